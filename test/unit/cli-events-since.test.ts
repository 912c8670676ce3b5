// `slipway events --since`: a time ago or an RFC 3339 time with its offset, and nothing else.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { sinceOf } from '../../src/cli/events.js';
import { UsageError } from '../../src/cli/args.js';

describe('events --since', () => {
  const now = Date.parse('2026-11-28T12:00:00Z');

  it('reads a time ago in seconds, minutes, hours or days', () => {
    assert.equal(sinceOf('30s', now), now - 30_000);
    assert.equal(sinceOf('90m', now), now - 90 * 60_000);
    assert.equal(sinceOf('2h', now), Date.parse('2026-11-28T10:00:00Z'));
    assert.equal(sinceOf('7d', now), Date.parse('2026-11-21T12:00:00Z'));
    assert.equal(sinceOf(undefined, now), undefined);
  });

  it('reads an RFC 3339 time with its offset, with or without seconds and fractions', () => {
    assert.equal(sinceOf('2026-11-02T09:00:00Z', now), Date.parse('2026-11-02T09:00:00Z'));
    assert.equal(sinceOf('2026-11-02T09:00Z', now), Date.parse('2026-11-02T09:00:00Z'));
    assert.equal(sinceOf('2026-11-02T10:00:00.250+01:00', now), Date.parse('2026-11-02T09:00:00.250Z'));
    assert.equal(sinceOf('2028-02-29T00:00:00Z', now), Date.parse('2028-02-29T00:00:00Z'));
  });

  it('refuses what it cannot read for certain: no offset (whose local time?), a date alone, words, another unit, a day or an hour that does not exist', () => {
    for (const bad of ['2026-11-02T09:00:00', '2026-11-02', 'yesterday', '2w', '-2h', '2 h', '', '2026-13-02T09:00:00Z', '2026-02-30T00:00:00Z', '2026-02-29T00:00:00Z', '2026-11-02T24:00:00Z', '2026-11-02T09:60:00Z', '2026-11-02T09:00:00+25:00']) {
      assert.throws(() => sinceOf(bad, now), UsageError, bad);
    }
  });
});
