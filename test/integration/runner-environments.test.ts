// A runner kept to environments: it is handed only their deployments (and so only their secret
// values), whatever it asks for; what it served elsewhere stops being its own; set through the API
// and the CLI, shown on the service user and in the runners list.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { runnerUrl } from '../../src/modules/runner/runner.protocol.js';
import { cliEnv, cliJson, runCli } from '../support/processes.js';
import {
  createEnvironment, createService, deploy, eventsOf, newRunner, runnerClient, startDeployFixture, unique, type DeployFixture, type RunnerClient,
} from '../support/deployments.js';
import { startSecondNode, type Actor } from '../support/harness.js';

describe('runners kept to environments', () => {
  let f: DeployFixture;
  let staging: { id: string; name: string };
  let production: { id: string; name: string };
  let service: { id: string };

  before(async () => {
    f = await startDeployFixture();
    staging = await createEnvironment(f.admin.http, f.orgId);
    production = await createEnvironment(f.admin.http, f.orgId);
    const secret = unique('prod-only');
    assert.equal((await f.developer.http.post(`/v1/orgs/${f.orgId}/secrets`, { secrets: [{ name: secret, values: { KEY: 'production-sentinel' } }] })).status, 201);
    service = await createService(f.developer.http, f.orgId, { spec: { command: ['serve'] } });
    assert.equal((await f.admin.http.patch(`/v1/orgs/${f.orgId}/environments/${production.id}`, { secrets: [{ secret, key: 'KEY', as: 'KEY' }] })).status, 200);
  });
  after(() => f.close());

  /** A runner service user made through the API, kept to `environments`, speaking the protocol. */
  async function keptRunner(environments: string[]): Promise<RunnerClient & { user: any }> {
    const made = await f.admin.http.post(`/v1/orgs/${f.orgId}/service-users`, { name: unique('kept'), role: 'runner', environments });
    assert.equal(made.status, 201, made.text);
    const token = await f.server.token(made.body);
    const actor = { ...made.body, token, http: f.server.http(token) } as Actor;
    return { ...runnerClient(actor, f.orgId), user: made.body };
  }

  it('hands a kept runner only its environments\' deployments, and refuses a claim or adoption of others (403)', async () => {
    const runner = await keptRunner([staging.name]);
    assert.deepEqual(runner.user.environments, [{ id: staging.id, name: staging.name }]);
    const inProduction = await deploy(f.developer.http, f.orgId, { service: service.id, environment: production.id });
    const inStaging = await deploy(f.developer.http, f.orgId, { service: service.id, environment: staging.id });

    // Asking for every environment, it gets staging's, though production's is older.
    const claimed = await runner.take({ waitSeconds: 0 });
    assert.equal(claimed.deployment.id, inStaging.id);
    assert.equal((await runner.claim({ waitSeconds: 0 })).status, 204);
    for (const environments of [[production.name], [staging.name, production.id]]) {
      const refused = await runner.claim({ environments, waitSeconds: 0 });
      assert.equal(refused.status, 403, refused.text);
      assert.match((refused.body as any).detail, new RegExp(`may take the deployments of ${staging.name} only, not of ${production.name}`));
    }
    const adopt = await runner.actor.http.post(runnerUrl('adopt', f.orgId), { host: 'rh_kept-adopt-1', environments: [production.name] });
    assert.equal(adopt.status, 403, adopt.text);
    // A claim or an adoption refused for its environments (403, 404) records no runner: none that
    // will never take a deployment is listed as up.
    const refusedHost = 'rh_kept-refused-1';
    for (const environments of [[production.name], [staging.name, 'no-such-environment']]) {
      assert.notEqual((await runner.claim({ environments, waitSeconds: 0, host: refusedHost })).status, 200);
      assert.notEqual((await runner.actor.http.post(runnerUrl('adopt', f.orgId), { host: refusedHost, environments })).status, 200);
    }
    assert.deepEqual((await f.admin.http.get(`/v1/orgs/${f.orgId}/runners`)).body.runners.filter((r: { host: string }) => r.host === refusedHost), []);
    assert.equal((await runner.actor.http.post(runnerUrl('adopt', f.orgId), { host: 'rh_kept-adopt-1' })).status, 200);

    // Production's waits for a runner that may take it; its secret value went nowhere else.
    const open = await f.runner.take({ environments: [production.name], waitSeconds: 0 });
    assert.equal(open.deployment.id, inProduction.id);
    assert.equal(open.run.secrets.KEY, 'production-sentinel');
    for (const c of [claimed, open]) assert.equal((await (c === claimed ? runner : f.runner).complete(c.deployment.id, c.lease.token)).status, 200);
  });

  it('stops answering for what it serves in an environment it is no longer kept to, for a runner of that environment to adopt', async () => {
    const runner = await keptRunner([staging.id, production.id]);
    const host = 'rh_kept-serving-1';
    const d = await deploy(f.developer.http, f.orgId, { service: service.id, environment: production.id });
    const claim = await runner.take({ environments: [production.name], waitSeconds: 0, host });
    assert.equal((await runner.complete(d.id, claim.lease.token)).status, 200);
    const serving = (body: unknown) => runner.actor.http.post(runnerUrl('serving', f.orgId), body);
    assert.deepEqual((await serving({ deployments: [d.id], host })).body.serving, [d.id]);
    assert.deepEqual((await serving({ deployments: [d.id] })).body.serving, [d.id]);

    const patched = await f.admin.http.patch(`/v1/orgs/${f.orgId}/service-users/${runner.user.id}`, { environments: [staging.name] });
    assert.equal(patched.status, 200, patched.text);
    assert.deepEqual(patched.body.environments, [{ id: staging.id, name: staging.name }]);
    assert.deepEqual((await serving({ deployments: [d.id], host })).body.serving, []);
    assert.deepEqual((await serving({ deployments: [d.id] })).body.serving, []);
    const [changed] = (await eventsOf(f.server, f.orgId, runner.user.id)).filter((e) => e.type === 'service_user.environments_changed');
    assert.deepEqual(changed.data, { from: [staging.id, production.id].sort(), to: [staging.id], names: [staging.name] });

    // Kept to none of what still exists: refused, rather than handed nothing for ever.
    const doomed = await createEnvironment(f.admin.http, f.orgId);
    assert.equal((await f.admin.http.patch(`/v1/orgs/${f.orgId}/service-users/${runner.user.id}`, { environments: [doomed.name] })).status, 200);
    assert.equal((await f.admin.http.delete(`/v1/orgs/${f.orgId}/environments/${doomed.id}`)).status, 204);
    const gone = await runner.claim({ waitSeconds: 0 });
    assert.equal(gone.status, 403, gone.text);
    assert.match((gone.body as any).detail, /kept to environments that no longer exist/);
    assert.deepEqual((await f.admin.http.get(`/v1/orgs/${f.orgId}/service-users/${runner.user.id}`)).body.environments, []);

    // All of them again (null), and so it answers for production's again.
    const all = await f.admin.http.patch(`/v1/orgs/${f.orgId}/service-users/${runner.user.id}`, { environments: null });
    assert.equal(all.body.environments, null);
    assert.deepEqual((await serving({ deployments: [d.id], host })).body.serving, [d.id]);
  });

  it('lets a kept runner release only what serves in its environments: one kept to staging cannot make production\'s deployments orphans', async () => {
    const host = 'rh_prod-runner-01';
    const d = await deploy(f.developer.http, f.orgId, { service: service.id, environment: production.id });
    const claim = await f.runner.take({ environments: [production.name], waitSeconds: 0, host });
    assert.equal((await f.runner.complete(d.id, claim.lease.token)).status, 200);
    assert.deepEqual((await f.runner.actor.http.post(runnerUrl('serving', f.orgId), { deployments: [d.id], host })).body.serving, [d.id]);

    const stagingOnly = await keptRunner([staging.id]);
    const released = await stagingOnly.actor.http.post(runnerUrl('release', f.orgId), { deployments: [d.id], host });
    assert.equal(released.status, 200, released.text);
    assert.deepEqual(released.body.released, []);
    // Still production's runner's: no one else can adopt it, and its report still answers it.
    const adopted = await runnerClient(await f.server.actor(f.orgId, 'runner'), f.orgId).actor.http.post(runnerUrl('adopt', f.orgId), { host: 'rh_other-runner-1', environments: [production.name] });
    assert.equal(adopted.status, 200, adopted.text);
    assert.deepEqual(adopted.body.adopted, []);
    assert.deepEqual((await f.runner.actor.http.post(runnerUrl('serving', f.orgId), { deployments: [d.id], host })).body.serving, [d.id]);
    // Its own runner may let it go.
    assert.deepEqual((await f.runner.actor.http.post(runnerUrl('release', f.orgId), { deployments: [d.id], host })).body.released, [d.id]);
  });

  it('holds a claim already waiting to a restriction made meanwhile', async () => {
    const runner = await keptRunner([staging.id, production.id]);
    const service = await createService(f.developer.http, f.orgId, { spec: { command: ['serve'] } });
    // Waiting for any environment it is kept to when it is narrowed to staging; production's then comes in.
    const waiting = runner.claim({ waitSeconds: 3 });
    await new Promise((resolve) => setTimeout(resolve, 500));
    assert.equal((await f.admin.http.patch(`/v1/orgs/${f.orgId}/service-users/${runner.user.id}`, { environments: [staging.name] })).status, 200);
    const d = await deploy(f.developer.http, f.orgId, { service: service.id, environment: production.id });
    const answer = await waiting;
    assert.equal(answer.status, 204, answer.text);
    assert.ok(!answer.text.includes('production-sentinel'));
    // Naming production while it waits: refused once it looks again.
    assert.equal((await f.admin.http.patch(`/v1/orgs/${f.orgId}/service-users/${runner.user.id}`, { environments: [staging.name, production.name] })).status, 200);
    // Waiting long enough for the change below to land however slowly: the deployment's signal wakes it.
    const named = runner.claim({ environments: [staging.name], waitSeconds: 10 });
    await new Promise((resolve) => setTimeout(resolve, 500));
    assert.equal((await f.admin.http.patch(`/v1/orgs/${f.orgId}/service-users/${runner.user.id}`, { environments: [production.name] })).status, 200);
    await deploy(f.developer.http, f.orgId, { service: service.id, environment: staging.id });
    const refused = await named;
    assert.equal(refused.status, 403, refused.text);
    // Production's is there for a runner that may take it; staging's too.
    const open = await f.runner.take({ environments: [production.name], waitSeconds: 0 });
    assert.equal(open.deployment.id, d.id);
    assert.equal((await f.runner.complete(d.id, open.lease.token)).status, 200);
    const rest = await f.runner.take({ environments: [staging.name], waitSeconds: 0 });
    assert.equal((await f.runner.complete(rest.deployment.id, rest.lease.token)).status, 200);
  });

  it('does not hand a claim retried under its Idempotency-Key again once its environment is no longer the runner\'s', async () => {
    const runner = await keptRunner([staging.id, production.id]);
    const service = await createService(f.developer.http, f.orgId, { spec: { command: ['serve'] } });
    const d = await deploy(f.developer.http, f.orgId, { service: service.id, environment: production.id });
    const keyed = { headers: { 'idempotency-key': randomUUID() } };
    const claimUrl = runnerUrl('claim', f.orgId);
    const first = await runner.actor.http.post(claimUrl, { environments: [production.name], waitSeconds: 0 }, keyed);
    assert.equal(first.status, 200, first.text);
    assert.equal(first.body.deployment.id, d.id);
    // Its answer was lost; meanwhile the runner is kept to staging.
    assert.equal((await f.admin.http.patch(`/v1/orgs/${f.orgId}/service-users/${runner.user.id}`, { environments: [staging.name] })).status, 200);
    const retry = await runner.actor.http.post(claimUrl, { environments: [production.name], waitSeconds: 0 }, keyed);
    assert.equal(retry.status, 403, retry.text);
    assert.ok(!retry.text.includes('production-sentinel'));
    // What it already runs under that lease stays its own to finish.
    assert.equal((await runner.complete(d.id, first.body.lease.token)).status, 200);
  });

  it('hands a kept runner deleted on another node nothing on this one, while this one still remembers it', async () => {
    const runner = await keptRunner([staging.name]);
    const service = await createService(f.developer.http, f.orgId, { spec: { command: ['serve'] } });
    const other = await startSecondNode(f.server);
    try {
      const there = runnerClient({ ...runner.actor, http: other.http(runner.actor.token) }, f.orgId);
      // Remembered there: it has just claimed.
      assert.equal((await there.claim({ waitSeconds: 0 })).status, 204);
      assert.equal((await f.admin.http.delete(`/v1/orgs/${f.orgId}/service-users/${runner.user.id}`)).status, 204);
      const d = await deploy(f.developer.http, f.orgId, { service: service.id, environment: production.id });
      const claimed = await there.claim({ waitSeconds: 0 });
      assert.notEqual(claimed.status, 200, claimed.text);
      assert.ok(!claimed.text.includes('production-sentinel'));
      const open = await f.runner.take({ environments: [production.name], waitSeconds: 0 });
      assert.equal(open.deployment.id, d.id);
      assert.equal((await f.runner.complete(d.id, open.lease.token)).status, 200);
    } finally {
      await other.close();
    }
  });

  it('keeps only runners to environments, and only to the organization\'s', async () => {
    const base = `/v1/orgs/${f.orgId}/service-users`;
    const developer = await f.admin.http.post(base, { name: unique('dev'), role: 'developer', environments: [staging.name] });
    assert.equal(developer.status, 400, developer.text);
    assert.deepEqual(developer.body.errors.map((e: { pointer: string }) => e.pointer), ['/environments']);
    const unknown = await f.admin.http.post(base, { name: unique('kept'), role: 'runner', environments: [staging.name, 'nowhere-at-all'] });
    assert.equal(unknown.status, 404, unknown.text);
    // Another organization's environment, by id, is not this one's.
    const otherOrg = (await f.server.createOrg()).id;
    const theirs = await createEnvironment((await f.server.actor(otherOrg, 'admin')).http, otherOrg);
    const foreign = await f.admin.http.post(base, { name: unique('kept'), role: 'runner', environments: [theirs.id] });
    assert.equal(foreign.status, 404, foreign.text);

    // A runner made a developer keeps no environments; a developer made a runner again takes all.
    const runner = await keptRunner([staging.name]);
    const demoted = await f.admin.http.patch(`${base}/${runner.user.id}`, { role: 'developer' });
    assert.equal(demoted.status, 200, demoted.text);
    assert.equal(demoted.body.environments, null);
    assert.equal((await f.admin.http.patch(`${base}/${runner.user.id}`, { role: 'runner' })).body.environments, null);
    const both = await f.admin.http.patch(`${base}/${runner.user.id}`, { role: 'viewer', environments: [staging.name] });
    assert.equal(both.status, 400, both.text);
  });

  it('shows a kept runner asking for every environment with its own in the runners list', async () => {
    const runner = await keptRunner([production.id]);
    const host = 'rh_kept-listed-1';
    assert.equal((await runner.claim({ waitSeconds: 0, host })).status, 204);
    const list = async (query: string) => (await f.viewer.http.get(`/v1/orgs/${f.orgId}/runners${query}`)).body.runners as any[];
    assert.deepEqual((await list('')).find((r) => r.host === host).environments, [{ id: production.id, name: production.name }]);
    assert.ok((await list(`?environment=${production.name}`)).some((r) => r.host === host));
    assert.equal((await list(`?environment=${staging.name}`)).some((r) => r.host === host), false);
  });

  it('is set with slipway service-user create --environment and update --environment / --all-environments', async () => {
    const env = cliEnv(f.server);
    const name = unique('cli-kept');
    const made = await cliJson(['service-user', 'create', '--org', f.orgId, '--name', name, '--role', 'runner', '--environment', `${staging.name},${production.name}`, '--json'], env);
    assert.deepEqual(made.environments.map((e: { name: string }) => e.name).sort(), [staging.name, production.name].sort());
    const shown = await runCli(['service-user', 'show', '--org', f.orgId, '--user', name], env);
    assert.match(shown.stdout, new RegExp(`environments\\s+(${staging.name} ${production.name}|${production.name} ${staging.name})`));
    const narrowed = await cliJson(['service-user', 'update', '--org', f.orgId, '--user', name, '--environment', staging.name, '--json'], env);
    assert.deepEqual(narrowed.environments, [{ id: staging.id, name: staging.name }]);
    const widened = await cliJson(['service-user', 'update', '--org', f.orgId, '--user', name, '--all-environments', '--json'], env);
    assert.equal(widened.environments, null);

    for (const [args, message] of [
      [['--environment', ''], /--environment is given but names no environment/],
      [['--environment', staging.name, '--all-environments'], /contradict each other/],
    ] as const) {
      const refused = await runCli(['service-user', 'update', '--org', f.orgId, '--user', name, ...args], env);
      assert.equal(refused.code, 2, refused.stderr);
      assert.match(refused.stderr, message);
    }
    const developer = await runCli(['service-user', 'create', '--org', f.orgId, '--name', unique('cli-dev'), '--role', 'developer', '--environment', staging.name], env);
    assert.equal(developer.code, 1, developer.stderr);
    assert.match(developer.stderr, /Only a runner is kept to environments/);
  });

  it('leaves an unkept runner every environment', async () => {
    const runner = await newRunner(f.server, f.orgId);
    const d = await deploy(f.developer.http, f.orgId, { service: service.id, environment: staging.id });
    const claim = await runner.take({ waitSeconds: 0 });
    assert.equal(claim.deployment.id, d.id);
    assert.equal((await runner.complete(d.id, claim.lease.token)).status, 200);
  });
});
