// Prefixed, time-sortable ids: shape, the time they carry, and order (within one millisecond, and
// when the clock steps back).
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { ID_PREFIXES, idFloor, isId, newId, type IdKind } from '../../src/platform/ids.js';

const CROCKFORD = '0123456789abcdefghjkmnpqrstvwxyz';

/** The millisecond timestamp in an id's first ten base32 characters (decoded independently of ids.ts). */
function timeOf(id: string): number {
  return [...id.slice(id.indexOf('_') + 1, id.indexOf('_') + 11)].reduce((n, c) => n * 32 + CROCKFORD.indexOf(c), 0);
}

// Each call of a property starts later than every id made before, so the times it picks are the ones encoded.
let later = Date.now() + 1_000_000;

describe('ids', () => {
  it('is the prefix, an underscore and 26 Crockford base32 characters, for every kind', () => {
    for (const kind of Object.keys(ID_PREFIXES) as IdKind[]) {
      const id = newId(kind);
      assert.match(id, new RegExp(`^${ID_PREFIXES[kind]}_[${CROCKFORD}]{26}$`));
      assert.equal(id.length, ID_PREFIXES[kind].length + 27);
      assert.ok(isId(kind, id));
    }
  });

  it('tells ids from slugs and from ids of another kind', () => {
    const org = newId('org');
    assert.ok(!isId('serviceUser', org));
    assert.ok(!isId('org', 'default'));
    assert.ok(!isId('org', `${org}x`));
    assert.ok(!isId('org', org.slice(0, -1) + 'u'), 'u is not in the alphabet');
    assert.ok(!isId('org', org.toUpperCase()));
  });

  it('orders ids made within one millisecond', () => {
    const now = later++;
    const ids = Array.from({ length: 10_000 }, () => newId('secret', now));
    assert.equal(new Set(ids).size, ids.length);
    assert.deepEqual([...ids].sort(), ids);
    assert.ok(ids.every((id) => timeOf(id) === now));
  });

  it('keeps order when the clock steps back', () => {
    const now = later;
    later += 10;
    const first = newId('event', now + 5);
    const second = newId('event', now);
    assert.ok(second > first, `${second} sorts before ${first}`);
  });

  it('carries its time and sorts by it (property)', () => {
    fc.assert(fc.property(fc.array(fc.integer({ min: 1, max: 10_000 }), { minLength: 2, maxLength: 50 }), (steps) => {
      const times = steps.map((step) => (later += step));
      const ids = times.map((t) => newId('deployment', t));
      assert.deepEqual(ids.map(timeOf), times);
      assert.deepEqual([...ids].sort(), ids);
    }));
  });

  it('gives the floor of a millisecond: every id made at or after it sorts at or after it, every earlier one before', () => {
    fc.assert(fc.property(fc.integer({ min: 1, max: 1_000 }), (step) => {
      const before = newId('event', later);
      later += step;
      const floor = idFloor('event', later);
      const at = newId('event', later);
      assert.equal(timeOf(floor), later);
      assert.match(floor, new RegExp(`^evt_[${CROCKFORD}]{26}$`));
      assert.ok(before < floor && floor <= at, `${before} < ${floor} <= ${at}`);
      later += 1;
    }));
  });
});
