// Where log lines go: every line written once, in order, whole; within PIPE_BUF per write when
// other processes share the descriptor; a full pipe waited for; a gone reader not fatal; and what
// is gathered written at exit.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import fc from 'fast-check';
import { BatchedOutput } from '../../src/platform/batched-output.js';

/** Records the writes BatchedOutput makes (it writes with fs.writeSync). */
function recordWrites(behaviour: (call: number, data: Buffer, offset: number) => number = (_c, data, offset) => data.length - offset) {
  const writes: string[] = [];
  const original = fs.writeSync;
  let calls = 0;
  (fs as { writeSync: unknown }).writeSync = (_fd: number, data: Buffer, offset = 0) => {
    const written = behaviour(calls++, data, offset);
    writes.push(data.subarray(offset, offset + written).toString('utf8'));
    return written;
  };
  return { writes, restore: () => { (fs as { writeSync: unknown }).writeSync = original; } };
}

const line = fc.string({ unit: 'binary', maxLength: 300 }).map((s) => `{"msg":${JSON.stringify(s)}}\n`);

describe('batched log output', () => {
  /** The writes BatchedOutput makes for `lines`, flushed once. */
  function writesOf(lines: string[], shared: boolean): string[] {
    const { writes, restore } = recordWrites();
    const out = new BatchedOutput(99, shared);
    try {
      for (const l of lines) out.write(l);
      out.flushSync();
      return writes;
    } finally {
      out.end();
      restore();
    }
  }

  it('writes every line once and in order, in one write when it has the descriptor to itself', () => {
    fc.assert(fc.property(fc.array(line, { maxLength: 200 }), (lines) => {
      const writes = writesOf(lines, false);
      assert.equal(writes.join(''), lines.join(''));
      assert.ok(writes.length <= 1 + Math.floor(Buffer.byteLength(lines.join('')) / (64 * 1024)));
    }));
  });

  it('keeps each write to whole lines within PIPE_BUF when other processes share the descriptor', () => {
    fc.assert(fc.property(fc.array(line, { minLength: 1, maxLength: 300 }), (lines) => {
      const writes = writesOf(lines, true);
      assert.equal(writes.join(''), lines.join(''));
      for (const w of writes) {
        assert.ok(Buffer.byteLength(w) <= 4096, `a write of ${Buffer.byteLength(w)} bytes`);
        assert.ok(w.endsWith('\n'));
      }
    }));
  });

  it('finishes partial writes, waits out a full pipe, and gives up quietly when the reader is gone', () => {
    const partial = recordWrites((call, data, offset) => {
      if (call === 1) throw Object.assign(new Error('full'), { code: 'EAGAIN' });
      return Math.min(10, data.length - offset);
    });
    try {
      const out = new BatchedOutput(99, false);
      out.write('{"a":1}\n');
      out.write('{"b":"two"}\n');
      out.flushSync();
      out.end();
      assert.equal(partial.writes.join(''), '{"a":1}\n{"b":"two"}\n');
    } finally {
      partial.restore();
    }
    const gone = recordWrites(() => { throw Object.assign(new Error('gone'), { code: 'EPIPE' }); });
    try {
      const out = new BatchedOutput(99, false);
      out.write('{"lost":true}\n');
      assert.doesNotThrow(() => out.flushSync());
      out.write('{"next":true}\n');
      assert.doesNotThrow(() => out.end());
    } finally {
      gone.restore();
    }
  });

  it('leaves no exit listener behind once ended, and writes what it gathered', () => {
    const listeners = process.listenerCount('exit');
    const { writes, restore } = recordWrites();
    try {
      const out = new BatchedOutput(99, false);
      assert.equal(process.listenerCount('exit'), listeners + 1);
      out.write('{"last":true}\n');
      out.end();
      assert.equal(process.listenerCount('exit'), listeners);
      assert.deepEqual(writes, ['{"last":true}\n']);
    } finally {
      restore();
    }
  });

  it('writes what it has gathered when the process exits, however it exits', () => {
    const module = fileURLToPath(new URL('../../src/platform/batched-output.js', import.meta.url));
    for (const ending of ['process.exit(3)', 'throw new Error("boom")', '']) {
      const script = `import { BatchedOutput } from ${JSON.stringify(module)};
        const out = new BatchedOutput(1, false);
        for (let i = 0; i < 5; i++) out.write('{"n":' + i + '}\\n');
        ${ending}`;
      const child = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' });
      assert.deepEqual(child.stdout.trim().split('\n').map((l) => JSON.parse(l).n), [0, 1, 2, 3, 4], `${ending}: ${child.stderr}`);
    }
  });
});
