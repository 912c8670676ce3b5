// The value rules that need no database: patches, equality, key diffs, If-Match, retention.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { isAppError } from '../../src/platform/errors.js';
import { etagOf, parseIfMatch, satisfies } from '../../src/platform/etags.js';
import { applyPatch, keyDiff, keysOf, retention, sameValues, toChange, toMetadata } from '../../src/modules/secrets/secret-model.js';
import type { SecretRow } from '../../src/modules/secrets/secrets.repo.js';

const key = fc.stringMatching(/^[A-Z_][A-Z0-9_]{0,5}$/);
const values = fc.dictionary(key, fc.string({ maxLength: 8 }), { minKeys: 1, maxKeys: 8 });

function problemOf(fn: () => unknown): { code: string; status: number; limit?: unknown } {
  try {
    fn();
  } catch (error) {
    assert.ok(isAppError(error));
    return { code: error.code, status: error.status, limit: error.extras.limit };
  }
  assert.fail('expected a problem');
}

describe('secret values', () => {
  it('keysOf lists the key names in Array#sort order, short lists and long ones alike', () => {
    const anyKey = fc.string({ unit: 'grapheme', maxLength: 6 });
    fc.assert(fc.property(fc.dictionary(anyKey, fc.constant('v'), { maxKeys: 40 }), (given) => {
      assert.deepEqual(keysOf(given), Object.keys(given).sort());
    }));
    assert.deepEqual(keysOf({ b: '', a: '', B: '', 'é': '', Z_1: '', '10': '', '9': '' }), ['10', '9', 'B', 'Z_1', 'a', 'b', 'é']);
  });

  it('sameValues ignores key order and sees every difference', () => {
    fc.assert(fc.property(values, values, (a, b) => {
      const reordered = Object.fromEntries(Object.entries(a).reverse());
      assert.ok(sameValues(a, reordered));
      const equal = JSON.stringify(Object.entries(a).sort()) === JSON.stringify(Object.entries(b).sort());
      assert.equal(sameValues(a, b), equal);
    }));
  });

  const limits = (keysPerSecret: number, valueChars = 1000) => ({ keysPerSecret, valueChars });

  it('a patch sets and unsets exactly what it names, and unsetting an absent key changes nothing', () => {
    fc.assert(fc.property(values, values, fc.array(key, { maxLength: 4 }), (current, set, unsetRaw) => {
      const unset = [...new Set(unsetRaw.filter((k) => !(k in set)))];
      const remaining = Object.keys({ ...current, ...set }).filter((k) => !unset.includes(k));
      if (remaining.length === 0) return;
      const next = applyPatch(current, { set, unset }, limits(100));
      for (const [k, v] of Object.entries(set)) if (!unset.includes(k)) assert.equal(next[k], v);
      for (const k of unset) assert.ok(!(k in next));
      for (const k of Object.keys(current)) if (!(k in set) && !unset.includes(k)) assert.equal(next[k], current[k]);
      assert.ok(sameValues(applyPatch(next, { set, unset }, limits(100)), next), 'a patch applied twice is the same as once');
    }));
  });

  it('a patch refuses nothing to do, a key both set and unset, no keys left, and too many keys', () => {
    assert.equal(problemOf(() => applyPatch({ A: '1' }, {}, limits(10))).code, 'invalid_request');
    assert.equal(problemOf(() => applyPatch({ A: '1' }, { set: { B: '1' }, unset: ['B'] }, limits(10))).code, 'invalid_request');
    assert.equal(problemOf(() => applyPatch({ A: '1' }, { unset: ['A'] }, limits(10))).code, 'invalid_request');
    const tooMany = problemOf(() => applyPatch({ A: '1', B: '2' }, { set: { C: '3' } }, limits(2)));
    assert.deepEqual([tooMany.code, tooMany.status, tooMany.limit], ['limit_exceeded', 400, { name: 'SLIPWAY_MAX_KEYS_PER_SECRET', value: 2 }]);
    assert.deepEqual(applyPatch({ A: '1', B: '2' }, { set: { C: '3' }, unset: ['A'] }, limits(2)), { B: '2', C: '3' });
  });

  it('a patch of a secret over limits lowered since may keep what it has, and take it down a step at a time; never add to it', () => {
    const over = { A: '1', B: '2', C: 'long value' };
    assert.deepEqual(applyPatch(over, { unset: ['A'] }, limits(1, 5)), { B: '2', C: 'long value' });
    assert.deepEqual(applyPatch(over, { set: { A: 'x' } }, limits(1, 5)), { A: 'x', B: '2', C: 'long value' });
    assert.deepEqual(problemOf(() => applyPatch(over, { set: { D: '4' } }, limits(1, 5))).limit, { name: 'SLIPWAY_MAX_KEYS_PER_SECRET', value: 1 });
    assert.deepEqual(problemOf(() => applyPatch(over, { set: { A: 'also long' } }, limits(1, 5))).limit, { name: 'SLIPWAY_MAX_VALUE_CHARS', value: 5 });
    // Characters are code points, as the schemas count them.
    assert.deepEqual(applyPatch({ A: '1' }, { set: { A: '😀😀' } }, limits(1, 2)), { A: '😀😀' });
  });

  it('keyDiff names added, removed and changed keys only', () => {
    assert.deepEqual(keyDiff({ A: '1', B: '2', C: '3' }, { A: '1', B: 'x', D: '4' }), { added: ['D'], removed: ['C'], changed: ['B'] });
  });

  it('keyDiff lists sorted key names that partition the keys of both sides (property)', () => {
    fc.assert(fc.property(values, values, (before, after) => {
      const { added, removed, changed } = keyDiff(before, after);
      for (const list of [added, removed, changed]) assert.deepEqual(list, [...list].sort());
      assert.deepEqual(added, Object.keys(after).filter((k) => !(k in before)).sort());
      assert.deepEqual(removed, Object.keys(before).filter((k) => !(k in after)).sort());
      assert.deepEqual(changed, Object.keys(after).filter((k) => k in before && before[k] !== after[k]).sort());
    }));
  });

  it('toChange is the metadata of a live secret and the result, keys from the row unless given', () => {
    const row: SecretRow = {
      id: 'sec_1', org_id: 'org_1', name: 'db', version: 3, keys: '["A","B"]', created_at: '2026-01-01T00:00:00.000Z',
      updated_at: '2026-01-02T00:00:00.000Z', created_by: 'su_1', updated_by: 'su_2', deleted_at: null,
    };
    assert.deepEqual(toChange(row, 'updated'), { ...toMetadata(row), result: 'updated' });
    assert.deepEqual(toChange(row, 'created', ['X']), { ...toMetadata(row, undefined, ['X']), result: 'created' });
  });
});

describe('If-Match and retention', () => {
  it('parses strong tags, lists and *; a weak or foreign tag matches nothing; a bare value is refused', () => {
    assert.equal(parseIfMatch(undefined), undefined);
    assert.equal(parseIfMatch('*'), undefined);
    assert.deepEqual(parseIfMatch('"3"'), [{ version: 3 }]);
    assert.deepEqual(parseIfMatch('"3.mi9x0v2k"'), [{ version: 3, incarnation: 'mi9x0v2k' }]);
    assert.deepEqual(parseIfMatch('W/"3", "5"'), [{ version: 5 }]);
    assert.deepEqual(parseIfMatch('"abc"'), []);
    assert.deepEqual(parseIfMatch('"3.MI9X"'), []);
    for (const bad of ['3', 'nonsense', '"3', 'W/3']) {
      assert.throws(() => parseIfMatch(bad), (e: unknown) => isAppError(e) && e.status === 400 && e.code === 'invalid_request', bad);
    }
    const created = fc.integer({ min: 0, max: 4e12 }).map((ms) => new Date(ms).toISOString());
    fc.assert(fc.property(fc.integer({ min: 1, max: 1e9 }), created, (v, at) => assert.ok(satisfies(parseIfMatch(etagOf(v, at)), v, at))));
  });

  it('If-None-Match compares weakly: a weak tag counts there, and is named in a refusal as that header', () => {
    const none = { header: 'if-none-match' as const, weak: true };
    assert.deepEqual(parseIfMatch('W/"3.mi9x0v2k", "4"', none), [{ version: 3, incarnation: 'mi9x0v2k' }, { version: 4 }]);
    assert.deepEqual(parseIfMatch('W/"3.mi9x0v2k"'), []);
    assert.throws(() => parseIfMatch('3', none), (e: unknown) => isAppError(e) && e.status === 400 && JSON.stringify(e).includes('/headers/if-none-match'));
  });

  it('an ETag matches its version of the same secret only; a bare version matches that version of any', () => {
    const at = '2030-01-01T00:00:00.000Z';
    const recreated = '2030-01-01T00:00:00.001Z';
    assert.ok(satisfies(undefined, 4, at));
    assert.ok(satisfies(parseIfMatch(etagOf(4, at)), 4, at));
    assert.ok(!satisfies(parseIfMatch(etagOf(4, at)), 5, at));
    assert.ok(!satisfies(parseIfMatch(etagOf(4, at)), 4, recreated));
    assert.ok(satisfies(parseIfMatch('"4"'), 4, recreated));
    assert.ok(satisfies(parseIfMatch(`"9", ${etagOf(4, at)}`), 4, at));
    assert.ok(!satisfies(parseIfMatch('W/"4"'), 4, at));
  });

  it('a deletion is restorable until exactly the retention window has passed', () => {
    const keep = retention(30);
    const deletedAt = '2030-01-01T00:00:00.000Z';
    assert.equal(keep.until(deletedAt), '2030-01-31T00:00:00.000Z');
    assert.ok(deletedAt >= keep.cutoff('2030-01-31T00:00:00.000Z'));
    assert.ok(deletedAt < keep.cutoff('2030-01-31T00:00:00.001Z'));
    assert.equal(retention(0).cutoff(deletedAt), deletedAt);
  });
});
