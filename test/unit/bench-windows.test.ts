// The benchmark's alternating windows: several measured windows of one load combine into one
// measurement whose req/s is over all of them, not an average of the windows' rates.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { combineWindows, p50AtMost, throughputAtLeast, type Measurement } from '../../bench/lib/harness.js';
import { ROWS } from '../../bench/rows.js';

function window(requests: number, seconds: number, extra: Partial<Measurement> = {}): Measurement {
  return {
    requests, durationSec: seconds, rps: requests / seconds, p50Ms: 1, p99Ms: 2, meanMs: 1, maxMs: 3,
    statusCounts: { 200: requests }, non2xx: 0, errors: 0, timeouts: 0, loadCpuPct: 50, serverCpuPct: 90, otherCpuPct: 5, ...extra,
  };
}

describe('bench: combining measured windows', () => {
  it('counts requests over the total time, so a longer window weighs more', () => {
    const m = combineWindows([window(1_000, 1), window(9_000, 3)]);
    assert.equal(m.requests, 10_000);
    assert.equal(m.durationSec, 4);
    assert.equal(m.rps, 2_500);
  });

  it('takes the windows’ median p50, the highest p99 and max, and time-weighted CPU', () => {
    const m = combineWindows([
      window(100, 1, { p50Ms: 5, p99Ms: 9, maxMs: 12, serverCpuPct: 100, loadCpuPct: 40 }),
      window(100, 1, { p50Ms: 1, p99Ms: 30, maxMs: 31, serverCpuPct: 80, loadCpuPct: 60 }),
      window(200, 2, { p50Ms: 3, p99Ms: 4, maxMs: 5, serverCpuPct: 90, loadCpuPct: 50 }),
    ]);
    assert.equal(m.p50Ms, 3);
    assert.equal(m.p99Ms, 30);
    assert.equal(m.maxMs, 31);
    assert.equal(m.serverCpuPct, (100 + 80 + 2 * 90) / 4);
    assert.equal(m.loadCpuPct, 50);
  });

  it('adds up status counts and failures, and keeps the first failure seen', () => {
    const m = combineWindows([
      window(10, 1, { statusCounts: { 200: 9, 503: 1 }, non2xx: 1, rps: 10, firstFailure: 'HTTP 503' }),
      window(10, 1, { statusCounts: { 200: 8, 429: 2 }, non2xx: 2, errors: 1, rps: 10, firstFailure: 'HTTP 429' }),
    ]);
    assert.deepEqual(m.statusCounts, { 200: 17, 503: 1, 429: 2 });
    assert.equal(m.non2xx, 3);
    assert.equal(m.errors, 1);
    assert.equal(m.firstFailure, 'HTTP 503');
  });

  it('counts the items of bulk windows over their total time', () => {
    const m = combineWindows([window(10, 1, { itemsPerSec: 10_000, itemsLabel: 'secrets/s' }), window(10, 3, { itemsPerSec: 2_000, itemsLabel: 'secrets/s' })]);
    assert.equal(m.itemsPerSec, (10_000 + 3 * 2_000) / 4);
    assert.equal(m.itemsLabel, 'secrets/s');
    assert.equal(combineWindows([window(10, 1), window(10, 1)]).itemsPerSec, undefined);
  });

  it('leaves CPU unknown when a window could not sample it', () => {
    const second = window(10, 1);
    delete second.serverCpuPct;
    assert.equal(combineWindows([window(10, 1), second]).serverCpuPct, undefined);
  });

  it('gives one window back as it is', () => {
    const only = window(42, 2);
    assert.equal(combineWindows([only]), only);
  });
});

describe('bench: targets against a reference', () => {
  it('compare each window pair as the row does: req/s for throughput, p50 for bulk latency', () => {
    const fast = window(400, 1, { p50Ms: 10 });
    const slow = window(100, 1, { p50Ms: 25 });
    assert.equal(throughputAtLeast(0.2, 'ceiling').ratio!(slow, fast), 0.25);
    assert.equal(p50AtMost(2, 'floor').ratio!(slow, fast), 2.5);
    assert.equal(p50AtMost(2, 'floor').evaluate(slow, fast).met, false);
    assert.equal(p50AtMost(3, 'floor').evaluate(slow, fast).met, true);
  });

  it('every row with a reference takes turns with it, so that no ratio compares two moments of a noisy machine', () => {
    for (const row of ROWS.filter((r) => r.reference !== undefined)) {
      assert.ok(row.target.alternating === true && typeof row.target.ratio === 'function', `${row.id} is measured apart from its reference`);
    }
  });
});
