// What makes two requests "the same" for an Idempotency-Key, which keys are well-formed, and
// which routes take one.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isDeepStrictEqual } from 'node:util';
import fc from 'fast-check';
import { IdempotencyKeyHeader, isIdempotentRoute } from '../../src/modules/idempotency/idempotency.schemas.js';
import { canonicalJson, requestFingerprint } from '../../src/modules/idempotency/idempotency.service.js';

const KEY = Buffer.alloc(32, 7);

/** The same object with its keys inserted in reverse order, at every depth. */
function reversedKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(reversedKeys);
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(Object.keys(value).reverse().map((k) => [k, reversedKeys((value as Record<string, unknown>)[k])]));
  }
  return value;
}

const json = fc.jsonValue().map((v) => JSON.parse(JSON.stringify(v)) as unknown);

describe('request fingerprint', () => {
  it('ignores key order at every depth', () => {
    fc.assert(fc.property(json, (body) => {
      assert.equal(canonicalJson(reversedKeys(body)), canonicalJson(body));
      assert.equal(requestFingerprint(KEY, { method: 'POST', path: '/v1/x', body: reversedKeys(body) }), requestFingerprint(KEY, { method: 'POST', path: '/v1/x', body }));
    }));
  });

  it('tells apart bodies that differ, and only those', () => {
    // isDeepStrictEqual ignores key order, as a retry may.
    fc.assert(fc.property(json, json, (a, b) => {
      const same = isDeepStrictEqual(a, b);
      assert.equal(requestFingerprint(KEY, { method: 'POST', path: '/v1/x', body: a }) === requestFingerprint(KEY, { method: 'POST', path: '/v1/x', body: b }), same);
    }));
  });

  it('keeps array order, and tells apart method and path', () => {
    const fp = (method: string, path: string, body: unknown) => requestFingerprint(KEY, { method, path, body });
    assert.notEqual(fp('POST', '/v1/x', [1, 2]), fp('POST', '/v1/x', [2, 1]));
    assert.notEqual(fp('POST', '/v1/orgs/a/secrets', {}), fp('POST', '/v1/orgs/b/secrets', {}));
    assert.notEqual(fp('POST', '/v1/x', {}), fp('PUT', '/v1/x', {}));
    assert.notEqual(fp('POST', '/v1/x?dry=1', {}), fp('POST', '/v1/x', {}));
    // No body and a JSON null are the same request; an empty object is not.
    assert.equal(fp('POST', '/v1/x', undefined), fp('POST', '/v1/x', null));
    assert.notEqual(fp('POST', '/v1/x', undefined), fp('POST', '/v1/x', {}));
  });
});

describe('Idempotency-Key header', () => {
  const valid = new RegExp(IdempotencyKeyHeader.pattern!, 'u');

  it('accepts 1-255 printable ASCII characters', () => {
    fc.assert(fc.property(fc.string({ unit: fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)), minLength: 1, maxLength: 255 }), (key) => {
      assert.ok(valid.test(key));
    }));
  });

  it('refuses empty, longer, control and non-ASCII keys', () => {
    for (const key of ['', 'k'.repeat(256), 'a\tb', 'a\u007fb', 'café', '鍵']) assert.equal(valid.test(key), false, JSON.stringify(key));
  });
});

describe('idempotent routes', () => {
  it('are the authenticated POSTs of the API', () => {
    assert.equal(isIdempotentRoute({ method: 'POST', url: '/v1/orgs/:orgId/secrets', config: { auth: 'developer' } }), true);
    assert.equal(isIdempotentRoute({ method: ['POST', 'HEAD'], url: '/v1/orgs', config: { auth: 'instance-admin' } }), true);
    assert.equal(isIdempotentRoute({ method: 'PUT', url: '/v1/orgs/:orgId/secrets', config: { auth: 'developer' } }), false);
    assert.equal(isIdempotentRoute({ method: 'GET', url: '/v1/orgs', config: { auth: 'member' } }), false);
    assert.equal(isIdempotentRoute({ method: 'POST', url: '/oauth/v2/token', config: { errorFormat: 'oauth' } }), false);
    assert.equal(isIdempotentRoute({ method: 'POST', url: '/v1/public', config: {} }), false);
  });
});
