// Where a secret is used: the services and environments that name it, and the live deployments
// (queued, in progress, serving) that pinned its versions, by its id; names and versions, never a value.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Actor } from '../support/harness.js';
import {
  createEnvironment, createSecret, createService, deploy, ship, startDeployFixture, type DeployFixture, type RunnerClient,
} from '../support/deployments.js';
import { assertProblem } from '../support/problems.js';

describe('secret usage', () => {
  let f: DeployFixture;
  let orgId: string;
  let admin: Actor;
  let developer: Actor;
  let viewer: Actor;
  let runner: RunnerClient;
  const VALUE = 'secret-usage-sentinel-value';

  before(async () => {
    f = await startDeployFixture();
    ({ orgId, admin, developer, viewer, runner } = f);
  });
  after(() => f.close());

  const usage = (name: string, who: Actor = viewer) => who.http.get(`/v1/orgs/${orgId}/secrets/${name}/usage`);

  it('names the services and environments that refer to it and the live deployments that pinned it, with their versions', async () => {
    const name = await createSecret(admin.http, orgId, { A: VALUE, B: VALUE });
    const other = await createSecret(admin.http, orgId, { C: 'x' });
    const whole = await createService(developer.http, orgId, { name: `a-${name}`, spec: { command: ['x'], secrets: [{ secret: name }] } });
    const keyed = await createService(developer.http, orgId, { name: `b-${name}`, spec: { command: ['x'], secrets: [{ secret: name, key: 'A', as: 'X' }, { secret: other }] } });
    await createService(developer.http, orgId, { spec: { command: ['x'], secrets: [{ secret: other }] } });
    const staging = await createEnvironment(admin.http, orgId, { secrets: [{ secret: name, key: 'B' }] });
    const production = await createEnvironment(admin.http, orgId);

    const failed = await ship(developer.http, runner, orgId, { service: keyed.id, environment: production.id }, 'failed');
    const first = await ship(developer.http, runner, orgId, { service: keyed.id, environment: production.id });
    const serving = await ship(developer.http, runner, orgId, { service: keyed.id, environment: production.id });
    assert.equal((await admin.http.put(`/v1/orgs/${orgId}/secrets/${name}`, { values: { A: VALUE, B: 'two' } })).status, 200);
    // Promoted into staging: the service's reference keeps version 1, staging's pins version 2.
    const promoted = await developer.http.post(`/v1/orgs/${orgId}/deployments/${serving.deployment.id}/promote`, { environment: staging.id });
    assert.equal(promoted.status, 201, promoted.text);
    const queued = await deploy(developer.http, orgId, { service: whole.id, environment: production.id });

    const res = await usage(name);
    assert.equal(res.status, 200, res.text);
    assert.ok(!res.text.includes(VALUE), 'never a value');
    assert.deepEqual(res.body, {
      name,
      services: [{ id: whole.id, name: whole.name, keys: null }, { id: keyed.id, name: keyed.name, keys: ['A as X'] }],
      environments: [{ id: staging.id, name: staging.name, keys: ['B'] }],
      deployments: [
        { id: queued.id, state: 'queued', service: { id: whole.id, name: whole.name }, environment: { id: production.id, name: production.name }, versions: [2] },
        { id: promoted.body.id, state: 'queued', service: { id: keyed.id, name: keyed.name }, environment: { id: staging.id, name: staging.name }, versions: [1, 2] },
        { id: serving.deployment.id, state: 'succeeded', service: { id: keyed.id, name: keyed.name }, environment: { id: production.id, name: production.name }, versions: [1] },
      ],
    });
    // Failed and superseded ones are not live: their versions matter only to a rollback.
    for (const gone of [failed.deployment.id, first.deployment.id]) assert.ok(!res.text.includes(gone), gone);
    assert.deepEqual((await usage(other)).body.services.map((s: { keys: unknown }) => s.keys), [null, null]);
    for (const id of [queued.id, promoted.body.id]) assert.equal((await developer.http.post(`/v1/orgs/${orgId}/deployments/${id}/cancel`, {})).status, 200);
  });

  it('is a 404 for a secret that does not exist or is deleted, and knows one created again under its name for another', async () => {
    assertProblem(await usage('no-such-secret'), 404, 'secret_not_found');
    const name = await createSecret(admin.http, orgId, { K: 'v' });
    const svc = await createService(developer.http, orgId, { spec: { command: ['x'], secrets: [{ secret: name }] } });
    const env = await createEnvironment(admin.http, orgId);
    await ship(developer.http, runner, orgId, { service: svc.id, environment: env.id });
    assert.equal((await admin.http.delete(`/v1/orgs/${orgId}/secrets/${name}`)).status, 204);
    assertProblem(await usage(name), 404, 'secret_not_found');
    assert.equal((await admin.http.delete(`/v1/orgs/${orgId}/secrets/${name}?permanent=true`)).status, 204);
    assert.equal((await admin.http.post(`/v1/orgs/${orgId}/secrets`, { secrets: [{ name, values: { K: 'new' } }] })).status, 201);
    const again = await usage(name);
    assert.deepEqual([again.body.services.map((s: { id: string }) => s.id), again.body.deployments], [[svc.id], []]);
  });
});
