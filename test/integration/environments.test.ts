// Environments: CRUD, names, protection, the active deployment per service, and deletion refused
// while a deployment is queued or in progress.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { sql } from 'kysely';
import { TEST_DB, type Actor, type TestServer } from '../support/harness.js';
import { assertProblem } from '../support/problems.js';
import {
  assertHiddenFromOtherOrgs, assertOneChain, createEnvironment, createService, deploy, eventsOf, holding, lockWaiters, ship, startDeployFixture, unique, type DeployFixture,
} from '../support/deployments.js';

describe('environments', () => {
  let f: DeployFixture;
  let server: TestServer;
  let orgId: string;
  let admin: Actor;
  let developer: Actor;
  let viewer: Actor;

  before(async () => {
    f = await startDeployFixture();
    ({ server, orgId, admin, developer, viewer } = f);
  });
  after(() => f.close());

  it('creates, reads by id and by name, lists with a cursor, updates and deletes', async () => {
    const name = unique('prod');
    const created = await admin.http.post(`/v1/orgs/${orgId}/environments`, { name, description: 'Live traffic', protected: true });
    assert.equal(created.status, 201, created.text);
    const env = created.body;
    assert.match(env.id, /^env_[0-9a-z]{26}$/);
    assert.deepEqual({ name: env.name, description: env.description, protected: env.protected }, { name, description: 'Live traffic', protected: true });
    assert.equal(env.updatedAt, env.createdAt);

    for (const ref of [env.id, name]) {
      const got = await viewer.http.get(`/v1/orgs/${orgId}/environments/${ref}`);
      assert.equal(got.status, 200);
      assert.deepEqual(got.body, env);
    }

    const more = [await createEnvironment(admin.http, orgId), await createEnvironment(admin.http, orgId)];
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const page: any = await viewer.http.get(`/v1/orgs/${orgId}/environments?limit=2${cursor ? `&cursor=${cursor}` : ''}`);
      assert.equal(page.status, 200);
      assert.ok(page.body.environments.length <= 2);
      seen.push(...page.body.environments.map((e: any) => e.id));
      cursor = page.body.nextCursor;
    } while (cursor !== null);
    assert.deepEqual(seen, [env.id, ...more.map((e) => e.id)]);

    const renamed = unique('production');
    const patched = await admin.http.patch(`/v1/orgs/${orgId}/environments/${name}`, { name: renamed, protected: false, description: 'Live traffic' });
    assert.equal(patched.status, 200, patched.text);
    assert.equal(patched.body.name, renamed);
    assert.equal(patched.body.protected, false);
    assert.equal(patched.body.description, 'Live traffic');
    assert.equal((await viewer.http.get(`/v1/orgs/${orgId}/environments/${name}`)).status, 404);
    // A patch that changes nothing changes nothing: neither updatedAt nor the audit log.
    const same = await admin.http.patch(`/v1/orgs/${orgId}/environments/${renamed}`, { name: renamed, protected: false, description: 'Live traffic' });
    assert.equal(same.status, 200, same.text);
    assert.equal(same.body.updatedAt, patched.body.updatedAt);
    const [update] = (await eventsOf(server, orgId, env.id)).filter((e) => e.type === 'environment.updated');
    // The description was sent but the same: the event names what changed, from what, to what.
    assert.deepEqual([update!.data.changed, update!.data.from, update!.data.to], [['name', 'protected'], { name, protected: true }, { name: renamed, protected: false }]);

    const deleted = await admin.http.delete(`/v1/orgs/${orgId}/environments/${renamed}`);
    assert.equal(deleted.status, 204);
    assert.equal((await viewer.http.get(`/v1/orgs/${orgId}/environments/${env.id}`)).status, 404);

    const types = (await eventsOf(server, orgId, env.id)).map((e) => e.type);
    assert.deepEqual(types, ['environment.created', 'environment.updated', 'environment.deleted']);
  });

  it('refuses a taken name, bad names, unknown fields and empty patches', async () => {
    const env = await createEnvironment(admin.http, orgId);
    const taken = await admin.http.post(`/v1/orgs/${orgId}/environments`, { name: env.name });
    assert.equal(taken.status, 409);
    assert.equal(taken.body.code, 'environment_name_taken');

    const bad = await admin.http.post(`/v1/orgs/${orgId}/environments`, { name: 'Not A Slug', color: 'red' });
    assert.equal(bad.status, 400);
    assert.deepEqual(bad.body.errors.map((e: any) => e.pointer).sort(), ['/color', '/name']);

    const empty = await admin.http.patch(`/v1/orgs/${orgId}/environments/${env.id}`, {});
    assert.equal(empty.status, 400);

    const other = await createEnvironment(admin.http, orgId);
    const clash = await admin.http.patch(`/v1/orgs/${orgId}/environments/${other.id}`, { name: env.name });
    assert.equal(clash.status, 409);
    assert.equal(clash.body.code, 'environment_name_taken');
  });

  it('makes one change of ten identical concurrent patches, and each of ten concurrent renames starts from the name the one before it left', async () => {
    const env = await createEnvironment(admin.http, orgId);
    const url = `/v1/orgs/${orgId}/environments/${env.id}`;
    const protects = await Promise.all(Array.from({ length: 10 }, () => admin.http.patch(url, { protected: true })));
    assert.deepEqual(protects.map((r) => r.status), Array(10).fill(200));
    const renames = await Promise.all(Array.from({ length: 10 }, (_, i) => admin.http.patch(url, { name: `${env.name}-${i}` })));
    assert.deepEqual(renames.map((r) => r.status), Array(10).fill(200));
    const updates = (await eventsOf(server, orgId, env.id)).filter((e) => e.type === 'environment.updated');
    assert.deepEqual(updates.filter((e) => e.data.changed.includes('protected')).length, 1);
    const names = updates.filter((e) => e.data.changed.includes('name')).map((e): [string, string] => [e.data.from.name, e.data.to.name]);
    assert.equal(names.length, 10);
    assertOneChain(names, env.name);
  });

  it('has a version and an ETag: each change, a lock and an unlock included, makes the next; If-Match refuses a stale one, If-None-Match answers 304', async () => {
    const made = await admin.http.post(`/v1/orgs/${orgId}/environments`, { name: unique('tagged') });
    assert.equal(made.status, 201);
    assert.equal(made.body.version, 1);
    const url = `/v1/orgs/${orgId}/environments/${made.body.name}`;
    const first = made.headers.get('etag')!;
    assert.match(first, /^"1\.[0-9a-z]+"$/);
    const read = await viewer.http.get(url);
    assert.equal(read.headers.get('etag'), first);
    const notModified = await viewer.http.get(url, { headers: { 'if-none-match': first } });
    assert.equal(notModified.status, 304);
    assert.equal(notModified.text, '');

    const changed = await admin.http.patch(url, { variables: { A: '1' } }, { headers: { 'if-match': first } });
    assert.equal(changed.status, 200, changed.text);
    assert.equal(changed.body.version, 2);
    const second = changed.headers.get('etag')!;
    // The same again changes nothing: no version, no event.
    const same = await admin.http.patch(url, { variables: { A: '1' } }, { headers: { 'if-match': second } });
    assert.deepEqual([same.status, same.body.version, same.headers.get('etag')], [200, 2, second]);
    // A stale ETag: 412 naming the version there, and nothing changed.
    const stale = await admin.http.patch(url, { variables: { B: '2' } }, { headers: { 'if-match': first } });
    assert.equal(assertProblem(stale, 412, 'precondition_failed').currentVersion, 2);
    assert.deepEqual((await viewer.http.get(url)).body.variables, { A: '1' });

    // A lock and an unlock are changes too: a writer that read before either is refused.
    const locked = await admin.http.put(`${url}/lock`, { reason: 'freeze' }, { headers: { 'if-match': second } });
    assert.deepEqual([locked.status, locked.body.version], [200, 3]);
    assertProblem(await admin.http.patch(url, { protected: true }, { headers: { 'if-match': second } }), 412, 'precondition_failed');
    assertProblem(await admin.http.delete(`${url}/lock`, { headers: { 'if-match': second } }), 412, 'precondition_failed');
    const unlocked = await admin.http.delete(`${url}/lock`, { headers: { 'if-match': locked.headers.get('etag')! } });
    assert.deepEqual([unlocked.status, unlocked.body.version, unlocked.body.lock], [200, 4, null]);
    // A write that knows no version (a node of an older Slipway, during a rolling upgrade) moves it all the same.
    await server.core.db.updateTable('environments').set({ description: 'from an older node' }).where('id', '=', made.body.id).execute();
    const moved = await viewer.http.get(url, { headers: { 'if-none-match': unlocked.headers.get('etag')! } });
    assert.deepEqual([moved.status, moved.body.version, moved.body.description], [200, 5, 'from an older node']);
    assertProblem(await admin.http.delete(url, { headers: { 'if-match': unlocked.headers.get('etag')! } }), 412, 'precondition_failed');
    assert.equal((await admin.http.delete(url, { headers: { 'if-match': moved.headers.get('etag')! } })).status, 204);
    assert.deepEqual((await eventsOf(server, orgId, made.body.id)).map((e) => e.type), ['environment.created', 'environment.updated', 'environment.locked', 'environment.unlocked', 'environment.deleted']);
  });

  it('is invisible from another organization', async () => {
    const env = await createEnvironment(admin.http, orgId);
    await assertHiddenFromOtherOrgs(server, orgId, `/environments/${env.id}`);
    const otherOrg = await server.actor((await server.createOrg()).id, 'admin');
    assert.deepEqual((await otherOrg.http.get(`/v1/orgs/${otherOrg.orgId}/environments`)).body.environments, []);
  });

  it('lets only admins and owners deploy to a protected environment, and cancel its deployments', async () => {
    const env = await createEnvironment(admin.http, orgId, { protected: true });
    const svc = await createService(developer.http, orgId);
    const refused = await developer.http.post(`/v1/orgs/${orgId}/deployments`, { service: svc.name, environment: env.name });
    assert.equal(refused.status, 403);
    assert.equal(refused.body.code, 'environment_protected');
    assert.match(refused.body.detail, /protected/);
    const queued: string[] = [];
    for (const who of [admin, await server.actor(orgId, 'owner')]) {
      const ok = await who.http.post(`/v1/orgs/${orgId}/deployments`, { service: svc.name, environment: env.name });
      assert.equal(ok.status, 201, ok.text);
      queued.push(ok.body.id);
    }
    // Cancelling one is as much the admins' as deploying: a developer is refused, and nothing changes.
    const cancel = await developer.http.post(`/v1/orgs/${orgId}/deployments/${queued[0]}/cancel`, {});
    assert.equal(cancel.status, 403, cancel.text);
    assert.equal(cancel.body.code, 'environment_protected');
    assert.match(cancel.body.detail, /cancel/);
    assert.equal((await developer.http.get(`/v1/orgs/${orgId}/deployments/${queued[0]}`)).body.state, 'queued');
    for (const id of queued) assert.equal((await admin.http.post(`/v1/orgs/${orgId}/deployments/${id}/cancel`, {})).status, 200);
    // A rollback is a deployment too.
    const env2 = await createEnvironment(admin.http, orgId, { protected: true });
    const shipped = await ship(admin.http, f.runner, orgId, { service: svc.id, environment: env2.id });
    const rollback = await developer.http.post(`/v1/orgs/${orgId}/deployments/${shipped.deployment.id}/rollback`);
    assert.equal(rollback.status, 403);
    assert.equal(rollback.body.code, 'environment_protected');
    assert.equal((await admin.http.post(`/v1/orgs/${orgId}/deployments/${shipped.deployment.id}/rollback`)).status, 201);

    const unprotected = await admin.http.patch(`/v1/orgs/${orgId}/environments/${env.id}`, { protected: false });
    assert.equal(unprotected.status, 200);
    assert.equal((await developer.http.post(`/v1/orgs/${orgId}/deployments`, { service: svc.name, environment: env.name })).status, 201);
  });

  it('refuses deletion while a deployment is queued or in progress, or serves unless forced, then deletes its history', async () => {
    const env = await createEnvironment(admin.http, orgId);
    const svc = await createService(developer.http, orgId);
    const { runner } = f;
    const first = await deploy(developer.http, orgId, { service: svc.id, environment: env.id });
    const claimed = await runner.take({ environments: [env.name], waitSeconds: 0 });
    assert.equal(claimed.deployment.id, first.id);
    const queued = await deploy(developer.http, orgId, { service: svc.id, environment: env.id });

    const refused = await admin.http.delete(`/v1/orgs/${orgId}/environments/${env.id}`);
    assert.equal(refused.status, 409);
    assert.equal(refused.body.code, 'environment_in_use');
    assert.deepEqual(refused.body.conflicts.map((c: any) => [c.deployment, c.state]), [[first.id, 'in_progress'], [queued.id, 'queued']]);
    assert.equal((await viewer.http.get(`/v1/orgs/${orgId}/environments/${env.id}`)).status, 200);

    // force does not reach past a deployment that is queued or in progress.
    assert.equal((await admin.http.delete(`/v1/orgs/${orgId}/environments/${env.id}?force=true`)).body.code, 'environment_in_use');

    assert.equal((await runner.complete(first.id, claimed.lease.token)).status, 200);
    // One queued, one serving: the detail says which is which.
    const both = await admin.http.delete(`/v1/orgs/${orgId}/environments/${env.id}`);
    assert.deepEqual(both.body.conflicts.map((c: any) => [c.deployment, c.state]), [[first.id, 'succeeded'], [queued.id, 'queued']]);
    assert.match(both.body.detail, new RegExp(`queued or in progress \\(${queued.id} queued\\); cancel them .* Besides, services serve in the environment "${env.name}" \\(${first.id} succeeded\\).* That needs \\?force=true\\.$`));
    assert.equal((await developer.http.post(`/v1/orgs/${orgId}/deployments/${queued.id}/cancel`)).status, 200);
    // The service now serves there: deleting would stop it and its rollback targets, so only force does.
    const serving = await admin.http.delete(`/v1/orgs/${orgId}/environments/${env.id}`);
    assert.equal(serving.status, 409);
    assert.equal(serving.body.code, 'environment_in_use');
    assert.deepEqual(serving.body.conflicts, [{ deployment: first.id, state: 'succeeded' }]);
    assert.match(serving.body.detail, /force=true/);
    assert.equal((await viewer.http.get(`/v1/orgs/${orgId}/deployments/${first.id}`)).body.state, 'succeeded');
    assert.equal((await admin.http.delete(`/v1/orgs/${orgId}/environments/${env.id}?force=true`)).status, 204);
    assert.equal((await viewer.http.get(`/v1/orgs/${orgId}/deployments/${first.id}`)).status, 404);
  });

  it('deletes an environment whose deployments all finished without one serving, without force', async () => {
    const env = await createEnvironment(admin.http, orgId);
    const svc = await createService(developer.http, orgId);
    const made = await deploy(developer.http, orgId, { service: svc.id, environment: env.id });
    assert.equal((await developer.http.post(`/v1/orgs/${orgId}/deployments/${made.id}/cancel`)).status, 200);
    assert.equal((await admin.http.delete(`/v1/orgs/${orgId}/environments/${env.id}`)).status, 204);
    assert.equal((await viewer.http.get(`/v1/orgs/${orgId}/deployments/${made.id}`)).status, 404);
  });

  it('deletes an environment and one of its services at the same moment without a deadlock, each with its deployments', { skip: TEST_DB !== 'postgres' && 'SQLite runs one writer at a time' }, async () => {
    const env = await createEnvironment(admin.http, orgId);
    const svc = await createService(developer.http, orgId);
    // By id: two that succeeded, then two that failed, each with a log line. The environment's
    // deletion reaches them by id; the service's by state (failed first), then id.
    const ids: string[] = [];
    for (const outcome of ['succeeded', 'succeeded', 'failed', 'failed'] as const) {
      const made = await deploy(developer.http, orgId, { service: svc.id, environment: env.id });
      const claim = await f.runner.take({ environments: [env.name], waitSeconds: 0 });
      assert.equal((await f.runner.logs(made.id, { leaseToken: claim.lease.token, lines: [{ stream: 'stdout', line: 'a line' }] })).status, 200);
      assert.equal((await f.runner.complete(made.id, claim.lease.token, outcome, outcome === 'failed' ? 'it failed' : undefined)).status, 200);
      ids.push(made.id);
    }
    // The second one's log held, so that both deletions are under way when it is let go.
    const commit = await holding(server, (trx) => sql`select 1 from deployment_logs where deployment_id = ${ids[1]} for key share`.execute(trx));
    const envDeleted = admin.http.delete(`/v1/orgs/${orgId}/environments/${env.id}?force=true`);
    await lockWaiters(server, 1);
    const svcDeleted = admin.http.delete(`/v1/orgs/${orgId}/services/${svc.id}?force=true`);
    await lockWaiters(server, 2);
    await commit();
    const [e, s] = await Promise.all([envDeleted, svcDeleted]);
    assert.deepEqual([e.status, s.status], [204, 204], `${e.text} ${s.text}`);
    const left = await server.core.db.selectFrom('deployments').select('id').where('id', 'in', ids).execute();
    assert.deepEqual(left, []);
  });

  it('shows the active (succeeded) deployment of each service', async () => {
    const env = await createEnvironment(admin.http, orgId);
    const [api, web] = [await createService(developer.http, orgId), await createService(developer.http, orgId)];
    const release = async (svc: any) => (await ship(developer.http, f.runner, orgId, { service: svc.id, environment: env.id, revision: unique('rev') })).deployment;
    assert.deepEqual((await viewer.http.get(`/v1/orgs/${orgId}/environments/${env.id}/active`)).body, { deployments: [], nextCursor: null });
    const api1 = await release(api);
    const web1 = await release(web);
    const api2 = await release(api);

    const active = await viewer.http.get(`/v1/orgs/${orgId}/environments/${env.name}/active`);
    assert.equal(active.status, 200);
    assert.deepEqual(active.body.deployments.map((d: any) => [d.id, d.state]).sort(), [[api2.id, 'succeeded'], [web1.id, 'succeeded']].sort());
    const onlyApi = await viewer.http.get(`/v1/orgs/${orgId}/environments/${env.name}/active?service=${api.name}`);
    assert.deepEqual(onlyApi.body.deployments.map((d: any) => d.id), [api2.id]);
    assert.equal((await viewer.http.get(`/v1/orgs/${orgId}/deployments/${api1.id}`)).body.state, 'superseded');
  });
});
