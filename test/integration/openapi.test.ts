// /openapi.json is generated from the route schemas: it must be OpenAPI 3.1, lint clean with a
// standard linter, and state every operation's whole contract. /docs renders it.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createConfig, lintFromString } from '@redocly/openapi-core';
import { PROBLEM_CODES } from '../../src/platform/problem-codes.js';
import { clientCredentialsGrant, freePort, startServer, tempDir, testDatabase, type HttpResult, type TestServer } from '../support/harness.js';
import { loadRoleMatrix, type DocOperation } from '../support/role-matrix.js';

const BODY_METHODS = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

describe('OpenAPI document and reference page', () => {
  let server: TestServer;
  let doc: any;
  let operations: DocOperation[];
  before(async () => {
    server = await startServer();
    const res = await server.http().get('/openapi.json');
    assert.equal(res.status, 200);
    doc = res.body;
    operations = (await loadRoleMatrix()).operationsOf(doc);
  });
  after(async () => { await server.close(); });

  it('is OpenAPI 3.1 describing this server', () => {
    assert.match(doc.openapi, /^3\.1\.\d+$/);
    assert.equal(doc.servers[0].url, server.config.baseUrl);
    // The OAuth endpoints are the authorization server's, at SLIPWAY_AUTH_URL, which may be elsewhere.
    assert.deepEqual(doc.paths['/oauth/v2/token'].servers, [{ url: server.config.authUrl }]);
    assert.ok(doc.components.schemas.Problem, 'the problem schema is shared under components.schemas');
    assert.ok(operations.length >= 15, `only ${operations.length} operations`);
  });

  it('lints clean with the Redocly recommended ruleset', async () => {
    const config = await createConfig({ extends: ['recommended'] });
    const problems = await lintFromString({ source: JSON.stringify(doc), absoluteRef: `${server.url}/openapi.json`, config });
    const remaining = problems.map((p) => `${p.severity} ${p.ruleId}: ${p.message} at ${p.location[0]?.pointer ?? '?'}`);
    assert.deepEqual(remaining, []);
  });

  it('states every operation\'s whole contract', () => {
    const tags = new Set((doc.tags as Array<{ name: string }>).map((t) => t.name));
    const ids = new Set<string>();
    const failures: string[] = [];
    for (const { method, path, operation } of operations) {
      const label = `${method} ${path}`;
      const responses = operation.responses as Record<string, any>;
      const expect = (ok: boolean, what: string) => { if (!ok) failures.push(`${label}: ${what}`); };
      expect(/^[a-z][A-Za-z]*(\.[a-z][A-Za-z]*)+$/.test(operation.operationId ?? ''), `operationId "${operation.operationId}" is not a dotted feature.verb`);
      expect(!ids.has(operation.operationId), `operationId ${operation.operationId} repeats`);
      ids.add(operation.operationId);
      expect(operation.tags?.length > 0 && operation.tags.every((t: string) => tags.has(t)), `tags ${JSON.stringify(operation.tags)} are not all in the tag list`);
      expect(typeof operation.summary === 'string' && operation.summary.length > 0, 'no summary');
      expect(Object.keys(responses).some((s) => /^2\d\d$/.test(s)), 'no 2xx response');
      expect(Array.isArray(operation.security), 'security is not stated (public operations say [])');

      const shared = ['5XX'];
      const bearer = (operation.security ?? []).some((r: Record<string, unknown>) => 'bearerAuth' in r);
      if (bearer) {
        shared.push('401', '403', '429');
        if (path.includes('{')) shared.push('404');
        expect(typeof operation['x-required-role'] === 'string', 'no x-required-role');
      }
      // The OAuth endpoints answer RFC 6749 errors instead of problems; they declare their own.
      const oauth = (operation.security ?? []).some((r: Record<string, unknown>) => 'clientBasic' in r);
      if (!oauth && BODY_METHODS.has(method)) shared.push('400', '413', '415');
      for (const status of shared) {
        const response = responses[status];
        if (response === undefined) {
          failures.push(`${label}: no ${status} response`);
          continue;
        }
        if (oauth) continue;
        expect(response.content?.['application/problem+json']?.schema?.$ref === '#/components/schemas/Problem', `${status} is not an application/problem+json Problem`);
      }
    }
    assert.deepEqual(failures, []);
  });

  it('declares the headers its answers carry, every problem code, and no result an operation cannot give', async () => {
    const watched = ['x-request-id', 'ratelimit', 'ratelimit-policy', 'retry-after', 'www-authenticate', 'cache-control', 'idempotent-replayed', 'etag', 'location'];
    const undeclared: string[] = [];
    const check = (method: string, path: string, res: { status: number; headers: Headers }) => {
      const responses = doc.paths[path][method].responses as Record<string, { headers?: Record<string, unknown> }>;
      const documented = responses[String(res.status)] ?? (res.status >= 500 ? responses['5XX'] : undefined);
      if (documented === undefined) return undeclared.push(`${method} ${path} ${res.status}: no such response`);
      const declared = new Set(Object.keys(documented.headers ?? {}).map((h) => h.toLowerCase()));
      for (const name of watched) if (res.headers.has(name) && !declared.has(name)) undeclared.push(`${method} ${path} ${res.status}: ${name}`);
    };
    const owner = server.owner;
    const orgs = `/v1/orgs/${owner.orgId}`;
    const api = server.http(owner.token);
    const sent: Array<[string, string, Promise<HttpResult>]> = [
      ['get', '/v1/orgs', api.get('/v1/orgs')],
      ['get', '/v1/orgs', server.http().get('/v1/orgs')],
      ['get', '/v1/orgs', server.http('not-a-token').get('/v1/orgs')],
      ['patch', '/v1/orgs/{orgId}/secrets/{name}', api.patch(`${orgs}/secrets/nothing-here`, { set: { A: '1' } })],
      ['post', '/v1/orgs/{orgId}/environments', api.post(`${orgs}/environments`, { name: `hdr-${Date.now()}` })],
      ['post', '/v1/orgs/{orgId}/environments', api.post(`${orgs}/environments`, { name: 'x' }, { headers: { 'content-encoding': 'gzip' } })],
    ];
    for (const [method, path, pending] of sent) check(method, path, await pending);
    // A token's own revocation (no-store, and the revocation budget beside the API's limit), with a token of its own.
    check('delete', '/v1/token', await server.http(await server.token(server.bootstrap)).delete('/v1/token'));
    // A replay, and a read answered 304.
    const body = { secrets: [{ name: `hdr-${Date.now()}`, values: { A: '1' } }] };
    for (let i = 0; i < 2; i++) check('post', '/v1/orgs/{orgId}/secrets', await api.post(`${orgs}/secrets`, body, { headers: { 'idempotency-key': `hdr-${process.pid}` } }));
    // A refusal is replayed too.
    const refused = { service: 'no-such-service', environment: 'no-such-environment' };
    for (let i = 0; i < 2; i++) {
      const answer = await api.post(`${orgs}/deployments`, refused, { headers: { 'idempotency-key': `hdr-refused-${process.pid}` } });
      assert.equal(answer.headers.get('idempotent-replayed'), i === 0 ? null : 'true');
      check('post', '/v1/orgs/{orgId}/deployments', answer);
    }
    const read = await api.get(`${orgs}/secrets/${body.secrets[0]!.name}`);
    check('get', '/v1/orgs/{orgId}/secrets/{name}', read);
    check('get', '/v1/orgs/{orgId}/secrets/{name}', await api.get(`${orgs}/secrets/${body.secrets[0]!.name}`, { headers: { 'if-none-match': read.headers.get('etag')! } }));
    const tokenUrl = `${server.url}/oauth/v2/token`;
    check('post', '/oauth/v2/token', await clientCredentialsGrant(tokenUrl, server.bootstrap, server.bootstrap.scope));
    check('post', '/oauth/v2/token', await clientCredentialsGrant(tokenUrl, { ...server.bootstrap, clientSecret: 'wrong' }, server.bootstrap.scope));
    assert.deepEqual(undeclared, []);

    const codes = doc.components.schemas.Problem.properties.code.description as string;
    assert.deepEqual(Object.keys(PROBLEM_CODES).filter((code) => !codes.includes(`\`${code}\``)), []);
    const result = (path: string, method: string) => doc.paths[path][method].responses['200'].content['application/json'].schema.properties.result;
    const values = (schema: { anyOf?: Array<{ const?: string; enum?: string[] }>; enum?: string[] }) => schema.enum ?? schema.anyOf!.flatMap((b) => b.enum ?? [b.const!]);
    assert.deepEqual(values(result('/v1/orgs/{orgId}/secrets/{name}', 'patch')), ['updated', 'unchanged']);
    assert.deepEqual(values(result('/v1/orgs/{orgId}/secrets/{name}', 'put')), ['updated', 'unchanged']);
    assert.deepEqual(values(result('/v1/orgs/{orgId}/secrets/{name}/restore', 'post')), ['updated', 'unchanged', 'restored']);
    // What the spec pins: a created secret is these five fields, never a value or a deletion time.
    const created = doc.paths['/v1/orgs/{orgId}/secrets'].post.responses['201'].content['application/json'].schema.properties.secrets.items;
    assert.deepEqual(Object.keys(created.properties).sort(), ['createdAt', 'keys', 'name', 'updatedAt', 'version']);
    assert.equal(JSON.stringify(doc).includes('Default Response'), false);
  });

  it('documents the OAuth endpoints\' form fields, client_secret_post as the alternative to Basic, and RFC 8414 metadata', () => {
    for (const [path, fields, required] of [['/oauth/v2/token', ['grant_type', 'scope'], ['grant_type']], ['/oauth/v2/introspect', ['token', 'token_type_hint'], ['token']], ['/oauth/v2/revoke', ['token', 'token_type_hint'], ['token']]] as const) {
      const op = doc.paths[path].post;
      const schema = op.requestBody.content['application/x-www-form-urlencoded'].schema;
      assert.deepEqual(Object.keys(schema.properties), [...fields, 'client_id', 'client_secret'], path);
      assert.deepEqual(schema.required, required, path);
      assert.equal(JSON.stringify(op).includes('x-form'), false);
      assert.deepEqual(op.security, [{ clientBasic: [] }, {}], path);
    }
    assert.deepEqual(doc.paths['/oauth/v2/token'].post.requestBody.content['application/x-www-form-urlencoded'].schema.properties.grant_type.enum, ['client_credentials']);
    assert.equal(doc.paths['/.well-known/oauth-authorization-server'].get.operationId, 'oauth.metadata');
  });

  it('types the OAuth answers as they are (metadata, keys, introspection), so that a generated client can read them', async () => {
    const schemaOf = (path: string, method: string) => doc.paths[path][method].responses['200'].content['application/json'].schema;
    const documented = (schema: any, answer: Record<string, unknown>, what: string) => {
      assert.equal(schema.additionalProperties, false, what);
      for (const key of Object.keys(answer)) assert.ok(key in schema.properties, `${what}: ${key} is not documented`);
      for (const key of schema.required ?? []) assert.ok(key in answer, `${what}: ${key} is documented as required and missing`);
    };
    const metadata = await server.http().get('/.well-known/oauth-authorization-server');
    documented(schemaOf('/.well-known/oauth-authorization-server', 'get'), metadata.body, 'metadata');
    assert.equal(schemaOf('/.well-known/oauth-authorization-server', 'get').properties.token_endpoint.type, 'string');
    const keys = await server.http().get('/oauth/v2/keys');
    for (const key of keys.body.keys) documented(schemaOf('/oauth/v2/keys', 'get').properties.keys.items, key, 'jwk');
    const basic = `Basic ${Buffer.from(`${server.bootstrap.clientId}:${server.bootstrap.clientSecret}`).toString('base64')}`;
    for (const token of [server.owner.token, 'not-a-token']) {
      const res = await fetch(`${server.url}/oauth/v2/introspect`, { method: 'POST', headers: { authorization: basic, 'content-type': 'application/x-www-form-urlencoded' }, body: new URLSearchParams({ token }) });
      documented(schemaOf('/oauth/v2/introspect', 'post'), await res.json() as Record<string, unknown>, 'introspection');
    }
  });

  it('declares 414 where a path takes a parameter, and bodies that may be left out as not required', async () => {
    assert.ok(doc.paths['/v1/orgs/{orgId}/secrets/{name}'].get.responses['414']);
    const long = await server.owner.http.get(`/v1/orgs/default/secrets/${'a'.repeat(1100)}`);
    assert.equal(long.status, 414);
    for (const path of ['/v1/orgs/{orgId}/secrets/{name}/reveal', '/v1/orgs/{orgId}/secrets/{name}/restore']) {
      assert.equal(doc.paths[path].post.requestBody.required, false, path);
    }
    // Headers of a success only on the success: a refused read has no ETag, a refused creation of a
    // credential no Cache-Control it does not declare.
    assert.equal((await server.owner.http.post('/v1/orgs/default/secrets', { secrets: [{ name: 'documented', values: { K: 'v' } }] })).status, 201);
    const stale = await server.owner.http.get('/v1/orgs/default/secrets/documented', { headers: { 'if-match': '"99"' } });
    assert.deepEqual([stale.status, stale.headers.get('etag')], [412, null]);
    const taken = await server.owner.http.post('/v1/orgs/default/service-users', { name: 'bootstrap-owner', role: 'viewer' });
    assert.deepEqual([taken.status, taken.headers.get('cache-control')], [409, null]);
  });

  it('serves an API reference page at /docs whose assets load', async () => {
    const page = await fetch(`${server.url}/docs`);
    assert.equal(page.status, 200);
    assert.match(page.headers.get('content-type') ?? '', /^text\/html/);
    const html = await page.text();
    assert.match(html, /<title>Slipway API reference<\/title>/);
    const scripts = [...html.matchAll(/<script[^>]+src="([^"]+)"/g)].map((m) => m[1]!);
    assert.ok(scripts.length > 0, 'the page references no script');
    for (const src of scripts) {
      const asset = await fetch(new URL(src, `${server.url}/docs/`));
      assert.equal(asset.status, 200, src);
      assert.match(asset.headers.get('content-type') ?? '', /javascript/, src);
      assert.ok((await asset.text()).length > 0, src);
    }
  });
});

describe('OpenAPI document and routes with the API and its authorization server apart, each on a path of its own', () => {
  let server: TestServer;
  let baseUrl: string;
  let authUrl: string;
  before(async () => {
    const port = await freePort();
    baseUrl = `http://127.0.0.1:${port}/api`;
    // Another origin, on the same listener.
    authUrl = `http://localhost:${port}/auth`;
    server = await startServer({ reuse: { dataDir: tempDir(), database: await testDatabase(), port }, env: { SLIPWAY_BASE_URL: baseUrl, SLIPWAY_AUTH_URL: authUrl } });
  });
  after(async () => {
    assert.deepEqual(server.undeclared, []);
    await server.close();
  });

  it('serves the API, its health checks and its reference under the base URL\'s path, where bootstrap.json and Location point', async () => {
    assert.equal(server.bootstrap.baseUrl, baseUrl);
    const auth = { authorization: `Bearer ${server.owner.token}` };
    assert.equal((await fetch(`${server.bootstrap.baseUrl}/v1/orgs`, { headers: auth })).status, 200);
    for (const path of ['/healthz', '/readyz', '/openapi.json', '/docs']) assert.equal((await fetch(`${baseUrl}${path}`)).status, 200, path);
    for (const path of ['/v1/orgs', '/healthz', '/openapi.json']) {
      const outside = await fetch(`${server.url}${path}`, { headers: auth });
      assert.equal(outside.status, 404, path);
      assert.match(((await outside.json()) as { detail: string }).detail, new RegExp(`See ${baseUrl}/openapi\\.json for the API`));
    }
    const created = await server.owner.http.post('/v1/orgs', { slug: 'pathed', name: 'Pathed' });
    assert.equal(created.status, 201, created.text);
    const location = created.headers.get('location')!;
    assert.ok(location.startsWith(`${baseUrl}/v1/orgs/`), location);
    assert.equal((await fetch(location, { headers: auth })).status, 200);
    // What applies to routes by their path applies under the prefix too: an Idempotency-Key, say.
    const keyed = () => server.owner.http.post('/v1/orgs', { slug: 'pathed-keyed', name: 'Keyed' }, { headers: { 'idempotency-key': 'pathed-key' } });
    assert.equal((await keyed()).status, 201);
    const replay = await keyed();
    assert.equal(replay.status, 201, replay.text);
    assert.equal(replay.headers.get('idempotent-replayed'), 'true');
  });

  it('resolves every operation of its OpenAPI document to a route the server has', async () => {
    const doc = (await server.http().get('/openapi.json')).body;
    assert.deepEqual(doc.servers, [{ url: baseUrl }]);
    const discovery = await (await fetch(`${authUrl}/.well-known/openid-configuration`)).json() as Record<string, string>;
    const where = (path: string) => `${(doc.paths[path].servers ?? doc.servers)[0].url}${path}`;
    assert.equal(where('/v1/orgs'), `${baseUrl}/v1/orgs`);
    assert.equal(where('/healthz'), `${baseUrl}/healthz`);
    assert.equal(where('/oauth/v2/token'), discovery.token_endpoint);
    assert.equal(where('/oauth/v2/keys'), discovery.jwks_uri);
    assert.equal(where('/oauth/v2/introspect'), discovery.introspection_endpoint);
    assert.equal(where('/oauth/v2/revoke'), discovery.revocation_endpoint);
    assert.equal(where('/.well-known/openid-configuration'), `${authUrl}/.well-known/openid-configuration`);
    assert.equal(where('/.well-known/oauth-authorization-server/auth'), `${new URL(authUrl).origin}/.well-known/oauth-authorization-server/auth`);
    assert.equal((await fetch(discovery.service_documentation!)).status, 200);
    // Each operation, called without credentials, meets its route: refused or answered, never a route not found.
    const unrouted: string[] = [];
    for (const [path, item] of Object.entries(doc.paths as Record<string, Record<string, unknown>>)) {
      for (const method of Object.keys(item).filter((m) => m !== 'servers')) {
        const res = await fetch(where(path).replace(/\{[^}]+\}/g, 'x'), { method: method.toUpperCase() });
        const body = await res.text();
        if (res.status === 405 || (res.status === 404 && body.includes('route_not_found'))) unrouted.push(`${method.toUpperCase()} ${path} → ${res.status}`);
      }
    }
    assert.deepEqual(unrouted, []);
    assert.ok(Object.keys(doc.paths).length >= 15, `only ${Object.keys(doc.paths).length} paths`);
  });
});
