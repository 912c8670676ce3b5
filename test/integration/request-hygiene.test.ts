// Input that no route should let reach the database or be quietly ignored: NUL characters and
// numbers past 32 bits (PostgreSQL refuses both, as a 500 if nothing stops them first), refusals
// that name what is allowed, query parameters an operation does not take, and conditional headers
// on resources without ETags.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import { after, before, describe, it } from 'node:test';
import { startServer, type TestServer } from '../support/harness.js';
import { assertProblem } from '../support/problems.js';

describe('request hygiene', () => {
  let server: TestServer;
  const org = '/v1/orgs/default';
  const secret = `hygiene-${randomUUID().slice(0, 8)}`;

  before(async () => {
    server = await startServer();
    const created = await server.owner.http.post(`${org}/secrets`, { secrets: [{ name: secret, values: { K: 'v1' } }] });
    assert.equal(created.status, 201, created.text);
  });
  after(async () => { await server.close(); });

  it('refuses a NUL character anywhere in the URL with a 400, never a 500', async () => {
    // The routes without any input too (their OpenAPI operations declare this 400).
    for (const path of [`${org}/secrets?prefix=a%00`, `${org}/secrets/a%00`, `${org}/environments/a%00`, `${org}/events?type=a%00`, '/v1/orgs/a%00/secrets',
      '/healthz?a%00', '/readyz?a%00', '/oauth/v2/keys?a%00', '/.well-known/openid-configuration?a%00', '/.well-known/oauth-authorization-server?a%00']) {
      const body = assertProblem(await server.owner.http.get(path), 400, 'invalid_request', path);
      assert.match(String(body.detail), /^The URL contains a NUL character/);
    }
  });

  it('refuses a NUL character in a body string or key, pointing at it, and writes nothing', async () => {
    const inValue = await server.owner.http.post(`${org}/secrets`, { secrets: [{ name: 'nul-value', values: { K: 'sentinel-\u0000-x' } }] });
    const body = assertProblem(inValue, 400, 'invalid_request');
    assert.deepEqual(body.errors, [{ pointer: '/secrets/0/values/K', message: 'contains U+0000' }]);
    assert.ok(!inValue.text.includes('sentinel'), 'the value is not repeated');
    const inKey = await server.owner.http.post(`${org}/environments`, { name: 'nul-key', ['de/sc\u0000']: 'x' });
    assert.deepEqual(assertProblem(inKey, 400, 'invalid_request').errors, [{ pointer: '/de~1sc\u0000', message: 'contains U+0000' }]);
    assert.equal((await server.owner.http.get(`${org}/secrets/nul-value`)).status, 404);
    // An escaped backslash before "u0000" is text, not NUL.
    const text = await server.owner.http.post(`${org}/environments`, { name: `bs-${randomUUID().slice(0, 8)}`, description: 'a\\u0000b' });
    assert.equal(text.status, 201, text.text);
  });

  it('refuses a body nested deeper than the stack allows with a 400, never a 500', async () => {
    const depth = 1_000_000;
    for (const escape of ['', '\\u0041']) {
      const raw = `{"a":"${escape}","secrets":${'['.repeat(depth)}${']'.repeat(depth)}}`;
      const res = await server.owner.http.request('POST', `${org}/secrets`, { raw, contentType: 'application/json' });
      assert.equal(res.status, 400, res.text);
    }
    // Deep, and holding what the checks after the parse look for (each of them walks the body too).
    for (const n of [2_000, 10_000, 50_000, 1_000_000]) {
      for (const inner of ['{"x":1,"x":2}', '"\\ud800"', '"\\u0000"']) {
        const raw = `{"secrets":${'['.repeat(n)}${inner}${']'.repeat(n)}}`;
        const res = await server.owner.http.request('POST', `${org}/secrets`, { raw, contentType: 'application/json' });
        assert.equal(res.status, 400, `${n} ${inner}: ${res.text.slice(0, 300)}`);
      }
    }
    assert.ok(!server.logs.some((l) => l.includes('Maximum call stack')), 'nothing overflowed');
  });

  it('says a query parameter given twice is given twice, not that it has the wrong type', async () => {
    const twice = assertProblem(await server.owner.http.get(`${org}/secrets?limit=1&limit=2`), 400, 'invalid_request');
    assert.deepEqual(twice.errors, [{ pointer: '/query/limit', message: 'is given more than once; give it once' }]);
  });

  it('lists at most 100 errors, and checks a body of more than 20,000 members up to its first', async () => {
    const badKeys = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`1bad${i}`, 'v']));
    const several = assertProblem(await server.owner.http.put(`${org}/secrets/${secret}`, { values: badKeys(150) }), 400, 'limit_exceeded');
    assert.equal((several.errors as unknown[]).length, 100);
    assert.match(String(several.detail), /more than 100 properties \(limit SLIPWAY_MAX_KEYS_PER_SECRET\)/);
    const invalid = assertProblem(await server.owner.http.post(`${org}/secrets`, { secrets: [{ name: 'many-bad', values: badKeys(0) }, ...Array.from({ length: 120 }, () => ({ nome: 'x' }))] }), 400, 'invalid_request');
    assert.equal((invalid.errors as unknown[]).length, 100);
    assert.match(String(invalid.detail), /\(and more: errors lists the first 100 of \d+\)/);
    // Hundreds of thousands of errors took seconds to list; the first is what such a body gets.
    const huge = assertProblem(await server.owner.http.put(`${org}/secrets/${secret}`, { values: badKeys(30_000) }), 400, 'limit_exceeded');
    assert.deepEqual(huge.errors, [{ pointer: '/values', message: 'must NOT have more than 100 properties (limit SLIPWAY_MAX_KEYS_PER_SECRET)' }]);
    assert.equal((await server.owner.http.get(`${org}/secrets/${secret}`)).body.version, 1, 'nothing was written');
  });

  it('refuses version and sequence numbers past 32 bits as invalid requests', async () => {
    for (const [method, path, body] of [
      ['GET', `${org}/secrets/${secret}/versions/3000000000`, undefined],
      ['POST', `${org}/secrets/${secret}/reveal`, { version: 3_000_000_000 }],
      ['POST', `${org}/secrets/${secret}/restore`, { version: 3_000_000_000 }],
      ['GET', `${org}/deployments/dep_01jd6xq0m3b8c2v4w5x6y7z8a9/logs?after=3000000000`, undefined],
    ] as const) {
      const res = await server.owner.http.request(method, path, body === undefined ? {} : { body });
      assert.match(String(assertProblem(res, 400, 'invalid_request', path).detail), /must be <= 2147483647/, path);
    }
  });

  it('names the allowed values when a choice is wrong, and says an empty change is empty', async () => {
    const state = assertProblem(await server.owner.http.get(`${org}/deployments?state=bogus`), 400, 'invalid_request');
    assert.match(String(state.detail), /must be one of "queued", /);
    const role = assertProblem(await server.owner.http.post(`${org}/service-users`, { name: 'x', role: 'superuser' }), 400, 'invalid_request');
    assert.deepEqual(role.errors, [{ pointer: '/role', message: 'must be one of "owner", "admin", "developer", "viewer", "runner"' }]);
    const empty = assertProblem(await server.owner.http.patch(org, {}), 400, 'invalid_request');
    assert.deepEqual(empty.errors, [{ pointer: '', message: 'must not be empty' }]);
    // An empty filter is refused alike, rather than meaning "all" on one list and "none" on another.
    for (const [path, pointer] of [[`${org}/deployments?service=`, '/query/service'], [`${org}/events?type=`, '/query/type'], [`${org}/events?subject=`, '/query/subject']]) {
      assert.deepEqual(assertProblem(await server.owner.http.get(path!), 400, 'invalid_request', path).errors, [{ pointer, message: 'must not be empty' }]);
    }
  });

  it('says in words what a field is wrong by: a repeat points at the repeated item, a type names the types, a nullable field fails once', async () => {
    const repeated = assertProblem(await server.owner.http.post(`${org}/service-users`, { name: 'repeats', role: 'runner', environments: ['a', 'b', 'b'] }), 400, 'invalid_request');
    assert.deepEqual(repeated.errors, [{ pointer: '/environments/2', message: 'repeats item 1: give each once' }]);
    const empty = assertProblem(await server.owner.http.post(`${org}/deployments`, { service: 'x', environment: 'y', revision: '' }), 400, 'invalid_request');
    assert.deepEqual(empty.errors, [{ pointer: '/revision', message: 'must not be empty' }]);
    const typed = assertProblem(await server.owner.http.post(`${org}/deployments`, { service: 'x', environment: 'y', revision: 7 }), 400, 'invalid_request');
    assert.deepEqual(typed.errors, [{ pointer: '/revision', message: 'must be a string or null' }]);
    const flag = assertProblem(await server.owner.http.get(`${org}/secrets?deleted=1`), 400, 'invalid_request');
    assert.deepEqual(flag.errors, [{ pointer: '/query/deleted', message: 'must be a boolean' }]);
  });

  it('refuses a service-user name that begins like an id, and fields where a route takes none', async () => {
    const res = await server.owner.http.post(`${org}/service-users`, { name: 'su_01m80ztq5jm5vg4dm9s179yk06', role: 'viewer' });
    assert.equal((assertProblem(res, 400, 'invalid_request').errors as Array<{ pointer: string }>)[0]!.pointer, '/name');
    const user = await server.owner.http.post(`${org}/service-users`, { name: `hygiene-${randomUUID().slice(0, 8)}`, role: 'viewer' });
    assert.equal(user.status, 201, user.text);
    const extra = await server.owner.http.post(`${org}/service-users/${user.body.id}/secrets`, { extra: 1 });
    assert.deepEqual(assertProblem(extra, 400, 'invalid_request').errors, [{ pointer: '/extra', message: 'is not a known field' }]);
    assert.equal((await server.owner.http.post(`${org}/service-users/${user.body.id}/secrets`)).status, 201);
  });

  it('refuses a query parameter an operation does not take, naming those it does, and changes nothing', async () => {
    const list = assertProblem(await server.owner.http.get(`${org}/secrets?limt=5`), 400, 'invalid_request');
    assert.deepEqual(list.errors, [{ pointer: '/query/limt', message: 'is not a query parameter of this operation (it takes limit, cursor, prefix, deleted)' }]);
    const one = assertProblem(await server.owner.http.get(`${org}/secrets/${secret}?version=1`), 400, 'invalid_request');
    assert.deepEqual(one.errors, [{ pointer: '/query/version', message: 'is not a query parameter of this operation (it takes none)' }]);
    // A misspelt switch of a destructive operation does nothing at all.
    const env = await server.owner.http.post(`${org}/environments`, { name: `typo-${randomUUID().slice(0, 8)}` });
    assert.equal(env.status, 201, env.text);
    assertProblem(await server.owner.http.delete(`${org}/environments/${env.body.id}?froce=true`), 400, 'invalid_request');
    assert.equal((await server.owner.http.get(`${org}/environments/${env.body.id}`)).status, 200);
    assert.equal((await server.owner.http.get(`${org}/secrets?limit=1`)).status, 200);
  });

  it('says briefly what an Idempotency-Key must be', async () => {
    const res = await server.owner.http.post(`${org}/secrets`, { secrets: [{ name: 'idem', values: { K: 'v' } }] }, { headers: { 'idempotency-key': 'caf\u00e9' } });
    const body = assertProblem(res, 400, 'invalid_request');
    assert.match(String(body.detail), /1-255 printable ASCII characters/);
    assert.ok(String(body.detail).length < 300, String(body.detail));
  });

  it('answers a precondition on a resource without ETags with 412 and changes nothing; * still holds', async () => {
    const before = (await server.owner.http.get(org)).body as { name: string };
    const stale = await server.owner.http.patch(org, { name: 'Renamed' }, { headers: { 'if-match': '"99"' } });
    assertProblem(stale, 412, 'precondition_failed');
    assert.equal((await server.owner.http.get(org)).body.name, before.name);
    const exists = await server.owner.http.put(`${org}/secrets`, { secrets: [{ name: secret, values: { K: 'v2' } }] }, { headers: { 'if-none-match': '*' } });
    assertProblem(exists, 412, 'precondition_failed');
    assert.equal((await server.owner.http.get(`${org}/secrets/${secret}`)).body.version, 1);
    const any = await server.owner.http.patch(org, { name: before.name }, { headers: { 'if-match': '*' } });
    assert.equal(any.status, 200, any.text);
    // If-None-Match's tags match nothing here, so the write goes on; a value that is no entity tag is
    // refused, as on a resource with ETags, rather than ignored.
    const garbage = await server.owner.http.patch(org, { name: 'Renamed' }, { headers: { 'if-none-match': 'garbage' } });
    assert.deepEqual(assertProblem(garbage, 400, 'invalid_request').errors, [{ pointer: '/headers/if-none-match', message: 'is not a quoted ETag' }]);
    assert.equal((await server.owner.http.get(org)).body.name, before.name);
    const none = await server.owner.http.patch(org, { name: before.name }, { headers: { 'if-none-match': '"1"' } });
    assert.equal(none.status, 200, none.text);
  });

  it('compares a secret’s If-Match strongly and refuses one that is not a quoted ETag', async () => {
    const weak = await server.owner.http.patch(`${org}/secrets/${secret}`, { set: { K: 'weak' } }, { headers: { 'if-match': 'W/"1"' } });
    assertProblem(weak, 412, 'precondition_failed');
    const unquoted = await server.owner.http.patch(`${org}/secrets/${secret}`, { set: { K: 'bare' } }, { headers: { 'if-match': '1' } });
    assert.deepEqual(assertProblem(unquoted, 400, 'invalid_request').errors, [{ pointer: '/headers/if-match', message: 'is not a quoted ETag' }]);
    assert.equal((await server.owner.http.get(`${org}/secrets/${secret}`)).body.version, 1);
    const strong = await server.owner.http.patch(`${org}/secrets/${secret}`, { set: { K: 'strong' } }, { headers: { 'if-match': '"1"' } });
    assert.equal(strong.status, 200, strong.text);
  });

  it('reads a list of ETags as RFC 9110 does: commas inside quotes belong to a tag, empty elements are skipped', async () => {
    const current = await server.owner.http.get(`${org}/secrets/${secret}`);
    const etag = current.headers.get('etag')!;
    for (const header of [`${etag},`, `"a,b", ${etag}`, ` , ${etag} ,, `]) {
      const res = await server.owner.http.get(`${org}/secrets/${secret}`, { headers: { 'if-none-match': header } });
      assert.equal(res.status, 304, `${header}: ${res.text}`);
    }
    assert.equal((await server.owner.http.get(`${org}/secrets/${secret}`, { headers: { 'if-none-match': '"a,b"' } })).status, 200);
  });

  it('answers an empty path segment under the API with 404 route_not_found, whatever the method', async () => {
    for (const [method, path] of [['GET', `${org}/environments/`], ['POST', `${org}/environments/`], ['PUT', `${org}/secrets/`], ['GET', '/v1/orgs/'], ['GET', `${org}//secrets`]] as const) {
      const res = await server.owner.http.request(method, path, method === 'GET' ? {} : { body: { name: 'x' } });
      assert.match(String(assertProblem(res, 404, 'route_not_found', `${method} ${path}`).detail), /an empty path segment/);
    }
  });

  it('takes a request without content whatever its Content-Type says, and refuses a body sent to a read', async () => {
    const name = `ct-${randomUUID().slice(0, 8)}`;
    await server.owner.http.post(`${org}/secrets`, { secrets: [{ name, values: { K: 'v' } }] });
    // As `curl -d ''` sends it: a form type and no content.
    const deleted = await server.owner.http.request('DELETE', `${org}/secrets/${name}`, { raw: '', contentType: 'application/x-www-form-urlencoded' });
    assert.equal(deleted.status, 204, deleted.text);
    const restored = await server.owner.http.request('POST', `${org}/secrets/${name}/restore`, { raw: '', contentType: 'text/plain; charset=utf-8' });
    assert.equal(restored.status, 200, restored.text);
    // Content in another type is still refused.
    assertProblem(await server.owner.http.request('POST', `${org}/secrets/${name}/reveal`, { raw: 'version=1', contentType: 'application/x-www-form-urlencoded' }), 415, 'unsupported_media_type');

    const withBody = await new Promise<{ status: number; body: any }>((resolve, reject) => {
      const url = new URL(`${server.url}${org}/environments`);
      const req = http.request(url, { method: 'GET', headers: { authorization: `Bearer ${server.owner.token}`, 'content-type': 'application/json', 'content-length': '11' } }, (res) => {
        let text = '';
        res.on('data', (c: Buffer) => { text += c.toString(); });
        res.on('end', () => resolve({ status: res.statusCode!, body: JSON.parse(text) }));
      });
      req.on('error', reject);
      req.end('{"limit":1}');
    });
    assert.equal(withBody.status, 400, JSON.stringify(withBody.body));
    assert.deepEqual(withBody.body.errors, [{ pointer: '', message: 'is not taken by this operation' }], JSON.stringify(withBody.body));
  });

  it('tells a bulk create that names a deleted secret how to free the name', async () => {
    const name = `deleted-${randomUUID().slice(0, 8)}`;
    assert.equal((await server.owner.http.post(`${org}/secrets`, { secrets: [{ name, values: { K: 'v' } }] })).status, 201);
    assert.equal((await server.owner.http.delete(`${org}/secrets/${name}`)).status, 204);
    const again = await server.owner.http.post(`${org}/secrets`, { secrets: [{ name, values: { K: 'v' } }] });
    assert.match(String(assertProblem(again, 409, 'secret_deleted').detail), /restore them .* or delete them permanently/);
  });
});
