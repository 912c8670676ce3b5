// Two `slipway runner` processes racing for 100 queued deployments: each deployment is claimed
// exactly once and completed exactly once. The deployments go to 10 (service, environment) pairs,
// ten each, so every success replaces the previous process of its pair and only a few processes
// live at a time.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createEnvironment, createService, deploy, eventually, startDeployFixture, type DeployFixture } from '../support/deployments.js';
import { alive, allEvents, servedBy, serviceSpec, startRunner } from '../support/runner-agent.js';

describe('slipway runners racing', () => {
  let f: DeployFixture;

  before(async () => {
    f = await startDeployFixture();
  });
  after(() => f.close());

  it('claims each of 100 queued deployments exactly once between two runners, and completes each once', async () => {
    const { server, orgId, admin, developer } = f;
    const envs = [await createEnvironment(admin.http, orgId), await createEnvironment(admin.http, orgId)];
    const svcs = [];
    for (let i = 0; i < 5; i++) svcs.push(await createService(developer.http, orgId, { spec: serviceSpec() }));
    const pairs = svcs.flatMap((svc) => envs.map((env) => ({ svc, env, ids: [] as string[] })));
    for (let round = 0; round < 10; round++) {
      for (const pair of pairs) pair.ids.push((await deploy(developer.http, orgId, { service: pair.svc.id, environment: pair.env.id, revision: `r${round}` })).id);
    }
    const all = new Set(pairs.flatMap((p) => p.ids));
    assert.equal(all.size, 100);

    const runners = [await startRunner(server, orgId), await startRunner(server, orgId, { via: 'env' })];
    const finished = await eventually('all 100 deployments to finish', async () => {
      const res = await developer.http.get(`/v1/orgs/${orgId}/deployments?state=succeeded&state=superseded&state=failed&limit=200`);
      return res.body.deployments.length === 100 ? res.body.deployments : undefined;
    }, 240_000);

    const changes = await allEvents(server, orgId, 'deployment.state_changed');
    const claims = changes.filter((e) => e.data.to === 'in_progress');
    assert.equal(claims.length, 100);
    assert.deepEqual(new Set(claims.map((e) => e.subject.id)), all);
    const runnerIds = new Set(runners.map((r) => r.actor.id));
    assert.ok(claims.every((e) => runnerIds.has(e.data.runner) && e.data.attempt === 1));
    const completions = changes.filter((e) => e.data.from === 'in_progress');
    const failures = completions.filter((e) => e.data.to !== 'succeeded').map((e) => ({ id: e.subject.id, ...e.data }));
    assert.deepEqual(completions.map((e) => e.data.to), Array(100).fill('succeeded'), JSON.stringify(failures));
    assert.deepEqual(new Set(completions.map((e) => e.subject.id)), all);

    // In each pair the last deployment serves; the nine before it were superseded in turn.
    const stateOf = new Map<string, string>(finished.map((d: any) => [d.id, d.state]));
    const serving = [];
    for (const pair of pairs) {
      assert.deepEqual(pair.ids.map((id) => stateOf.get(id)), [...Array(9).fill('superseded'), 'succeeded']);
      serving.push(await servedBy(developer.http, orgId, pair.ids.at(-1)!));
    }
    assert.ok(serving.every((s) => alive(s.pid)));
    for (const r of runners) assert.equal(await r.stop(), 0);
    assert.deepEqual(serving.filter((s) => alive(s.pid)), [], 'the runners stopped their services');
  });
});
