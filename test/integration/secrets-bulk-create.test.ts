// POST /v1/orgs/{orgId}/secrets, exactly as the spec and the design fix it.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { eventsSettled } from '../support/deployments.js';
import { startServer, type TestServer } from '../support/harness.js';

describe('bulk create secrets', () => {
  let server: TestServer;
  before(async () => { server = await startServer(); });
  after(async () => { await server.close(); });

  it('lists 100 of a thousand names given twice, as every problem lists 100 items at most, and says how many there were', async () => {
    const many = await server.owner.http.post('/v1/orgs/default/secrets', { secrets: Array.from({ length: 1000 }, () => ({ name: 'same', values: { A: '1' } })) });
    assert.equal(many.status, 400, many.text);
    assert.equal(many.body.code, 'duplicate_names');
    assert.equal(many.body.errors.length, 100);
    assert.match(many.body.detail, /\(1000 items repeat a name; errors lists the first 100\)/);
  });

  it('creates every secret in request order with version 1 and key names only', async () => {
    const res = await server.owner.http.post('/v1/orgs/default/secrets', {
      secrets: [
        { name: 'payments', values: { STRIPE_KEY: 'sk_live_1', WEBHOOK_SECRET: 'whsec_2' } },
        { name: 'database', values: { URL: 'postgres://x' } },
      ],
    });
    assert.equal(res.status, 201);
    assert.deepEqual(res.body.secrets.map((s: any) => [s.name, s.version, s.keys]), [
      ['payments', 1, ['STRIPE_KEY', 'WEBHOOK_SECRET']],
      ['database', 1, ['URL']],
    ]);
    for (const s of res.body.secrets) {
      assert.match(s.createdAt, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
      assert.equal(s.updatedAt, s.createdAt);
      assert.deepEqual(Object.keys(s).sort(), ['createdAt', 'keys', 'name', 'updatedAt', 'version']);
    }
    assert.ok(!res.text.includes('sk_live_1'));
  });

  it('creates 1,000 secrets in one request', async () => {
    const secrets = Array.from({ length: 1000 }, (_, i) => ({ name: `bulk-${i}`, values: { A: `a${i}`, B: `b${i}` } }));
    const res = await server.owner.http.post('/v1/orgs/default/secrets', { secrets });
    assert.equal(res.status, 201);
    assert.equal(res.body.secrets.length, 1000);
    assert.deepEqual(res.body.secrets.map((s: any) => s.name), secrets.map((s) => s.name));
  });

  it('keeps each secret\'s own keys, values and event, in batches where some or all secrets share their key names', async () => {
    const http = server.owner.http;
    // 600 items: more than one insert statement's worth, with key names that differ (every third
    // item) and that all agree (the second batch).
    const mixed = Array.from({ length: 600 }, (_, i) => ({ name: `own-${i}`, values: i % 3 === 0 ? { [`K${i}`]: `v${i}` } : { A: `a${i}`, B: `b${i}` } }));
    const same = Array.from({ length: 3 }, (_, i) => ({ name: `same-${i}`, values: { A: `same${i}` } }));
    for (const secrets of [mixed, same]) {
      const res = await http.post('/v1/orgs/default/secrets', { secrets });
      assert.equal(res.status, 201, res.text);
      assert.deepEqual(res.body.secrets.map((s: any) => [s.name, s.keys]), secrets.map((s) => [s.name, Object.keys(s.values).sort()]));
      const listed = await http.get(`/v1/orgs/default/secrets?prefix=${secrets[0]!.name.split('-')[0]}-&limit=200`);
      for (const s of listed.body.secrets) assert.deepEqual(s.keys, Object.keys(secrets.find((x) => x.name === s.name)!.values).sort());
      for (const i of [0, 1, secrets.length - 1]) {
        const revealed = await http.post(`/v1/orgs/default/secrets/${secrets[i]!.name}/reveal`, {});
        assert.deepEqual(revealed.body.values, secrets[i]!.values);
      }
      const { id } = await server.core.db.selectFrom('secrets').select('id').where('name', '=', secrets[1]!.name).executeTakeFirstOrThrow();
      await eventsSettled(server);
      const events = await http.get(`/v1/orgs/default/events?type=secret.created&subject=${id}`);
      assert.deepEqual(events.body.events.map((e: any) => [e.subject.id, e.data.name, e.data.keys, e.requestId]), [[id, secrets[1]!.name, Object.keys(secrets[1]!.values).sort(), res.headers.get('x-request-id')]]);
    }
  });
});

describe('bulk create secrets: refusals', () => {
  let server: TestServer;
  before(async () => { server = await startServer({ env: { SLIPWAY_MAX_SECRETS_PER_REQUEST: '5', SLIPWAY_MAX_KEYS_PER_SECRET: '3', SLIPWAY_MAX_VALUE_CHARS: '10' } }); });
  after(async () => {
    assert.deepEqual(server.undeclared, []);
    await server.close();
  });

  const post = (secrets: unknown) => server.owner.http.post('/v1/orgs/default/secrets', { secrets });
  const count = async () => Number((await server.core.db.selectFrom('secrets').select((eb) => eb.fn.countAll<number>().as('n')).executeTakeFirstOrThrow()).n);

  it('409 lists every existing name, and a batch with one existing name creates nothing', async () => {
    assert.equal((await post([{ name: 'one', values: { A: '1' } }, { name: 'two', values: { A: '1' } }])).status, 201);
    const before = await count();
    const res = await post([{ name: 'fresh', values: { A: '1' } }, { name: 'two', values: { A: '1' } }, { name: 'fresh2', values: { A: '1' } }, { name: 'one', values: { A: '1' } }]);
    assert.equal(res.status, 409);
    assert.equal(res.body.code, 'secret_exists');
    assert.deepEqual(res.body.conflicts, [{ pointer: '/secrets/1/name', name: 'two', state: 'exists' }, { pointer: '/secrets/3/name', name: 'one', state: 'exists' }]);
    assert.equal(await count(), before);
    assert.equal((await server.owner.http.get('/v1/orgs/default/secrets/fresh')).status, 404);
  });

  it('one problem names everything to fix: existing and deleted names together, and beside names given twice', async () => {
    assert.equal((await post([{ name: 'held', values: { A: '1' } }, { name: 'gone', values: { A: '1' } }])).status, 201);
    assert.equal((await server.owner.http.delete('/v1/orgs/default/secrets/gone')).status, 204);
    const before = await count();
    const taken = await post([{ name: 'gone', values: { A: '1' } }, { name: 'new-one', values: { A: '1' } }, { name: 'held', values: { A: '1' } }]);
    assert.equal(taken.status, 409, taken.text);
    assert.equal(taken.body.code, 'secret_exists');
    assert.deepEqual(taken.body.conflicts, [{ pointer: '/secrets/0/name', name: 'gone', state: 'deleted' }, { pointer: '/secrets/2/name', name: 'held', state: 'exists' }]);
    assert.match(taken.body.detail, /already exists in this organization: held\..*keep their names until they are purged: gone;/);

    const both = await post([{ name: 'held', values: { A: '1' } }, { name: 'twice', values: { A: '1' } }, { name: 'twice', values: { A: '2' } }, { name: 'gone', values: { A: '1' } }]);
    assert.equal(both.status, 400, both.text);
    assert.equal(both.body.code, 'duplicate_names');
    assert.deepEqual(both.body.errors.map((e: any) => e.pointer), ['/secrets/1/name', '/secrets/2/name']);
    assert.deepEqual(both.body.conflicts, [{ pointer: '/secrets/0/name', name: 'held', state: 'exists' }, { pointer: '/secrets/3/name', name: 'gone', state: 'deleted' }]);
    assert.match(both.body.detail, /once in one request\. Besides: 1 secret name already exists in this organization: held\./);
    assert.equal(await count(), before);
  });

  it('400 for an empty array, for names given twice, and for invalid names and keys, each item pointed at', async () => {
    const empty = await post([]);
    assert.equal(empty.status, 400);
    assert.equal(empty.body.errors[0].pointer, '/secrets');

    const dup = await post([{ name: 'd', values: { A: '1' } }, { name: 'e', values: { A: '1' } }, { name: 'd', values: { A: '2' } }]);
    assert.equal(dup.status, 400);
    assert.equal(dup.body.code, 'duplicate_names');
    assert.deepEqual(dup.body.errors.map((e: any) => e.pointer), ['/secrets/0/name', '/secrets/2/name']);

    const invalid = await post([{ name: '-bad', values: { A: '1' } }, { name: 'ok', values: { '9KEY': '1' } }, { name: 'ok2', values: {} }, { name: 'ok3', values: { A: { nested: '1' } } }]);
    assert.equal(invalid.status, 400);
    assert.equal(invalid.body.code, 'invalid_request');
    const pointers = invalid.body.errors.map((e: any) => e.pointer);
    for (const p of ['/secrets/0/name', '/secrets/1/values/9KEY', '/secrets/2/values', '/secrets/3/values/A']) assert.ok(pointers.includes(p), `${p} in ${pointers}`);
    assert.equal((await post([{ name: 'x'.repeat(129), values: { A: '1' } }])).status, 400);
    assert.equal((await post([{ name: 'ok', values: { A: '1' }, extra: true }])).status, 400);
    // Values are strings: a number or a boolean is refused, not converted.
    const typed = await post([{ name: 'typed', values: { PORT: 5432, DEBUG: true } }]);
    assert.equal(typed.status, 400);
    assert.deepEqual(typed.body.errors.map((e: any) => e.pointer).sort(), ['/secrets/0/values/DEBUG', '/secrets/0/values/PORT']);
  });

  it('refuses each documented limit with a problem that names it', async () => {
    const tooMany = await post(Array.from({ length: 6 }, (_, i) => ({ name: `n${i}`, values: { A: '1' } })));
    assert.equal(tooMany.status, 400);
    assert.equal(tooMany.body.code, 'limit_exceeded');
    assert.deepEqual(tooMany.body.limit, { name: 'SLIPWAY_MAX_SECRETS_PER_REQUEST', value: 5 });

    const keys = await post([{ name: 'k', values: { A: '1', B: '1', C: '1', D: '1' } }]);
    assert.equal(keys.body.code, 'limit_exceeded');
    assert.deepEqual(keys.body.limit, { name: 'SLIPWAY_MAX_KEYS_PER_SECRET', value: 3 });

    const value = await post([{ name: 'v', values: { A: '12345678901' } }]);
    assert.equal(value.body.code, 'limit_exceeded');
    assert.deepEqual(value.body.limit, { name: 'SLIPWAY_MAX_VALUE_CHARS', value: 10 });
    assert.equal(value.body.errors[0].pointer, '/secrets/0/values/A');
    assert.ok(!value.text.includes('12345678901'));
  });

  it('the same limits hold on replace, patch and upsert', async () => {
    const http = server.owner.http;
    assert.equal((await post([{ name: 'limited', values: { A: '1', B: '2' } }])).status, 201);
    const replace = await http.put('/v1/orgs/default/secrets/limited', { values: { A: 'x'.repeat(11) } });
    assert.deepEqual(replace.body.limit, { name: 'SLIPWAY_MAX_VALUE_CHARS', value: 10 });
    const patchValue = await http.patch('/v1/orgs/default/secrets/limited', { set: { A: 'x'.repeat(11) } });
    assert.deepEqual(patchValue.body.limit, { name: 'SLIPWAY_MAX_VALUE_CHARS', value: 10 });
    // Two keys plus two more is over three, although the patch itself names only two.
    const patchKeys = await http.patch('/v1/orgs/default/secrets/limited', { set: { C: '3', D: '4' } });
    assert.equal(patchKeys.status, 400);
    assert.deepEqual(patchKeys.body.limit, { name: 'SLIPWAY_MAX_KEYS_PER_SECRET', value: 3 });
    assert.equal((await http.patch('/v1/orgs/default/secrets/limited', { set: { C: '3', D: '4' }, unset: ['A'] })).status, 200);
    const upsert = await http.put('/v1/orgs/default/secrets', { secrets: Array.from({ length: 6 }, (_, i) => ({ name: `u${i}`, values: { A: '1' } })) });
    assert.deepEqual(upsert.body.limit, { name: 'SLIPWAY_MAX_SECRETS_PER_REQUEST', value: 5 });
  });
});

describe('bulk create secrets: concurrency', () => {
  let server: TestServer;
  before(async () => { server = await startServer(); });
  after(async () => { await server.close(); });

  it('50 concurrent batches with overlapping names leave one winner per name and no partial batch', async () => {
    // Batch i takes names i..i+3 of a ring of 60, so each overlaps its neighbours; its values name it.
    const batches = Array.from({ length: 50 }, (_, i) => Array.from({ length: 4 }, (_, k) => `ring-${(i * 3 + k * 7) % 60}`));
    const results = await Promise.all(batches.map((names, i) =>
      server.owner.http.post('/v1/orgs/default/secrets', { secrets: [...new Set(names)].map((name) => ({ name, values: { BATCH: String(i) } })) })));
    for (const r of results) assert.ok(r.status === 201 || r.status === 409, `${r.status} ${r.text}`);
    const winners = results.flatMap((r, i) => (r.status === 201 ? [i] : []));
    assert.ok(winners.length > 0);

    const owner = new Map<string, number>();
    for (const i of winners) for (const name of batches[i]!) {
      assert.ok(!owner.has(name), `${name} created by two batches`);
      owner.set(name, i);
    }
    const rows = await server.core.db.selectFrom('secrets').select(['name', 'version']).where('name', 'like', 'ring-%').execute();
    assert.deepEqual(rows.map((r) => r.name).sort(), [...owner.keys()].sort());
    assert.ok(rows.every((r) => r.version === 1));
    for (const [name, i] of owner) {
      const res = await server.owner.http.post(`/v1/orgs/default/secrets/${name}/reveal`, {});
      assert.equal(res.body.values.BATCH, String(i));
    }
    // Every losing batch was told which of its names were taken.
    for (const r of results.filter((x) => x.status === 409)) assert.ok(r.body.conflicts.length > 0);
  });
});
