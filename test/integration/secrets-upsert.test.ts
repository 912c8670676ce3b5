// PUT /v1/orgs/{orgId}/secrets: create the missing, version the changed, leave the identical.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { CompiledQuery } from 'kysely';
import { bumpManyStatement } from '../../src/modules/secrets/secrets.repo.js';
import { eventsSettled } from '../support/deployments.js';
import { startServer, TEST_DB, type TestServer } from '../support/harness.js';

const base = '/v1/orgs/default/secrets';

describe('bulk upsert secrets', () => {
  let server: TestServer;
  before(async () => { server = await startServer(); });
  after(async () => {
    assert.deepEqual(server.undeclared, []);
    await server.close();
  });

  it('reports per item, in request order, whether it was created, updated or unchanged', async () => {
    const http = server.owner.http;
    assert.equal((await http.post(base, { secrets: [{ name: 'keep', values: { A: '1' } }, { name: 'change', values: { A: '1' } }] })).status, 201);
    const res = await http.put(base, {
      secrets: [
        { name: 'new-one', values: { X: 'x' } },
        { name: 'keep', values: { A: '1' } },
        { name: 'change', values: { A: '2', B: 'b' } },
      ],
    });
    assert.equal(res.status, 200, res.text);
    assert.deepEqual(res.body.secrets.map((s: any) => [s.name, s.result, s.version, s.keys]), [
      ['new-one', 'created', 1, ['X']],
      ['keep', 'unchanged', 1, ['A']],
      ['change', 'updated', 2, ['A', 'B']],
    ]);
    assert.ok(!res.text.includes('"b"'));
    const revealed = await http.post(`${base}/change/reveal`, {});
    assert.deepEqual(revealed.body.values, { A: '2', B: 'b' });

    await eventsSettled(server);
    const events = await http.get('/v1/orgs/default/events?type=secret.*&limit=200');
    const mine = events.body.events.filter((e: any) => ['new-one', 'keep', 'change'].includes(e.data.name) && e.requestId === res.headers.get('x-request-id'));
    assert.deepEqual(mine.map((e: any) => [e.type, e.data.name]).sort(), [['secret.created', 'new-one'], ['secret.updated', 'change']]);
    const updated = mine.find((e: any) => e.type === 'secret.updated');
    assert.deepEqual([updated.data.added, updated.data.removed, updated.data.changed, updated.data.change], [['B'], [], ['A'], 'upsert']);
  });

  it('is atomic: a deleted name or a duplicate fails the whole batch and writes nothing', async () => {
    const http = server.owner.http;
    assert.equal((await http.post(base, { secrets: [{ name: 'atom-a', values: { A: '1' } }, { name: 'atom-del', values: { A: '1' } }] })).status, 201);
    assert.equal((await http.delete(`${base}/atom-del`)).status, 204);
    const res = await http.put(base, { secrets: [{ name: 'atom-a', values: { A: '2' } }, { name: 'atom-new', values: { A: '1' } }, { name: 'atom-del', values: { A: '2' } }] });
    assert.equal(res.status, 409);
    assert.equal(res.body.code, 'secret_deleted');
    assert.deepEqual(res.body.conflicts, [{ pointer: '/secrets/2/name', name: 'atom-del', state: 'deleted' }]);
    assert.equal((await http.get(`${base}/atom-a`)).body.version, 1);
    assert.equal((await http.get(`${base}/atom-new`)).status, 404);

    const dup = await http.put(base, { secrets: [{ name: 'atom-a', values: { A: '2' } }, { name: 'atom-a', values: { A: '3' } }] });
    assert.equal(dup.status, 400);
    assert.equal(dup.body.code, 'duplicate_names');
    assert.equal(dup.body.conflicts, undefined, 'existing names are what an upsert is for');
    assert.equal((await http.get(`${base}/atom-a`)).body.version, 1);
    // A deleted name besides the duplicate: one problem says both.
    const both = await http.put(base, { secrets: [{ name: 'atom-a', values: { A: '2' } }, { name: 'atom-del', values: { A: '2' } }, { name: 'atom-a', values: { A: '3' } }] });
    assert.equal(both.status, 400);
    assert.deepEqual(both.body.conflicts, [{ pointer: '/secrets/1/name', name: 'atom-del', state: 'deleted' }]);
    assert.match(both.body.detail, /Besides: Deleted secrets keep their names/);
  });

  it('upserts 1,000 secrets of which half exist in one request', async () => {
    const http = server.owner.http;
    const existing = Array.from({ length: 500 }, (_, i) => ({ name: `half-${String(i * 2).padStart(4, '0')}`, values: { K1: 'old', K2: 'same' } }));
    assert.equal((await http.post(base, { secrets: existing })).status, 201);
    const all = Array.from({ length: 1000 }, (_, i) => ({ name: `half-${String(i).padStart(4, '0')}`, values: { K1: i % 4 === 0 ? 'old' : 'new', K2: 'same' } }));
    const res = await http.put(base, { secrets: all });
    assert.equal(res.status, 200, res.text);
    assert.equal(res.body.secrets.length, 1000);
    const tally: Record<string, number> = {};
    for (const [i, s] of res.body.secrets.entries()) {
      assert.equal(s.name, all[i]!.name);
      const expected = i % 2 === 1 ? 'created' : i % 4 === 0 ? 'unchanged' : 'updated';
      assert.equal(s.result, expected, s.name);
      assert.equal(s.version, expected === 'updated' ? 2 : 1);
      tally[s.result] = (tally[s.result] ?? 0) + 1;
    }
    assert.deepEqual(tally, { created: 500, updated: 250, unchanged: 250 });
    assert.deepEqual((await http.post(`${base}/half-0002/reveal`, {})).body.values, { K1: 'new', K2: 'same' });
    assert.deepEqual((await http.post(`${base}/half-0002/reveal`, { version: 1 })).body.values, { K1: 'old', K2: 'same' });
  });

  it('versions more changed secrets than one statement holds, and only those', async () => {
    const http = server.owner.http;
    const names = Array.from({ length: 450 }, (_, i) => `many-${String(i).padStart(3, '0')}`);
    assert.equal((await http.post(base, { secrets: names.map((name) => ({ name, values: { V: 'old' } })) })).status, 201);
    // The same names in another organization: a bump must find its rows by id, never by name or version.
    const other = await server.createOrg();
    const otherOwner = await server.actor(other.id, 'owner');
    assert.equal((await otherOwner.http.post(`/v1/orgs/${other.id}/secrets`, { secrets: names.slice(0, 5).map((name) => ({ name, values: { V: 'old' } })) })).status, 201);

    const res = await http.put(base, { secrets: names.map((name, i) => ({ name, values: { V: i === 7 ? 'old' : `new-${i}` } })) });
    assert.equal(res.status, 200, res.text);
    assert.deepEqual(res.body.secrets.map((s: any) => [s.name, s.result, s.version]), names.map((name, i) => (i === 7 ? [name, 'unchanged', 1] : [name, 'updated', 2])));
    for (const i of [0, 7, 399, 400, 449]) {
      const revealed = await http.post(`${base}/${names[i]}/reveal`, {});
      assert.deepEqual([revealed.body.version, revealed.body.values], i === 7 ? [1, { V: 'old' }] : [2, { V: `new-${i}` }], names[i]);
    }
    const untouched = await otherOwner.http.get(`/v1/orgs/${other.id}/secrets/${names[0]}`);
    assert.equal(untouched.body.version, 1);
  });

  it('bumps many secrets by looking each up through its id, never by scanning the table (SQLite plan)', { skip: TEST_DB !== 'sqlite' }, async () => {
    const bumps = Array.from({ length: 400 }, (_, i) => ({ id: `sec_${i}`, keys: '["A"]', expected: 1 }));
    const { sql, parameters } = bumpManyStatement(server.core.db, bumps, new Date().toISOString(), 'su_1').compile();
    const plan = (await server.core.db.executeQuery<{ detail: string }>(CompiledQuery.raw(`explain query plan ${sql}`, [...parameters]))).rows.map((r) => r.detail);
    assert.ok(plan.some((d) => /^SEARCH secrets USING .*\(id=\?\)$/.test(d)), plan.join(' | '));
    assert.ok(!plan.some((d) => /^SCAN secrets/.test(d)), plan.join(' | '));
  });

  it('concurrent upserts of the same new and existing names all succeed, one version per change', async () => {
    const http = server.owner.http;
    const results = await Promise.all(Array.from({ length: 20 }, (_, i) => http.put(base, {
      secrets: [{ name: 'race-shared', values: { N: String(i) } }, { name: `race-own-${i}`, values: { N: String(i) } }, { name: 'race-other', values: { N: String(i % 2) } }],
    })));
    for (const r of results) assert.equal(r.status, 200, r.text);
    const shared = results.map((r) => r.body.secrets[0]);
    assert.equal(shared.filter((s: any) => s.result === 'created').length, 1);
    const versions = await http.get(`${base}/race-shared/versions?limit=200`);
    assert.deepEqual(versions.body.versions.map((v: any) => v.version), Array.from({ length: 20 }, (_, i) => 20 - i));
    const reported = shared.map((s: any) => s.version).sort((a: number, b: number) => a - b);
    assert.deepEqual(reported, Array.from({ length: 20 }, (_, i) => i + 1));
  });
});
