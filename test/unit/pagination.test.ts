// Cursor pagination: opaque cursors that round-trip any sort key, refuse anything we did not issue
// (another list's cursor included), and pages that know whether another follows.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { isAppError } from '../../src/platform/errors.js';
import { decodeCursor, DEFAULT_LIMIT, encodeCursor, pageRequest, toPage } from '../../src/platform/pagination.js';

function refusedAsInvalidCursor(cursor: string, list = 'secrets'): boolean {
  try {
    decodeCursor(list, cursor);
    return false;
  } catch (error) {
    return isAppError(error) && error.status === 400 && error.code === 'invalid_cursor';
  }
}

describe('pagination', () => {
  it('round-trips every sort key through an opaque, URL-safe cursor (property)', () => {
    fc.assert(fc.property(fc.string({ unit: 'grapheme' }), (key) => {
      const cursor = encodeCursor('secrets', key);
      assert.match(cursor, /^[A-Za-z0-9_-]*$/);
      assert.equal(decodeCursor('secrets', cursor), key);
    }));
  });

  it('treats a missing or empty cursor as the first page', () => {
    assert.equal(decodeCursor('secrets', undefined), null);
    assert.equal(decodeCursor('secrets', ''), null);
    assert.deepEqual(pageRequest('secrets', {}), { limit: DEFAULT_LIMIT, after: null });
    assert.deepEqual(pageRequest('secrets', { limit: 7, cursor: encodeCursor('secrets', 'sec_1') }), { limit: 7, after: 'sec_1' });
  });

  it('refuses cursors it did not issue with a 400 problem', () => {
    const notOurs = ['!!!', 'bm90IGpzb24', Buffer.from('{"x":1}').toString('base64url'), Buffer.from('{"k":5}').toString('base64url'), Buffer.from('null').toString('base64url')];
    for (const cursor of notOurs) assert.ok(refusedAsInvalidCursor(cursor), cursor);
    // Another list's cursor, and one without its list (as an earlier release wrote them).
    assert.ok(refusedAsInvalidCursor(encodeCursor('deployments', 'dep_1')));
    assert.ok(refusedAsInvalidCursor(Buffer.from('{"k":"api"}').toString('base64url')));
    fc.assert(fc.property(fc.string({ minLength: 1 }), (junk) => {
      try {
        return typeof decodeCursor('secrets', junk) === 'string';
      } catch (error) {
        return isAppError(error) && error.code === 'invalid_cursor';
      }
    }));
  });

  it('returns limit items and a cursor after the last one only when another page follows', () => {
    const rows = Array.from({ length: 6 }, (_, i) => ({ id: `k${i}` }));
    const full = toPage('secrets', rows, 5, (r) => r.id);
    assert.deepEqual(full.items.map((r) => r.id), ['k0', 'k1', 'k2', 'k3', 'k4']);
    assert.equal(decodeCursor('secrets', full.nextCursor!), 'k4');
    const last = toPage('secrets', rows.slice(0, 5), 5, (r) => r.id);
    assert.deepEqual([last.items.length, last.nextCursor], [5, null]);
    assert.deepEqual(toPage('secrets', [], 5, (r: { id: string }) => r.id), { items: [], nextCursor: null });
  });
});
