// A runner that stops answering in the middle of a deployment (SIGSTOP: frozen, connections open)
// loses its lease; the deployment is re-queued and completed exactly once by another runner; and
// when the frozen runner wakes up, it finds by its own clock that its lease ran out, stops the
// process it had started, leaving the other runner's in place, and the server refuses its late
// calls. A deployment cancelled while it starts has its process stopped too. (A short lease, so a
// heartbeat comes every second: 4 s, so that one may land up to 3 s late on a loaded machine
// without the lease of a runner at work running out.)
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Actor, TestServer } from '../support/harness.js';
import { createEnvironment, createService, deploy, eventsOf, eventually, getDeployment, newRunner, startDeployFixture, type DeployFixture } from '../support/deployments.js';
import { alive, ask, deploymentLog, gateFile, servedBy, serviceSpec, settled, startedPids, startRunner } from '../support/runner-agent.js';

describe('slipway runner and its lease', () => {
  let f: DeployFixture;
  let server: TestServer;
  let orgId: string;
  let admin: Actor;
  let developer: Actor;

  before(async () => {
    f = await startDeployFixture({ env: { SLIPWAY_RUNNER_LEASE_SECONDS: '4' } });
    ({ server, orgId, admin, developer } = f);
  });
  after(() => f.close());

  it('re-queues the deployment of a frozen runner, another completes it once, and the late runner stops its process and is refused', async () => {
    const env = await createEnvironment(admin.http, orgId);
    // Unhealthy until the gate file exists: the first runner is frozen while it waits for health.
    const gate = gateFile();
    const svc = await createService(developer.http, orgId, { spec: serviceSpec({ variables: { HEALTH_GATE: gate } }) });
    // One deployment at a time: no claim of its own is left waiting while it is frozen.
    const frozen = await startRunner(server, orgId, { environments: [env.name], concurrency: 1 });

    const d = await deploy(developer.http, orgId, { service: svc.id, environment: env.id });
    const [firstPid] = await eventually('the first attempt to start its process', async () => {
      const pids = await startedPids(developer.http, orgId, d.id, 1);
      return pids.length > 0 ? pids : undefined;
    });
    assert.equal((await getDeployment(developer.http, orgId, d.id)).lease?.runner, frozen.actor.id);
    frozen.proc.child.kill('SIGSTOP');

    const requeued = await eventually('the lease to expire', async () => {
      const now = await getDeployment(developer.http, orgId, d.id);
      return now.state === 'queued' ? now : undefined;
    });
    assert.equal(requeued.attempt, 2);
    // Not claimed again yet: the attempt has no start.
    assert.equal(requeued.startedAt, undefined);

    const rescuer = await startRunner(server, orgId, { environments: [env.name], via: 'env' });
    fs.writeFileSync(gate, '');
    const done = await settled(developer.http, orgId, d.id);
    assert.equal(done.state, 'succeeded');
    assert.equal(done.attempt, 2);
    const serving = await servedBy(developer.http, orgId, d.id);
    assert.notEqual(serving.pid, firstPid);

    frozen.proc.child.kill('SIGCONT');
    // Its own clock says at once that a whole lease passed without a renewal; giving the deployment back is refused.
    const stopped = await frozen.proc.waitForLog((l) => l.msg !== undefined && String(l.msg).startsWith('stopped working on the deployment'), 'that it stopped working on the deployment');
    assert.equal(stopped.deployment, d.id);
    assert.match(String(stopped.msg), /^stopped working on the deployment: no renewal of its lease got through in time to keep it \(a lease of 4 s\)/);
    const refused = await frozen.proc.waitForLog((l) => l.deployment === d.id && String(l.msg).startsWith('the deployment was no longer this runner\'s to give back'), 'that giving it back was refused');
    assert.equal(refused.code, 'lease_lost');
    await eventually('the late runner to stop its process', async () => (alive(firstPid!) ? undefined : true));

    // Completed once, by the second attempt; nothing of the late runner's after its lease ran out.
    const moves = (await eventsOf(server, orgId, d.id)).filter((e) => e.type === 'deployment.state_changed').map((e) => `${e.data.from}→${e.data.to}@${e.data.attempt}`);
    assert.deepEqual(moves, ['queued→in_progress@1', 'in_progress→queued@2', 'queued→in_progress@2', 'in_progress→succeeded@2']);
    const log = await deploymentLog(developer.http, orgId, d.id);
    assert.ok(!log.some((l) => l.attempt === 1 && l.line.startsWith('healthy: ')), JSON.stringify(log));
    // The log says where attempt 1 ended and why, before attempt 2's lines.
    const ended = log.findIndex((l) => l.attempt === 1 && l.stream === 'runner' && l.line === 'slipway: The lease of attempt 1 expired without a heartbeat; re-queued.');
    assert.ok(ended >= 0 && log.slice(ended + 1).every((l) => l.attempt === 2), JSON.stringify(log));
    assert.equal((await getDeployment(developer.http, orgId, d.id)).state, 'succeeded');
    assert.deepEqual(await ask(serving.port), { pid: serving.pid, greeting: null, apiKey: null, revision: null });

    // The late runner goes on: it claims and carries out the next deployment of its environment.
    assert.equal(await rescuer.stop(), 0);
    assert.equal(alive(serving.pid), false);
    const next = await deploy(developer.http, orgId, { service: svc.id, environment: env.id });
    assert.equal((await settled(developer.http, orgId, next.id)).state, 'succeeded');
    const claims = (await eventsOf(server, orgId, next.id)).filter((e) => e.type === 'deployment.state_changed' && e.data.to === 'in_progress');
    assert.deepEqual(claims.map((e) => [e.data.attempt, e.data.runner]), [[1, frozen.actor.id]]);
    assert.equal(await frozen.stop(), 0);
  });

  it('does not hand a re-queued deployment back to the frozen runner whose claim still waits', async () => {
    const env = await createEnvironment(admin.http, orgId);
    const gate = gateFile();
    const svc = await createService(developer.http, orgId, { spec: serviceSpec({ variables: { HEALTH_GATE: gate } }) });
    // Room for more: a claim of its own waits on the server while it is frozen.
    const frozen = await startRunner(server, orgId, { environments: [env.name], concurrency: 4 });
    const d = await deploy(developer.http, orgId, { service: svc.id, environment: env.id });
    await eventually('the first attempt to start its process', async () => ((await startedPids(developer.http, orgId, d.id, 1)).length > 0 ? true : undefined));
    frozen.proc.child.kill('SIGSTOP');
    try {
      await eventually('the lease to expire', async () => ((await getDeployment(developer.http, orgId, d.id)).attempt === 2 ? true : undefined));
      // The frozen runner's waiting claim would be answered at once: the deployment stays queued for another.
      await new Promise((resolve) => setTimeout(resolve, 1500));
      assert.equal((await getDeployment(developer.http, orgId, d.id)).state, 'queued');
      const rescuer = await startRunner(server, orgId, { environments: [env.name], via: 'env' });
      fs.writeFileSync(gate, '');
      const done = await settled(developer.http, orgId, d.id);
      assert.deepEqual([done.state, done.attempt], ['succeeded', 2]);
      const claims = (await eventsOf(server, orgId, d.id)).filter((e) => e.type === 'deployment.state_changed' && e.data.to === 'in_progress');
      assert.deepEqual(claims.map((e) => [e.data.attempt, e.data.runner]), [[1, frozen.actor.id], [2, rescuer.actor.id]]);
      await rescuer.stop();
    } finally {
      frozen.proc.child.kill('SIGCONT');
    }
    assert.equal(await frozen.stop(), 0);
  });

  it('gives back, when stopped with SIGTERM, the deployment it is still carrying out: queued at once as the next attempt, with why', async () => {
    // Back in the queue by the time the runner has exited, and its reason says why: given back, not expired.
    const env = await createEnvironment(admin.http, orgId);
    const gate = gateFile();
    const svc = await createService(developer.http, orgId, { spec: serviceSpec({ variables: { HEALTH_GATE: gate } }) });
    const stopping = await startRunner(server, orgId, { environments: [env.name], concurrency: 1 });
    const d = await deploy(developer.http, orgId, { service: svc.id, environment: env.id });
    const [pid] = await eventually('the first attempt to start its process', async () => {
      const pids = await startedPids(developer.http, orgId, d.id, 1);
      return pids.length > 0 ? pids : undefined;
    });

    assert.equal(await stopping.stop(), 0);
    assert.equal(alive(pid!), false, 'what it started for the deployment stopped with it');
    const back = await getDeployment(developer.http, orgId, d.id);
    assert.deepEqual([back.state, back.attempt, back.reason], ['queued', 2, 'Attempt 1 was given back by its runner: the runner stopped before the deployment finished; re-queued.']);
    const log = await deploymentLog(developer.http, orgId, d.id);
    assert.deepEqual(log.at(-1), { ...log.at(-1)!, attempt: 1, stream: 'runner', line: 'the runner is stopping: attempt 1 ends here, and the deployment is given back (queued again for its next attempt, unless this was its last)' });
    const said = stopping.proc.logs().find((l) => l.deployment === d.id && String(l.msg).startsWith('gave the deployment back'));
    assert.equal(said?.state, 'queued');

    // The next runner takes it as attempt 2 and carries it out.
    const next = await startRunner(server, orgId, { environments: [env.name] });
    fs.writeFileSync(gate, '');
    const done = await settled(developer.http, orgId, d.id);
    assert.deepEqual([done.state, done.attempt], ['succeeded', 2]);
    const claims = (await eventsOf(server, orgId, d.id)).filter((e) => e.type === 'deployment.state_changed').map((e) => `${e.data.from}→${e.data.to}@${e.data.attempt}`);
    assert.deepEqual(claims, ['queued→in_progress@1', 'in_progress→queued@2', 'queued→in_progress@2', 'in_progress→succeeded@2']);
    assert.equal(await next.stop(), 0);
  });

  it('stops the process of a deployment cancelled while it starts', async () => {
    const env = await createEnvironment(admin.http, orgId);
    const gate = gateFile();
    const svc = await createService(developer.http, orgId, { spec: serviceSpec({ variables: { HEALTH_GATE: gate } }) });
    const runner = await startRunner(server, orgId, { environments: [env.name] });
    const d = await deploy(developer.http, orgId, { service: svc.id, environment: env.id });
    const [pid] = await eventually('the process to start', async () => {
      const pids = await startedPids(developer.http, orgId, d.id);
      return pids.length > 0 ? pids : undefined;
    });
    const cancelled = await developer.http.post(`/v1/orgs/${orgId}/deployments/${d.id}/cancel`, { reason: 'wrong branch' });
    assert.equal(cancelled.status, 200, cancelled.text);
    const stopped = await runner.proc.waitForLog((l) => l.deployment === d.id && String(l.msg).startsWith('stopped working on the deployment'), 'that it stopped working on it');
    assert.equal(stopped.code, 'deployment_cancelled');
    await eventually('its process to stop', async () => (alive(pid!) ? undefined : true));
    const final = await getDeployment(developer.http, orgId, d.id);
    assert.deepEqual([final.state, final.reason], ['cancelled', 'wrong branch']);
    assert.equal(await runner.stop(), 0);
  });
});

// A server that was down (restarting, upgraded) got no heartbeats meanwhile: for one lease after it
// starts it expires no lease, so that a runner still at work gets its retried heartbeat in first.
// (Through the protocol, with a lease long enough for a start and a few calls.)
describe('runner leases across a server restart', () => {
  // The first lease after the restart holds a token request, a claim, a sweep and a heartbeat: on a
  // slow machine, well inside it.
  const LEASE_SECONDS = 8;
  let f: DeployFixture;

  before(async () => {
    f = await startDeployFixture({ env: { SLIPWAY_RUNNER_LEASE_SECONDS: String(LEASE_SECONDS) } });
  });
  after(() => f.close());

  it('keeps a lease that ran out while the server was down for one lease after it starts, and expires it once that has passed', async () => {
    const env = await createEnvironment(f.admin.http, f.orgId);
    const svc = await createService(f.developer.http, f.orgId);
    const d = await deploy(f.developer.http, f.orgId, { service: svc.id, environment: env.id });
    const claim = await f.runner.take({ environments: [env.id], waitSeconds: 0 });
    assert.equal(claim.deployment.id, d.id);
    // Made now, so that the lease after the start holds only the calls below (its token stays good).
    const other = await newRunner(f.server, f.orgId);

    // Down for longer than the lease.
    const restarted = await f.server.restart(() => sleep(LEASE_SECONDS * 1000 + 500));
    // The fixture closes the server it started; this one is the test's own.
    f = { ...f, server: restarted, close: async () => { assert.deepEqual(restarted.undeclared, []); await restarted.close(); } };

    // What expires leases first thing, another runner's claim and the sweep, leave it be.
    assert.equal((await other.claim({ environments: [env.id], waitSeconds: 0 })).status, 204);
    await restarted.core.runner.sweep();
    const beat = await f.runner.heartbeat(d.id, claim.lease.token);
    assert.equal(beat.status, 200, beat.text);
    const kept = await getDeployment(f.developer.http, f.orgId, d.id);
    assert.deepEqual([kept.state, kept.attempt, kept.lease.expiresAt], ['in_progress', 1, beat.body.lease.expiresAt]);

    // Without heartbeats it expires as ever, once this server has been up for a lease.
    const requeued = await eventually('the lease to expire', async () => {
      const now = await getDeployment(f.developer.http, f.orgId, d.id);
      return now.state === 'queued' ? now : undefined;
    });
    assert.equal(requeued.attempt, 2);
    assert.equal((await f.runner.heartbeat(d.id, claim.lease.token)).body.code, 'lease_lost');
    const moves = (await eventsOf(restarted, f.orgId, d.id)).filter((e) => e.type === 'deployment.state_changed').map((e) => `${e.data.from}→${e.data.to}@${e.data.attempt}`);
    assert.deepEqual(moves, ['queued→in_progress@1', 'in_progress→queued@2']);
  });
});
