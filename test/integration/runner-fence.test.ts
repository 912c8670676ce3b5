// A runner cut off from the server (a TCP proxy between them that stops passing bytes) cannot hear
// that its lease ran out: by its own clock, once a whole lease has passed without a renewal, it
// stops the process it started for the deployment, before the server can hand the deployment to
// another runner, which completes it once. So too a runner whose heartbeats a node answers with the
// database out of reach (PostgreSQL only): that node says so of itself only.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { createLogger } from '../../src/platform/logging.js';
import { createRunner } from '../../src/runner-agent/runner.js';
import { createProtocolClient, type ProtocolClient } from '../../src/runner-agent/protocol-client.js';
import { createTokenSource } from '../../src/runner-agent/token-source.js';
import { createEnvironment, createService, deploy, eventsOf, eventually, getDeployment, startDeployFixture, type DeployFixture } from '../support/deployments.js';
import { startServerBehindProxy, TEST_DB } from '../support/harness.js';
import type { LogLine } from '../support/processes.js';
import { alive, ask, deploymentLog, gateFile, servedBy, serviceSpec, settled, startedPids, startRunner } from '../support/runner-agent.js';
import { createTcpProxy } from '../support/tcp-proxy.js';

/** The state changes of a deployment's events, as `from→to@attempt`. */
async function moves(f: Pick<DeployFixture, 'server' | 'orgId'>, id: string): Promise<string[]> {
  return (await eventsOf(f.server, f.orgId, id)).filter((e) => e.type === 'deployment.state_changed').map((e) => `${e.data.from}→${e.data.to}@${e.data.attempt}`);
}

const stoppedWorking = (id: string) => (l: LogLine) => l.deployment === id && String(l.msg).startsWith('stopped working on the deployment');

describe('a runner cut off from the server', () => {
  const LEASE_SECONDS = 4;
  let f: DeployFixture;
  const proxy = createTcpProxy();

  before(async () => {
    // A short lease: a heartbeat every second, a lease lost four seconds after the last one (so
    // that a heartbeat landing up to three seconds late on a loaded machine keeps it).
    f = await startDeployFixture({ env: { SLIPWAY_RUNNER_LEASE_SECONDS: String(LEASE_SECONDS) } });
  });
  after(async () => {
    await proxy.cut();
    await f.close();
  });

  it('stops the process it started for its deployment once its lease may have run out, before another runner starts the next attempt, which completes it once', async () => {
    const { server, orgId, admin, developer } = f;
    const env = await createEnvironment(admin.http, orgId);
    // Unhealthy until the gate file exists: the first runner's process waits for its health check
    // (for longer than the test takes) while the runner is cut off.
    const gate = gateFile();
    const svc = await createService(developer.http, orgId, { spec: serviceSpec({ variables: { HEALTH_GATE: gate }, healthCheck: { path: '/healthz', timeoutSeconds: 600 } }) });
    const url = new URL(server.url);
    const proxyPort = await proxy.open(url.hostname, Number(url.port));
    const cutOff = await startRunner(server, orgId, { environments: [env.name], concurrency: 1, url: `http://${url.hostname}:${proxyPort}` });

    const d = await deploy(developer.http, orgId, { service: svc.id, environment: env.id });
    const [firstPid] = await eventually('the first attempt to start its process', async () => {
      const pids = await startedPids(developer.http, orgId, d.id, 1);
      return pids.length > 0 ? pids : undefined;
    });
    const firstPort = Number(/^serving pid=\d+ port=(\d+)/.exec((await deploymentLog(developer.http, orgId, d.id)).find((l) => l.attempt === 1 && l.line.startsWith(`serving pid=${firstPid} `))!.line)![1]);
    assert.equal((await getDeployment(developer.http, orgId, d.id)).lease?.runner, cutOff.actor.id);
    // Another runner of the environment waits with a claim: it takes the deployment as soon as the server hands it out.
    const rescuer = await startRunner(server, orgId, { environments: [env.name], via: 'env' });

    proxy.silence();
    const [secondPid] = await eventually('the other runner to start the next attempt\'s process', async () => {
      const pids = await startedPids(developer.http, orgId, d.id, 2);
      return pids.length > 0 ? pids : undefined;
    });
    assert.equal(alive(firstPid!), false, 'the cut-off runner stopped its process before the next attempt started');
    // Nothing answers on its port, or another process given the port since.
    const answer = await ask(firstPort);
    assert.ok('error' in answer || answer.pid !== firstPid, JSON.stringify(answer));
    const said = await cutOff.proc.waitForLog(stoppedWorking(d.id), 'that it stopped working on the deployment');
    assert.equal(said.level, 'warn');
    assert.match(String(said.msg), /^stopped working on the deployment: no renewal of its lease got through in time to keep it \(a lease of 4 s\)/);

    fs.writeFileSync(gate, '');
    const done = await settled(developer.http, orgId, d.id);
    assert.deepEqual([done.state, done.attempt], ['succeeded', 2]);
    const serving = await servedBy(developer.http, orgId, d.id);
    assert.equal(serving.pid, secondPid);
    assert.deepEqual(await moves(f, d.id), ['queued→in_progress@1', 'in_progress→queued@2', 'queued→in_progress@2', 'in_progress→succeeded@2']);

    // Back in touch, the cut-off runner completes nothing of attempt 1, and the process of attempt 2 keeps serving.
    await proxy.open();
    // Giving the deployment back found its lease gone, or did not get through in time.
    const gaveUp = await cutOff.proc.waitForLog((l) => l.deployment === d.id && /giving it back|to give back/.test(String(l.msg)), 'what became of giving the deployment back');
    assert.match(String(gaveUp.msg), /^(left the deployment without giving it back|the deployment was no longer this runner's to give back)/);
    assert.deepEqual(await moves(f, d.id), ['queued→in_progress@1', 'in_progress→queued@2', 'queued→in_progress@2', 'in_progress→succeeded@2']);
    const log = await deploymentLog(developer.http, orgId, d.id);
    assert.ok(!log.some((l) => l.attempt === 1 && l.line.startsWith('healthy: ')), JSON.stringify(log));
    assert.deepEqual(await ask(serving.port), { pid: serving.pid, greeting: null, apiKey: null, revision: null });

    assert.equal(await rescuer.stop(), 0);
    assert.equal(await cutOff.stop(), 0);
  });

  it('sees a completion it sent through, however long after the lease its answer comes: the server took it, so the process it started serves', async () => {
    const { server, orgId, admin, developer, runner: { actor } } = f;
    const env = await createEnvironment(admin.http, orgId);
    const svc = await createService(developer.http, orgId, { spec: serviceSpec() });
    const real = createProtocolClient({
      baseUrl: server.url, orgId, tokens: createTokenSource({ tokenUrl: actor.tokenUrl, clientId: actor.clientId, clientSecret: actor.clientSecret, scope: actor.scope }),
    });
    // The server takes the completion; its answer comes back a lease and more later (a connection
    // cut as it answered, the retry let through late), unless the runner gives up on it meanwhile.
    const client: ProtocolClient = {
      ...real,
      async complete(id, body, signal) {
        const answer = await real.complete(id, body, signal);
        await sleep(LEASE_SECONDS * 1000 + 1_500, undefined, { signal });
        return answer;
      },
    };
    const runner = createRunner({ client, environments: [env.name], concurrency: 1, logger: createLogger('info', { write: () => {} }), waitSeconds: 1 });
    const running = runner.run();
    try {
      const d = await deploy(developer.http, orgId, { service: svc.id, environment: env.id });
      assert.deepEqual([(await settled(developer.http, orgId, d.id)).state], ['succeeded']);
      const serving = await servedBy(developer.http, orgId, d.id);
      await eventually('the runner to put the process in place once the answer came', async () => (runner.processes.current(`${svc.id}/${env.id}`)?.pid === serving.pid ? true : undefined));
      assert.equal(alive(serving.pid), true);
      assert.deepEqual(await ask(serving.port), { pid: serving.pid, greeting: null, apiKey: null, revision: null });
      assert.deepEqual(await moves(f, d.id), ['queued→in_progress@1', 'in_progress→succeeded@1']);
    } finally {
      runner.stop();
      await running;
    }
  });
});

describe('a runner whose heartbeats meet the database out of reach', { skip: TEST_DB !== 'postgres' && 'PostgreSQL only (SQLite is a file on the server\'s machine)' }, () => {
  it('stops its process as if cut off (a 503 keeps no lease: another node may expire it), and the deployment is completed once in its next attempt', async () => {
    const { server, proxy, close } = await startServerBehindProxy({ env: { SLIPWAY_RUNNER_LEASE_SECONDS: '4' } });
    try {
      const orgId = server.bootstrap.orgId;
      const http = server.owner.http;
      const env = await createEnvironment(http, orgId);
      const gate = gateFile();
      const svc = await createService(http, orgId, { spec: serviceSpec({ variables: { HEALTH_GATE: gate }, healthCheck: { path: '/healthz', timeoutSeconds: 600 } }) });
      const first = await startRunner(server, orgId, { environments: [env.name], concurrency: 1 });
      const d = await deploy(http, orgId, { service: svc.id, environment: env.id });
      const [pid] = await eventually('the attempt to start its process', async () => {
        const pids = await startedPids(http, orgId, d.id, 1);
        return pids.length > 0 ? pids : undefined;
      });
      // Another runner of the environment, to take the next attempt (the first is not handed back
      // a deployment whose lease it lost for a while).
      const rescuer = await startRunner(server, orgId, { environments: [env.name], via: 'env' });

      await proxy.cut();
      // Its heartbeats are answered 503 (the database cannot be reached): it stops all the same.
      const said = await first.proc.waitForLog(stoppedWorking(d.id), 'that it stopped working on the deployment');
      assert.match(String(said.msg), /no renewal of its lease got through in time to keep it \(a lease of 4 s\)/);
      assert.ok(first.proc.logs().some((l) => l.call === 'heartbeat' && /answered 503/.test(String(l.msg))), 'its heartbeats met the outage');
      await eventually('its process to stop', async () => (alive(pid!) ? undefined : true));
      await proxy.open();

      fs.writeFileSync(gate, '');
      const done = await settled(http, orgId, d.id);
      assert.deepEqual([done.state, done.attempt], ['succeeded', 2]);
      const serving = await servedBy(http, orgId, d.id);
      assert.notEqual(serving.pid, pid);
      assert.deepEqual(await moves({ server, orgId }, d.id), ['queued→in_progress@1', 'in_progress→queued@2', 'queued→in_progress@2', 'in_progress→succeeded@2']);
      assert.equal(await rescuer.stop(), 0);
      assert.equal(await first.stop(), 0);
    } finally {
      await close();
    }
  });
});
