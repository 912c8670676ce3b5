// `.env` text as the console and `slipway secret` read it, and as `slipway secret reveal` writes it.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomInt } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';
import { formatDotenv, parseDotenv } from '../../src/platform/dotenv.js';

describe('.env text', () => {
  it('reads dotenv\'s lines: export, comments, quotes and escapes', () => {
    const { values, problems } = parseDotenv([
      '\uFEFF# a comment',
      'export A=1',
      'B = spaced out  # a comment',
      'C=no#comment',
      `D='single \\n kept'`,
      'E="double \\n \\t \\" \\\\ \\x"   # after',
      'F=',
      'G="a\u2028b"',
      '',
      '  H=indented',
      'export=word',
      'NOTE= # only a comment',
      'NOTE2=#',
      'TAB=a\t# after a tab',
      'NBSP=a\u00a0#kept',
    ].join('\r\n'));
    assert.deepEqual(problems, []);
    assert.deepEqual(values, { A: '1', B: 'spaced out', C: 'no#comment', D: 'single \\n kept', E: 'double \n \t " \\ \\x', F: '', G: 'a\u2028b', H: 'indented', export: 'word', NOTE: '', NOTE2: '', TAB: 'a', NBSP: 'a\u00a0#kept' });
  });

  it('names every line it cannot read, and a key given twice, by its number', () => {
    const { problems } = parseDotenv('A=1\nnot a line\nC=\'x\' trailing\nA=2\nB="open\n');
    assert.deepEqual(problems, [
      { line: 2, message: 'is not KEY=value' },
      { line: 3, message: 'has text after its closing quote' },
      { line: 4, message: 'sets A again (first on line 1)' },
      { line: 5, message: 'has a quote that is not closed' },
    ]);
    // A closing quote forgotten: the value runs on to the next quote, and what follows that is refused.
    assert.deepEqual(parseDotenv('A="open\nB=2\nC="x"\nD=4\n').problems, [{ line: 1, message: 'has text after its closing quote (on line 3)' }]);
  });

  it('reads a quoted value over several lines, backquotes, a lone carriage return as a line break, and a # inside a value', () => {
    const pem = '-----BEGIN PRIVATE KEY-----\nMIIBVQIBADANBgkqhkiG9w0BAQEFAASCAT8wggE7AgEAAkEA==\n-----END PRIVATE KEY-----';
    const { values, problems } = parseDotenv([
      `KEY="${pem}"  # a comment`,
      `SINGLE='${pem}'`,
      'TICK=`it\'s "both"`',
      'PASS=abc#def',
      'AFTER=1',
    ].join('\r\n').replace('AFTER=1', 'AFTER=1\rLAST=2\r'));
    assert.deepEqual(problems, []);
    assert.deepEqual(values, { KEY: pem, SINGLE: pem, TICK: 'it\'s "both"', PASS: 'abc#def', AFTER: '1', LAST: '2' });
    // The lines a value took count: a problem after it names its own line.
    assert.deepEqual(parseDotenv(`A="1\n2\n3"\nbad\n`).problems, [{ line: 4, message: 'is not KEY=value' }]);
  });

  it('refuses a line of many backslashes and no closing quote at once (each character read one way only)', () => {
    // Read two ways, a backslash doubled the work: 40 of them took seconds, 60 would take days.
    for (const quote of ['"', '\'', '`']) {
      assert.deepEqual(parseDotenv(`A=${quote}${'\\'.repeat(100_000)}\n`).problems.map((p) => p.line), [1]);
      assert.deepEqual(parseDotenv(`B=${quote}${`\\${quote}  `.repeat(100_000)} x\n`).problems.map((p) => p.line), [1]);
    }
    // A backslash just before the closing quote stands for itself, as it did.
    assert.deepEqual(parseDotenv('A="x\\"\nB=\'y\\\' # note\n').values, { A: 'x\\', B: 'y\\' });
  });

  it('keeps a key named __proto__ as a key', () => {
    const { values } = parseDotenv('__proto__=x\n');
    assert.deepEqual(Object.keys(values), ['__proto__']);
    assert.equal(Object.getPrototypeOf(values), Object.prototype);
  });

  it('writes values that read back exactly, whatever characters they hold', () => {
    const alphabet = ['a', 'Z', '0', ' ', '\t', '\n', '\r', '"', '\'', '\\', '#', '=', '$', '`', '\u2028', '\u2029', '\u00e9', '\u{1F511}', '\u0085', '\v', '\f', 'n', '-', '.'];
    for (let round = 0; round < 500; round++) {
      const values: Record<string, string> = {};
      for (let k = 0; k < 5; k++) values[`K${k}`] = Array.from({ length: randomInt(0, 12) }, () => alphabet[randomInt(alphabet.length)]).join('');
      const { values: back, problems } = parseDotenv(formatDotenv(values));
      assert.deepEqual(problems, [], JSON.stringify(values));
      assert.deepEqual(back, values, JSON.stringify(values));
    }
    assert.equal(formatDotenv({ A: 'plain-1.2:3/4@5+6=7%', B: 'two words', C: '' }), 'A=plain-1.2:3/4@5+6=7%\nB=\'two words\'\nC=\n');
  });

  it('escapes $ and ` in a double-quoted value too: a shell sourcing it runs nothing and reads it as it is', { skip: process.platform === 'win32' }, () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dotenv-'));
    try {
      const ran = path.join(dir, 'ran');
      // A quote or a backslash forces double quotes; what a shell would expand is escaped there.
      const values = { V: `it's $(touch ${ran})`, W: 'a"b`touch ' + ran + '`$HOME\\', X: "it's $x" };
      const text = formatDotenv(values);
      assert.equal(text, `V="it's \\$(touch ${ran})"\nW="a\\"b\\\`touch ${ran}\\\`\\$HOME\\\\"\nX="it's \\$x"\n`);
      assert.deepEqual(parseDotenv(text).values, values);
      fs.writeFileSync(path.join(dir, 'x.env'), text);
      const script = `set -a; . ./x.env; ${Object.keys(values).map((k) => `printf '%s\\0' "$${k}"`).join('; ')}`;
      const out = execFileSync('/bin/sh', ['-c', script], { cwd: dir, encoding: 'utf8', env: { HOME: '/nowhere', PATH: process.env.PATH } });
      assert.deepEqual(out.split('\0').slice(0, -1), Object.values(values));
      assert.equal(fs.existsSync(ran), false, 'sourcing the file ran a command');
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
    // A hand-written file's \$ is a $, as dotenv-expand and a shell read it.
    assert.deepEqual(parseDotenv('A="\\$HOME \\`x\\`"\n').values, { A: '$HOME `x`' });
  });

  it('writes a value that a shell or Compose would expand ($, `, ~) in single quotes, which they read as written', { skip: process.platform === 'win32' }, () => {
    const values = { P: 'pa$$w0rd$HOME', C: '$(echo run)`echo run`', T: '~/x', U: 'a:~/b', Q: 'two "words" # not a comment' };
    const text = formatDotenv(values);
    assert.equal(text, `P='pa$$w0rd$HOME'\nC='$(echo run)\`echo run\`'\nT='~/x'\nU='a:~/b'\nQ='two "words" # not a comment'\n`);
    assert.deepEqual(parseDotenv(text).values, values);
    // What `set -a; . ./file` makes of it: the same values, nothing run or expanded.
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dotenv-'));
    try {
      fs.writeFileSync(path.join(dir, 'x.env'), text);
      const script = `set -a; . ./x.env; ${Object.keys(values).map((k) => `printf '%s\\0' "$${k}"`).join('; ')}`;
      const out = execFileSync('/bin/sh', ['-c', script], { cwd: dir, encoding: 'utf8', env: { HOME: '/nowhere', PATH: process.env.PATH } });
      assert.deepEqual(out.split('\0').slice(0, -1), Object.values(values));
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
