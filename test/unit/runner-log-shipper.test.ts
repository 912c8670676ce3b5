// The runner's log shipper: order kept across batches, one request at a time, batches bounded by
// lines and characters, a bounded queue that says what it dropped, secret values masked, a batch
// the server refuses sent again in parts, and a failure that stops it for good.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import fc from 'fast-check';
import { LOG_LINE_MAX_CHARS, LOG_LINES_PER_CALL } from '../../src/modules/runner/runner.protocol.js';
import { LogShipper, MASK, secretMasker, TRUNCATED, type LogEntry } from '../../src/runner-agent/log-shipper.js';

/** A receiving end that records batches and can be held up, to see what queues meanwhile. */
function receiver(options: { delayMs?: number } = {}) {
  const batches: LogEntry[][] = [];
  let inFlight = 0;
  let mostInFlight = 0;
  return {
    batches,
    get mostInFlight() { return mostInFlight; },
    lines: () => batches.flat().map((e) => e.line),
    async send(lines: LogEntry[]) {
      inFlight++;
      mostInFlight = Math.max(mostInFlight, inFlight);
      await sleep(options.delayMs ?? 0);
      batches.push(lines);
      inFlight--;
    },
  };
}

async function until(condition: () => boolean): Promise<void> {
  while (!condition()) await sleep(1);
}

describe('log shipper', () => {
  it('sends every line in order, one request at a time, in batches of at most the protocol limit', async () => {
    const to = receiver({ delayMs: 2 });
    const shipper = new LogShipper({ send: (l) => to.send(l), onError: assert.fail, lingerMs: 1 });
    const sent = Array.from({ length: 2500 }, (_, i) => `line ${i}`);
    for (const [i, line] of sent.entries()) {
      shipper.push(i % 2 ? 'stderr' : 'stdout', line);
      if (i % 700 === 0) await sleep(3);
    }
    await shipper.close();
    assert.deepEqual(to.lines(), sent);
    assert.equal(to.mostInFlight, 1);
    assert.ok(to.batches.every((b) => b.length >= 1 && b.length <= LOG_LINES_PER_CALL));
    assert.deepEqual(to.batches.flat().slice(0, 2).map((e) => e.stream), ['stdout', 'stderr']);
    shipper.push('stdout', 'after close');
    assert.equal(to.lines().length, sent.length);
  });

  it('cuts a long line between characters, never between the halves of a surrogate pair', async () => {
    const to = receiver();
    const shipper = new LogShipper({ send: (l) => to.send(l), onError: assert.fail });
    const room = LOG_LINE_MAX_CHARS - TRUNCATED.length;
    // A pair whose first half is the last unit that fits, then one that starts right after it.
    shipper.push('stdout', `${'x'.repeat(room - 1)}\u{1F680}${'y'.repeat(100)}`);
    shipper.push('stdout', `${'x'.repeat(room)}\u{1F680}${'y'.repeat(100)}`);
    await shipper.close();
    const [split, whole] = to.lines() as [string, string];
    assert.equal(split, `${'x'.repeat(room - 1)}${TRUNCATED}`);
    assert.equal(whole, `${'x'.repeat(room)}${TRUNCATED}`);
    assert.ok(to.lines().every((line) => !/[\uD800-\uDBFF](?![\uDC00-\uDFFF])/.test(line)));
  });

  it('keeps a batch within its character budget, and cuts lines to the protocol length', async () => {
    const to = receiver();
    const shipper = new LogShipper({ send: (l) => to.send(l), onError: assert.fail, batchChars: 100 });
    for (let i = 0; i < 10; i++) shipper.push('stdout', `${i}`.repeat(40));
    shipper.push('stdout', 'x'.repeat(LOG_LINE_MAX_CHARS + 10));
    await shipper.close();
    assert.ok(to.batches.slice(0, -1).every((b) => b.reduce((n, e) => n + e.line.length, 0) <= 100));
    const last = to.lines().at(-1)!;
    assert.equal(last.length, LOG_LINE_MAX_CHARS);
    assert.match(last, /…\[truncated\]$/);
  });

  it('drops what a full queue cannot hold and says how many lines, where they were lost', async () => {
    let release!: () => void;
    const held = new Promise<void>((resolve) => { release = resolve; });
    const to = receiver();
    let calls = 0;
    const shipper = new LogShipper({ send: async (l) => { calls++; await held; await to.send(l); }, onError: assert.fail, maxQueued: 5, lingerMs: 0 });
    shipper.push('stdout', 'first');
    await until(() => calls === 1); // `first` is in flight, held
    for (let i = 0; i < 12; i++) shipper.push('stdout', `burst ${i}`);
    release();
    await until(() => to.batches.length === 1); // and the bursts that fitted went out with the next request
    shipper.push('stdout', 'later');
    await shipper.close();
    assert.deepEqual(to.lines(), [
      'first', 'burst 0', 'burst 1', 'burst 2', 'burst 3', 'burst 4',
      '[runner] 7 lines of output dropped: they came faster than the server took them', 'later',
    ]);
    assert.equal(to.batches.flat().find((e) => e.line.startsWith('[runner]'))!.stream, 'runner');
  });

  it('holds at most its character budget of waiting lines, however few they are', async () => {
    let release!: () => void;
    const held = new Promise<void>((resolve) => { release = resolve; });
    const to = receiver();
    let calls = 0;
    const shipper = new LogShipper({ send: async (l) => { calls++; await held; await to.send(l); }, onError: assert.fail, maxQueuedChars: 100, lingerMs: 0 });
    shipper.push('stdout', 'first');
    await until(() => calls === 1);
    // Four lines of 40 characters while the first is held: two fit in 100, two are dropped.
    for (let i = 0; i < 4; i++) shipper.push('stdout', String(i).repeat(40));
    release();
    await shipper.close();
    assert.deepEqual(to.lines(), ['first', '0'.repeat(40), '1'.repeat(40), '[runner] 2 lines of output dropped: they came faster than the server took them']);
  });

  it('stops for good when a send fails: reports it once, drops the rest, and close rejects with it', async () => {
    const refused = new Error('lease lost');
    const reported: unknown[] = [];
    let calls = 0;
    const shipper = new LogShipper({ send: async () => { calls++; throw refused; }, onError: (e) => reported.push(e), lingerMs: 0 });
    shipper.push('stdout', 'one');
    await until(() => reported.length === 1);
    shipper.push('stdout', 'two');
    await assert.rejects(shipper.close(), refused);
    assert.deepEqual(reported, [refused]);
    assert.equal(calls, 1);
  });

  it('sends a refused batch again in parts, so that only the lines the server cannot take are lost', async () => {
    const to = receiver();
    const send = async (lines: LogEntry[]) => (lines.some((e) => e.line.startsWith('bad')) ? 'refused' as const : to.send(lines));
    const shipper = new LogShipper({ send, onError: assert.fail });
    const sent = Array.from({ length: 40 }, (_, i) => (i === 5 || i === 6 || i === 31 ? `bad ${i}` : `line ${i}`));
    for (const line of sent) shipper.push('stdout', line);
    await shipper.close();
    assert.deepEqual(to.lines(), sent.filter((l) => !l.startsWith('bad')));
    assert.equal(to.mostInFlight, 1);
  });

  it('masks secret values before they are queued', async () => {
    const to = receiver();
    const shipper = new LogShipper({ send: (l) => to.send(l), onError: assert.fail, mask: secretMasker(['hunter2-password', 'abc']) });
    shipper.push('stdout', 'connecting with hunter2-password to db (abc)');
    await shipper.close();
    assert.deepEqual(to.lines(), [`connecting with ${MASK} to db (abc)`]);
  });
});

describe('secret masker', () => {
  it('masks each line of a multi-line value, and a value inside a longer one whole', () => {
    const mask = secretMasker(['-----BEGIN KEY-----\nMIIEvQIBADANBg\n-----END KEY-----', 'token-1234', 'token-1234-extended']);
    assert.equal(mask('key: MIIEvQIBADANBg'), `key: ${MASK}`);
    assert.equal(mask('t=token-1234-extended; u=token-1234'), `t=${MASK}; u=${MASK}`);
    assert.equal(mask('nothing here'), 'nothing here');
  });

  it('masks a value as JSON writes it inside a string, its non-ASCII escaped or not', () => {
    const value = 'pa"ss\\wörd1';
    const mask = secretMasker([value, 'line-one-xyz\nline-two-xyz', 'tab\there']);
    assert.equal(mask(JSON.stringify({ Q: value })), `{"Q":"${MASK}"}`);
    assert.equal(mask('{"Q": "pa\\"ss\\\\w\\u00f6rd1"}'), `{"Q": "${MASK}"}`);
    assert.equal(mask(JSON.stringify({ ML: 'line-one-xyz\nline-two-xyz', T: 'tab\there' })), `{"ML":"${MASK}","T":"${MASK}"}`);
    assert.equal(mask(value), MASK);
  });

  it('masks the beginning of a value that a truncated line was cut through', () => {
    const mask = secretMasker(['SECRETVALUE-1234', 'other-secret']);
    assert.equal(mask(`log xxxSECRETVA${TRUNCATED}`), `log xxx${MASK}${TRUNCATED}`);
    assert.equal(mask(`log SECRETVALUE-1234 then oth${TRUNCATED}`), `log ${MASK} then ${MASK}${TRUNCATED}`);
    // Only a cut line is treated so: the same text at the end of a whole line is left alone.
    assert.equal(mask('log xxxSECRETVA'), 'log xxxSECRETVA');
    assert.equal(mask(`nothing secret${TRUNCATED}`), `nothing secret${TRUNCATED}`);
    // Wherever the cut falls inside a value, what is left of it is masked.
    fc.assert(fc.property(fc.stringMatching(/^[A-Za-z0-9_-]{4,24}$/), fc.string(), fc.nat(), (value, before, n) => {
      const kept = value.slice(0, 1 + (n % (value.length - 1)));
      return secretMasker([value])(`${before}${kept}${TRUNCATED}`).endsWith(`${MASK}${TRUNCATED}`);
    }));
  });

  it('masks overlapping values whole, values ending in CR, values as a process environment changes them, and very long values', () => {
    assert.equal(secretMasker(['abcd1234', '1234SENTINEL-7f3a9-overlap'])('ov=abcd1234SENTINEL-7f3a9-overlap!'), `ov=${MASK}!`);
    assert.equal(secretMasker(['SENTINEL-7f3a9-crlf-value\r'])('cr=SENTINEL-7f3a9-crlf-value'), `cr=${MASK}`);
    assert.equal(secretMasker(['line-one\rline-two'])('a line-one b line-two'), `a ${MASK} b ${MASK}`);
    // A CR inside a value stays inside the output line (lines end at LF): the value is masked whole.
    assert.equal(secretMasker(['ab\rcdefgh'])('v=ab\rcdefgh'), `v=${MASK}`);
    assert.equal(secretMasker(['abcd'])('abcdabcd!'), `${MASK}!`);
    assert.equal(secretMasker(['abcdefgh\rxy'])('v=abcdefgh\rxy'), `v=${MASK}`);
    // A lone surrogate cannot be encoded into the environment: the process sees U+FFFD.
    assert.equal(secretMasker(['\ud800SENTINEL-7f3a9-lone'])('lone=\ufffdSENTINEL-7f3a9-lone'), `lone=${MASK}`);
    // Values too long for one regular expression of all of them.
    const big = ['A', 'B'].map((c) => `SENTINEL-${c}-${c.repeat(40_000)}`);
    const mask = secretMasker([...big, 'abcd']);
    assert.equal(mask(`x ${big[0]} y ${big[1]} z abcd`), `x ${MASK} y ${MASK} z ${MASK}`);
  });

  it('covers exactly the characters that some occurrence of a value covers, overlapping ones included', () => {
    // The reference: mark every character inside any occurrence, then put one MASK per marked run.
    const reference = (values: string[], line: string): string => {
      const marked = new Array<boolean>(line.length).fill(false);
      for (const v of values) for (let at = line.indexOf(v); at !== -1; at = line.indexOf(v, at + 1)) marked.fill(true, at, at + v.length);
      let out = '';
      for (let i = 0; i < line.length; i++) {
        if (!marked[i]) out += line[i];
        else if (i === 0 || !marked[i - 1]) out += MASK;
      }
      return out;
    };
    fc.assert(fc.property(
      fc.array(fc.stringMatching(/^[a-c]{4,8}$/), { minLength: 1, maxLength: 4 }),
      fc.stringMatching(/^[a-c]{0,40}$/),
      (values, line) => secretMasker(values)(line) === reference(values, line),
    ), { numRuns: 2000 });
  });

  it('never lets a value of four or more characters through, whatever surrounds it', () => {
    fc.assert(fc.property(
      fc.array(fc.stringMatching(/^[A-Za-z0-9_-]{4,16}$/), { minLength: 1, maxLength: 5 }),
      fc.string(), fc.string(), fc.nat(4),
      (values, before, after, pick) => {
        const masked = secretMasker(values)(before + values[pick % values.length]! + after);
        return values.every((value) => !masked.includes(value));
      },
    ));
  });
});
