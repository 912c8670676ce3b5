// Locking an environment (a deploy freeze): while it is locked, no deployment into it is created,
// rolled back to or promoted into, whoever asks, and the refusal says why, by whom and since when.
// What is queued or running goes on and can be cancelled. Locks and unlocks are events, and on
// PostgreSQL a lock and the deployments being made into the environment wait for each other.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { sql } from 'kysely';
import { TEST_DB } from '../support/harness.js';
import {
  createEnvironment, createService, deploy, eventsOf, holding, lockWaiters, ship, useDeployFixture,
} from '../support/deployments.js';
import { assertProblem } from '../support/problems.js';

describe('environment locks', () => {
  const f = useDeployFixture();

  const lockPath = (env: { id: string }) => `/v1/orgs/${f.orgId}/environments/${env.id}/lock`;

  it('refuses every new deployment into a locked environment, saying why, until it is unlocked; what was queued goes on', async () => {
    const svc = await createService(f.developer.http, f.orgId);
    const env = await createEnvironment(f.admin.http, f.orgId);
    const staging = await createEnvironment(f.admin.http, f.orgId);
    assert.equal(env.lock, null);
    const served = await ship(f.developer.http, f.runner, f.orgId, { service: svc.id, environment: env.id, revision: 'r1' });
    const tried = await ship(f.developer.http, f.runner, f.orgId, { service: svc.id, environment: staging.id });
    const queued = await deploy(f.developer.http, f.orgId, { service: svc.id, environment: env.id });

    assertProblem(await f.developer.http.put(lockPath(env), { reason: 'mine' }), 403, 'forbidden');
    assertProblem(await f.admin.http.put(lockPath(env), {}), 400, 'invalid_request');
    assertProblem(await f.admin.http.put(lockPath(env), { reason: '' }), 400, 'invalid_request');
    assertProblem(await f.admin.http.put(lockPath(env), { reason: ' \t ' }), 400, 'invalid_request');
    assertProblem(await f.admin.http.put(lockPath(env), { reason: '\u202e\u200b' }), 400, 'invalid_request');
    const locked = await f.admin.http.put(lockPath(env), { reason: 'incident 42: hands off production' });
    assert.equal(locked.status, 200, locked.text);
    const lock = locked.body.lock;
    assert.deepEqual([lock.reason, lock.lockedBy], ['incident 42: hands off production', f.admin.id]);
    assert.ok(!Number.isNaN(Date.parse(lock.lockedAt)));
    assert.deepEqual((await f.viewer.http.get(`/v1/orgs/${f.orgId}/environments/${env.name}`)).body.lock, lock);

    // Nobody deploys into it, however: create, roll back, promote; an admin no more than a developer.
    const refusals = [
      await f.developer.http.post(`/v1/orgs/${f.orgId}/deployments`, { service: svc.id, environment: env.name }),
      await f.admin.http.post(`/v1/orgs/${f.orgId}/deployments`, { service: svc.id, environment: env.id }),
      await f.admin.http.post(`/v1/orgs/${f.orgId}/deployments/${served.deployment.id}/rollback`, {}),
      await f.admin.http.post(`/v1/orgs/${f.orgId}/deployments/${tried.deployment.id}/promote`, { environment: env.id }),
    ];
    for (const res of refusals) {
      const problem = assertProblem(res, 409, 'environment_locked');
      assert.deepEqual(problem.lock, lock);
      assert.match(String(problem.detail), /incident 42: hands off production/);
      assert.match(String(problem.detail), new RegExp(`by ${f.admin.id}`));
    }
    // Out of it, a promotion of its deployments goes on.
    const out = await f.developer.http.post(`/v1/orgs/${f.orgId}/deployments/${served.deployment.id}/promote`, { environment: staging.id });
    assert.equal(out.status, 201, out.text);
    assert.equal((await f.developer.http.post(`/v1/orgs/${f.orgId}/deployments/${out.body.id}/cancel`, {})).status, 200);

    // What was queued before the lock goes on, and may be cancelled.
    const claim = await f.runner.take({ environments: [env.id], waitSeconds: 0 });
    assert.equal(claim.deployment.id, queued.id);
    assert.equal((await f.developer.http.post(`/v1/orgs/${f.orgId}/deployments/${queued.id}/cancel`, {})).status, 200);

    // The same lock again is no change; another reason says why anew.
    assert.deepEqual((await f.admin.http.put(lockPath(env), { reason: 'incident 42: hands off production' })).body.lock, lock);
    const again = await f.admin.http.put(lockPath(env), { reason: 'incident 42: still' });
    assert.equal(again.body.lock.reason, 'incident 42: still');

    assertProblem(await f.developer.http.delete(lockPath(env)), 403, 'forbidden');
    const unlocked = await f.admin.http.delete(lockPath(env));
    assert.equal(unlocked.status, 200, unlocked.text);
    assert.equal(unlocked.body.lock, null);
    assert.equal((await f.admin.http.delete(lockPath(env))).status, 200, 'unlocking an unlocked environment changes nothing');
    const made = await deploy(f.developer.http, f.orgId, { service: svc.id, environment: env.id });
    assert.equal((await f.developer.http.post(`/v1/orgs/${f.orgId}/deployments/${made.id}/cancel`, {})).status, 200);

    const events = (await eventsOf(f.server, f.orgId, env.id)).filter((e) => e.type.startsWith('environment.'));
    assert.deepEqual(events.map((e) => [e.type, e.data.reason ?? e.data.lock?.reason]), [
      ['environment.created', undefined],
      ['environment.locked', 'incident 42: hands off production'],
      ['environment.locked', 'incident 42: still'],
      ['environment.unlocked', 'incident 42: still'],
    ]);
    assert.equal(events[2].data.replaced.reason, 'incident 42: hands off production');
  });

  it('leaves a locked environment, and what serves in it, as they are: no deletion of it, nor of a service serving there, until it is unlocked', async () => {
    const svc = await createService(f.developer.http, f.orgId);
    const env = await createEnvironment(f.admin.http, f.orgId);
    await ship(f.developer.http, f.runner, f.orgId, { service: svc.id, environment: env.id });
    assert.equal((await f.admin.http.put(lockPath(env), { reason: 'incident 43' })).status, 200);
    const byEnvironment = assertProblem(await f.admin.http.delete(`/v1/orgs/${f.orgId}/environments/${env.id}?force=true`), 409, 'environment_locked');
    assert.match(String(byEnvironment.detail), /no one may delete it until an admin or owner unlocks it/);
    // Without force too: the lock is what to lift first, not the force to give.
    assertProblem(await f.admin.http.delete(`/v1/orgs/${f.orgId}/services/${svc.id}`), 409, 'environment_locked');
    const byService = assertProblem(await f.admin.http.delete(`/v1/orgs/${f.orgId}/services/${svc.id}?force=true`), 409, 'environment_locked');
    assert.match(String(byService.detail), new RegExp(`no one may stop what serves in it \\(deleting service "${svc.name}" would\\)`));
    assert.equal((await f.viewer.http.get(`/v1/orgs/${f.orgId}/services/${svc.id}`)).status, 200);
    assert.equal((await f.viewer.http.get(`/v1/orgs/${f.orgId}/environments/${env.id}`)).status, 200);

    assert.equal((await f.admin.http.delete(lockPath(env))).status, 200);
    assert.equal((await f.admin.http.delete(`/v1/orgs/${f.orgId}/services/${svc.id}?force=true`)).status, 204);
    assert.equal((await f.admin.http.delete(`/v1/orgs/${f.orgId}/environments/${env.id}`)).status, 204);
  });

  it('answers 404 for an environment that is not there, in this organization or any', async () => {
    const env = await createEnvironment(f.admin.http, f.orgId);
    const otherOrg = (await f.server.createOrg()).id;
    const stranger = await f.server.actor(otherOrg, 'owner');
    for (const res of [
      await f.admin.http.put(`/v1/orgs/${f.orgId}/environments/no-such-env/lock`, { reason: 'x' }),
      await f.admin.http.delete(`/v1/orgs/${f.orgId}/environments/no-such-env/lock`),
      await stranger.http.put(`/v1/orgs/${otherOrg}/environments/${env.id}/lock`, { reason: 'x' }),
      await stranger.http.put(`/v1/orgs/${f.orgId}/environments/${env.id}/lock`, { reason: 'x' }),
    ]) assert.equal(res.status, 404, res.text);
    assert.equal((await f.viewer.http.get(`/v1/orgs/${f.orgId}/environments/${env.id}`)).body.lock, null);
  });

  it('documents the refusal on every route that makes a deployment into an environment', async () => {
    const paths = (await f.server.http().get('/openapi.json')).body.paths;
    for (const path of ['/v1/orgs/{orgId}/deployments', '/v1/orgs/{orgId}/deployments/{id}/rollback', '/v1/orgs/{orgId}/deployments/{id}/promote']) {
      assert.match(paths[path].post.description, /409 `environment_locked`/, path);
      assert.ok(paths[path].post.responses['409'], path);
    }
  });

  it('makes a deployment wait for a lock being taken, and refuses it once taken', { skip: TEST_DB !== 'postgres' && 'SQLite runs one writer at a time' }, async () => {
    const svc = await createService(f.developer.http, f.orgId);
    const env = await createEnvironment(f.admin.http, f.orgId);
    // A lock between its read and its commit, as the lock request makes it.
    const commit = await holding(f.server, async (trx) => {
      await sql`select 1 from environments where id = ${env.id} for update`.execute(trx);
      await sql`update environments set lock_reason = 'freeze', locked_by = null, locked_at = ${new Date().toISOString()} where id = ${env.id}`.execute(trx);
    });
    const creation = f.developer.http.post(`/v1/orgs/${f.orgId}/deployments`, { service: svc.id, environment: env.id });
    await lockWaiters(f.server, 1);
    await commit();
    assertProblem(await creation, 409, 'environment_locked');
    assert.deepEqual((await f.viewer.http.get(`/v1/orgs/${f.orgId}/deployments?environment=${env.id}`)).body.deployments, []);
  });

  it('makes a lock, and a change of protection or configuration, wait for a deployment being made', { skip: TEST_DB !== 'postgres' && 'SQLite runs one writer at a time' }, async () => {
    const env = await createEnvironment(f.admin.http, f.orgId);
    for (const change of [
      () => f.admin.http.put(lockPath(env), { reason: 'freeze' }),
      () => f.admin.http.patch(`/v1/orgs/${f.orgId}/environments/${env.id}`, { protected: true }),
      () => f.admin.http.patch(`/v1/orgs/${f.orgId}/environments/${env.id}`, { variables: { STAGE: 'frozen' } }),
    ]) {
      // A deployment between its read of the environment and its commit: made as the environment
      // was, so the change waits for it, not answering before a deployment it would have refused.
      const commit = await holding(f.server, (trx) => sql`select 1 from environments where id = ${env.id} for key share`.execute(trx));
      const changing = change();
      await lockWaiters(f.server, 1);
      await commit();
      assert.equal((await changing).status, 200);
    }
  });

  it('lets no deployment overtake a lock waiting for the environment, and lists its event after every deployment made before it', { skip: TEST_DB !== 'postgres' && 'SQLite runs one writer at a time' }, async () => {
    const svc = await createService(f.developer.http, f.orgId);
    const env = await createEnvironment(f.admin.http, f.orgId);
    const before = await deploy(f.developer.http, f.orgId, { service: svc.id, environment: env.id });
    // A deployment between its read of the environment and its commit; the lock waits for it.
    const commit = await holding(f.server, (trx) => sql`select 1 from environments where id = ${env.id} for key share`.execute(trx));
    const locking = f.admin.http.put(lockPath(env), { reason: 'freeze' });
    await lockWaiters(f.server, 1);
    // Asked for after the lock: it waits behind it (a row lock let it go first, and it was made
    // while the lock waited, then listed after the lock, as if made into a locked environment).
    const after = f.developer.http.post(`/v1/orgs/${f.orgId}/deployments`, { service: svc.id, environment: env.id });
    await lockWaiters(f.server, 2);
    await commit();
    assert.equal((await locking).status, 200);
    assertProblem(await after, 409, 'environment_locked');
    const events = (await eventsOf(f.server, f.orgId, env.id)).map((e) => e.type);
    assert.deepEqual(events, ['environment.created', 'environment.locked']);
    const deployments = (await f.viewer.http.get(`/v1/orgs/${f.orgId}/deployments?environment=${env.id}`)).body.deployments;
    assert.deepEqual(deployments.map((d: { id: string }) => d.id), [before.id]);
  });
  it('makes a service\'s deletion and a lock of an environment it serves in wait for each other', { skip: TEST_DB !== 'postgres' && 'SQLite runs one writer at a time' }, async () => {
    const svc = await createService(f.developer.http, f.orgId);
    const env = await createEnvironment(f.admin.http, f.orgId);
    const { deployment } = await ship(f.developer.http, f.runner, f.orgId, { service: svc.id, environment: env.id });
    // The deletion past its check of the environments, held up before its commit (at what it
    // deletes): a lock asked for meanwhile waits for it, and does not answer before it stops what serves there.
    const commit = await holding(f.server, (trx) => sql`select 1 from deployments where id = ${deployment.id} for update`.execute(trx));
    const deleting = f.admin.http.delete(`/v1/orgs/${f.orgId}/services/${svc.id}?force=true`);
    await lockWaiters(f.server, 1);
    const locking = f.admin.http.put(lockPath(env), { reason: 'freeze' });
    const first = await Promise.race([locking.then(() => 'the lock answered'), lockWaiters(f.server, 2).then(() => 'the lock waits')]);
    await commit();
    assert.equal(first, 'the lock waits');
    assert.equal((await deleting).status, 204);
    assert.equal((await locking).status, 200);
    assert.equal((await f.admin.http.delete(lockPath(env))).status, 200);

    // The other way round: a lock being taken, between its read and its commit, as the lock request
    // makes it; the deletion waits for it, then is refused.
    const other = await createService(f.developer.http, f.orgId);
    await ship(f.developer.http, f.runner, f.orgId, { service: other.id, environment: env.id });
    const commitLock = await holding(f.server, async (trx) => {
      await sql`select pg_advisory_xact_lock(hashtext('slipway.environment'), hashtext(${env.id}))`.execute(trx);
      await sql`update environments set lock_reason = 'freeze', locked_by = null, locked_at = ${new Date().toISOString()} where id = ${env.id}`.execute(trx);
    });
    const refused = f.admin.http.delete(`/v1/orgs/${f.orgId}/services/${other.id}?force=true`);
    await lockWaiters(f.server, 1);
    await commitLock();
    assertProblem(await refused, 409, 'environment_locked');
    assert.equal((await f.viewer.http.get(`/v1/orgs/${f.orgId}/environments/${env.id}/active?service=${other.id}`)).body.deployments.length, 1);
  });
  it('makes a developer\'s cancellation and the protection of its environment wait for each other', { skip: TEST_DB !== 'postgres' && 'SQLite runs one writer at a time' }, async () => {
    const svc = await createService(f.developer.http, f.orgId);
    const env = await createEnvironment(f.admin.http, f.orgId);
    const queued = await deploy(f.developer.http, f.orgId, { service: svc.id, environment: env.id });
    // The cancellation past its read of the environment, held up at the deployment it moves: the
    // protection asked for meanwhile waits for it, and does not answer before it.
    const commit = await holding(f.server, (trx) => sql`select 1 from deployments where id = ${queued.id} for update`.execute(trx));
    const cancelling = f.developer.http.post(`/v1/orgs/${f.orgId}/deployments/${queued.id}/cancel`, {});
    await lockWaiters(f.server, 1);
    const protecting = f.admin.http.patch(`/v1/orgs/${f.orgId}/environments/${env.id}`, { protected: true });
    const first = await Promise.race([protecting.then(() => 'the protection answered'), lockWaiters(f.server, 2).then(() => 'the protection waits')]);
    await commit();
    assert.equal(first, 'the protection waits');
    assert.equal((await cancelling).status, 200);
    assert.equal((await protecting).status, 200);

    // The other way round: the protection being made, between its read and its commit; the
    // developer's cancellation waits for it, then is refused.
    const next = await deploy(f.admin.http, f.orgId, { service: svc.id, environment: env.id });
    assert.equal((await f.admin.http.patch(`/v1/orgs/${f.orgId}/environments/${env.id}`, { protected: false })).status, 200);
    const commitProtection = await holding(f.server, async (trx) => {
      await sql`select pg_advisory_xact_lock(hashtext('slipway.environment'), hashtext(${env.id}))`.execute(trx);
      await sql`update environments set protected = 1 where id = ${env.id}`.execute(trx);
    });
    const refused = f.developer.http.post(`/v1/orgs/${f.orgId}/deployments/${next.id}/cancel`, {});
    await lockWaiters(f.server, 1);
    await commitProtection();
    assertProblem(await refused, 403, 'environment_protected');
    assert.equal((await f.viewer.http.get(`/v1/orgs/${f.orgId}/deployments/${next.id}`)).body.state, 'queued');
    assert.equal((await f.admin.http.post(`/v1/orgs/${f.orgId}/deployments/${next.id}/cancel`, {})).status, 200);
  });
});
