// A unique sentinel value, written through every path a value can enter by, comes back from
// reveal and from nothing else: no other response, no problem, no log line, no event, and no
// byte of the database files.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { createEnvironment, createService, deploy, newRunner } from '../support/deployments.js';
import { rawDatabaseBytes, startServer, TEST_DB, type HttpResult, type TestServer } from '../support/harness.js';

const base = '/v1/orgs/default/secrets';

describe('secret values never leak', () => {
  let server: TestServer;
  const sentinel = (tag: string) => `SENTINEL-${tag}-${randomBytes(12).toString('hex')}`;
  const values = {
    create: sentinel('create'), replace: sentinel('replace'), patch: sentinel('patch'),
    upsertNew: sentinel('upsert-new'), upsertOld: sentinel('upsert-old'), refused: sentinel('refused'),
    keyed: sentinel('keyed'), keyedPatch: sentinel('keyed-patch'), deployed: sentinel('deployed'),
  };
  // Every value shares this marker, so a leak of part of one (a quoted snippet) is caught too.
  const all = [...Object.values(values), 'SENTINEL-'];
  const responses: Array<{ what: string; res: HttpResult }> = [];

  before(async () => { server = await startServer(); });
  after(async () => { await server.close(); });

  const record = (what: string, res: HttpResult) => {
    responses.push({ what, res });
    return res;
  };
  const headersText = (res: HttpResult) => [...res.headers.entries()].map(([k, v]) => `${k}: ${v}`).join('\n');

  it('enters through create, replace, patch and upsert, and a refused request', async () => {
    const http = server.owner.http;
    assert.equal(record('create', await http.post(base, { secrets: [{ name: 'leak-a', values: { A: values.create } }] })).status, 201);
    assert.equal(record('replace', await http.put(`${base}/leak-a`, { values: { A: values.replace } })).status, 200);
    assert.equal(record('patch', await http.patch(`${base}/leak-a`, { set: { B: values.patch } })).status, 200);
    assert.equal(record('upsert', await http.put(base, { secrets: [{ name: 'leak-a', values: { A: values.upsertOld, B: values.patch } }, { name: 'leak-b', values: { C: values.upsertNew } }] })).status, 200);
    // Invalid key names, an over-long value, a duplicate name: 400s that point at the item without echoing it.
    const refused = [
      record('invalid key', await http.post(base, { secrets: [{ name: 'leak-c', values: { OK: values.refused, '1BAD': values.refused } }] })),
      record('invalid key in patch', await http.patch(`${base}/leak-a`, { set: { OK: values.refused, 'bad-key': values.refused } })),
      record('invalid name', await http.put(base, { secrets: [{ name: '-bad', values: { OK: values.refused } }] })),
      record('duplicate', await http.post(base, { secrets: [{ name: 'leak-d', values: { A: values.refused } }, { name: 'leak-d', values: { A: values.refused } }] })),
      record('conflict', await http.post(base, { secrets: [{ name: 'leak-a', values: { A: values.refused } }] })),
      record('stale', await http.put(`${base}/leak-a`, { values: { A: values.refused } }, { headers: { 'if-match': '"1"' } })),
      record('malformed', await http.request('POST', base, { raw: `{"secrets":[{"name":"x","values":{"A":"${values.refused}"}}`, contentType: 'application/json' })),
      // A value left unquoted, as a template without quotes would send it: JSON.parse quotes the text around the bad token.
      record('unquoted', await http.request('PUT', base, { raw: `{"secrets":[{"name":"x","values":{"A":${values.refused}}}]}`, contentType: 'application/json' })),
    ];
    assert.deepEqual(refused.map((r) => r.status), [400, 400, 400, 400, 409, 412, 400, 400]);
    assert.equal(refused.at(-1)!.body.code, 'malformed_json');
    assert.ok(refused.every((r) => r.headers.get('content-type')?.startsWith('application/problem+json')));
    // Past the limits: a value too long for any write, and a body too large to read at all.
    const tooLong = values.refused + 'x'.repeat(server.config.limits.valueChars);
    const limits = [
      record('over-long value', await http.post(base, { secrets: [{ name: 'leak-e', values: { A: tooLong } }] })),
      record('over-long value in replace', await http.put(`${base}/leak-a`, { values: { A: tooLong } })),
      record('over-long value in patch', await http.patch(`${base}/leak-a`, { set: { A: tooLong } })),
      record('body too large', await http.post(base, { secrets: [{ name: 'leak-e', values: { A: values.refused + 'x'.repeat(server.config.limits.bodyBytes) } }] })),
    ];
    assert.deepEqual(limits.map((r) => r.status), [400, 400, 400, 413]);
  });

  it('enters under an Idempotency-Key, whose kept answers hold no value', async () => {
    const http = server.owner.http;
    const keyed = (key: string) => ({ headers: { 'idempotency-key': `${key}-${values.keyed.slice(-8)}` } });
    for (let i = 0; i < 2; i++) {
      assert.equal(record('keyed create', await http.post(base, { secrets: [{ name: 'leak-k', values: { K: values.keyed } }] }, keyed('create'))).status, 201);
      // (A PATCH takes no key: setting the same keys again changes nothing.)
      assert.equal(record('keyed patch', await http.patch(`${base}/leak-k`, { set: { P: values.keyedPatch } }, keyed('patch'))).status, 200);
      // A reveal's answer carries the values; what its key keeps does not (checked with the database below).
      const revealed = await http.post(`${base}/leak-k/reveal`, {}, keyed('reveal'));
      assert.equal(revealed.status, 200);
      assert.deepEqual(revealed.body.values, { K: values.keyed, P: values.keyedPatch });
    }
  });

  it('reaches a runner through a deployment, and nothing else that the deployment shows', async () => {
    const http = server.owner.http;
    const orgId = server.bootstrap.orgId;
    assert.equal(record('deployed secret', await http.post(base, { secrets: [{ name: 'leak-deployed', values: { DB_PASSWORD: values.deployed } }] })).status, 201);
    const env = await createEnvironment(http, orgId);
    const svc = record('service', await http.post(`/v1/orgs/${orgId}/services`, { name: 'leaky', spec: { command: ['x'], secrets: [{ secret: 'leak-deployed' }] } })).body;
    const d = await deploy(http, orgId, { service: svc.id, environment: env.id });
    const runner = await newRunner(server, orgId);
    const claim = await runner.actor.http.post(`/v1/orgs/${orgId}/runner/claim`, { environments: [env.id], waitSeconds: 0 }, { headers: { 'idempotency-key': 'claim-with-a-secret' } });
    assert.equal(claim.status, 200, claim.text);
    assert.equal(claim.body.run.secrets.DB_PASSWORD, values.deployed);
    assert.equal((await runner.logs(d.id, { leaseToken: claim.body.lease.token, lines: [{ stream: 'stdout', line: 'listening' }] })).status, 200);
    assert.equal((await runner.complete(d.id, claim.body.lease.token)).status, 200);
    record('deployment', await http.get(`/v1/orgs/${orgId}/deployments/${d.id}`));
    record('deployments', await http.get(`/v1/orgs/${orgId}/deployments`));
    record('deployment logs', await http.get(`/v1/orgs/${orgId}/deployments/${d.id}/logs`));
    record('active', await http.get(`/v1/orgs/${orgId}/environments/${env.id}/active`));
    record('service', await http.get(`/v1/orgs/${orgId}/services/${svc.id}`));
  });

  it('is read back by reveal, for every version it was written in', async () => {
    const http = server.owner.http;
    const expect: Array<[string, number, string]> = [
      ['leak-a', 1, values.create], ['leak-a', 2, values.replace], ['leak-a', 3, values.patch], ['leak-a', 4, values.upsertOld], ['leak-b', 1, values.upsertNew],
      ['leak-k', 1, values.keyed], ['leak-k', 2, values.keyedPatch], ['leak-deployed', 1, values.deployed],
    ];
    for (const [name, version, value] of expect) {
      const res = await http.post(`${base}/${name}/reveal`, { version });
      assert.equal(res.status, 200);
      assert.ok(Object.values(res.body.values).includes(value), `${name}@${version}`);
    }
  });

  it('appears in no other response: metadata reads, lists, versions, events, restore, delete', async () => {
    const http = server.owner.http;
    record('get', await http.get(`${base}/leak-a`));
    record('list', await http.get(`${base}?limit=200`));
    record('versions', await http.get(`${base}/leak-a/versions`));
    record('version', await http.get(`${base}/leak-a/versions/2`));
    record('restore version', await http.post(`${base}/leak-a/restore`, { version: 1 }));
    record('delete', await http.delete(`${base}/leak-b`));
    record('deleted list', await http.get(`${base}?deleted=true`));
    record('undelete', await http.post(`${base}/leak-b/restore`));
    record('events', await http.get('/v1/orgs/default/events?limit=200'));
    for (const { what, res } of responses) {
      for (const value of all) {
        assert.ok(!res.text.includes(value), `${what} response body carries a value`);
        assert.ok(!headersText(res).includes(value), `${what} response headers carry a value`);
      }
    }
  });

  it('appears in no log line, no event row and no byte of the database files', async () => {
    for (const value of all) {
      assert.ok(!server.logs.some((line) => line.includes(value)), 'a log line carries a value');
    }
    const events = await server.core.db.selectFrom('events').selectAll().execute();
    const eventText = JSON.stringify(events);
    assert.ok(events.length > 5);
    for (const value of all) assert.ok(!eventText.includes(value), 'an event row carries a value');

    const files = await rawDatabaseBytes(server);
    assert.ok(files.length > 0);
    for (const value of all) {
      const needle = Buffer.from(value, 'utf8');
      assert.ok(files.every((bytes) => !bytes.includes(needle)), 'the database files carry a value in plain text');
    }
    // The harness does see plain text that is stored as such: the check can fail.
    assert.ok(files.some((bytes) => bytes.includes(Buffer.from('leak-a', 'utf8'))));
    // The keyed requests' kept answers were there to be found: the create's, the reveal's and the claim's.
    assert.ok((await server.core.db.selectFrom('idempotency_keys').select('idempotency_key').where('status', 'is not', null).execute()).length >= 3);
  });

  // PostgreSQL keeps a deleted row's bytes in its pages until VACUUM's reuse of the space overwrites
  // them, and in its write-ahead log: Slipway vacuums, but cannot promise that (README, Secrets).
  it('leaves no ciphertext of a secret deleted permanently in the database files', { skip: TEST_DB !== 'sqlite' && 'SQLite\'s files only' }, async () => {
    const name = `destroyed-${randomBytes(4).toString('hex')}`;
    assert.equal((await server.owner.http.post(base, { secrets: [{ name, values: { K: sentinel('destroyed-1') } }] })).status, 201);
    assert.equal((await server.owner.http.patch(`${base}/${name}`, { set: { K: sentinel('destroyed-2') } })).status, 200);
    const sealed = (await server.core.db.selectFrom('secret_versions').innerJoin('secrets', 'secrets.id', 'secret_versions.secret_id')
      .select('secret_versions.ciphertext').where('secrets.name', '=', name).execute()).map((r) => Buffer.from(r.ciphertext as Uint8Array));
    assert.equal(sealed.length, 2);
    // Before: the harness finds them where they are kept.
    const before = await rawDatabaseBytes(server);
    assert.ok(sealed.every((c) => before.some((bytes) => bytes.includes(c))), 'the ciphertexts are in the files to begin with');

    assert.equal((await server.owner.http.delete(`${base}/${name}?permanent=true`)).status, 204);
    const after = await rawDatabaseBytes(server);
    for (const c of sealed) assert.ok(after.every((bytes) => !bytes.includes(c)), 'a destroyed version\'s ciphertext is still in the files');
  });
});
