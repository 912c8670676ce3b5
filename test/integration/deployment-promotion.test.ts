// Promotion: a deployment that succeeded in one environment, deployed into another with what it
// took from its service (spec, service version, revision, the versions its service's secrets
// pinned, its own variables) and the target environment's configuration instead of its own.
// Refusals write nothing; the target's protection, the carried-over versions and the target's
// configuration are checked as a new deployment's are.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Actor } from '../support/harness.js';
import {
  createEnvironment, createSecret, createService, deploy, eventsOf, getDeployment, ship, useDeployFixture, unique,
} from '../support/deployments.js';
import { assertProblem } from '../support/problems.js';

describe('deployment promotion', () => {
  const f = useDeployFixture();
  const VALUE = 'promotion-sentinel-value-only-in-claims';

  const secret = (values: Record<string, string>) => createSecret(f.admin.http, f.orgId, values);
  const promote = (who: Actor, id: string, body: Record<string, unknown>, headers: Record<string, string> = {}) =>
    who.http.post(`/v1/orgs/${f.orgId}/deployments/${id}/promote`, body, { headers });
  const count = async () => (await f.server.core.db.selectFrom('deployments').select((eb) => eb.fn.countAll<string>().as('n')).where('org_id', '=', f.orgId).executeTakeFirstOrThrow()).n;

  it('carries the service\'s part over and leaves the environment\'s behind, with the target environment\'s pinned now', async () => {
    const api = await secret({ API_KEY: `v1-${VALUE}` });
    const stagingDb = await secret({ DATABASE_URL: 'postgres://staging/app' });
    const productionDb = await secret({ DATABASE_URL: `postgres://production/${VALUE}` });
    const svc = await createService(f.developer.http, f.orgId, {
      spec: { command: ['serve', 'v1'], healthCheck: { path: '/healthz' }, variables: { LOG_LEVEL: 'info', REGION: 'eu' }, secrets: [{ secret: api, key: 'API_KEY' }] },
    });
    const staging = await createEnvironment(f.admin.http, f.orgId, { variables: { LOG_LEVEL: 'debug', STAGE: 'staging' }, secrets: [{ secret: stagingDb }] });
    const production = await createEnvironment(f.admin.http, f.orgId, { variables: { STAGE: 'production' }, secrets: [{ secret: productionDb }] });
    const tried = await ship(f.developer.http, f.runner, f.orgId, { service: svc.name, environment: staging.name, revision: 'abc123', variables: { FEATURE: 'on' } });

    // What changes after the deployment was tried does not reach its promotion: the service's spec and
    // its secret. The production secret does, as it would reach any deployment into production.
    assert.equal((await f.developer.http.patch(`/v1/orgs/${f.orgId}/services/${svc.id}`, { spec: { command: ['serve', 'v2'], secrets: [{ secret: api, key: 'API_KEY' }] } })).status, 200);
    assert.equal((await f.admin.http.put(`/v1/orgs/${f.orgId}/secrets/${api}`, { values: { API_KEY: 'v2' } })).status, 200);
    assert.equal((await f.admin.http.put(`/v1/orgs/${f.orgId}/secrets/${productionDb}`, { values: { DATABASE_URL: `postgres://production/v2-${VALUE}` } })).status, 200);

    const res = await promote(f.developer, tried.deployment.id, { environment: production.name, variables: { REGION: 'us' } });
    assert.equal(res.status, 201, res.text);
    const promoted = res.body;
    assert.equal(res.headers.get('location'), `${f.server.url}/v1/orgs/${f.orgId}/deployments/${promoted.id}`);
    assert.deepEqual({
      state: promoted.state, promotedFrom: promoted.promotedFrom, revision: promoted.revision, description: promoted.description,
      service: promoted.service, environment: promoted.environment, rollbackOf: promoted.rollbackOf,
    }, {
      state: 'queued', promotedFrom: tried.deployment.id, revision: 'abc123', description: `Promotion of ${tried.deployment.id} from ${staging.name}`,
      service: { id: svc.id, name: svc.name, version: 1 }, environment: { id: production.id, name: production.name }, rollbackOf: undefined,
    });
    assert.deepEqual(promoted.spec, {
      command: ['serve', 'v1'],
      healthCheck: { path: '/healthz', timeoutSeconds: 30 },
      // The service's, production's over them, the deployment's own (carried over) and the request's over all.
      variables: { LOG_LEVEL: 'info', REGION: 'us', STAGE: 'production', FEATURE: 'on' },
      secrets: [
        { secret: api, key: 'API_KEY', secretId: tried.deployment.spec.secrets[0].secretId, version: 1 },
        { secret: productionDb, secretId: promoted.spec.secrets[1].secretId, version: 2 },
      ],
    });
    assert.ok(!res.text.includes(VALUE), 'no value in the answer');

    const claim = await f.runner.take({ environments: [production.id], waitSeconds: 0 });
    assert.equal(claim.deployment.id, promoted.id);
    assert.deepEqual(claim.run.secrets, { API_KEY: `v1-${VALUE}`, DATABASE_URL: `postgres://production/v2-${VALUE}` });
    assert.deepEqual(claim.run.variables, promoted.spec.variables);
    assert.equal((await f.runner.complete(promoted.id, claim.lease.token)).status, 200);

    const [event] = await eventsOf(f.server, f.orgId, promoted.id);
    assert.equal(event.type, 'deployment.created');
    assert.equal(event.data.promotedFrom, tried.deployment.id);
    assert.deepEqual(event.data.secretVersions.map((v: { version: number }) => v.version), [1, 2]);
    assert.ok(!JSON.stringify(event).includes(VALUE), 'no value in the event');

    // A promotion promotes on, into a third environment, with the same service part; the environment's again its own.
    const third = await createEnvironment(f.admin.http, f.orgId);
    const onward = await promote(f.developer, promoted.id, { environment: third.id, description: 'to the edge' });
    assert.equal(onward.status, 201, onward.text);
    assert.deepEqual([onward.body.description, onward.body.promotedFrom, onward.body.spec.variables, onward.body.spec.secrets.length],
      ['to the edge', promoted.id, { LOG_LEVEL: 'info', REGION: 'us', FEATURE: 'on' }, 1]);
    assert.equal((await f.developer.http.post(`/v1/orgs/${f.orgId}/deployments/${onward.body.id}/cancel`, {})).status, 200);

    // A rollback to a promotion is a rollback: the promotion's exact snapshot, not another promotion.
    const next = await ship(f.developer.http, f.runner, f.orgId, { service: svc.name, environment: production.name });
    const rolled = await f.developer.http.post(`/v1/orgs/${f.orgId}/deployments/${promoted.id}/rollback`, {});
    assert.equal(rolled.status, 201, rolled.text);
    assert.deepEqual([rolled.body.rollbackOf, rolled.body.promotedFrom, rolled.body.spec], [promoted.id, undefined, promoted.spec]);
    assert.equal((await f.developer.http.post(`/v1/orgs/${f.orgId}/deployments/${rolled.body.id}/cancel`, {})).status, 200);
    // And a deployment made from the service as it is now promotes its v2 spec.
    const later = await promote(f.developer, next.deployment.id, { environment: staging.name });
    assert.equal(later.status, 201, later.text);
    assert.deepEqual([later.body.spec.command, later.body.service.version, later.body.spec.variables],
      [['serve', 'v2'], 2, { LOG_LEVEL: 'debug', STAGE: 'staging' }]);
    assert.equal((await f.developer.http.post(`/v1/orgs/${f.orgId}/deployments/${later.body.id}/cancel`, {})).status, 200);
  });

  it('promotes only what succeeded, into another environment that exists, and writes nothing when it refuses', async () => {
    const svc = await createService(f.developer.http, f.orgId);
    const staging = await createEnvironment(f.admin.http, f.orgId);
    const production = await createEnvironment(f.admin.http, f.orgId);
    const failed = await ship(f.developer.http, f.runner, f.orgId, { service: svc.id, environment: staging.id }, 'failed');
    const queued = await deploy(f.developer.http, f.orgId, { service: svc.id, environment: staging.id });
    const before = await count();
    for (const id of [failed.deployment.id, queued.id]) {
      const problem = assertProblem(await promote(f.developer, id, { environment: production.id }), 409, 'not_promotable');
      assert.deepEqual(problem.promoteFrom, ['succeeded', 'superseded']);
    }
    assert.equal((await f.developer.http.post(`/v1/orgs/${f.orgId}/deployments/${queued.id}/cancel`, {})).status, 200);
    const good = await ship(f.developer.http, f.runner, f.orgId, { service: svc.id, environment: staging.id });
    const own = assertProblem(await promote(f.developer, good.deployment.id, { environment: staging.name }), 400, 'invalid_request');
    assert.deepEqual((own.errors as Array<{ pointer: string }>).map((e) => e.pointer), ['/environment']);
    assert.match(String(own.detail), /rollback/);
    const unknown = assertProblem(await promote(f.developer, good.deployment.id, { environment: 'no-such-env' }), 404, 'environment_not_found');
    assert.deepEqual((unknown.errors as Array<{ pointer: string }>).map((e) => e.pointer), ['/environment']);
    assertProblem(await promote(f.developer, 'dep_nothing', { environment: production.id }), 404, 'deployment_not_found');
    assertProblem(await promote(f.developer, good.deployment.id, {}), 400, 'invalid_request');
    assertProblem(await promote(f.developer, good.deployment.id, { environment: production.id, variables: { PORT: '80' } }), 422, 'reserved_variable');
    assertProblem(await promote(f.viewer, good.deployment.id, { environment: production.id }), 403, 'forbidden');

    // The target's protection counts, not the source's.
    const locked = await createEnvironment(f.admin.http, f.orgId, { protected: true });
    assertProblem(await promote(f.developer, good.deployment.id, { environment: locked.id }), 403, 'environment_protected');
    assert.equal(await count(), before + 1, 'only the deployment shipped to try them on');
    const byAdmin = await promote(f.admin, good.deployment.id, { environment: locked.id });
    assert.equal(byAdmin.status, 201, byAdmin.text);
    assert.equal((await f.admin.http.post(`/v1/orgs/${f.orgId}/deployments/${byAdmin.body.id}/cancel`, {})).status, 200);
  });

  it('checks the target environment\'s configuration against what it carries over, and refuses versions that are gone', async () => {
    const api = await secret({ API_KEY: VALUE, TOKEN: 'one' });
    const svc = await createService(f.developer.http, f.orgId, { spec: { command: ['serve'], secrets: [{ secret: api }] } });
    const staging = await createEnvironment(f.admin.http, f.orgId);
    // Production sets a variable that the service's secret exports at the version carried over.
    const clashing = await createEnvironment(f.admin.http, f.orgId, { variables: { LOG_LEVEL: 'warn' } });
    const tried = await ship(f.developer.http, f.runner, f.orgId, { service: svc.id, environment: staging.id });
    assert.equal((await f.admin.http.patch(`/v1/orgs/${f.orgId}/environments/${clashing.id}`, { variables: { TOKEN: 'mine' } })).status, 200);
    const before = await count();
    const clash = assertProblem(await promote(f.developer, tried.deployment.id, { environment: clashing.id }), 422, 'variable_conflict');
    assert.deepEqual((clash.errors as Array<{ pointer: string }>).map((e) => e.pointer), ['/environment/variables/TOKEN']);
    // The carried-over version is what counts: a key the secret has gained since is no clash.
    const other = await secret({ X: '1' });
    const fine = await createEnvironment(f.admin.http, f.orgId, { variables: { NEW_KEY: 'plain' }, secrets: [{ secret: other }] });
    assert.equal((await f.admin.http.put(`/v1/orgs/${f.orgId}/secrets/${api}`, { values: { API_KEY: 'two', TOKEN: 'two', NEW_KEY: 'two' } })).status, 200);
    const ok = await promote(f.developer, tried.deployment.id, { environment: fine.id });
    assert.equal(ok.status, 201, ok.text);
    assert.deepEqual(ok.body.spec.secrets.map((r: { version: number }) => r.version), [1, 1]);
    assert.equal((await f.developer.http.post(`/v1/orgs/${f.orgId}/deployments/${ok.body.id}/cancel`, {})).status, 200);

    // A variable the promoted deployment was made with meets one the target environment's secret exports: said so.
    const dbSecret = await secret({ DATABASE_URL: 'postgres://production' });
    const withDb = await createEnvironment(f.admin.http, f.orgId, { secrets: [{ secret: dbSecret }] });
    const overridden = await ship(f.developer.http, f.runner, f.orgId, { service: svc.id, environment: staging.id, variables: { DATABASE_URL: 'postgres://staging' } });
    const carried = assertProblem(await promote(f.developer, overridden.deployment.id, { environment: withDb.id }), 422, 'variable_conflict');
    assert.match(String(carried.detail), new RegExp(`the variables deployment ${overridden.deployment.id} was made with, which a promotion carries over`));

    // Its versions destroyed (a permanent delete), nothing can be carried over.
    assert.equal((await f.admin.http.delete(`/v1/orgs/${f.orgId}/secrets/${api}?permanent=true`)).status, 204);
    const gone = assertProblem(await promote(f.developer, tried.deployment.id, { environment: fine.id }), 422, 'secret_versions_gone');
    assert.deepEqual(gone.missing, [`${api}@1`]);
    assert.match(String(gone.detail), /cannot be promoted/);
    assert.equal(await count(), before + 2);
  });

  it('hands each reference the version it pinned when the service and the target environment name one secret at two versions', async () => {
    const shared = await secret({ API_KEY: `v1-${VALUE}`, DATABASE_URL: 'postgres://v1' });
    const svc = await createService(f.developer.http, f.orgId, { spec: { command: ['serve'], secrets: [{ secret: shared, key: 'API_KEY' }] } });
    const staging = await createEnvironment(f.admin.http, f.orgId);
    const production = await createEnvironment(f.admin.http, f.orgId, { secrets: [{ secret: shared, key: 'DATABASE_URL' }] });
    const tried = await ship(f.developer.http, f.runner, f.orgId, { service: svc.id, environment: staging.id });
    assert.equal((await f.admin.http.put(`/v1/orgs/${f.orgId}/secrets/${shared}`, { values: { API_KEY: 'v2', DATABASE_URL: `postgres://v2-${VALUE}` } })).status, 200);
    const res = await promote(f.developer, tried.deployment.id, { environment: production.id });
    assert.equal(res.status, 201, res.text);
    assert.deepEqual(res.body.spec.secrets.map((r: { key: string; version: number }) => [r.key, r.version]), [['API_KEY', 1], ['DATABASE_URL', 2]]);
    // The service's key at the version carried over, the environment's at the one pinned now.
    const claim = await f.runner.take({ environments: [production.id], waitSeconds: 0 });
    assert.equal(claim.deployment.id, res.body.id);
    assert.deepEqual(claim.run.secrets, { API_KEY: `v1-${VALUE}`, DATABASE_URL: `postgres://v2-${VALUE}` });
    assert.equal((await f.runner.complete(res.body.id, claim.lease.token)).status, 200);
  });

  it('refuses a deployment made before promotions, which did not record what was its environment\'s', async () => {
    const svc = await createService(f.developer.http, f.orgId);
    const staging = await createEnvironment(f.admin.http, f.orgId);
    const production = await createEnvironment(f.admin.http, f.orgId);
    const tried = await ship(f.developer.http, f.runner, f.orgId, { service: svc.id, environment: staging.id });
    const row = await f.server.core.db.selectFrom('deployments').select('snapshot').where('id', '=', tried.deployment.id).executeTakeFirstOrThrow();
    const { sources, ...older } = JSON.parse(row.snapshot);
    assert.deepEqual(sources, {});
    await f.server.core.db.updateTable('deployments').set({ snapshot: JSON.stringify(older) }).where('id', '=', tried.deployment.id).execute();
    const problem = assertProblem(await promote(f.developer, tried.deployment.id, { environment: production.id }), 409, 'not_promotable');
    assert.match(String(problem.detail), /earlier version of Slipway/);
    assert.equal((await getDeployment(f.viewer.http, f.orgId, tried.deployment.id)).state, 'succeeded');
  });

  it('replays a promotion retried under its Idempotency-Key: one deployment', async () => {
    const svc = await createService(f.developer.http, f.orgId);
    const staging = await createEnvironment(f.admin.http, f.orgId);
    const production = await createEnvironment(f.admin.http, f.orgId);
    const tried = await ship(f.developer.http, f.runner, f.orgId, { service: svc.id, environment: staging.id });
    const headers = { 'idempotency-key': unique('promote') };
    const answers = await Promise.all(Array.from({ length: 5 }, () => promote(f.developer, tried.deployment.id, { environment: production.id }, headers)));
    const made = answers.filter((a) => a.status === 201);
    assert.ok(made.length >= 1, answers.map((a) => a.status).join());
    assert.ok(answers.every((a) => a.status === 201 || a.status === 409), answers.map((a) => a.status).join());
    assert.equal(new Set(made.map((a) => a.body.id)).size, 1);
    const list = await f.viewer.http.get(`/v1/orgs/${f.orgId}/deployments?environment=${production.id}`);
    assert.deepEqual(list.body.deployments.map((d: { id: string }) => d.id), [made[0]!.body.id]);
  });
});
