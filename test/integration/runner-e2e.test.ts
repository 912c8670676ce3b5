// The reference runner end to end: a real server, `slipway runner` as a real child process, and
// the services it deploys as real processes answering HTTP. Deploy, redeploy, roll back, a failed
// health check, and a server restart in the middle of a deployment.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import { startServer, type Actor, type TestServer } from '../support/harness.js';
import { createEnvironment, createService, deploy, eventsOf, eventually, getDeployment, startDeployFixture, unique, type DeployFixture } from '../support/deployments.js';
import { spawnSlipway } from '../support/processes.js';

/** The processes `pid` started that still run (Linux's /proc). */
function childrenOf(pid: number): number[] {
  try {
    return fs.readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

function commandLineOf(pid: number): string {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ');
  } catch {
    return '';
  }
}
import { alive, ask, deploymentLog, gateFile, noLongerServing, servedBy, serviceSpec, settled, startedPids, startRunner, type RunnerProcess } from '../support/runner-agent.js';

describe('slipway runner', () => {
  let f: DeployFixture;
  let orgId: string;
  let admin: Actor;
  let developer: Actor;
  let runner: RunnerProcess;
  const secretValues = ['sk-live-first-7f3a9c', 'sk-live-second-b21e4d'];

  before(async () => {
    f = await startDeployFixture();
    ({ orgId, admin, developer } = f);
    // Reports every 2 s, so that what it says of its processes shows soon.
    runner = await startRunner(f.server, orgId, { env: { SLIPWAY_RUNNER_RECONCILE_SECONDS: '2' } });
  });
  after(async () => {
    await runner.stop();
    await f.close();
  });

  it('deploys a service as a process with its variable, secret and PORT; a second revision replaces it; a rollback brings the first back', async () => {
    const secret = unique('api');
    assert.equal((await developer.http.post(`/v1/orgs/${orgId}/secrets`, { secrets: [{ name: secret, values: { API_KEY: secretValues[0] } }] })).status, 201);
    const env = await createEnvironment(admin.http, orgId);
    const svc = await createService(developer.http, orgId, { spec: serviceSpec({ variables: { GREETING: 'hello' }, secrets: [{ secret, key: 'API_KEY' }] }) });

    const first = await deploy(developer.http, orgId, { service: svc.id, environment: env.name, revision: 'v1', variables: { REVISION: 'v1' } });
    assert.equal((await settled(developer.http, orgId, first.id)).state, 'succeeded');
    const one = await servedBy(developer.http, orgId, first.id);
    assert.deepEqual(await ask(one.port), { pid: one.pid, greeting: 'hello', apiKey: secretValues[0], revision: 'v1' });

    // Its output reached the deployment's log, with the secret value masked.
    const log = await deploymentLog(developer.http, orgId, first.id);
    assert.ok(log.some((l) => l.stream === 'stdout' && l.line === `serving pid=${one.pid} port=${one.port} key=***`), JSON.stringify(log));
    assert.match(log[0]!.line, /^claimed attempt 1: /);
    assert.ok(!JSON.stringify(log).includes(secretValues[0]!));

    const changed = await developer.http.put(`/v1/orgs/${orgId}/secrets/${secret}`, { values: { API_KEY: secretValues[1] } });
    assert.equal(changed.status, 200, changed.text);
    const second = await deploy(developer.http, orgId, { service: svc.id, environment: env.id, revision: 'v2', variables: { REVISION: 'v2' } });
    assert.equal((await settled(developer.http, orgId, second.id)).state, 'succeeded');
    const two = await servedBy(developer.http, orgId, second.id);
    assert.match(two.line, new RegExp(`the previous process \\(pid ${one.pid}\\) stops once the server has taken the result`));
    // Stopped once the success was reported, not before.
    await eventually('the first process is gone', async () => (alive(one.pid) ? undefined : true));
    const gone = await ask(one.port);
    assert.ok(noLongerServing(gone, secretValues[0]!), JSON.stringify(gone));
    assert.deepEqual(await ask(two.port), { pid: two.pid, greeting: 'hello', apiKey: secretValues[1], revision: 'v2' });
    assert.equal((await getDeployment(developer.http, orgId, first.id)).state, 'superseded');

    const rollback = await developer.http.post(`/v1/orgs/${orgId}/deployments/${first.id}/rollback`, {});
    assert.equal(rollback.status, 201, rollback.text);
    assert.equal((await settled(developer.http, orgId, rollback.body.id)).state, 'succeeded');
    const three = await servedBy(developer.http, orgId, rollback.body.id);
    await eventually('the second process is gone', async () => (alive(two.pid) ? undefined : true));
    // The first revision's answer: its variables and the secret version it pinned.
    assert.deepEqual(await ask(three.port), { pid: three.pid, greeting: 'hello', apiKey: secretValues[0], revision: 'v1' });
  });

  it('fails a deployment whose health check fails, with the reason, and the previous revision keeps answering', async () => {
    const env = await createEnvironment(admin.http, orgId);
    const svc = await createService(developer.http, orgId, { spec: serviceSpec({ healthCheck: { path: '/healthz', timeoutSeconds: 8 } }) });
    const good = await deploy(developer.http, orgId, { service: svc.id, environment: env.id, variables: { REVISION: 'good' } });
    assert.equal((await settled(developer.http, orgId, good.id)).state, 'succeeded');
    const serving = await servedBy(developer.http, orgId, good.id);

    const bad = await deploy(developer.http, orgId, { service: svc.id, environment: env.id, variables: { REVISION: 'bad', HEALTH: 'fail' } });
    const failed = await settled(developer.http, orgId, bad.id);
    assert.equal(failed.state, 'failed');
    assert.match(failed.reason, /^The new process did not come up: health check GET \/healthz on port \d+ did not answer 2xx within 8 s \(last: HTTP 503\)\. What served before, if anything, keeps serving\.$/);
    const [badPid] = await startedPids(developer.http, orgId, bad.id);
    assert.ok(badPid !== undefined && badPid !== serving.pid);
    assert.equal(alive(badPid), false, 'the unhealthy process was stopped');
    assert.ok((await deploymentLog(developer.http, orgId, bad.id)).some((l) => l.stream === 'runner' && l.line.startsWith('failed: health check')));

    assert.deepEqual(await ask(serving.port), { pid: serving.pid, greeting: null, apiKey: null, revision: 'good' });
    assert.equal((await getDeployment(developer.http, orgId, good.id)).state, 'succeeded');
  });

  it('fails a deployment whose new process exits within minReadySeconds of becoming healthy, and the previous revision keeps answering', async () => {
    const env = await createEnvironment(admin.http, orgId);
    const svc = await createService(developer.http, orgId, { spec: serviceSpec({ minReadySeconds: 3 }) });
    assert.equal(svc.spec.minReadySeconds, 3);
    const good = await deploy(developer.http, orgId, { service: svc.id, environment: env.id, variables: { REVISION: 'steady' } });
    assert.equal((await settled(developer.http, orgId, good.id)).state, 'succeeded');
    assert.ok((await deploymentLog(developer.http, orgId, good.id)).some((l) => l.stream === 'runner' && l.line.endsWith('; then it must keep running 3 s')));
    const serving = await servedBy(developer.http, orgId, good.id);

    // Gone a second after its first healthy answer: a crash loop in the making is no success.
    const flaky = await deploy(developer.http, orgId, { service: svc.id, environment: env.id, variables: { REVISION: 'flaky', EXIT_AFTER_MS: '1000' } });
    const failed = await settled(developer.http, orgId, flaky.id);
    assert.equal(failed.state, 'failed');
    assert.match(failed.reason, /^The new process did not come up: process exited with code 4 [0-9.]+ s after becoming healthy, within the 3 s it had to keep running \(minReadySeconds\)\. What served before, if anything, keeps serving\.$/);
    assert.deepEqual(await ask(serving.port), { pid: serving.pid, greeting: null, apiKey: null, revision: 'steady' });
    assert.equal((await getDeployment(developer.http, orgId, good.id)).state, 'succeeded');
  });

  it('fails a deployment it cannot run: an image without a command', async () => {
    const env = await createEnvironment(admin.http, orgId);
    const svc = await createService(developer.http, orgId, { spec: { image: 'registry.example.com/app:1' } });
    const d = await deploy(developer.http, orgId, { service: svc.id, environment: env.id });
    const failed = await settled(developer.http, orgId, d.id);
    assert.equal(failed.state, 'failed');
    assert.match(failed.reason, /starts commands, and the spec has none \(only the image registry\.example\.com\/app:1\)/);
  });

  it('exits 1 with the reason when the server refuses its credentials or its environment', async () => {
    const actor = await f.server.actor(orgId, 'runner');
    const env = { SLIPWAY_URL: f.server.url, SLIPWAY_ORG: orgId, SLIPWAY_CLIENT_ID: actor.clientId, SLIPWAY_SCOPE: actor.scope };
    for (const [extra, code] of [
      [{ SLIPWAY_CLIENT_SECRET: 'not-the-secret' }, 'invalid_client'],
      [{ SLIPWAY_CLIENT_SECRET: actor.clientSecret, SLIPWAY_ENVIRONMENTS: 'no-such-environment' }, 'environment_not_found'],
    ] as const) {
      const proc = spawnSlipway(['runner'], { ...env, ...extra });
      assert.equal((await proc.exited).code, 1);
      assert.ok(proc.logs().some((l) => l.level === 'error' && l.code === code), proc.output.join('\n'));
    }
  });

  it('starts a service that exits on its own again on its port, logs its output masked, and leaves it be once replaced', async () => {
    const secret = unique('api');
    assert.equal((await developer.http.post(`/v1/orgs/${orgId}/secrets`, { secrets: [{ name: secret, values: { API_KEY: secretValues[0] } }] })).status, 201);
    const env = await createEnvironment(admin.http, orgId);
    const svc = await createService(developer.http, orgId, { spec: serviceSpec({ secrets: [{ secret, key: 'API_KEY' }] }) });
    const first = await deploy(developer.http, orgId, { service: svc.id, environment: env.id, variables: { REVISION: 'v1' } });
    assert.equal((await settled(developer.http, orgId, first.id)).state, 'succeeded');
    const one = await servedBy(developer.http, orgId, first.id);

    await fetch(`http://127.0.0.1:${one.port}/exit`).catch(() => undefined);
    await eventually('the first process is gone', async () => (alive(one.pid) ? undefined : true));
    const back = await eventually('the service to answer again on its port', async () => {
      const answer = await ask(one.port);
      return 'pid' in answer && answer.pid !== one.pid ? answer : undefined;
    });
    assert.deepEqual(back, { pid: back.pid, greeting: null, apiKey: secretValues[0], revision: 'v1' });
    const exited = await runner.proc.waitForLog((l) => (l.msg ?? '').includes('exited with code 3, not by this runner') && l.processPid === one.pid, 'the exit');
    assert.equal(exited.serviceName, svc.name);
    assert.equal(exited.environmentName, env.name);
    await runner.proc.waitForLog((l) => l.msg === 'the service is running again' && l.processPid === back.pid, 'the restart');
    // The runner's reports say so: the deployment shows the exit, and an event records it.
    const shown = await eventually('the exit on the deployment', async () => {
      const { process } = await getDeployment(developer.http, orgId, first.id);
      return process?.state === 'running' && process.exits === 1 ? process : undefined;
    });
    assert.deepEqual({ code: shown.lastExit.code, signal: shown.lastExit.signal }, { code: 3, signal: null });
    // And where it answers: this machine, on the port the runner gave it.
    assert.deepEqual(shown.address, { hostname: os.hostname(), port: one.port });
    const exitEvents = (await eventsOf(f.server, orgId, first.id)).filter((e) => e.type === 'deployment.process_exited');
    assert.equal(exitEvents.length, 1, JSON.stringify(exitEvents));
    assert.equal(exitEvents[0].data.lastExit.code, 3);
    // Its output now reaches the runner's log, masked; the deployment's log ended with the deployment.
    await runner.proc.waitForLog((l) => l.msg === `serving pid=${back.pid} port=${one.port} key=***` && l.stream === 'stdout', 'the output of the restarted process');
    assert.ok(!(await deploymentLog(developer.http, orgId, first.id)).some((l) => l.line.includes(`pid=${back.pid}`)));

    // Replaced by a deployment: the supervisor lets the restarted process go and starts nothing.
    const second = await deploy(developer.http, orgId, { service: svc.id, environment: env.id, variables: { REVISION: 'v2' } });
    assert.equal((await settled(developer.http, orgId, second.id)).state, 'succeeded');
    const two = await servedBy(developer.http, orgId, second.id);
    await eventually('the restarted process is gone', async () => (alive(back.pid) ? undefined : true));
    await sleep(1500);
    const gone = await ask(one.port);
    assert.ok(noLongerServing(gone, secretValues[0]!), JSON.stringify(gone));
    assert.equal((await ask(two.port) as { revision: string }).revision, 'v2');
  });

  it('never writes a secret value or its own credentials to its log, and stops its services on SIGTERM', async () => {
    const last = await servedBy(developer.http, orgId, (await developer.http.get(`/v1/orgs/${orgId}/deployments?state=succeeded&limit=1`)).body.deployments[0].id);
    assert.equal(alive(last.pid), true);
    const code = await runner.stop();
    assert.equal(code, 0);
    assert.equal(alive(last.pid), false, 'its services stop with it');
    const output = runner.proc.output.join('\n');
    for (const secret of [...secretValues, runner.actor.clientSecret]) assert.ok(!output.includes(secret));
    assert.ok(runner.proc.logs().some((l) => l.msg === 'runner stopped'));
  });
});

describe('slipway runner killed', () => {
  let f: DeployFixture;

  before(async () => {
    f = await startDeployFixture();
  });
  after(() => f.close());

  // The only runner of its organization: nothing else claims these deployments.
  it('does not leave its services running when it is killed (SIGKILL), even after its watchdog was killed: the one serving and the one being deployed stop', async () => {
    const env = await createEnvironment(f.admin.http, f.orgId);
    const gate = gateFile();
    const [serving, pending] = [await createService(f.developer.http, f.orgId, { spec: serviceSpec() }), await createService(f.developer.http, f.orgId, { spec: serviceSpec({ variables: { HEALTH_GATE: gate } }) })];
    const doomed = await startRunner(f.server, f.orgId);
    const done = await deploy(f.developer.http, f.orgId, { service: serving.id, environment: env.id, revision: 'v1' });
    assert.equal((await settled(f.developer.http, f.orgId, done.id)).state, 'succeeded');
    const up = await servedBy(f.developer.http, f.orgId, done.id);
    const underway = await deploy(f.developer.http, f.orgId, { service: pending.id, environment: env.id, revision: 'v1' });
    const [starting] = await eventually('the second process to start', async () => {
      const pids = await startedPids(f.developer.http, f.orgId, underway.id);
      return pids.length > 0 ? pids : undefined;
    });
    assert.equal(alive(up.pid) && alive(starting!), true);

    // Its watchdog killed first (by someone): another is started at once, and does its work.
    const watchdogs = () => childrenOf(doomed.proc.child.pid!).filter((pid) => commandLineOf(pid).includes('reaper-main.js'));
    const [watchdog] = await eventually('the watchdog', async () => (watchdogs().length === 1 ? watchdogs() : undefined));
    process.kill(watchdog!, 'SIGKILL');
    // At once, not with the next process the runner starts or stops (the gated one's health check
    // ends only after 30 s): 10 s is ample for a process to start.
    await eventually('another watchdog', async () => (watchdogs().some((pid) => pid !== watchdog) ? true : undefined), 10_000);

    doomed.proc.child.kill('SIGKILL');
    await doomed.proc.exited;
    // The watchdog stops them as a runner stops what it runs (a grace period, then SIGKILL): on a
    // machine busy with both suites, past the usual 30 s of a wait.
    await eventually('both processes to be gone', async () => (alive(up.pid) || alive(starting!) ? undefined : true), 90_000);
    // A connection that reached the listener as it closed is reset; after that, refused.
    await eventually('its port to refuse connections', async () => ((await ask(up.port) as { error?: string }).error === 'ECONNREFUSED' ? true : undefined));
  });

  it('starts every deployment a stopped runner let go of again at once on the next, more than the server hands out in one answer', async () => {
    const env = await createEnvironment(f.admin.http, f.orgId);
    // Eleven services that run without a health check: one more than an adopt answer holds by default.
    const ids: string[] = [];
    for (let i = 0; i < 11; i++) {
      const svc = await createService(f.developer.http, f.orgId, { spec: { command: [process.execPath, '-e', 'setInterval(() => {}, 1 << 30)'] } });
      ids.push((await deploy(f.developer.http, f.orgId, { service: svc.id, environment: env.id, revision: 'v1' })).id);
    }
    const first = await startRunner(f.server, f.orgId, { environments: [env.name] });
    for (const id of ids) assert.equal((await settled(f.developer.http, f.orgId, id)).state, 'succeeded');
    assert.equal(await first.stop(), 0);

    // Its rounds are 20 s apart (a third of the default host timeout): all eleven come on the first look.
    const next = await startRunner(f.server, f.orgId, { environments: [env.name] });
    await eventually('every deployment adopted', async () => {
      const adopted = new Set(next.proc.logs().filter((l) => String(l.msg).startsWith('adopted:')).map((l) => l.deployment));
      return ids.every((id) => adopted.has(id)) ? true : undefined;
    }, 10_000);
    await next.stop();
  });
});

// A runner that stops (and lets its deployments go) or is killed (and stops reporting them): the
// next runner of the environment adopts what it ran and starts it again; the deployment stays the
// active one throughout.
describe('slipway runner taken over', () => {
  // Its runners report every second: a report may land up to 3 s late on a loaded machine before what it runs is taken for an orphan.
  const HOST_TIMEOUT_SECONDS = 4;
  let f: DeployFixture;
  before(async () => {
    f = await startDeployFixture({ env: { SLIPWAY_RUNNER_HOST_TIMEOUT_SECONDS: String(HOST_TIMEOUT_SECONDS) } });
  });
  after(() => f.close());

  const fast = { env: { SLIPWAY_RUNNER_RECONCILE_SECONDS: '1' } };

  /** The process a runner started for an adopted deployment, from its log line. */
  const adoptedBy = (runner: RunnerProcess, id: string) => eventually(`a runner to adopt ${id}`, async () => {
    const line = runner.proc.logs().find((l) => l.deployment === id && String(l.msg).startsWith('adopted:'));
    return line !== undefined ? { pid: Number(line.processPid), port: Number(line.port) } : undefined;
  });

  async function serving(secretValue: string) {
    const secret = unique('taken-over');
    assert.equal((await f.developer.http.post(`/v1/orgs/${f.orgId}/secrets`, { secrets: [{ name: secret, values: { API_KEY: secretValue } }] })).status, 201);
    const env = await createEnvironment(f.admin.http, f.orgId);
    const svc = await createService(f.developer.http, f.orgId, { spec: serviceSpec({ variables: { GREETING: 'again' }, secrets: [{ secret, key: 'API_KEY' }] }) });
    return { env, svc };
  }

  it('starts what a runner stopped with SIGTERM ran again at once on the next runner, as the same deployment', async () => {
    const { env, svc } = await serving('sk-taken-over-1');
    const first = await startRunner(f.server, f.orgId, { environments: [env.name] });
    const d = await deploy(f.developer.http, f.orgId, { service: svc.id, environment: env.id, revision: 'v1', variables: { REVISION: 'v1' } });
    assert.equal((await settled(f.developer.http, f.orgId, d.id)).state, 'succeeded');
    const before = await servedBy(f.developer.http, f.orgId, d.id);
    assert.equal(await first.stop(), 0);
    assert.equal(alive(before.pid), false);
    assert.ok(first.proc.logs().some((l) => String(l.msg).startsWith('let go of the deployments')), first.proc.output.join('\n'));

    // Released: the next runner takes it on its first look, without waiting for the host timeout.
    const next = await startRunner(f.server, f.orgId, { environments: [env.name] });
    const now = await adoptedBy(next, d.id);
    assert.deepEqual(await ask(now.port), { pid: now.pid, greeting: 'again', apiKey: 'sk-taken-over-1', revision: 'v1' });
    const active = await f.developer.http.get(`/v1/orgs/${f.orgId}/environments/${env.id}/active`);
    assert.deepEqual(active.body.deployments.map((a: { id: string; state: string }) => [a.id, a.state]), [[d.id, 'succeeded']]);
    const adopted = (await eventsOf(f.server, f.orgId, d.id)).filter((e) => e.type === 'deployment.adopted');
    assert.equal(adopted.length, 1);
    assert.ok(!next.proc.output.join('\n').includes('sk-taken-over-1'), 'the secret value stays out of the runner\'s log');
    await next.stop();
  });

  it('starts what a killed runner ran again on another runner once the host timeout has passed, and only there', async () => {
    const { env, svc } = await serving('sk-taken-over-2');
    const doomed = await startRunner(f.server, f.orgId, { environments: [env.name], ...fast });
    const d = await deploy(f.developer.http, f.orgId, { service: svc.id, environment: env.id, revision: 'v1' });
    assert.equal((await settled(f.developer.http, f.orgId, d.id)).state, 'succeeded');
    const heir = await startRunner(f.server, f.orgId, { environments: [env.name], ...fast });
    // While its runner reports it, nobody else takes it.
    await sleep(HOST_TIMEOUT_SECONDS * 1000 + 1500);
    assert.ok(!heir.proc.logs().some((l) => l.deployment === d.id), 'adopted while its runner still ran it');

    doomed.proc.child.kill('SIGKILL');
    await doomed.proc.exited;
    const now = await adoptedBy(heir, d.id);
    assert.equal((await ask(now.port) as { apiKey: string }).apiKey, 'sk-taken-over-2');
    assert.equal((await getDeployment(f.developer.http, f.orgId, d.id)).state, 'succeeded');
    await heir.stop();
  });
});

describe('slipway runner across a server restart', () => {
  let server: TestServer;
  let runner: RunnerProcess | undefined;

  before(async () => {
    server = await startServer();
  });
  after(async () => {
    await runner?.stop();
    await server.close();
  });

  it('keeps a deployment going through the restart, completes it, and claims again afterwards', async () => {
    const orgId = (await server.createOrg()).id;
    const [admin, developer] = [await server.actor(orgId, 'admin'), await server.actor(orgId, 'developer')];
    const env = await createEnvironment(admin.http, orgId);
    const gate = gateFile();
    const svc = await createService(developer.http, orgId, { spec: serviceSpec({ variables: { HEALTH_GATE: gate } }) });
    runner = await startRunner(server, orgId, { environments: [env.name], via: 'env' });

    const before = await deploy(developer.http, orgId, { service: svc.id, environment: env.id, revision: 'before' });
    await eventually('the process to start', async () => ((await startedPids(developer.http, orgId, before.id)).length > 0 ? true : undefined));
    server = await server.restart();
    fs.writeFileSync(gate, '');
    const done = await settled(developer.http, orgId, before.id);
    assert.equal(done.state, 'succeeded');
    assert.equal(done.attempt, 1, 'the lease held through the restart');

    const afterwards = await deploy(developer.http, orgId, { service: svc.id, environment: env.id, revision: 'after' });
    assert.equal((await settled(developer.http, orgId, afterwards.id)).state, 'succeeded');
    const serving = await servedBy(developer.http, orgId, afterwards.id);
    assert.equal((await ask(serving.port) as { pid: number }).pid, serving.pid);
    assert.deepEqual(server.undeclared, []);
    // It did meet the outage (its waiting claim was cut off), and came through it.
    assert.ok(runner.proc.logs().some((l) => String(l.msg).startsWith('the server is unavailable, retrying')), runner.proc.output.join('\n'));
  });
});
