// Cursor pagination: opaque cursors that round-trip any sort key, refuse anything we did not issue
// (another list's cursor included) and any made in another scope (filters, organization, parent),
// and pages that know whether another follows.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { isAppError } from '../../src/platform/errors.js';
import { cursorList, decodeCursor, DEFAULT_LIMIT, encodeCursor, pageRequest, toPage, type CursorList } from '../../src/platform/pagination.js';

const secrets = cursorList('secrets', { org: 'org_1' });

/** The detail of the 400 `invalid_cursor` problem `cursor` is refused with, or null if it is read. */
function refusal(cursor: string, list: CursorList = secrets): string | null {
  try {
    decodeCursor(list, cursor);
    return null;
  } catch (error) {
    assert.ok(isAppError(error) && error.status === 400 && error.code === 'invalid_cursor', String(error));
    return error.detail;
  }
}
const refusedAsInvalidCursor = (cursor: string, list?: CursorList) => refusal(cursor, list) !== null;

describe('pagination', () => {
  it('round-trips every sort key through an opaque, URL-safe cursor (property)', () => {
    fc.assert(fc.property(fc.string({ unit: 'grapheme' }), (key) => {
      const cursor = encodeCursor(secrets, key);
      assert.match(cursor, /^[A-Za-z0-9_-]*$/);
      assert.equal(decodeCursor(secrets, cursor), key);
    }));
  });

  it('treats a missing or empty cursor as the first page', () => {
    assert.equal(decodeCursor(secrets, undefined), null);
    assert.equal(decodeCursor(secrets, ''), null);
    assert.deepEqual(pageRequest(secrets, {}), { limit: DEFAULT_LIMIT, after: null });
    assert.deepEqual(pageRequest(secrets, { limit: 7, cursor: encodeCursor(secrets, 'sec_1') }), { limit: 7, after: 'sec_1' });
  });

  it('refuses cursors it did not issue with a 400 problem', () => {
    const notOurs = ['!!!', 'bm90IGpzb24', Buffer.from('{"x":1}').toString('base64url'), Buffer.from('{"k":5}').toString('base64url'), Buffer.from('null').toString('base64url')];
    for (const cursor of notOurs) assert.ok(refusedAsInvalidCursor(cursor), cursor);
    // Another list's cursor, and one without its list (as an earlier release wrote them).
    assert.ok(refusedAsInvalidCursor(encodeCursor(cursorList('deployments', { org: 'org_1' }), 'dep_1')));
    assert.ok(refusedAsInvalidCursor(Buffer.from('{"k":"api"}').toString('base64url')));
    fc.assert(fc.property(fc.string({ minLength: 1 }), (junk) => {
      try {
        return typeof decodeCursor(secrets, junk) === 'string';
      } catch (error) {
        return isAppError(error) && error.code === 'invalid_cursor';
      }
    }));
  });

  it('binds a cursor to its scope, whatever the order of the filters, of a set\'s members or their repeats', () => {
    const list = cursorList('deployments', { org: 'org_1', service: 'svc_1', environment: undefined, state: ['queued', 'cancelled'] });
    const cursor = encodeCursor(list, 'dep_1');
    const same = cursorList('deployments', { state: ['cancelled', 'queued', 'queued'], service: 'svc_1', org: 'org_1' });
    assert.equal(decodeCursor(same, cursor), 'dep_1');
    const others = [
      { org: 'org_2', service: 'svc_1', state: ['queued', 'cancelled'] },
      { org: 'org_1', service: 'svc_2', state: ['queued', 'cancelled'] },
      { org: 'org_1', service: 'svc_1', state: ['queued'] },
      { org: 'org_1', service: 'svc_1', environment: 'env_1', state: ['queued', 'cancelled'] },
      { org: 'org_1', service: 'svc_1' },
      // A value that would read as two (or as none) if the scope were joined into one string.
      { org: 'org_1', service: 'svc_1,state', state: ['queued', 'cancelled'] },
    ];
    for (const scope of others) {
      assert.match(refusal(cursor, cursorList('deployments', scope)) ?? 'read', /repeat the request with the filters and order the cursor was made with, or start again without it/, JSON.stringify(scope));
    }
    // Booleans and strings are not confused, nor is no filter with an empty one.
    assert.ok(refusedAsInvalidCursor(encodeCursor(cursorList('secrets', { deleted: true }), 'a'), cursorList('secrets', { deleted: 'true' })));
    assert.ok(refusedAsInvalidCursor(encodeCursor(cursorList('secrets', {}), 'a'), cursorList('secrets', { prefix: '' })));
  });

  it('keeps the scope opaque and the cursor short, whatever the filters', () => {
    const prefix = 'p'.repeat(128);
    const cursor = encodeCursor(cursorList('secrets', { org: 'org_1', prefix }), 'pa');
    assert.ok(!Buffer.from(cursor, 'base64url').toString('utf8').includes(prefix));
    assert.ok(cursor.length < 80, cursor);
  });

  it('reads a cursor from before cursors had a scope only where the list says so', () => {
    const unscoped = Buffer.from(JSON.stringify({ l: 'events', k: '42' })).toString('base64url');
    assert.ok(refusedAsInvalidCursor(unscoped, cursorList('events', { org: 'org_1' })));
    const events = cursorList('events', { org: 'org_1' }, { acceptsUnscoped: true });
    assert.equal(decodeCursor(events, unscoped), '42');
    // A scoped one is still checked.
    assert.ok(refusedAsInvalidCursor(encodeCursor(cursorList('events', { org: 'org_2' }), '42'), events));
  });

  it('returns limit items and a cursor after the last one only when another page follows', () => {
    const rows = Array.from({ length: 6 }, (_, i) => ({ id: `k${i}` }));
    const full = toPage(secrets, rows, 5, (r) => r.id);
    assert.deepEqual(full.items.map((r) => r.id), ['k0', 'k1', 'k2', 'k3', 'k4']);
    assert.equal(decodeCursor(secrets, full.nextCursor!), 'k4');
    const last = toPage(secrets, rows.slice(0, 5), 5, (r) => r.id);
    assert.deepEqual([last.items.length, last.nextCursor], [5, null]);
    assert.deepEqual(toPage(secrets, [], 5, (r: { id: string }) => r.id), { items: [], nextCursor: null });
  });
});
