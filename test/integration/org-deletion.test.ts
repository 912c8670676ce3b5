// Deleting an organization: instance administrators only; refused while something of it runs or it
// holds an instance administrator; then every row it held is gone, from every table that has an
// org_id, its tokens are refused, its slug stays reserved, another organization is untouched, and the
// deletion is recorded in the deleting administrator's own organization.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { setTimeout as setTimeoutPromise } from 'node:timers/promises';
import { sql } from 'kysely';
import { createOrgsService } from '../../src/modules/orgs/orgs.service.js';
import { cliContext } from '../../src/platform/context.js';
import { createEnvironment, createService, deploy, eventsOf, holding, lockWaiters, newRunner, ship } from '../support/deployments.js';
import { clientCredentialsGrant, startServer, TEST_DB, type Actor, type TestServer } from '../support/harness.js';
import { assertProblem } from '../support/problems.js';
import { cliEnv, cliJson, runCli } from '../support/processes.js';

/** An organization with something in every table: a secret, a serving deployment and a queued one, a webhook, an idempotent request. */
async function populated(server: TestServer) {
  const org = await server.createOrg();
  const owner = await server.actor(org.id, 'owner');
  const developer = await server.actor(org.id, 'developer');
  const runner = await newRunner(server, org.id);
  assert.equal((await developer.http.post(`/v1/orgs/${org.id}/secrets`, { secrets: [{ name: 'db', values: { PASSWORD: 'p' } }] }, { headers: { 'idempotency-key': `k-${org.id}` } })).status, 201);
  assert.equal((await developer.http.patch(`/v1/orgs/${org.id}/secrets/db`, { set: { PASSWORD: 'q' } })).status, 200);
  const env = await createEnvironment(owner.http, org.id, { secrets: [{ secret: 'db' }] });
  const svc = await createService(developer.http, org.id);
  await ship(developer.http, runner, org.id, { service: svc.name, environment: env.name });
  const queued = await deploy(developer.http, org.id, { service: svc.name, environment: env.name });
  assert.equal((await owner.http.post(`/v1/orgs/${org.id}/webhooks`, { url: 'http://127.0.0.1:9/hook', events: ['secret.*'] })).status, 201);
  assert.equal((await developer.http.patch(`/v1/orgs/${org.id}/secrets/db`, { set: { PASSWORD: 'r' } })).status, 200);
  return { org, owner, developer, runner, env, svc, queued };
}

/** Rows per table that name the organization in an org_id column, for every such table of the schema. */
async function rowsOf(server: TestServer, orgId: string): Promise<Record<string, number>> {
  const db = server.core.db;
  const tables = TEST_DB === 'postgres'
    ? (await sql<{ name: string }>`select table_name as name from information_schema.columns where column_name = 'org_id' and table_schema = current_schema()`.execute(db)).rows.map((r) => r.name)
    : (await sql<{ name: string }>`select m.name as name from sqlite_master m join pragma_table_info(m.name) c where m.type = 'table' and c.name = 'org_id'`.execute(db)).rows.map((r) => r.name);
  const out: Record<string, number> = {};
  for (const table of tables.sort()) {
    const { rows } = await sql<{ n: number | string }>`select count(*) as n from ${sql.table(table)} where org_id = ${orgId}`.execute(db);
    out[table] = Number(rows[0]!.n);
  }
  return out;
}

describe('deleting an organization', () => {
  let server: TestServer;
  let admin: Actor;

  before(async () => {
    server = await startServer({ env: { SLIPWAY_WEBHOOK_ALLOW_PRIVATE: 'true' } });
    admin = server.owner;
  });
  after(async () => {
    assert.deepEqual(server.undeclared, []);
    await server.close();
  });

  it('takes an instance administrator, and is refused while something of it runs; then everything it held is gone', async () => {
    const a = await populated(server);
    const b = await populated(server);
    const bBefore = await rowsOf(server, b.org.id);
    const path = `/v1/orgs/${a.org.id}`;

    assert.equal((await server.http().delete(path)).status, 401);
    assertProblem(await a.owner.http.delete(path), 403);
    assertProblem(await b.owner.http.delete(path), 404);

    const inUse = assertProblem(await admin.http.delete(path), 409, 'organization_in_use');
    assert.deepEqual((inUse.conflicts as Array<{ state: string }>).map((c) => c.state).sort(), ['queued', 'succeeded']);
    assert.equal((await a.developer.http.post(`${path}/deployments/${a.queued.id}/cancel`, {})).status, 200);
    assertProblem(await admin.http.delete(path), 409, 'organization_in_use');
    assert.equal((await a.owner.http.delete(`${path}/services/${a.svc.name}?force=true`)).status, 204);
    assert.ok(Object.values(await rowsOf(server, a.org.id)).some((n) => n > 0));
    // A runner still online may still run what served: it learns that it no longer does at its next
    // report, and with its credentials gone it would keep it running. Stopped, it is in nobody's way.
    const host = 'rh_deletion-test';
    assert.equal((await a.runner.actor.http.post(`${path}/runner/adopt`, { host })).status, 200);
    const online = assertProblem(await admin.http.delete(path), 409, 'organization_in_use');
    assert.deepEqual((online.conflicts as Array<{ runner: string }>).map((c) => c.runner), [host]);
    assert.match(String(online.detail), /has runners online \(rh_deletion-test\).*stop them first/);
    assert.equal((await a.runner.actor.http.post(`${path}/runner/release`, { host, deployments: [], stopping: true })).status, 200);

    assert.equal((await admin.http.delete(path)).status, 204);
    for (const [table, n] of Object.entries(await rowsOf(server, a.org.id))) {
      // The organization's own row stays, holding nothing, with the slugs it reserves.
      assert.equal(n, table === 'retired_org_slugs' ? 1 : 0, table);
    }
    const db = server.core.db;
    for (const [table, column] of [['client_secrets', 'service_user_id'], ['revoked_tokens', 'service_user_id'], ['idempotency_keys', 'subject']] as const) {
      const { rows } = await sql<{ n: number | string }>`select count(*) as n from ${sql.table(table)} where ${sql.ref(column)} in (${sql.join([a.owner.id, a.developer.id, a.runner.actor.id])})`.execute(db);
      assert.equal(Number(rows[0]!.n), 0, table);
    }
    assert.deepEqual(await rowsOf(server, b.org.id), bBefore, 'another organization is untouched');

    assertProblem(await admin.http.get(path), 404);
    assertProblem(await admin.http.get(`/v1/orgs/${a.org.slug}`), 404);
    assert.equal((await admin.http.get('/v1/orgs?limit=200')).body.orgs.some((o: { id: string }) => o.id === a.org.id), false);
    // Its service users' tokens: refused at once on this node.
    assertProblem(await a.owner.http.get(`/v1/orgs/${a.org.id}/secrets`), 401);
    const grant = await clientCredentialsGrant(`${server.url}/oauth/v2/token`, a.owner, a.owner.scope);
    assert.equal(grant.status, 401, await grant.text());
    // Its slug stays reserved; it cannot be changed or deleted again.
    assertProblem(await admin.http.post('/v1/orgs', { slug: a.org.slug, name: 'Taken' }), 409, 'org_slug_taken');
    assertProblem(await admin.http.delete(path), 404);

    const events = await eventsOf(server, server.bootstrap.orgId, a.org.id);
    assert.equal(events.length, 1);
    assert.equal(events[0].type, 'organization.deleted');
    assert.deepEqual([events[0].data.slug, events[0].data.deleted.secrets, events[0].data.deleted.serviceUsers, events[0].data.deleted.secretVersions], [a.org.slug, 1, 3, 3]);
  });

  it('is refused while the organization holds an instance administrator', async () => {
    const org = await server.createOrg();
    const other = await server.core.serviceUsers.create(cliContext(), org.id, { name: 'root-2', role: 'owner', instanceAdmin: true });
    const refused = assertProblem(await admin.http.delete(`/v1/orgs/${org.id}`), 409, 'organization_has_instance_admins');
    assert.deepEqual(refused.conflicts, [{ serviceUser: other.id, name: 'root-2' }]);
    assert.equal((await admin.http.get(`/v1/orgs/${org.id}`)).status, 200);
  });

  it('a request that still holds the organization (another node\'s caches) writes nothing into it once deleted', async () => {
    const org = await server.createOrg();
    const owner = await server.actor(org.id, 'owner');
    const base = `/v1/orgs/${org.id}`;
    // This node knows the organization, its service user and its data key now (its caches remember them).
    assert.equal((await owner.http.get(`${base}/secrets`)).status, 200);
    assert.equal((await owner.http.post(`${base}/secrets`, { secrets: [{ name: 'early', values: { K: 'v' } }] })).status, 201);
    // Another node (the CLI, another server on the database) deletes it: this node's caches are not told.
    const elsewhere = createOrgsService({ db: server.core.db, runnersOnlineWithinSeconds: 60 });
    await elsewhere.remove(cliContext(), org.id);

    for (const [path, body] of [
      [`${base}/secrets`, { secrets: [{ name: 'late', values: { K: 'v' } }] }],
      [`${base}/environments`, { name: 'late' }],
      [`${base}/service-users`, { name: 'late', role: 'viewer' }],
    ] as const) {
      const res = await owner.http.post(path, body, { headers: { 'idempotency-key': `late-${path}` } });
      assertProblem(res, 404, 'organization_not_found');
    }
    for (const [table, n] of Object.entries(await rowsOf(server, org.id))) assert.equal(n, table === 'retired_org_slugs' ? 1 : 0, table);
  });

  it('forgets the organization\'s data keys on the node that deleted it, not only in the database', async () => {
    const org = await server.createOrg();
    const owner = await server.actor(org.id, 'owner');
    assert.equal((await owner.http.post(`/v1/orgs/${org.id}/secrets`, { secrets: [{ name: 'kept', values: { K: 'v' } }] })).status, 201);
    const db = server.core.db;
    const keyIds = (await db.selectFrom('org_data_keys').select('id').where('org_id', '=', org.id).execute()).map((r) => r.id);
    assert.equal(keyIds.length, 1);
    // Used since the server started: this node holds the key unwrapped.
    await server.core.dataKeys.byId(db, keyIds[0]!);
    assert.equal((await admin.http.delete(`/v1/orgs/${org.id}`)).status, 204);
    const after = await server.core.dataKeys.byId(db, keyIds[0]!).then(() => 'still held', () => 'gone');
    assert.equal(after, 'gone');
  });

  it('forgets the organization\'s claim wake-up counter on the node that deleted it', async () => {
    const org = await server.createOrg();
    const owner = await server.actor(org.id, 'owner');
    const env = await createEnvironment(owner.http, org.id);
    const svc = await createService(owner.http, org.id);
    const queued = await deploy(owner.http, org.id, { service: svc.name, environment: env.name });
    assert.equal((await owner.http.post(`/v1/orgs/${org.id}/deployments/${queued.id}/cancel`, {})).status, 200);
    // Creating and cancelling woke this organization's claims: the node counts them.
    assert.equal(server.core.signals.counts(org.id), true);
    const seen = server.core.signals.version(org.id);
    assert.equal((await admin.http.delete(`/v1/orgs/${org.id}`)).status, 204);
    assert.equal(server.core.signals.counts(org.id), false);
    // A claim that read the counter before does not wait once the organization is gone.
    assert.notEqual(server.core.signals.version(org.id), seen);
  });

  it('a deletion racing writes into the organization leaves nothing of them, and answers each with a problem a client can act on', async () => {
    const statuses = new Map<number, number>();
    for (let round = 0; round < 12; round++) {
      const org = await server.createOrg();
      const developer = await server.actor(org.id, 'developer');
      // Its data key made and remembered, as on a node that has written into it before.
      assert.equal((await developer.http.post(`/v1/orgs/${org.id}/secrets`, { secrets: [{ name: 'warm', values: { K: 'v' } }] })).status, 201);
      const writes = Array.from({ length: 40 }, (_, i) => developer.http.post(`/v1/orgs/${org.id}/secrets`, { secrets: [{ name: `s${i}`, values: { K: 'v' } }] }));
      // The deletion sent a little later each round, so that it lands among the writes at different points.
      const deletion = setTimeoutPromise(round).then(() => admin.http.delete(`/v1/orgs/${org.id}`));
      for (const res of await Promise.all([...writes, deletion])) {
        statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
        if (res.status >= 400) assert.match(String(res.headers.get('content-type')), /problem\+json/, res.text);
      }
      for (const [table, n] of Object.entries(await rowsOf(server, org.id))) assert.equal(n, table === 'retired_org_slugs' ? 1 : 0, `round ${round}: ${table}`);
    }
    assert.equal(statuses.get(204), 12, 'every deletion went through');
    // Written before the deletion (201, then deleted with it), or refused: its user gone (401), the
    // organization gone (404), or what the write named deleted under it (409, Retry-After).
    assert.deepEqual([...statuses.keys()].filter((s) => ![201, 204, 401, 404, 409].includes(s)), [], JSON.stringify([...statuses]));
  });

  it('lets a change of anything the organization holds wait for its deletion, without a deadlock', { skip: TEST_DB !== 'postgres' && 'SQLite runs one writer at a time' }, async () => {
    const changes = {
      deployment: (o: Held) => o.owner.http.post(`/v1/orgs/${o.org.id}/deployments`, { service: o.svc.id, environment: o.env.id }),
      lock: (o: Held) => o.owner.http.put(`/v1/orgs/${o.org.id}/environments/${o.env.id}/lock`, { reason: 'freeze' }),
      environment: (o: Held) => o.owner.http.patch(`/v1/orgs/${o.org.id}/environments/${o.env.id}`, { description: 'changed' }),
      'environment-delete': (o: Held) => o.owner.http.delete(`/v1/orgs/${o.org.id}/environments/${o.env.id}`),
      service: (o: Held) => o.owner.http.patch(`/v1/orgs/${o.org.id}/services/${o.svc.id}`, { description: 'changed' }),
      secret: (o: Held) => o.owner.http.patch(`/v1/orgs/${o.org.id}/secrets/db`, { set: { PASSWORD: 'changed' } }),
      'secret-upsert': (o: Held) => o.owner.http.put(`/v1/orgs/${o.org.id}/secrets`, { secrets: [{ name: 'db', values: { PASSWORD: 'changed' } }, { name: 'new', values: { K: 'v' } }] }),
      'secret-delete': (o: Held) => o.owner.http.delete(`/v1/orgs/${o.org.id}/secrets/db`),
      'secret-destroy': (o: Held) => o.owner.http.delete(`/v1/orgs/${o.org.id}/secrets/db?permanent=true`),
      webhook: (o: Held) => o.owner.http.patch(`/v1/orgs/${o.org.id}/webhooks/${o.hook}`, { active: false }),
      'webhook-delete': (o: Held) => o.owner.http.delete(`/v1/orgs/${o.org.id}/webhooks/${o.hook}`),
      'service-user': (o: Held) => o.owner.http.patch(`/v1/orgs/${o.org.id}/service-users/${o.developer.id}`, { description: 'changed' }),
      'webhook-create': (o: Held) => o.owner.http.post(`/v1/orgs/${o.org.id}/webhooks`, { url: 'http://127.0.0.1:9/other', events: ['secret.*'] }),
    };
    // Those that take the organization's row to change it learn that it is gone, rather than what they name.
    const organizationGone = new Set(['service-user', 'webhook-create']);
    type Held = Awaited<ReturnType<typeof holds>>;
    const holds = async () => {
      const org = await server.createOrg();
      const owner = await server.actor(org.id, 'owner');
      const developer = await server.actor(org.id, 'developer');
      assert.equal((await owner.http.post(`/v1/orgs/${org.id}/secrets`, { secrets: [{ name: 'db', values: { PASSWORD: 'p' } }] })).status, 201);
      const hook = (await owner.http.post(`/v1/orgs/${org.id}/webhooks`, { url: 'http://127.0.0.1:9/hook', events: ['secret.*'] })).body.id as string;
      return { org, owner, developer, hook, svc: await createService(owner.http, org.id), env: await createEnvironment(owner.http, org.id) };
    };
    for (const [change, make] of Object.entries(changes)) {
      const held = await holds();
      // The deletion held after it has taken the organization's row and before it deletes anything
      // the change reads; the change sent then waits for the organization, not the deletion for it.
      const commit = await holding(server, (trx) => sql`select 1 from services where id = ${held.svc.id} for key share`.execute(trx));
      const deletion = admin.http.delete(`/v1/orgs/${held.org.id}`);
      await lockWaiters(server, 1);
      const made = make(held);
      await lockWaiters(server, 2);
      await commit();
      const [deleted, answered] = await Promise.all([deletion, made]);
      assert.equal(deleted.status, 204, `${change}: ${deleted.text}`);
      // Found gone (its organization, its user, or what it names), not stopped as one side of a deadlock.
      assert.ok([401, 404].includes(answered.status), `${change}: ${answered.status} ${answered.text}`);
      if (answered.status === 404 && organizationGone.has(change)) assert.equal(answered.body.code, 'organization_not_found', `${change}: ${answered.text}`);
    }
  });

  it('slipway org delete does the same, and says what went', async () => {
    const org = await server.createOrg();
    await server.actor(org.id, 'owner');
    const env = cliEnv(server);
    for (const [args, message] of [[[], /--confirm SLUG is required/], [['--confirm', 'another'], new RegExp(`--confirm must be the organization's slug, "${org.slug}"; nothing was deleted`)]] as const) {
      const refused = await runCli(['org', 'delete', '--org', org.id, ...args], env);
      assert.equal(refused.code, 2, refused.stderr);
      assert.match(refused.stderr, message);
    }
    assert.equal((await admin.http.get(`/v1/orgs/${org.id}`)).status, 200, 'still there');
    const printed = await cliJson(['org', 'delete', '--org', org.slug, '--confirm', org.slug], env);
    assert.equal(printed.deleted, org.id);
    assert.equal(printed.slug, org.slug);
    assert.equal(printed.removed.serviceUsers, 1);
    const again = await runCli(['org', 'delete', '--org', org.id, '--confirm', org.slug, '--json'], env);
    assert.equal(again.code, 1);
    assert.equal(JSON.parse(again.stderr).error.code, 'organization_not_found');
    assert.equal((await runCli(['org', 'delete'], env)).code, 2);
  });
});
