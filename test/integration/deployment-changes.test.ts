// What a deployment changes: its frozen spec beside the one it replaced (the last of its service and
// environment that succeeded before it) or beside another deployment; run fields, plain variables
// with their values, secret references by pinned version, never a secret's value.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  createEnvironment, createSecret, createService, ship, useDeployFixture,
} from '../support/deployments.js';
import { assertProblem } from '../support/problems.js';

describe('deployment changes', () => {
  const f = useDeployFixture();
  const VALUE = 'deployment-changes-sentinel';

  const changes = (id: string, against?: string) => f.viewer.http.get(`/v1/orgs/${f.orgId}/deployments/${id}/changes${against !== undefined ? `?against=${against}` : ''}`);

  it('compares a deployment with the one it replaced: revision, run fields, variables and pinned versions', async () => {
    const api = await createSecret(f.admin.http, f.orgId, { KEY: `${VALUE}-1` });
    const svc = await createService(f.developer.http, f.orgId, {
      spec: { command: ['serve', 'v1'], variables: { LOG_LEVEL: 'info', OLD: 'x' }, secrets: [{ secret: api, key: 'KEY' }] },
    });
    const env = await createEnvironment(f.admin.http, f.orgId);
    const first = await ship(f.developer.http, f.runner, f.orgId, { service: svc.id, environment: env.id, revision: 'r1' });

    const initial = await changes(first.deployment.id);
    assert.equal(initial.status, 200, initial.text);
    assert.deepEqual(initial.body, {
      deployment: first.deployment.id, against: null, revision: { from: null, to: 'r1' },
      spec: [{ field: 'command', change: 'added', to: ['serve', 'v1'] }],
      variables: [{ name: 'LOG_LEVEL', change: 'added', to: 'info' }, { name: 'OLD', change: 'added', to: 'x' }],
      secrets: [{ secret: api, key: 'KEY', change: 'added', to: 1 }],
    });

    assert.equal((await f.admin.http.put(`/v1/orgs/${f.orgId}/secrets/${api}`, { values: { KEY: `${VALUE}-2` } })).status, 200);
    assert.equal((await f.developer.http.patch(`/v1/orgs/${f.orgId}/services/${svc.id}`, {
      spec: { command: ['serve', 'v2'], healthCheck: { path: '/healthz' }, variables: { LOG_LEVEL: 'debug', NEW: 'y' }, secrets: [{ secret: api, key: 'KEY' }] },
    })).status, 200);
    const second = await ship(f.developer.http, f.runner, f.orgId, { service: svc.id, environment: env.id, revision: 'r2' });
    // A failed one in between replaced nothing: the next is compared with the one that succeeded.
    await ship(f.developer.http, f.runner, f.orgId, { service: svc.id, environment: env.id, revision: 'broken' }, 'failed');
    const third = await ship(f.developer.http, f.runner, f.orgId, { service: svc.id, environment: env.id, revision: 'r2' });

    const res = await changes(second.deployment.id);
    assert.ok(!res.text.includes(VALUE), 'never a secret value');
    assert.deepEqual(res.body, {
      deployment: second.deployment.id,
      against: { id: first.deployment.id, state: 'superseded', revision: 'r1', environment: { id: env.id, name: env.name } },
      revision: { from: 'r1', to: 'r2' },
      spec: [
        { field: 'command', change: 'changed', from: ['serve', 'v1'], to: ['serve', 'v2'] },
        { field: 'healthCheck', change: 'added', to: { path: '/healthz', timeoutSeconds: 30 } },
      ],
      variables: [
        { name: 'LOG_LEVEL', change: 'changed', from: 'info', to: 'debug' },
        { name: 'NEW', change: 'added', to: 'y' },
        { name: 'OLD', change: 'removed', from: 'x' },
      ],
      secrets: [{ secret: api, key: 'KEY', change: 'changed', from: 1, to: 2 }],
    });
    const unchanged = await changes(third.deployment.id);
    assert.deepEqual(unchanged.body, {
      deployment: third.deployment.id,
      against: { id: second.deployment.id, state: 'superseded', revision: 'r2', environment: { id: env.id, name: env.name } },
      revision: null, spec: [], variables: [], secrets: [],
    });
  });

  it('compares with a deployment named in `against`, such as what serves in the next environment', async () => {
    const db = await createSecret(f.admin.http, f.orgId, { URL: 'postgres://staging' });
    const svc = await createService(f.developer.http, f.orgId, { spec: { command: ['serve'] } });
    const staging = await createEnvironment(f.admin.http, f.orgId, { variables: { STAGE: 'staging' }, secrets: [{ secret: db }] });
    const production = await createEnvironment(f.admin.http, f.orgId, { variables: { STAGE: 'production' } });
    const inProduction = await ship(f.developer.http, f.runner, f.orgId, { service: svc.id, environment: production.id, revision: 'r1' });
    const inStaging = await ship(f.developer.http, f.runner, f.orgId, { service: svc.id, environment: staging.id, revision: 'r2' });

    const res = await changes(inStaging.deployment.id, inProduction.deployment.id);
    assert.equal(res.status, 200, res.text);
    assert.deepEqual([res.body.against.environment.name, res.body.revision, res.body.variables, res.body.secrets], [
      production.name, { from: 'r1', to: 'r2' },
      [{ name: 'STAGE', change: 'changed', from: 'production', to: 'staging' }],
      [{ secret: db, change: 'added', to: 1 }],
    ]);
    assertProblem(await changes(inStaging.deployment.id, 'dep_nothing'), 404, 'deployment_not_found');
    // Another organization's deployment is not there for this one, whichever way it is named.
    const otherOrg = (await f.server.createOrg()).id;
    const stranger = await f.server.actor(otherOrg, 'owner');
    const svc2 = await createService(stranger.http, otherOrg);
    const env2 = await createEnvironment(stranger.http, otherOrg);
    const theirs = await stranger.http.post(`/v1/orgs/${otherOrg}/deployments`, { service: svc2.id, environment: env2.id });
    assert.equal(theirs.status, 201, theirs.text);
    assertProblem(await changes(inStaging.deployment.id, theirs.body.id), 404, 'deployment_not_found');
    assert.equal((await stranger.http.get(`/v1/orgs/${otherOrg}/deployments/${inStaging.deployment.id}/changes`)).status, 404);
  });
  it('keeps apart two references alike that a promotion pinned at two versions of one secret', async () => {
    // Version 1 holds A, version 2 only B: the service's whole reference, carried over at 1, and the
    // environment's, pinned at 2, export different keys and so go together.
    const s = await createSecret(f.admin.http, f.orgId, { A: `${VALUE}-a` });
    const svc = await createService(f.developer.http, f.orgId, { spec: { command: ['serve'], secrets: [{ secret: s }] } });
    const staging = await createEnvironment(f.admin.http, f.orgId);
    const inStaging = await ship(f.developer.http, f.runner, f.orgId, { service: svc.id, environment: staging.id });
    assert.equal((await f.admin.http.put(`/v1/orgs/${f.orgId}/secrets/${s}`, { values: { B: `${VALUE}-b` } })).status, 200);
    const production = await createEnvironment(f.admin.http, f.orgId, { secrets: [{ secret: s }] });
    const promoted = await f.developer.http.post(`/v1/orgs/${f.orgId}/deployments/${inStaging.deployment.id}/promote`, { environment: production.id });
    assert.equal(promoted.status, 201, promoted.text);
    assert.deepEqual(promoted.body.spec.secrets.map((r: { version: number }) => r.version), [1, 2]);

    const first = await changes(promoted.body.id);
    assert.ok(!first.text.includes(VALUE), 'never a secret value');
    assert.deepEqual(first.body.secrets, [{ secret: s, change: 'added', to: 1 }, { secret: s, change: 'added', to: 2 }]);
    // Beside the staging one: the service's reference kept its version, the environment's is new.
    assert.deepEqual((await changes(promoted.body.id, inStaging.deployment.id)).body.secrets, [{ secret: s, change: 'added', to: 2 }]);
    assert.deepEqual((await changes(inStaging.deployment.id, promoted.body.id)).body.secrets, [{ secret: s, change: 'removed', from: 2 }]);
    assert.equal((await f.developer.http.post(`/v1/orgs/${f.orgId}/deployments/${promoted.body.id}/cancel`, {})).status, 200);
  });
});
