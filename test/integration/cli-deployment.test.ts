// `slipway deployment` as a real child process against a real server, as a service user: it lists,
// shows, reads and follows a deployment's log, says what a deployment changes, cancels one, and
// rolls a service back in an environment to what served there before (or to a deployment named),
// following the rollback with --wait; the runner's side is played over the protocol.
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { createEnvironment, createService, deploy, eventually, newRunner, ship, type RunnerClient } from '../support/deployments.js';
import type { Actor } from '../support/harness.js';
import { startWithOrg, type OrgFixture } from '../support/org-fixture.js';
import { runCli, spawnSlipway, type CliResult, clientVariables } from '../support/processes.js';

describe('slipway deployment', () => {
  let f: OrgFixture;
  let developer: Actor;
  let viewer: Actor;
  let runner: RunnerClient;

  /** A service user's credentials in the environment, as a CI job or a shell has them. */
  const credentials = (who: Actor) => clientVariables(f.server.url, f.orgId, who);
  const as = (who: Actor, args: string[]): Promise<CliResult> => runCli(['deployment', ...args], credentials(who));

  before(async () => {
    f = await startWithOrg();
    developer = await f.server.actor(f.orgId, 'developer');
    viewer = await f.server.actor(f.orgId, 'viewer');
    runner = await newRunner(f.server, f.orgId);
  });
  after(async () => { await f.close(); });

  it('lists deployments newest first, narrowed by service, environment and state, and shows one', async () => {
    const env = await createEnvironment(f.admin.http, f.orgId);
    const svc = await createService(developer.http, f.orgId);
    const first = (await ship(developer.http, runner, f.orgId, { service: svc.name, environment: env.name, revision: 'v1' })).deployment;
    const queued = await deploy(developer.http, f.orgId, { service: svc.name, environment: env.name, revision: 'v2', description: 'second' });

    const listed = await as(viewer, ['list', '--service', svc.name, '--environment', env.name]);
    assert.equal(listed.code, 0, listed.stderr);
    const lines = listed.stdout.trim().split('\n');
    assert.match(lines[0]!, /^ID +SERVICE +ENVIRONMENT +REVISION +STATE +CREATED +BY$/);
    assert.deepEqual(lines.slice(1).map((l) => l.split(/ +/).slice(0, 5)), [
      [queued.id, svc.name, env.name, 'v2', 'queued'], [first.id, svc.name, env.name, 'v1', 'succeeded'],
    ]);
    const succeeded = JSON.parse((await as(viewer, ['list', '--service', svc.name, '--state', 'succeeded', '--state', 'failed', '--limit', '5', '--json'])).stdout);
    assert.deepEqual(succeeded.deployments.map((d: { id: string }) => d.id), [first.id]);

    const shown = await as(viewer, ['show', '--id', queued.id]);
    assert.equal(shown.code, 0, shown.stderr);
    assert.match(shown.stdout, new RegExp(`^id +${queued.id}$`, 'm'));
    assert.match(shown.stdout, /^state +queued$/m);
    assert.match(shown.stdout, /^description +second$/m);
    assert.match(shown.stdout, new RegExp(`^created +\\S+ by ${developer.id}$`, 'm'));
    assert.equal(JSON.parse((await as(viewer, ['show', '--id', queued.id, '--json'])).stdout).revision, 'v2');

    // A serving deployment's process as its runner reports it, a crash loop included.
    const at = new Date(Date.now() - 3000).toISOString();
    const report = { deployment: first.id, state: 'restarting', exits: 4, lastExit: { code: 7, signal: null, at }, address: { hostname: 'build-01', port: 40001 } };
    assert.equal((await runner.actor.http.post(`/v1/orgs/${f.orgId}/runner/serving`, { deployments: [first.id], host: 'rh_cli-show-0001', processes: [report] })).status, 200);
    assert.match((await as(viewer, ['show', '--id', first.id])).stdout, /^process +restarting at build-01:40001, exited 4 times \(last: code 7, \d+ s ago\), reported \d+ s ago$/m);

    const cancelled = await as(developer, ['cancel', '--id', queued.id, '--reason', 'not today']);
    assert.equal(cancelled.code, 0, cancelled.stderr);
    assert.equal(cancelled.stdout, `deployment ${queued.id}: cancelled (not today)\n`);
    const again = await as(developer, ['cancel', '--id', queued.id, '--json']);
    assert.equal(again.code, 1);
    assert.equal(JSON.parse(again.stderr).error.status, 409);
  });

  it('says what serves in an environment: each service\'s succeeded deployment, its revision and its process', async () => {
    const env = await createEnvironment(f.admin.http, f.orgId);
    const empty = await as(viewer, ['active', '--environment', env.name]);
    assert.equal(empty.code, 0, empty.stderr);
    assert.equal(empty.stdout, `environment ${env.name}: no service has succeeded there yet\n`);

    const api = await createService(developer.http, f.orgId);
    const worker = await createService(developer.http, f.orgId);
    await ship(developer.http, runner, f.orgId, { service: api.name, environment: env.name, revision: 'a1' });
    const api2 = (await ship(developer.http, runner, f.orgId, { service: api.name, environment: env.name, revision: 'a2' })).deployment;
    const w1 = (await ship(developer.http, runner, f.orgId, { service: worker.name, environment: env.name, revision: 'w1' })).deployment;
    // A failed one serves nothing: the worker's w1 still does.
    await ship(developer.http, runner, f.orgId, { service: worker.name, environment: env.name, revision: 'w2' }, 'failed');
    const report = { deployment: api2.id, state: 'running', exits: 0, address: { hostname: 'web-01', port: 40100 } };
    const served = await runner.actor.http.post(`/v1/orgs/${f.orgId}/runner/serving`, { deployments: [api2.id, w1.id], host: 'rh_cli-active-001', processes: [report] });
    assert.equal(served.status, 200, served.text);

    const active = await as(viewer, ['active', '--environment', env.name]);
    assert.equal(active.code, 0, active.stderr);
    const lines = active.stdout.trim().split('\n');
    assert.match(lines[0]!, /^SERVICE +REVISION +DEPLOYMENT +SINCE +PROCESS$/);
    const rows = new Map(lines.slice(1).map((l) => [l.split(/ +/)[0], l]));
    assert.match(rows.get(api.name)!, new RegExp(`^${api.name} +a2 +${api2.id} +\\d+ s ago +running at web-01:40100, reported \\d+ s ago$`));
    assert.match(rows.get(worker.name)!, new RegExp(`^${worker.name} +w1 +${w1.id} +\\d+ s ago +no runner reports it \\(none yet, or its runner let it go\\)$`));
    const asJson = JSON.parse((await as(viewer, ['active', '--environment', env.id, '--json'])).stdout);
    assert.deepEqual(asJson.deployments.map((d: { id: string }) => d.id).sort(), [api2.id, w1.id].sort());

    const unknown = await as(viewer, ['active', '--environment', 'no-such-environment', '--json']);
    assert.equal(unknown.code, 1);
    assert.equal(JSON.parse(unknown.stderr).error.status, 404);
    const noFlag = await as(viewer, ['active']);
    assert.equal(noFlag.code, 2);
    assert.match(noFlag.stderr, /--environment is required/);
  });

  it('waits for a deployment made before: exit 0 when it succeeded, 1 when it failed or was still going at --timeout', async () => {
    const env = await createEnvironment(f.admin.http, f.orgId);
    const svc = await createService(developer.http, f.orgId);
    for (const outcome of ['succeeded', 'failed'] as const) {
      const made = await deploy(developer.http, f.orgId, { service: svc.name, environment: env.name, revision: outcome });
      const waiting = as(viewer, ['wait', '--id', made.id, '--timeout', '60']);
      const claim = await runner.take({ environments: [env.name], waitSeconds: 20 });
      assert.equal(claim.deployment.id, made.id);
      assert.equal((await runner.logs(made.id, { leaseToken: claim.lease.token, lines: [{ line: `starting ${outcome}` }] })).status, 200);
      assert.equal((await runner.complete(made.id, claim.lease.token, outcome, outcome === 'failed' ? 'it would not start' : undefined)).status, 200);
      const waited = await waiting;
      assert.equal(waited.code, outcome === 'succeeded' ? 0 : 1, waited.stderr);
      assert.match(waited.stderr, new RegExp(`starting ${outcome}`));
      assert.match(waited.stderr, new RegExp(outcome === 'failed' ? `deployment ${made.id} failed: it would not start\\n$` : `\nslipway: deployment ${made.id} succeeded\\n$`));
    }
    const queued = await deploy(developer.http, f.orgId, { service: svc.name, environment: env.name, revision: 'later' });
    const timedOut = await as(viewer, ['wait', '--id', queued.id, '--timeout', '1', '--json']);
    assert.equal(timedOut.code, 1);
    assert.equal(JSON.parse(timedOut.stderr.trim().split('\n').at(-1)!).error.code, 'wait_timeout');
    assert.equal((await f.admin.http.post(`/v1/orgs/${f.orgId}/deployments/${queued.id}/cancel`, {})).status, 200);
  });

  it('prints a deployment\'s log, and follows it to the deployment\'s end', async () => {
    const env = await createEnvironment(f.admin.http, f.orgId);
    const svc = await createService(developer.http, f.orgId);
    const created = await deploy(developer.http, f.orgId, { service: svc.name, environment: env.name });
    const claim = await runner.take({ environments: [env.name], waitSeconds: 0 });
    const lease = claim.lease.token;
    assert.equal((await runner.logs(created.id, { leaseToken: lease, lines: [{ stream: 'stdout', line: 'one' }, { stream: 'stderr', line: 'two \u001b[2Kthree' }] })).status, 200);

    const now = await as(viewer, ['logs', '--id', created.id]);
    assert.equal(now.code, 0, now.stderr);
    assert.equal(now.stdout, 'one\ntwo \\x1b[2Kthree\n');
    const asJson = await as(viewer, ['logs', '--id', created.id, '--json']);
    assert.deepEqual(asJson.stdout.trim().split('\n').map((l) => JSON.parse(l)).map((l) => [l.seq, l.stream, l.line]), [[1, 'stdout', 'one'], [2, 'stderr', 'two \u001b[2Kthree']]);
    const last = await as(viewer, ['logs', '--id', created.id, '--tail', '1']);
    assert.equal(last.stdout, 'two \\x1b[2Kthree\n', last.stderr);
    const tooMany = await as(viewer, ['logs', '--id', created.id, '--tail', '1001']);
    assert.equal(tooMany.code, 2);
    assert.match(tooMany.stderr, /--tail must be/);

    // Followed: the lines written after it started reach it, and it ends when the deployment does.
    // Written once the follower has printed what was there when it started.
    const following = spawnSlipway(['deployment', 'logs', '--id', created.id, '--tail', '1', '--follow'], credentials(viewer));
    await eventually('the follower to print the last line there was', async () => (following.output.includes('two \\x1b[2Kthree') ? true : undefined));
    assert.equal((await runner.logs(created.id, { leaseToken: lease, lines: [{ stream: 'stdout', line: 'healthy' }] })).status, 200);
    assert.equal((await runner.complete(created.id, lease, 'succeeded')).status, 200);
    assert.deepEqual(await following.exited, { code: 0, signal: null }, following.output.join('\n'));
    // The log's lines on stdout; how it ended, on stderr.
    assert.deepEqual(following.output.filter((l) => !l.startsWith('deployment ')), ['two \\x1b[2Kthree', 'healthy']);
    assert.ok(following.output.includes(`deployment ${created.id}: succeeded`), following.output.join('\n'));

    const stillRunning = await deploy(developer.http, f.orgId, { service: svc.name, environment: env.name });
    const gaveUp = await as(viewer, ['logs', '--id', stillRunning.id, '--follow', '--timeout', '1']);
    assert.equal(gaveUp.code, 1);
    assert.match(gaveUp.stderr, new RegExp(`stopped following after 1 s: deployment ${stillRunning.id} is still queued`));
    assert.equal((await f.admin.http.post(`/v1/orgs/${f.orgId}/deployments/${stillRunning.id}/cancel`, {})).status, 200);
  });

  it('says how a followed deployment ended when it ended between the log\'s first page and the read of the deployment', async () => {
    const env = await createEnvironment(f.admin.http, f.orgId);
    const svc = await createService(developer.http, f.orgId);
    const created = await deploy(developer.http, f.orgId, { service: svc.name, environment: env.name });
    const claim = await runner.take({ environments: [env.name], waitSeconds: 0 });
    assert.equal((await runner.logs(created.id, { leaseToken: claim.lease.token, lines: [{ line: 'starting' }] })).status, 200);
    // The API through a forwarder that holds the follower's read of the deployment (not of its
    // log) until the deployment has succeeded.
    let release!: () => void;
    const released = new Promise<void>((resolve) => { release = resolve; });
    let held = false;
    const forwarder = http.createServer(async (req, res) => {
      if (req.method === 'GET' && new URL(req.url!, 'http://x').pathname.endsWith(`/deployments/${created.id}`)) {
        held = true;
        await released;
      }
      const body = await new Promise<Buffer>((resolve) => { const parts: Buffer[] = []; req.on('data', (c: Buffer) => parts.push(c)); req.on('end', () => resolve(Buffer.concat(parts))); });
      const answer = await fetch(f.server.url + req.url, { method: req.method, headers: req.headers as Record<string, string>, ...(body.length > 0 ? { body } : {}) });
      res.writeHead(answer.status, Object.fromEntries([...answer.headers].filter(([name]) => name !== 'content-encoding' && name !== 'transfer-encoding')));
      res.end(Buffer.from(await answer.arrayBuffer()));
    });
    await new Promise<void>((resolve) => forwarder.listen(0, '127.0.0.1', resolve));
    try {
      const url = `http://127.0.0.1:${(forwarder.address() as AddressInfo).port}`;
      const following = spawnSlipway(['deployment', 'logs', '--id', created.id, '--follow'], clientVariables(f.server.url, f.orgId, viewer, url));
      await eventually('the follower to read the deployment', async () => (held ? true : undefined));
      assert.equal((await runner.complete(created.id, claim.lease.token, 'succeeded')).status, 200);
      release();
      assert.deepEqual(await following.exited, { code: 0, signal: null }, following.output.join('\n'));
      assert.deepEqual(following.output, ['starting', `deployment ${created.id}: succeeded`]);
    } finally {
      release();
      forwarder.closeAllConnections();
      await new Promise<void>((resolve) => forwarder.close(() => resolve()));
    }
  });

  it('says what a deployment changes against what it replaced, or another deployment', async () => {
    const env = await createEnvironment(f.admin.http, f.orgId);
    const svc = await createService(developer.http, f.orgId, { spec: { command: ['node', 'server.js'], variables: { GREETING: 'hi' } } });
    const v1 = (await ship(developer.http, runner, f.orgId, { service: svc.name, environment: env.name, revision: 'v1' })).deployment;
    const v2 = (await ship(developer.http, runner, f.orgId, { service: svc.name, environment: env.name, revision: 'v2', variables: { GREETING: 'hello' } })).deployment;
    const changes = await as(viewer, ['changes', '--id', v2.id]);
    assert.equal(changes.code, 0, changes.stderr);
    assert.match(changes.stdout, new RegExp(`^${v2.id} against ${v1.id} \\(superseded at v1 in ${env.name}\\)$`, 'm'));
    assert.match(changes.stdout, /^revision +changed +v1 +v2$/m);
    assert.match(changes.stdout, /^variable GREETING +changed +hi +hello$/m);
    assert.equal((await as(viewer, ['changes', '--id', v2.id, '--against', v2.id])).stdout, `${v2.id} against ${v2.id} (succeeded at v2 in ${env.name})\nno changes\n`);
    assert.deepEqual(JSON.parse((await as(viewer, ['changes', '--id', v1.id, '--json'])).stdout).against, null);
    // The first deployment here: its revision is new, as everything else is.
    assert.match((await as(viewer, ['changes', '--id', v1.id])).stdout, /^revision +added +— +v1$/m);
  });

  it('rolls a service back to what served before, again back, and to a deployment named; --wait follows it', async () => {
    const env = await createEnvironment(f.admin.http, f.orgId);
    const svc = await createService(developer.http, f.orgId);
    const nothing = await as(developer, ['rollback', '--service', svc.name, '--environment', env.name]);
    assert.equal(nothing.code, 1);
    assert.match(nothing.stderr, /nothing to roll back to: no deployment of .* served before now \(none serves\); nothing was created/);
    const v1 = (await ship(developer.http, runner, f.orgId, { service: svc.name, environment: env.name, revision: 'v1' })).deployment;
    assert.deepEqual(JSON.parse((await as(developer, ['rollback', '--service', svc.name, '--environment', env.name, '--json'])).stderr).error.code, 'nothing_to_roll_back');
    const v2 = (await ship(developer.http, runner, f.orgId, { service: svc.name, environment: env.name, revision: 'v2' })).deployment;

    // While another deployment of it there is on its way, what serves is about to change: refused, nothing made.
    const coming = await deploy(developer.http, f.orgId, { service: svc.name, environment: env.name, revision: 'v3' });
    const inFlight = await as(developer, ['rollback', '--service', svc.name, '--environment', env.name, '--json']);
    assert.equal(inFlight.code, 1);
    const refusal = JSON.parse(inFlight.stderr).error;
    assert.equal(refusal.code, 'deployment_in_flight');
    assert.match(refusal.message, new RegExp(`^${coming.id} \\(v3\\) is queued for ${svc.name} in ${env.name}, so what serves there is about to change: .*--to; nothing was created$`));
    assert.equal((await f.admin.http.post(`/v1/orgs/${f.orgId}/deployments/${coming.id}/cancel`, {})).status, 200);
    assert.equal((await developer.http.get(`/v1/orgs/${f.orgId}/deployments?service=${svc.name}&state=queued`)).body.deployments.length, 0);

    // Back to v1, followed to its end.
    const rolling = as(developer, ['rollback', '--service', svc.name, '--environment', env.name, '--wait']);
    const claim = await runner.take({ environments: [env.name], waitSeconds: 20 });
    assert.equal(claim.deployment.rollbackOf, v1.id);
    assert.equal((await runner.complete(claim.deployment.id, claim.lease.token, 'succeeded')).status, 200);
    const rolled = await rolling;
    assert.equal(rolled.code, 0, rolled.stderr);
    assert.equal(rolled.stdout, `${claim.deployment.id}\n`);
    assert.match(rolled.stderr, new RegExp(`rolling ${svc.name} in ${env.name} back from ${v2.id} \\(v2\\) to ${v1.id} \\(v1\\)`));
    assert.match(rolled.stderr, new RegExp(`deployment ${claim.deployment.id}: ${svc.name} into ${env.name} at v1, a rollback to ${v1.id}, queued`));

    // A second rollback goes back to what served before the first: v2.
    const second = await as(developer, ['rollback', '--service', svc.name, '--environment', env.name, '--json']);
    assert.equal(second.code, 0, second.stderr);
    const back = JSON.parse(second.stdout);
    assert.deepEqual([back.rollbackOf, back.revision, back.state], [v2.id, 'v2', 'queued']);
    assert.equal((await f.admin.http.post(`/v1/orgs/${f.orgId}/deployments/${back.id}/cancel`, {})).status, 200);

    // To a deployment named; a viewer may not.
    const named = await as(developer, ['rollback', '--to', v1.id, '--description', 'named']);
    assert.equal(named.code, 0, named.stderr);
    const made = (await f.owner.http.get(`/v1/orgs/${f.orgId}/deployments/${named.stdout.trim()}`)).body;
    assert.deepEqual([made.rollbackOf, made.description], [v1.id, 'named']);
    assert.equal((await f.admin.http.post(`/v1/orgs/${f.orgId}/deployments/${made.id}/cancel`, {})).status, 200);
    const refused = await as(viewer, ['rollback', '--service', svc.name, '--environment', env.name]);
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /^slipway: .*developer/m);
    assert.ok(!refused.stderr.includes('rolling'), 'nothing said to be rolled back when it was refused');
  });

  it('shows a revision as written, never sending its control characters to the terminal', async () => {
    const env = await createEnvironment(f.admin.http, f.orgId);
    const svc = await createService(developer.http, f.orgId);
    const odd = 'r1\u001b]0;PWNED\u0007\u001b[31mRED';
    const first = (await ship(developer.http, runner, f.orgId, { service: svc.name, environment: env.name, revision: odd })).deployment;
    const second = (await ship(developer.http, runner, f.orgId, { service: svc.name, environment: env.name, revision: 'r2' })).deployment;
    const changes = await as(viewer, ['changes', '--id', second.id]);
    const rolled = await as(developer, ['rollback', '--service', svc.name, '--environment', env.name]);
    assert.equal(rolled.code, 0, rolled.stderr);
    for (const printed of [changes.stdout, rolled.stderr]) {
      assert.ok(printed.includes('r1\\x1b]0;PWNED\\x07\\x1b[31mRED'), printed);
      assert.ok(!/[\u001b\u0007]/.test(printed), printed);
    }
    assert.match(rolled.stderr, new RegExp(`rolling ${svc.name} in ${env.name} back from ${second.id} \\(r2\\) to ${first.id} \\(r1`));
    assert.equal((await f.admin.http.post(`/v1/orgs/${f.orgId}/deployments/${rolled.stdout.trim()}/cancel`, {})).status, 200);
  });

  it('lists a page at a time, saying which cursor gets the next', async () => {
    const env = await createEnvironment(f.admin.http, f.orgId);
    const svc = await createService(developer.http, f.orgId);
    const made = [];
    for (let i = 0; i < 3; i++) made.push((await deploy(developer.http, f.orgId, { service: svc.name, environment: env.name })).id as string);
    const ids: string[] = [];
    let args = ['list', '--service', svc.name, '--limit', '2'];
    for (;;) {
      const page = await as(viewer, args);
      assert.equal(page.code, 0, page.stderr);
      ids.push(...page.stdout.trim().split('\n').slice(1).map((l) => l.split(' ')[0]!));
      const more = /--cursor (\S+)/.exec(page.stderr);
      if (more === null) break;
      args = ['list', '--service', svc.name, '--limit', '2', '--cursor', more[1]!];
    }
    assert.deepEqual(ids, [...made].reverse());
    const asJson = JSON.parse((await as(viewer, ['list', '--service', svc.name, '--limit', '2', '--json'])).stdout);
    assert.equal(asJson.deployments.length, 2);
    assert.equal(typeof asJson.nextCursor, 'string');
    for (const id of made) assert.equal((await f.admin.http.post(`/v1/orgs/${f.orgId}/deployments/${id}/cancel`, {})).status, 200);
  });

  it('refuses bad usage with exit 2 before calling anything', async () => {
    for (const [args, message] of [
      [['show'], /--id is required/],
      [['show', '--id', ''], /--id is empty/],
      [['list', '--state', 'running'], /--state must be one of queued, in_progress/],
      [['list', '--limit', '0'], /--limit must be a whole number from 1 to 200/],
      [['logs', '--id', 'dep_x', '--timeout', '5'], /--timeout needs --follow/],
      [['rollback', '--service', 'api'], /rollback needs --service and --environment/],
      [['rollback', '--to', 'dep_x', '--service', 'api'], /--to names the deployment to roll back to/],
      [['rollback', '--to', 'dep_x', '--timeout', '5'], /--timeout needs --wait/],
      [['promote'], /unknown deployment command "promote": list, show, active, logs, changes, cancel, wait, rollback/],
    ] as const) {
      const refused = await as(developer, [...args]);
      assert.equal(refused.code, 2, `${args.join(' ')}: ${refused.stderr}`);
      assert.match(refused.stderr, message);
    }
  });
});
