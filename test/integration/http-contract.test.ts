// The HTTP contract every route shares: RFC 9457 problems for every refusal the machinery makes
// (unknown route, wrong method, media type, size, malformed JSON), request ids, the access log and
// its redaction, health and readiness.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import { connect } from 'node:net';
import { gzipSync } from 'node:zlib';
import { after, before, describe, it } from 'node:test';
import { startServer, TEST_DB, type TestServer } from '../support/harness.js';
import { assertProblem } from '../support/problems.js';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const BODY_LIMIT = 2048;

/** The access-log line of one request. It is written after the response, so wait for it (bounded). */
async function accessLog(server: TestServer, requestId: string): Promise<Record<string, unknown>[]> {
  for (let attempt = 0; attempt < 200; attempt++) {
    const lines = server.logs.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.requestId === requestId && l.msg === 'request');
    if (lines.length > 0) return lines;
    await sleep(10);
  }
  return [];
}

describe('HTTP contract', () => {
  let server: TestServer;
  before(async () => { server = await startServer({ env: { SLIPWAY_BODY_LIMIT_BYTES: String(BODY_LIMIT) } }); });
  after(async () => { await server.close(); });

  it('answers an unknown route with a 404 problem', async () => {
    const res = await server.owner.http.get('/v1/nothing-here?x=1');
    const body = assertProblem(res, 404, 'route_not_found');
    assert.equal(body.instance, '/v1/nothing-here');
    assert.match(String(body.detail), /GET \/v1\/nothing-here/);
    assert.match(String(body.type), /^https:\/\//);
  });

  it('answers a known path with another method 405 and Allow', async () => {
    const collection = await server.owner.http.delete('/v1/orgs');
    assertProblem(collection, 405, 'method_not_allowed');
    assert.equal(collection.headers.get('allow'), 'GET, HEAD, POST, OPTIONS');
    const item = await server.owner.http.post('/v1/orgs/default', {});
    assertProblem(item, 405, 'method_not_allowed');
    assert.match(item.headers.get('allow') ?? '', /^GET, HEAD\b.*\bPATCH\b.*, OPTIONS$/);
    const health = await server.http().request('POST', '/healthz');
    assertProblem(health, 405, 'method_not_allowed');
    assert.equal(health.headers.get('allow'), 'GET, HEAD, OPTIONS');
  });

  it('answers OPTIONS with 204 and Allow on every path it has, without a token, and 404 elsewhere', async () => {
    const collection = await server.http().request('OPTIONS', '/v1/orgs');
    assert.equal(collection.status, 204, collection.text);
    assert.equal(collection.headers.get('allow'), 'GET, HEAD, POST, OPTIONS');
    assert.equal(collection.text, '');
    assert.ok(collection.headers.get('x-request-id'));
    const secret = await server.http().request('OPTIONS', '/v1/orgs/default/secrets/anything');
    assert.equal(secret.status, 204, secret.text);
    assert.equal(secret.headers.get('allow'), 'GET, HEAD, PUT, PATCH, DELETE, OPTIONS');
    assertProblem(await server.http().request('OPTIONS', '/v1/nothing-here'), 404, 'route_not_found');
  });

  it('refuses a body that is not JSON with 415', async () => {
    const plain = await server.owner.http.request('POST', '/v1/orgs', { raw: 'slug=x', contentType: 'text/plain' });
    assert.match(String(assertProblem(plain, 415, 'unsupported_media_type').detail), /application\/json.*text\/plain/);
    const untyped = await server.owner.http.request('POST', '/v1/orgs', { raw: '{"slug":"x","name":"y"}' });
    assertProblem(untyped, 415, 'unsupported_media_type');
  });

  it('refuses a body over SLIPWAY_BODY_LIMIT_BYTES with 413 naming the limit', async () => {
    const res = await server.owner.http.post('/v1/orgs', { slug: 'big', name: 'x'.repeat(BODY_LIMIT) });
    const body = assertProblem(res, 413, 'payload_too_large');
    assert.match(String(body.detail), new RegExp(`${BODY_LIMIT} bytes.*SLIPWAY_BODY_LIMIT_BYTES`));
    assert.deepEqual(body.limit, { name: 'SLIPWAY_BODY_LIMIT_BYTES', value: BODY_LIMIT });
  });

  it('refuses malformed JSON with a 400 that says where, without repeating the body', async () => {
    const res = await server.owner.http.request('POST', '/v1/orgs', { raw: '{"slug": "x",\n  , }', contentType: 'application/json' });
    assert.match(String(assertProblem(res, 400, 'malformed_json').detail), /not valid JSON: expected double-quoted property name at line 2, column 3\./);
    // Wherever the syntax breaks, the detail says where (a trailing comma, a bare word, text after the value).
    for (const [raw, where] of [
      ['{"secrets":[{"name":"a","values":{"A":"b"}},]}', /an unexpected character at line 1, column 45 /],
      ['{"slug": "x",\n "name": hunter2}', /an unexpected character at line 2, column 10 /],
      ['{"slug": "x"} {}', /text after the JSON value at line 1, column 15\./],
      ['\ufeff{"slug": "x"}', /begins with a byte order mark/],
    ] as const) {
      const refused = await server.owner.http.request('POST', '/v1/orgs', { raw, contentType: 'application/json' });
      assert.match(String(assertProblem(refused, 400, 'malformed_json').detail), where, raw);
      assert.ok(!refused.text.includes('hunter2'), refused.text);
    }
    // JSON.parse's own message quotes the text around an unexpected token; a body may hold secret values.
    for (const raw of ['{"slug": "x", "name": hunter2secret}', '{"slug": "hunter2secret"', '{"slug": "hunter2secret"}}']) {
      const refused = await server.owner.http.request('POST', '/v1/orgs', { raw, contentType: 'application/json' });
      assertProblem(refused, 400, 'malformed_json', raw);
      assert.ok(!refused.text.includes('hunter2'), refused.text);
    }
  });

  it('refuses keys that reach the prototype (__proto__, constructor.prototype), escaped or not', async () => {
    for (const [raw, pointer] of [
      ['{"slug":"p","name":"p","__proto__":{"polluted":true}}', '/__proto__'],
      ['{"slug":"p","name":"p","\\u005f_proto__":{"polluted":true}}', '/__proto__'],
      ['{"slug":"p","name":"p","constructor":{"prototype":{"polluted":true}}}', '/constructor'],
      ['{"secrets":[{"name":"a","values":{"A":"1"}},{"name":"b","values":{"__proto__":"x"}}]}', '/secrets/1/values/__proto__'],
    ]) {
      const res = await server.owner.http.request('POST', '/v1/orgs', { raw, contentType: 'application/json' });
      const problem = assertProblem(res, 400, 'malformed_json', raw);
      assert.match(String(problem.detail), /"(__proto__|constructor)".*refused/);
      assert.deepEqual(problem.errors, [{ pointer, message: 'could alter object prototypes' }]);
    }
    assert.equal(({} as Record<string, unknown>).polluted, undefined);
    assert.equal((await server.owner.http.get('/v1/orgs/p')).status, 404);
  });


  it('reads bodies as I-JSON: UTF-8 only, each name once per object, no unpaired surrogates; refusals write nothing', async () => {
    const create = (raw: string | Buffer, contentType = 'application/json', headers: Record<string, string> = {}) =>
      server.owner.http.request('POST', '/v1/orgs/default/secrets', { raw, contentType, headers });
    const gone = async (name: string) => assert.equal((await server.owner.http.get(`/v1/orgs/default/secrets/${name}`)).status, 404, name);

    // Bytes that are not UTF-8 were read as U+FFFD and stored so: now refused, naming the byte.
    const latin1 = Buffer.concat([Buffer.from('{"secrets":[{"name":"ij-bytes","values":{"A":"caf'), Buffer.from([0xe9]), Buffer.from('"}}]}')]);
    assert.match(String(assertProblem(await create(latin1), 400, 'malformed_json').detail), /not valid UTF-8: the byte at offset 49 \(0xe9\)/);
    await gone('ij-bytes');
    // A charset other than UTF-8 is not decoded either; naming UTF-8 is fine.
    const latinCharset = await create('{"secrets":[{"name":"ij-charset","values":{"A":"x"}}]}', 'application/json; charset=ISO-8859-1');
    assert.match(String(assertProblem(latinCharset, 415, 'unsupported_media_type').detail), /UTF-8.*charset=ISO-8859-1/);
    await gone('ij-charset');
    assert.equal((await create('{"secrets":[{"name":"ij-utf8","values":{"A":"café"}}]}', 'application/json; charset="UTF-8"')).status, 201);
    // A compressed body is refused as such, not as malformed JSON (RFC 9110 §15.5.16).
    const gzipped = await create(gzipSync('{"secrets":[{"name":"ij-gzip","values":{"A":"x"}}]}'), 'application/json', { 'content-encoding': 'gzip' });
    assert.match(String(assertProblem(gzipped, 415, 'unsupported_media_type').detail), /without Content-Encoding \(it says "gzip"\)/);
    assert.equal(gzipped.headers.get('accept-encoding'), 'identity');

    // A member twice: the first item of the batch would have vanished behind a 201.
    const twice = await create('{"secrets":[{"name":"ij-first","values":{"A":"1"}}],"secrets":[{"name":"ij-second","values":{"B":"1"}}]}');
    assert.deepEqual(assertProblem(twice, 400, 'malformed_json').errors, [{ pointer: '/secrets', message: 'is given twice' }]);
    const key = await create('{"secrets":[{"name":"ij-key","values":{"A\\"/":"first","A\\u0022/":"second"}}]}');
    assert.deepEqual(assertProblem(key, 400, 'malformed_json').errors, [{ pointer: '/secrets/0/values/A"~1', message: 'is given twice' }]);
    assert.ok(!key.text.includes('first') && !key.text.includes('second'), 'no value is repeated');
    for (const name of ['ij-first', 'ij-second', 'ij-key']) await gone(name);
    // The same name in different objects, and quotes, colons and escapes inside strings, are fine.
    const fine = await create('{"secrets":[{"name":"ij-fine-1","values":{"A":"x\\":\\\\","B":"{\\"A\\":1}"}},{"name":"ij-fine-2","values":{"A":"y"}}]}');
    assert.equal(fine.status, 201, fine.text);

    const lone = await create('{"secrets":[{"name":"ij-lone","values":{"A":"\\ud800x"}}]}');
    assert.deepEqual(assertProblem(lone, 400, 'malformed_json').errors, [{ pointer: '/secrets/0/values/A', message: 'contains an unpaired surrogate' }]);
    await gone('ij-lone');
    assert.equal((await create('{"secrets":[{"name":"ij-pair","values":{"A":"\\ud83d\\ude80"}}]}')).status, 201);
  });
  it('asks for a body when a route needs one and none came', async () => {
    for (const options of [{}, { raw: '', contentType: 'application/json' }]) {
      const res = await server.owner.http.request('POST', '/v1/orgs', options);
      assert.match(String(assertProblem(res, 400, 'invalid_request').detail), /needs a JSON body/);
    }
  });

  it('keeps a sane X-Request-Id, puts it in the problem and the access log, and makes one up otherwise', async () => {
    const given = await server.owner.http.get('/v1/orgs/no-such-org', { headers: { 'x-request-id': 'contract-given-1' } });
    assert.equal(given.headers.get('x-request-id'), 'contract-given-1');
    assert.equal(assertProblem(given, 404, 'organization_not_found').requestId, 'contract-given-1');
    const [line] = await accessLog(server, 'contract-given-1');
    assert.equal(line?.status, 404);
    assert.equal(line?.path, '/v1/orgs/no-such-org');

    const insane = await server.http().get('/healthz', { headers: { 'x-request-id': 'has spaces and "quotes"' } });
    assert.match(insane.headers.get('x-request-id') ?? '', UUID);
    const first = await server.http().get('/healthz');
    const second = await server.http().get('/healthz');
    assert.match(first.headers.get('x-request-id') ?? '', UUID);
    assert.notEqual(first.headers.get('x-request-id'), second.headers.get('x-request-id'));
  });

  it('reaches a secret by a name of the longest length allowed', async () => {
    const name = `a${'b'.repeat(127)}`;
    const created = await server.owner.http.post('/v1/orgs/default/secrets', { secrets: [{ name, values: { K: 'v' } }] });
    assert.equal(created.status, 201, created.text);
    const read = await server.owner.http.get(`/v1/orgs/default/secrets/${name}`);
    assert.equal(read.status, 200, read.text);
    assert.equal(read.body.name, name);
  });

  it('answers what the router refuses with problems: an overlong path segment, a malformed escape', async () => {
    const long = await server.owner.http.get(`/v1/orgs/default/secrets/${'x'.repeat(600)}`, { headers: { 'x-request-id': 'contract-long-segment' } });
    assert.match(String(assertProblem(long, 414, 'uri_too_long').detail), /512 characters/);
    assert.equal(long.headers.get('x-request-id'), 'contract-long-segment');
    assert.equal((await accessLog(server, 'contract-long-segment'))[0]?.status, 414);
    const escape = await server.owner.http.get('/v1/orgs/default/secrets/%zz');
    assert.match(String(assertProblem(escape, 400, 'malformed_path').detail), /percent-encoding/);
    assert.match(escape.headers.get('x-request-id') ?? '', UUID);
    // The query's are refused as the path's, not looked up as written.
    for (const [query, pointer] of [['prefix=caf%E9', '/query/prefix'], ['limit=5&prefix=%', '/query/prefix'], ['pre%ZZfix=a', '/query'], ['prefix=%C3%A9%ff', '/query/prefix']] as const) {
      const refused = await server.owner.http.get(`/v1/orgs/default/secrets?${query}`);
      assert.deepEqual(assertProblem(refused, 400, 'malformed_query').errors, [{ pointer, message: 'has a malformed percent-encoding' }], query);
    }
    assert.equal((await server.owner.http.get('/v1/orgs/default/secrets?prefix=caf%C3%A9%25')).status, 200);
  });

  it('answers an Expect it does not meet with a 417 problem, and runs nothing', async () => {
    // Node's own answer to it is a bare 417, without a body or a request id.
    const { port } = new URL(server.url);
    const body = JSON.stringify({ secrets: [{ name: 'expected', values: { A: '1' } }] });
    const headers = { authorization: `Bearer ${server.owner.token}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), expect: 'bogus', 'x-request-id': 'contract-expect' };
    const res = await new Promise<{ status: number; headers: IncomingHttpHeaders; text: string }>((resolve, reject) => {
      const req = httpRequest({ host: '127.0.0.1', port: Number(port), method: 'POST', path: '/v1/orgs/default/secrets?dryRun=false', headers }, (answer) => {
        let text = '';
        answer.setEncoding('utf8').on('data', (chunk: string) => { text += chunk; }).on('end', () => resolve({ status: answer.statusCode!, headers: answer.headers, text }));
      });
      req.on('error', reject).end(body);
    });
    assert.equal(res.status, 417);
    assert.equal(res.headers['content-type'], 'application/problem+json; charset=utf-8');
    assert.equal(res.headers['x-request-id'], 'contract-expect');
    const problem = JSON.parse(res.text) as Record<string, unknown>;
    assert.deepEqual({ ...problem, detail: undefined }, {
      type: 'https://slipway.dev/problems/expectation-failed', title: 'Expectation failed', status: 417, detail: undefined,
      instance: '/v1/orgs/default/secrets', code: 'expectation_failed', requestId: 'contract-expect',
    });
    assert.match(String(problem.detail), /"bogus".*Send it without Expect/);
    assert.equal((await server.owner.http.get('/v1/orgs/default/secrets/expected')).status, 404);
  });

  it('answers CONNECT with a problem rather than closing the connection without a word', async () => {
    const { port } = new URL(server.url);
    const raw = await new Promise<string>((resolve, reject) => {
      const socket = connect(Number(port), '127.0.0.1', () => socket.write('CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n'));
      let text = '';
      socket.on('data', (chunk: Buffer) => { text += chunk.toString(); }).on('close', () => resolve(text)).on('error', reject);
    });
    const [head, body] = raw.split('\r\n\r\n') as [string, string];
    assert.match(head, /^HTTP\/1\.1 404 Not Found\r\n/);
    assert.match(head, /\r\ncontent-type: application\/problem\+json; charset=utf-8/i);
    const problem = JSON.parse(body) as Record<string, unknown>;
    assert.equal(problem.code, 'route_not_found');
    assert.match(String(problem.detail), /CONNECT example\.com:443: this server is not a proxy/);
    assert.match(head, new RegExp(`\\r\\nx-request-id: ${String(problem.requestId)}`, 'i'));
  });

  it('takes a client that hangs up in the middle of its body for what it is, not for a database outage', async () => {
    const { port } = new URL(server.url);
    const requestId = 'contract-hang-up';
    await new Promise<void>((resolve, reject) => {
      const socket = connect(Number(port), '127.0.0.1', () => socket.write(`POST /v1/orgs/default/environments HTTP/1.1\r\nHost: x\r\n`
        + `Authorization: Bearer ${server.owner.token}\r\nContent-Type: application/json\r\nX-Request-Id: ${requestId}\r\nContent-Length: 100\r\n\r\n{"na`));
      socket.on('error', reject);
      setTimeout(() => { socket.destroy(); resolve(); }, 200);
    });
    await sleep(300);
    const lines = server.logs.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.requestId === requestId);
    assert.deepEqual(lines.filter((l) => l.level === 'error' || l.level === 'fatal'), [], 'no error is logged: the database is fine');
    assert.equal((await server.owner.http.get('/v1/orgs/default/environments')).status, 200);
  });

  it('reads numbers in the query and the path only as decimal digits', async () => {
    assert.equal((await server.owner.http.post('/v1/orgs/default/secrets', { secrets: [{ name: 'numbered', values: { A: '1' } }] })).status, 201);
    for (const limit of ['0x10', '%201', '1e1', '01', '1.0', '']) {
      const refused = await server.owner.http.get(`/v1/orgs/default/secrets?limit=${limit}`);
      const [first] = assertProblem(refused, 400, 'invalid_request').errors as Array<{ pointer: string; message: string }>;
      assert.equal(first!.pointer, '/query/limit', limit);
      if (limit !== '') assert.match(first!.message, /must be a whole number in decimal digits, got/);
    }
    for (const version of ['01', '1e0', '0x1', '%201']) {
      const refused = await server.owner.http.get(`/v1/orgs/default/secrets/numbered/versions/${version}`);
      assert.deepEqual((assertProblem(refused, 400, 'invalid_request').errors as Array<{ pointer: string }>).map((e) => e.pointer), ['/params/version'], version);
    }
    assert.equal((await server.owner.http.get('/v1/orgs/default/secrets/numbered/versions/1')).status, 200);
    assert.equal((await server.owner.http.get('/v1/orgs/default/secrets?limit=10')).status, 200);
  });

  it('answers what the HTTP parser refuses with problems, and logs nothing of the request even at trace', async () => {
    const traced = await startServer({ env: { SLIPWAY_LOG_LEVEL: 'trace' } });
    try {
      const { port } = new URL(traced.url);
      const rawExchange = (request: string) => new Promise<string>((resolve, reject) => {
        const socket = connect(Number(port), '127.0.0.1', () => socket.end(request));
        let text = '';
        socket.on('data', (chunk: Buffer) => { text += chunk.toString(); }).on('close', () => resolve(text)).on('error', reject);
      });
      const parse = (raw: string) => {
        const [head, body] = raw.split('\r\n\r\n') as [string, string];
        return { head, problem: JSON.parse(body) as Record<string, unknown> };
      };
      // A body of secret values behind a request line no parser takes, with a bearer token.
      const garbage = parse(await rawExchange(`GARBAGE /v1/orgs/default/secrets HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${traced.owner.token}\r\n`
        + 'Content-Type: application/json\r\nContent-Length: 40\r\n\r\n{"secrets":[{"name":"a","values":{"K":"TRACED-SENTINEL"}}]}'));
      assert.match(garbage.head, /^HTTP\/1\.1 400 Bad Request\r\n/);
      assert.match(garbage.head, /\r\ncontent-type: application\/problem\+json; charset=utf-8/i);
      assert.equal(garbage.problem.code, 'malformed_http');
      assert.match(String(garbage.problem.detail), /not valid HTTP\/1\.1 \(HPE_INVALID_METHOD\)/);
      assert.match(String(garbage.problem.requestId), UUID);
      assert.match(garbage.head, new RegExp(`\\r\\nx-request-id: ${String(garbage.problem.requestId)}`, 'i'));

      // No request came to be, so these problems have no `instance`.
      const headers = await traced.owner.http.get('/v1/orgs', { headers: { 'x-big': 'a'.repeat(20_000) } });
      assert.equal(headers.status, 431);
      assert.equal(headers.headers.get('content-type'), 'application/problem+json; charset=utf-8');
      assert.equal(headers.body.code, 'headers_too_large');
      assert.match(String(headers.body.detail), /larger than the \d+ bytes the server reads/);

      await sleep(50);
      const logged = traced.logs.join('\n');
      assert.ok(!logged.includes('TRACED-SENTINEL') && !logged.includes(traced.owner.token), 'neither the body nor the token is logged');
      assert.ok(!logged.includes('rawPacket'));
      assert.ok(traced.logs.some((l) => l.includes(String(garbage.problem.requestId)) && l.includes('HPE_INVALID_METHOD')), 'the refusal itself is logged');
    } finally {
      await traced.close();
    }
  });

  it('refuses a request without Host, a one-value header sent twice, and a fragment in the target, saying which', async () => {
    const { port } = new URL(server.url);
    const token = server.owner.token;
    // Written, not ended: a client that half-closes is answered only if the answer comes at once.
    const exchange = (request: string) => new Promise<{ status: number; problem: Record<string, unknown> }>((resolve, reject) => {
      const socket = connect(Number(port), '127.0.0.1', () => socket.write(request));
      let text = '';
      socket.on('data', (chunk: Buffer) => { text += chunk.toString(); }).on('error', reject).on('close', () => {
        const [head, body] = text.split('\r\n\r\n') as [string, string];
        assert.match(head, /\r\ncontent-type: application\/problem\+json; charset=utf-8/i, `${request}: ${head}`);
        resolve({ status: Number(head.split(' ')[1]), problem: JSON.parse(body) as Record<string, unknown> });
      });
    });
    const pointers = (problem: Record<string, unknown>) => (problem.errors as Array<{ pointer: string }>).map((e) => e.pointer);
    const noHost = await exchange(`GET /v1/orgs HTTP/1.1\r\nAuthorization: Bearer ${token}\r\nConnection: close\r\n\r\n`);
    assert.deepEqual([noHost.status, noHost.problem.code, pointers(noHost.problem)], [400, 'invalid_request', ['/headers/host']]);
    for (const [name, lines] of [
      ['host', 'Host: a\r\nHost: b'],
      ['authorization', `Host: x\r\nAuthorization: Bearer ${token}\r\nAuthorization: Bearer garbage`],
      ['content-type', `Host: x\r\nAuthorization: Bearer ${token}\r\nContent-Type: application/json\r\ncontent-type: text/plain`],
    ] as const) {
      const twice = await exchange(`PATCH /v1/orgs/default/secrets/twice-sent HTTP/1.1\r\n${lines}\r\nContent-Length: 17\r\nConnection: close\r\n\r\n{"set":{"K":"v"}}`);
      assert.deepEqual([twice.status, twice.problem.code, pointers(twice.problem)], [400, 'invalid_request', [`/headers/${name}`]], name);
      assert.match(String(twice.problem.detail), new RegExp(`The ${name} header is sent more than once`));
    }
    const fragment = await exchange(`GET /v1/orgs/default/secrets?limit=1#x HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token}\r\nConnection: close\r\n\r\n`);
    assert.deepEqual([fragment.status, fragment.problem.code], [400, 'invalid_request']);
    assert.match(String(fragment.problem.detail), /has a fragment .* %23/);
    // Headers sent once each, and a list header (Accept) sent twice, are fine.
    const fine = await exchange(`GET /v1/orgs/no-such-org HTTP/1.1\r\nHost: x\r\nAccept: application/json\r\nAccept: */*\r\nAuthorization: Bearer ${token}\r\nConnection: close\r\n\r\n`);
    assert.deepEqual([fine.status, fine.problem.code], [404, 'organization_not_found']);
  });

  it('refuses an organization in the path longer than its schema allows, and an empty cursor, as invalid requests', async () => {
    const long = await server.owner.http.get(`/v1/orgs/${'a'.repeat(65)}/secrets`);
    assert.deepEqual((assertProblem(long, 400, 'invalid_request').errors as Array<{ pointer: string }>).map((e) => e.pointer), ['/params/orgId']);
    assertProblem(await server.owner.http.get(`/v1/orgs/${'a'.repeat(64)}/secrets`), 404, 'organization_not_found');
    for (const list of ['secrets', 'events', 'deployments']) {
      const empty = await server.owner.http.get(`/v1/orgs/default/${list}?cursor=`);
      assert.deepEqual((assertProblem(empty, 400, 'invalid_request').errors as Array<{ pointer: string }>).map((e) => e.pointer), ['/query/cursor'], list);
    }
  });

  /** A server and a connection to it that has sent the first lines of a request's headers. */
  async function halfRequest(path: string) {
    const closing = await startServer();
    const port = Number(new URL(closing.url).port);
    const socket = connect(port, '127.0.0.1');
    await new Promise((resolve) => socket.once('connect', resolve));
    let text = '';
    socket.on('data', (chunk: Buffer) => { text += chunk.toString(); });
    const ended = new Promise((resolve) => socket.once('close', resolve));
    socket.write(`GET ${path} HTTP/1.1\r\nHost: x\r\n`);
    await sleep(50);
    return { closing, port, socket, ended, received: () => text };
  }

  it('answers a request that arrives while the server shuts down with a 503 problem', async () => {
    // Half a request before the shutdown, the rest once it has begun.
    const { closing, port, socket, ended, received } = await halfRequest('/v1/orgs');
    const closed = closing.close();
    // Once the server no longer takes connections, its shutdown has begun.
    for (;;) {
      const refused = await new Promise<boolean>((resolve) => {
        const probe = connect(port, '127.0.0.1').once('connect', () => { probe.destroy(); resolve(false); }).once('error', () => resolve(true));
      });
      if (refused) break;
      await sleep(10);
    }
    socket.end(`Authorization: Bearer ${closing.owner.token}\r\n\r\n`);
    await ended;
    await closed;
    const [head, body] = received().split('\r\n\r\n') as [string, string];
    assert.match(head, /^HTTP\/1\.1 503 /);
    assert.match(head, /\r\ncontent-type: application\/problem\+json/i);
    assert.match(head, /\r\nretry-after: 1\r\n/i);
    assert.match(head, /\r\nconnection: close\r\n/i);
    const problem = JSON.parse(body) as Record<string, unknown>;
    assert.equal(problem.code, 'unavailable');
    assert.match(String(problem.detail), /shutting down/);
  });

  it('ends, at shutdown, a connection that never finishes sending a request\'s headers, rather than wait for it', async () => {
    const { closing, ended, received } = await halfRequest('/healthz');
    await closing.close();
    await ended;
    // Left to Node, it would have been answered 408 once its header timeout (a minute) ran out.
    assert.equal(received(), '');
  });

  it('refuses a body on an operation that takes none, rather than ignore it, and does nothing', async () => {
    const name = `nobody-${Date.now()}`;
    assert.equal((await server.owner.http.post('/v1/orgs/default/secrets', { secrets: [{ name, values: { K: 'v' } }] })).status, 201);
    const refused = await server.owner.http.delete(`/v1/orgs/default/secrets/${name}`, { body: { permanent: true } });
    const problem = assertProblem(refused, 400, 'invalid_request');
    assert.match(String(problem.detail), /takes no request body; its options are query parameters \(permanent\)/);
    assert.deepEqual(problem.errors, [{ pointer: '/permanent', message: 'is not a known field' }]);
    assert.equal((await server.owner.http.get(`/v1/orgs/default/secrets/${name}`)).status, 200, 'not deleted');
    // An empty object carries nothing: clients that always send one still work.
    assert.equal((await server.owner.http.delete(`/v1/orgs/default/secrets/${name}`, { body: {} })).status, 204);
    // Nor is any other JSON value taken as "nothing": adding a client secret made one for each of these.
    const users = `/v1/orgs/default/service-users/${server.owner.id}/secrets`;
    for (const raw of ['"keepOld": false', '[]', 'null', '1', '"please"']) {
      const res = await server.owner.http.request('POST', users, { raw, contentType: 'application/json' });
      assert.equal(res.status, 400, `${raw}: ${res.text}`);
    }
    const secrets = await server.owner.http.get(`/v1/orgs/default/service-users/${server.owner.id}`);
    assert.equal(secrets.body.secrets.length, 1, 'no client secret was added');
  });

  it('writes exactly one access-log line per request', async () => {
    const requests: Array<[string, string, number]> = [['GET', '/healthz', 200], ['GET', '/v1/orgs', 200], ['DELETE', '/v1/orgs', 405], ['GET', '/nope', 404], ['GET', '/v1/orgs/default', 200]];
    for (const [i, [method, path, status]] of requests.entries()) {
      const id = `contract-log-${i}`;
      assert.equal((await server.owner.http.request(method, path, { headers: { 'x-request-id': id } })).status, status);
      const lines = await accessLog(server, id);
      assert.equal(lines.length, 1, `${method} ${path}`);
      assert.deepEqual([lines[0]!.method, lines[0]!.path, lines[0]!.status], [method, path, status]);
    }
    // The shape of every structured log line, with who asked and how long it took.
    const [line] = await accessLog(server, 'contract-log-4');
    assert.deepEqual(Object.keys(line!), ['level', 'time', 'service', 'pid', 'requestId', 'method', 'route', 'path', 'status', 'ms', 'ip', 'sub', 'msg']);
    assert.equal(line!.ip, '127.0.0.1');
    assert.equal(line!.level, 'info');
    assert.ok(!Number.isNaN(Date.parse(String(line!.time))) && String(line!.time).endsWith('Z'));
    assert.deepEqual([line!.service, line!.route, line!.sub], ['slipway', '/v1/orgs/:orgId', server.bootstrap.clientId]);
    assert.equal(typeof line!.ms, 'number');
  });

  it('never logs a credential', async () => {
    const planted = 'planted-token-value-that-must-not-be-logged';
    await server.http(planted).get('/v1/orgs', { headers: { 'x-request-id': 'contract-planted' } });
    await server.owner.http.get('/v1/orgs', { headers: { 'x-request-id': 'contract-owner' } });
    assert.equal((await accessLog(server, 'contract-planted')).length, 1);
    assert.equal((await accessLog(server, 'contract-owner')).length, 1);
    for (const secret of [planted, server.owner.token, server.bootstrap.clientSecret]) {
      assert.deepEqual(server.logs.filter((l) => l.includes(secret)), []);
    }
    assert.deepEqual(server.logs.filter((l) => /bearer /i.test(l)), []);
  });

  it('answers /healthz and /readyz', async () => {
    const health = await server.http().get('/healthz');
    assert.deepEqual([health.status, health.body], [200, { status: 'ok' }]);
    const ready = await server.http().get('/readyz');
    assert.deepEqual([ready.status, ready.body], [200, { status: 'ready' }]);
  });

  it('answered only statuses the routes declare', () => {
    assert.deepEqual(server.undeclared, []);
  });
});

describe('readiness without a database', () => {
  let server: TestServer;
  before(async () => { server = await startServer(); });
  after(async () => { await server.close(); });

  it('answers /readyz 503 once the SQLite file it has open is deleted, and says so once in the log', { skip: TEST_DB === 'sqlite' ? false : 'SQLite only: PostgreSQL has no file here' }, async () => {
    const other = await startServer();
    try {
      assert.equal((await other.http().get('/readyz')).status, 200);
      // Deleted under it: the server would go on writing to the file it has open, which goes when it stops.
      for (const suffix of ['', '-wal', '-shm']) fs.rmSync(`${other.core.database.file!}${suffix}`, { force: true });
      for (let i = 0; i < 2; i++) {
        const ready = await other.http().get('/readyz');
        assert.match(String(assertProblem(ready, 503, 'unavailable').detail), /database file is no longer in place/);
        assert.ok(Number(ready.headers.get('retry-after')) > 0);
      }
      assert.equal((await other.http().get('/healthz')).status, 200);
      const said = other.logs.map((l) => JSON.parse(l) as { level: string; msg: string; file?: string }).filter((l) => /no longer the one this server has open/.test(l.msg));
      assert.equal(said.length, 1, JSON.stringify(said));
      assert.deepEqual([said[0]!.level, said[0]!.file], ['error', other.core.database.file]);
      assert.deepEqual(other.undeclared, []);
    } finally {
      await other.close();
    }
  });

  it('answers /readyz 503 with Retry-After once the database is gone, while /healthz stays 200', async () => {
    await server.core.database.close();
    const ready = await server.http().get('/readyz');
    assertProblem(ready, 503, 'unavailable');
    assert.ok(Number(ready.headers.get('retry-after')) > 0);
    assert.equal((await server.http().get('/healthz')).status, 200);
    assert.deepEqual(server.undeclared, []);
  });
});
