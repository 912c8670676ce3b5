// `slipway events --since` and `--until`: a time ago or an RFC 3339 time with its offset, and nothing else.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { timeOf } from '../../src/cli/events.js';
import { UsageError } from '../../src/cli/args.js';

describe('events --since and --until', () => {
  const now = Date.parse('2026-11-28T12:00:00Z');

  it('reads a time ago in seconds, minutes, hours or days', () => {
    assert.equal(timeOf('since', '30s', now), now - 30_000);
    assert.equal(timeOf('since', '90m', now), now - 90 * 60_000);
    assert.equal(timeOf('since', '2h', now), Date.parse('2026-11-28T10:00:00Z'));
    assert.equal(timeOf('since', '7d', now), Date.parse('2026-11-21T12:00:00Z'));
    assert.equal(timeOf('since', undefined, now), undefined);
  });

  it('reads an RFC 3339 time with its offset, with or without seconds and fractions', () => {
    assert.equal(timeOf('since', '2026-11-02T09:00:00Z', now), Date.parse('2026-11-02T09:00:00Z'));
    assert.equal(timeOf('since', '2026-11-02T09:00Z', now), Date.parse('2026-11-02T09:00:00Z'));
    assert.equal(timeOf('since', '2026-11-02T10:00:00.250+01:00', now), Date.parse('2026-11-02T09:00:00.250Z'));
    assert.equal(timeOf('since', '2028-02-29T00:00:00Z', now), Date.parse('2028-02-29T00:00:00Z'));
  });

  it('refuses what it cannot read for certain: no offset (whose local time?), a date alone, words, another unit, a day or an hour that does not exist', () => {
    for (const bad of ['2026-11-02T09:00:00', '2026-11-02', 'yesterday', '2w', '-2h', '2 h', '', '2026-13-02T09:00:00Z', '2026-02-30T00:00:00Z', '2026-02-29T00:00:00Z', '2026-11-02T24:00:00Z', '2026-11-02T09:60:00Z', '2026-11-02T09:00:00+25:00']) {
      assert.throws(() => timeOf('since', bad, now), UsageError, bad);
    }
    assert.throws(() => timeOf('until', 'yesterday', now), { message: /^--until must be a time ago \(90m, 2h, 7d\) or an RFC 3339 time/ });
  });
});
