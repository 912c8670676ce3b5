// Locking an environment (a deploy freeze): while it is locked, no deployment into it is created,
// rolled back to or promoted into, whoever asks, and the refusal says why, by whom and since when.
// What is queued or running goes on and can be cancelled. Locks and unlocks are events, and on
// PostgreSQL a lock and the deployments being made into the environment wait for each other.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { sql } from 'kysely';
import { TEST_DB, type Actor, type TestServer } from '../support/harness.js';
import {
  createEnvironment, createService, deploy, eventsOf, lockWaiters, ship, startDeployFixture, type DeployFixture, type RunnerClient,
} from '../support/deployments.js';
import { assertProblem } from '../support/problems.js';

describe('environment locks', () => {
  let f: DeployFixture;
  let server: TestServer;
  let orgId: string;
  let admin: Actor;
  let developer: Actor;
  let viewer: Actor;
  let runner: RunnerClient;

  const lockPath = (env: { id: string }) => `/v1/orgs/${orgId}/environments/${env.id}/lock`;

  before(async () => {
    f = await startDeployFixture();
    ({ server, orgId, admin, developer, viewer, runner } = f);
  });
  after(() => f.close());

  it('refuses every new deployment into a locked environment, saying why, until it is unlocked; what was queued goes on', async () => {
    const svc = await createService(developer.http, orgId);
    const env = await createEnvironment(admin.http, orgId);
    const staging = await createEnvironment(admin.http, orgId);
    assert.equal(env.lock, null);
    const served = await ship(developer.http, runner, orgId, { service: svc.id, environment: env.id, revision: 'r1' });
    const tried = await ship(developer.http, runner, orgId, { service: svc.id, environment: staging.id });
    const queued = await deploy(developer.http, orgId, { service: svc.id, environment: env.id });

    assertProblem(await developer.http.put(lockPath(env), { reason: 'mine' }), 403, 'forbidden');
    assertProblem(await admin.http.put(lockPath(env), {}), 400, 'invalid_request');
    assertProblem(await admin.http.put(lockPath(env), { reason: '' }), 400, 'invalid_request');
    assertProblem(await admin.http.put(lockPath(env), { reason: ' \t ' }), 400, 'invalid_request');
    const locked = await admin.http.put(lockPath(env), { reason: 'incident 42: hands off production' });
    assert.equal(locked.status, 200, locked.text);
    const lock = locked.body.lock;
    assert.deepEqual([lock.reason, lock.lockedBy], ['incident 42: hands off production', admin.id]);
    assert.ok(!Number.isNaN(Date.parse(lock.lockedAt)));
    assert.deepEqual((await viewer.http.get(`/v1/orgs/${orgId}/environments/${env.name}`)).body.lock, lock);

    // Nobody deploys into it, however: create, roll back, promote; an admin no more than a developer.
    const refusals = [
      await developer.http.post(`/v1/orgs/${orgId}/deployments`, { service: svc.id, environment: env.name }),
      await admin.http.post(`/v1/orgs/${orgId}/deployments`, { service: svc.id, environment: env.id }),
      await admin.http.post(`/v1/orgs/${orgId}/deployments/${served.deployment.id}/rollback`, {}),
      await admin.http.post(`/v1/orgs/${orgId}/deployments/${tried.deployment.id}/promote`, { environment: env.id }),
    ];
    for (const res of refusals) {
      const problem = assertProblem(res, 409, 'environment_locked');
      assert.deepEqual(problem.lock, lock);
      assert.match(String(problem.detail), /incident 42: hands off production/);
      assert.match(String(problem.detail), new RegExp(`by ${admin.id}`));
    }
    // Out of it, a promotion of its deployments goes on.
    const out = await developer.http.post(`/v1/orgs/${orgId}/deployments/${served.deployment.id}/promote`, { environment: staging.id });
    assert.equal(out.status, 201, out.text);
    assert.equal((await developer.http.post(`/v1/orgs/${orgId}/deployments/${out.body.id}/cancel`, {})).status, 200);

    // What was queued before the lock goes on, and may be cancelled.
    const claim = await runner.take({ environments: [env.id], waitSeconds: 0 });
    assert.equal(claim.deployment.id, queued.id);
    assert.equal((await developer.http.post(`/v1/orgs/${orgId}/deployments/${queued.id}/cancel`, {})).status, 200);

    // The same lock again is no change; another reason says why anew.
    assert.deepEqual((await admin.http.put(lockPath(env), { reason: 'incident 42: hands off production' })).body.lock, lock);
    const again = await admin.http.put(lockPath(env), { reason: 'incident 42: still' });
    assert.equal(again.body.lock.reason, 'incident 42: still');

    assertProblem(await developer.http.delete(lockPath(env)), 403, 'forbidden');
    const unlocked = await admin.http.delete(lockPath(env));
    assert.equal(unlocked.status, 200, unlocked.text);
    assert.equal(unlocked.body.lock, null);
    assert.equal((await admin.http.delete(lockPath(env))).status, 200, 'unlocking an unlocked environment changes nothing');
    const made = await deploy(developer.http, orgId, { service: svc.id, environment: env.id });
    assert.equal((await developer.http.post(`/v1/orgs/${orgId}/deployments/${made.id}/cancel`, {})).status, 200);

    const events = (await eventsOf(server, orgId, env.id)).filter((e) => e.type.startsWith('environment.'));
    assert.deepEqual(events.map((e) => [e.type, e.data.reason ?? e.data.lock?.reason]), [
      ['environment.created', undefined],
      ['environment.locked', 'incident 42: hands off production'],
      ['environment.locked', 'incident 42: still'],
      ['environment.unlocked', 'incident 42: still'],
    ]);
    assert.equal(events[2].data.replaced.reason, 'incident 42: hands off production');
  });

  it('answers 404 for an environment that is not there, in this organization or any', async () => {
    const env = await createEnvironment(admin.http, orgId);
    const otherOrg = (await server.createOrg()).id;
    const stranger = await server.actor(otherOrg, 'owner');
    for (const res of [
      await admin.http.put(`/v1/orgs/${orgId}/environments/no-such-env/lock`, { reason: 'x' }),
      await admin.http.delete(`/v1/orgs/${orgId}/environments/no-such-env/lock`),
      await stranger.http.put(`/v1/orgs/${otherOrg}/environments/${env.id}/lock`, { reason: 'x' }),
      await stranger.http.put(`/v1/orgs/${orgId}/environments/${env.id}/lock`, { reason: 'x' }),
    ]) assert.equal(res.status, 404, res.text);
    assert.equal((await viewer.http.get(`/v1/orgs/${orgId}/environments/${env.id}`)).body.lock, null);
  });


  it('documents the refusal on every route that makes a deployment into an environment', async () => {
    const paths = (await server.http().get('/openapi.json')).body.paths;
    for (const path of ['/v1/orgs/{orgId}/deployments', '/v1/orgs/{orgId}/deployments/{id}/rollback', '/v1/orgs/{orgId}/deployments/{id}/promote']) {
      assert.match(paths[path].post.description, /409 `environment_locked`/, path);
      assert.ok(paths[path].post.responses['409'], path);
    }
  });

  /** Runs `hold` in a transaction of its own, committed when the returned function is called. */
  async function holding(hold: (trx: typeof server.core.db) => Promise<unknown>): Promise<() => Promise<void>> {
    let release!: () => void;
    const released = new Promise<void>((resolve) => { release = resolve; });
    let held!: () => void;
    const taken = new Promise<void>((resolve) => { held = resolve; });
    const holder = server.core.db.transaction().execute(async (trx) => {
      await hold(trx);
      held();
      await released;
    });
    await taken;
    return async () => { release(); await holder; };
  }

  it('makes a deployment wait for a lock being taken, and refuses it once taken', { skip: TEST_DB !== 'postgres' && 'SQLite runs one writer at a time' }, async () => {
    const svc = await createService(developer.http, orgId);
    const env = await createEnvironment(admin.http, orgId);
    // A lock between its read and its commit, as the lock request makes it.
    const commit = await holding(async (trx) => {
      await sql`select 1 from environments where id = ${env.id} for update`.execute(trx);
      await sql`update environments set lock_reason = 'freeze', locked_by = null, locked_at = ${new Date().toISOString()} where id = ${env.id}`.execute(trx);
    });
    const creation = developer.http.post(`/v1/orgs/${orgId}/deployments`, { service: svc.id, environment: env.id });
    await lockWaiters(server, 1);
    await commit();
    assertProblem(await creation, 409, 'environment_locked');
    assert.deepEqual((await viewer.http.get(`/v1/orgs/${orgId}/deployments?environment=${env.id}`)).body.deployments, []);
  });

  it('makes a lock wait for a deployment being made, which it then does not refuse', { skip: TEST_DB !== 'postgres' && 'SQLite runs one writer at a time' }, async () => {
    const svc = await createService(developer.http, orgId);
    const env = await createEnvironment(admin.http, orgId);
    // A deployment between its read of the environment and its commit.
    const commit = await holding((trx) => sql`select 1 from environments where id = ${env.id} for key share`.execute(trx));
    const locking = admin.http.put(lockPath(env), { reason: 'freeze' });
    await lockWaiters(server, 1);
    await commit();
    assert.equal((await locking).status, 200);
  });

  it('lets an organization\'s deletion and a deployment, a lock or a change of an environment or a service being made wait for each other without a deadlock', { skip: TEST_DB !== 'postgres' && 'SQLite runs one writer at a time' }, async () => {
    for (const change of ['deployment', 'lock', 'environment', 'service', 'environment-delete'] as const) {
      const org = await server.createOrg();
      const owner = await server.actor(org.id, 'owner');
      const svc = await createService(owner.http, org.id);
      const env = await createEnvironment(owner.http, org.id);
      // The deletion held after it has taken the organization's row and before it deletes the
      // environment; the change sent then reads the environment, and waits for the organization.
      const commit = await holding((trx) => sql`select 1 from services where id = ${svc.id} for key share`.execute(trx));
      const deletion = server.owner.http.delete(`/v1/orgs/${org.id}`);
      await lockWaiters(server, 1);
      const made = {
        deployment: () => owner.http.post(`/v1/orgs/${org.id}/deployments`, { service: svc.id, environment: env.id }),
        lock: () => owner.http.put(`/v1/orgs/${org.id}/environments/${env.id}/lock`, { reason: 'freeze' }),
        environment: () => owner.http.patch(`/v1/orgs/${org.id}/environments/${env.id}`, { description: 'changed' }),
        service: () => owner.http.patch(`/v1/orgs/${org.id}/services/${svc.id}`, { description: 'changed' }),
        'environment-delete': () => owner.http.delete(`/v1/orgs/${org.id}/environments/${env.id}`),
      }[change]();
      await lockWaiters(server, 2);
      await commit();
      const [deleted, answered] = await Promise.all([deletion, made]);
      assert.equal(deleted.status, 204, deleted.text);
      // Found gone (its organization, or what it names), not stopped as one side of a deadlock.
      assert.ok([401, 404].includes(answered.status), `${change}: ${answered.status} ${answered.text}`);
    }
  });
});
