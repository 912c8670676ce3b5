// Where a secret is used: the services and environments that name it, and the live deployments
// (queued, in progress, serving) that pinned its versions, by its id; names and versions, never a value.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { sql } from 'kysely';
import { TEST_DB, type Actor, type HttpResult } from '../support/harness.js';
import {
  createEnvironment, createSecret, createService, deploy, holding, lockWaiters, ship, useDeployFixture,
} from '../support/deployments.js';
import { assertProblem } from '../support/problems.js';

describe('secret usage', () => {
  const f = useDeployFixture();
  const VALUE = 'secret-usage-sentinel-value';

  const usage = (name: string, who: Actor = f.viewer) => who.http.get(`/v1/orgs/${f.orgId}/secrets/${name}/usage`);

  it('names the services and environments that refer to it and the live deployments that pinned it, with their versions', async () => {
    const name = await createSecret(f.admin.http, f.orgId, { A: VALUE, B: VALUE });
    const other = await createSecret(f.admin.http, f.orgId, { C: 'x' });
    const whole = await createService(f.developer.http, f.orgId, { name: `a-${name}`, spec: { command: ['x'], secrets: [{ secret: name }] } });
    const keyed = await createService(f.developer.http, f.orgId, { name: `b-${name}`, spec: { command: ['x'], secrets: [{ secret: name, key: 'A', as: 'X' }, { secret: other }] } });
    await createService(f.developer.http, f.orgId, { spec: { command: ['x'], secrets: [{ secret: other }] } });
    const staging = await createEnvironment(f.admin.http, f.orgId, { secrets: [{ secret: name, key: 'B' }] });
    const production = await createEnvironment(f.admin.http, f.orgId);

    const failed = await ship(f.developer.http, f.runner, f.orgId, { service: keyed.id, environment: production.id }, 'failed');
    const first = await ship(f.developer.http, f.runner, f.orgId, { service: keyed.id, environment: production.id });
    const serving = await ship(f.developer.http, f.runner, f.orgId, { service: keyed.id, environment: production.id });
    assert.equal((await f.admin.http.put(`/v1/orgs/${f.orgId}/secrets/${name}`, { values: { A: VALUE, B: 'two' } })).status, 200);
    // Promoted into staging: the service's reference keeps version 1, staging's pins version 2.
    const promoted = await f.developer.http.post(`/v1/orgs/${f.orgId}/deployments/${serving.deployment.id}/promote`, { environment: staging.id });
    assert.equal(promoted.status, 201, promoted.text);
    const queued = await deploy(f.developer.http, f.orgId, { service: whole.id, environment: production.id });

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
    for (const id of [queued.id, promoted.body.id]) assert.equal((await f.developer.http.post(`/v1/orgs/${f.orgId}/deployments/${id}/cancel`, {})).status, 200);
  });

  it('is a 404 for a secret that does not exist or is deleted, and knows one created again under its name for another', async () => {
    assertProblem(await usage('no-such-secret'), 404, 'secret_not_found');
    const name = await createSecret(f.admin.http, f.orgId, { K: 'v' });
    const svc = await createService(f.developer.http, f.orgId, { spec: { command: ['x'], secrets: [{ secret: name }] } });
    const env = await createEnvironment(f.admin.http, f.orgId);
    await ship(f.developer.http, f.runner, f.orgId, { service: svc.id, environment: env.id });
    assert.equal((await f.admin.http.delete(`/v1/orgs/${f.orgId}/secrets/${name}`)).status, 204);
    assertProblem(await usage(name), 404, 'secret_not_found');
    assert.equal((await f.admin.http.delete(`/v1/orgs/${f.orgId}/secrets/${name}?permanent=true`)).status, 204);
    assert.equal((await f.admin.http.post(`/v1/orgs/${f.orgId}/secrets`, { secrets: [{ name, values: { K: 'new' } }] })).status, 201);
    const again = await usage(name);
    assert.deepEqual([again.body.services.map((s: { id: string }) => s.id), again.body.deployments], [[svc.id], []]);
  });
  it('makes a deployment and a deletion or a change of a secret it pins wait for each other', { skip: TEST_DB !== 'postgres' && 'SQLite runs one writer at a time' }, async () => {
    const name = await createSecret(f.developer.http, f.orgId, { K: 'v1' });
    const svc = await createService(f.developer.http, f.orgId, { spec: { command: ['node', 'server.js'], secrets: [{ secret: name }] } });
    const env = await createEnvironment(f.admin.http, f.orgId);
    // A deployment past its read of the secrets, held up at its insert (the service's row), and
    // `write` asked for meanwhile: which came first, then both answers.
    const deployingWhile = async (write: () => Promise<HttpResult>) => {
      const commit = await holding(f.server, (trx) => sql`select 1 from services where id = ${svc.id} for update`.execute(trx));
      const deploying = f.developer.http.post(`/v1/orgs/${f.orgId}/deployments`, { service: svc.id, environment: env.id });
      await lockWaiters(f.server, 1);
      const writing = write();
      const first = await Promise.race([writing.then(() => 'the write answered'), lockWaiters(f.server, 2).then(() => 'the write waits')]);
      await commit();
      return { first, made: await deploying, written: await writing };
    };
    // A new version asked for meanwhile waits for it, and does not answer before it is pinned as it was.
    const changed = await deployingWhile(() => f.developer.http.patch(`/v1/orgs/${f.orgId}/secrets/${name}`, { set: { K: 'v2' } }));
    assert.equal(changed.first, 'the write waits');
    assert.equal(changed.made.status, 201, changed.made.text);
    assert.equal(changed.made.body.spec.secrets[0].version, 1);
    assert.equal(changed.written.status, 200);
    assert.equal((await f.developer.http.post(`/v1/orgs/${f.orgId}/deployments/${changed.made.body.id}/cancel`, {})).status, 200);

    // The same with its deletion: once the deletion has answered, no deployment pins it.
    const deleted = await deployingWhile(() => f.developer.http.delete(`/v1/orgs/${f.orgId}/secrets/${name}`));
    assert.equal(deleted.first, 'the write waits');
    assert.equal(deleted.made.status, 201, deleted.made.text);
    assert.equal(deleted.made.body.spec.secrets[0].version, 2);
    assert.equal(deleted.written.status, 204);
    assert.equal((await f.developer.http.post(`/v1/orgs/${f.orgId}/deployments/${deleted.made.body.id}/cancel`, {})).status, 200);
    assertProblem(await f.developer.http.post(`/v1/orgs/${f.orgId}/deployments`, { service: svc.id, environment: env.id }), 422, 'unknown_secrets');
  });
  it('makes a rollback and the permanent deletion of a secret version it pins wait for each other', { skip: TEST_DB !== 'postgres' && 'SQLite runs one writer at a time' }, async () => {
    const name = await createSecret(f.developer.http, f.orgId, { K: 'v1' });
    const svc = await createService(f.developer.http, f.orgId, { spec: { command: ['node', 'server.js'], secrets: [{ secret: name }] } });
    const env = await createEnvironment(f.admin.http, f.orgId);
    const { deployment } = await ship(f.developer.http, f.runner, f.orgId, { service: svc.id, environment: env.id });
    // The rollback past its check of the pinned versions, held up at its insert (the service's row).
    const commit = await holding(f.server, (trx) => sql`select 1 from services where id = ${svc.id} for update`.execute(trx));
    const rolling = f.developer.http.post(`/v1/orgs/${f.orgId}/deployments/${deployment.id}/rollback`, {});
    await lockWaiters(f.server, 1);
    const destroying = f.admin.http.delete(`/v1/orgs/${f.orgId}/secrets/${name}?permanent=true`);
    const first = await Promise.race([destroying.then(() => 'the deletion answered'), lockWaiters(f.server, 2).then(() => 'the deletion waits')]);
    await commit();
    assert.equal(first, 'the deletion waits');
    const rollback = await rolling;
    assert.equal(rollback.status, 201, rollback.text);
    assert.equal((await destroying).status, 204);
    assert.equal((await f.developer.http.post(`/v1/orgs/${f.orgId}/deployments/${rollback.body.id}/cancel`, {})).status, 200);
    assertProblem(await f.developer.http.post(`/v1/orgs/${f.orgId}/deployments/${deployment.id}/rollback`, {}), 422, 'secret_versions_gone');
  });
});
