// `slipway deploy` as a real child process against a real server: it queues a deployment as a
// service user, follows it with --wait (the runner's side played over the protocol), says why a
// deployment failed, gives up waiting when told, reports the API's refusals, and a create whose
// answer was lost is retried under its Idempotency-Key without a second deployment.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { createEnvironment, createService, newRunner, ship, type RunnerClient } from '../support/deployments.js';
import type { Actor } from '../support/harness.js';
import { lossyProxy } from '../support/lossy-proxy.js';
import { startWithOrg, type OrgFixture } from '../support/org-fixture.js';
import { CLI_ENTRY, runCli, type CliResult, clientVariables } from '../support/processes.js';

describe('slipway deploy', () => {
  let f: OrgFixture;
  let developer: Actor;
  let env: { name: string };
  let service: { name: string };
  let runner: RunnerClient;

  /** The CLI with a service user's credentials in the environment, as a CI job has them. */
  const deployAs = (who: Actor, args: string[], url = f.server.url): Promise<CliResult> => runCli(['deploy', ...args], clientVariables(f.server.url, f.orgId, who, url));
  const deployments = async () => (await f.owner.http.get(`/v1/orgs/${f.orgId}/deployments?service=${service.name}&limit=200`)).body.deployments as Array<{ id: string; state: string }>;

  /** The CLI as a child process of its own (to be signalled) for the developer, deploying the service into the environment. */
  const spawnDeploy = (args: string[], url: string, tokenUrl: string) => {
    const child = spawn(process.execPath, [CLI_ENTRY, 'deploy', '--service', service.name, '--environment', env.name, ...args], {
      env: {
        PATH: process.env.PATH ?? '', SLIPWAY_URL: url, SLIPWAY_TOKEN_URL: tokenUrl,
        SLIPWAY_ORG: f.orgId, SLIPWAY_CLIENT_ID: developer.clientId, SLIPWAY_CLIENT_SECRET: developer.clientSecret, SLIPWAY_SCOPE: developer.scope,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (c: Buffer) => { stderr += c.toString('utf8'); });
    child.stdout.resume();
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    return { kill: (signal: NodeJS.Signals) => child.kill(signal), exited, stderr: () => stderr };
  };

  before(async () => {
    f = await startWithOrg();
    developer = await f.server.actor(f.orgId, 'developer');
    env = await createEnvironment(f.admin.http, f.orgId);
    service = await createService(f.admin.http, f.orgId, { spec: { command: ['node', 'server.js'], variables: { GREETING: 'hello' } } });
    runner = await newRunner(f.server, f.orgId);
  });
  after(async () => { await f.close(); });

  it('queues a deployment and prints its id; with --json, the deployment', async () => {
    const plain = await deployAs(developer, ['--service', service.name, '--environment', env.name, '--revision', 'abc123']);
    assert.equal(plain.code, 0, plain.stderr);
    const id = plain.stdout.trim();
    assert.match(id, /^dep_/);
    assert.match(plain.stderr, new RegExp(`deployment ${id}: ${service.name} into ${env.name} at abc123, queued`));
    const json = await deployAs(developer, ['--service', service.name, '--environment', env.name, '--var', 'GREETING=hi=there', '--var', 'EXTRA=', '--description', 'from CI', '--json']);
    assert.equal(json.code, 0, json.stderr);
    const created = JSON.parse(json.stdout);
    assert.equal(created.state, 'queued');
    assert.equal(created.description, 'from CI');
    assert.deepEqual(created.spec.variables, { GREETING: 'hi=there', EXTRA: '' });
    assert.equal(json.stderr, '', 'nothing but the result with --json');
    for (const d of [id, created.id]) assert.equal((await f.owner.http.post(`/v1/orgs/${f.orgId}/deployments/${d}/cancel`, {})).status, 200);
  });

  it('--wait follows the deployment to its end, its log on stderr, and exits 0 when it succeeded', async () => {
    const cli = deployAs(developer, ['--service', service.name, '--environment', env.name, '--wait', '--json']);
    const claim = await runner.take({ environments: [env.name], waitSeconds: 20 });
    const lease = claim.lease.token;
    assert.equal((await runner.logs(claim.deployment.id, { leaseToken: lease, lines: [{ stream: 'stdout', line: 'listening on the port given' }, { stream: 'stderr', line: 'a warning' },
      // A service's output that would retitle the terminal, clear a line and move up over one printed already.
      { stream: 'stdout', line: 'hi \u001b]0;owned\u0007\u001b[2K\u001b[1Adeployment succeeded' }] })).status, 200);
    assert.equal((await runner.complete(claim.deployment.id, lease, 'succeeded')).status, 200);
    const result = await cli;
    assert.equal(result.code, 0, result.stderr);
    assert.equal(JSON.parse(result.stdout).state, 'succeeded');
    assert.equal(JSON.parse(result.stdout).id, claim.deployment.id);
    assert.match(result.stderr, /listening on the port given\na warning\n/);
    // Shown, not sent to the terminal.
    assert.ok(result.stderr.includes('hi \\x1b]0;owned\\x07\\x1b[2K\\x1b[1Adeployment succeeded\n'), result.stderr);
    assert.ok(!/[\u001b\u0007]/.test(result.stderr), 'no control character reaches the terminal');
  });

  it('--wait exits 1 with the reason when the deployment fails', async () => {
    const cli = deployAs(developer, ['--service', service.name, '--environment', env.name, '--wait']);
    const claim = await runner.take({ environments: [env.name], waitSeconds: 20 });
    assert.equal((await runner.complete(claim.deployment.id, claim.lease.token, 'failed', 'the health check got 500 from /healthz')).status, 200);
    const result = await cli;
    assert.equal(result.code, 1);
    assert.equal(result.stdout.trim(), claim.deployment.id);
    assert.match(result.stderr, new RegExp(`slipway: deployment ${claim.deployment.id} failed: the health check got 500 from /healthz\\n$`));
  });

  it('--wait --timeout gives up waiting with exit 1, and the deployment goes on', async () => {
    const result = await deployAs(developer, ['--service', service.name, '--environment', env.name, '--wait', '--timeout', '1', '--json']);
    assert.equal(result.code, 1);
    const error = JSON.parse(result.stderr.trim().split('\n').at(-1)!).error;
    assert.equal(error.code, 'wait_timeout');
    const id = /deployment (dep_\w+) is still queued/.exec(error.message)?.[1];
    assert.ok(id, error.message);
    assert.equal(error.deployment, id, 'the JSON failure names the deployment, for a script to follow or cancel');
    assert.equal((await f.owner.http.get(`/v1/orgs/${f.orgId}/deployments/${id}`)).body.state, 'queued');
    assert.equal((await f.owner.http.post(`/v1/orgs/${f.orgId}/deployments/${id}/cancel`, {})).status, 200);
  });

  it('--wait prints the id on stdout when the wait times out too, as DEP=$(slipway deploy … --wait) expects', async () => {
    const result = await deployAs(developer, ['--service', service.name, '--environment', env.name, '--wait', '--timeout', '4']);
    assert.equal(result.code, 1);
    const id = result.stdout.trim();
    assert.match(id, /^dep_\w+$/, `stdout: ${JSON.stringify(result.stdout)}; stderr: ${result.stderr}`);
    // No runner took it: while it waits (once, halfway through so short a wait) and when it gives up,
    // it says what to check: the runners list knows of none for that environment.
    const hint = `no runner has claimed it yet: no runner for ${env.name} is online \\(none was ever seen\\): start one with slipway runner --environment ${env.name}`;
    assert.match(result.stderr, new RegExp(`^deployment ${id} is still queued: ${hint}`, 'm'));
    assert.match(result.stderr, new RegExp(`gave up waiting after 4 s: deployment ${id} is still queued, and goes on; ${hint}`));
    assert.equal((await f.owner.http.post(`/v1/orgs/${f.orgId}/deployments/${id}/cancel`, {})).status, 200);
  });

  it('--wait says which runners are online when one is and still nothing claimed the deployment', async () => {
    // A runner of the environment that asked a moment ago and is busy elsewhere (it claims no more).
    assert.equal((await runner.claim({ environments: [env.name], waitSeconds: 0, host: `rh_deploy_hint_${process.pid}` })).status, 204);
    const result = await deployAs(developer, ['--service', service.name, '--environment', env.name, '--wait', '--timeout', '2']);
    assert.equal(result.code, 1);
    const id = result.stdout.trim();
    assert.match(result.stderr, new RegExp(`still queued, and goes on; no runner has claimed it yet: 1 runner for ${env.name} is online, carrying out 0 deployments now \\(slipway runners --environment ${env.name}\\)`), result.stderr);
    assert.equal((await f.owner.http.post(`/v1/orgs/${f.orgId}/deployments/${id}/cancel`, {})).status, 200);
  });

  it('--from promotes what serves in another environment, at the revision asked for, and refuses when that is not what serves there', async () => {
    const svc = await createService(f.admin.http, f.orgId, { spec: { command: ['node', 'server.js'], variables: { GREETING: 'hello' } } });
    const staging = await createEnvironment(f.admin.http, f.orgId, { variables: { STAGE: 'staging' } });
    const production = await createEnvironment(f.admin.http, f.orgId, { variables: { STAGE: 'production' } });
    const empty = await createEnvironment(f.admin.http, f.orgId);
    const tried = await ship(developer.http, runner, f.orgId, { service: svc.name, environment: staging.name, revision: 'abc123', variables: { FEATURE: 'on' } });
    const all = async () => (await f.owner.http.get(`/v1/orgs/${f.orgId}/deployments?service=${svc.name}`)).body.deployments as Array<{ id: string }>;

    for (const [args, message] of [
      [['--from', staging.name, '--revision', 'def456'], new RegExp(`^slipway: ${staging.name} serves ${svc.name} at abc123 \\(deployment ${tried.deployment.id}\\), not at def456: nothing was promoted$`, 'm')],
      [['--from', empty.name], new RegExp(`^slipway: nothing serves ${svc.name} in ${empty.name}: no deployment of it succeeded there to promote`, 'm')],
    ] as const) {
      const refused = await deployAs(developer, ['--service', svc.name, '--environment', production.name, ...args]);
      assert.equal(refused.code, 1, refused.stderr);
      assert.match(refused.stderr, message);
    }
    // With --json, a code a pipeline can tell from a failure of the system.
    for (const [args, code] of [[['--from', staging.name, '--revision', 'def456'], 'revision_not_serving'], [['--from', empty.name], 'nothing_to_promote']] as const) {
      const refused = await deployAs(developer, ['--service', svc.name, '--environment', production.name, ...args, '--json']);
      assert.equal(refused.code, 1, refused.stderr);
      assert.equal(JSON.parse(refused.stderr).error.code, code);
    }
    assert.equal((await all()).length, 1, 'nothing promoted');
    const same = await deployAs(developer, ['--service', svc.name, '--environment', staging.name, '--from', staging.name]);
    assert.equal(same.code, 2);
    assert.match(same.stderr, /--from and --environment are both/);

    const cli = deployAs(developer, ['--service', svc.name, '--environment', production.name, '--from', staging.name, '--revision', 'abc123', '--var', 'REGION=us', '--wait', '--json']);
    const claim = await runner.take({ environments: [production.name], waitSeconds: 20 });
    assert.deepEqual(claim.run.variables, { GREETING: 'hello', STAGE: 'production', FEATURE: 'on', REGION: 'us' });
    assert.equal((await runner.complete(claim.deployment.id, claim.lease.token)).status, 200);
    const result = await cli;
    assert.equal(result.code, 0, result.stderr);
    const promoted = JSON.parse(result.stdout);
    assert.deepEqual([promoted.id, promoted.state, promoted.promotedFrom, promoted.revision, promoted.environment.name],
      [claim.deployment.id, 'succeeded', tried.deployment.id, 'abc123', production.name]);
  });

  it('slipway environment locks and unlocks an environment, and deploy is refused with the reason meanwhile', async () => {
    const environment = (who: Actor, args: string[]) => runCli(['environment', ...args], clientVariables(f.server.url, f.orgId, who));
    const frozen = await createEnvironment(f.admin.http, f.orgId);

    for (const [args, message] of [
      [['lock', '--environment', frozen.name], /--reason is required/],
      [['lock', '--environment', frozen.name, '--reason', '  '], /--reason is required/],
      [['unlock'], /--environment is required/],
      [['freeze', '--environment', frozen.name], /unknown environment command "freeze": list, show, apply, delete, lock, unlock/],
    ] as const) {
      const refused = await environment(f.admin, [...args]);
      assert.equal(refused.code, 2, refused.stderr);
      assert.match(refused.stderr, message);
    }
    const byDeveloper = await environment(developer, ['lock', '--environment', frozen.name, '--reason', 'mine']);
    assert.equal(byDeveloper.code, 1);
    assert.match(byDeveloper.stderr, /admin/);

    const locked = await environment(f.admin, ['lock', '--environment', frozen.name, '--reason', 'release freeze']);
    assert.equal(locked.code, 0, locked.stderr);
    assert.match(locked.stdout, new RegExp(`^environment ${frozen.name}: locked since \\S+ by ${f.admin.id}: release freeze\\n$`));
    const refused = await deployAs(developer, ['--service', service.name, '--environment', frozen.name, '--json']);
    assert.equal(refused.code, 1);
    const error = JSON.parse(refused.stderr.trim().split('\n').at(-1)!).error;
    assert.deepEqual([error.code, error.status, error.lock.reason], ['environment_locked', 409, 'release freeze']);
    const shown = JSON.parse((await environment(developer, ['show', '--environment', frozen.name, '--json'])).stdout);
    assert.equal(shown.lock.reason, 'release freeze');

    const unlocked = await environment(f.admin, ['unlock', '--environment', frozen.name]);
    assert.equal(unlocked.code, 0, unlocked.stderr);
    assert.match(unlocked.stdout, new RegExp(`^environment ${frozen.name}: unlocked \\(locked since \\S+: release freeze\\)\\n$`));
    assert.equal((await environment(f.admin, ['unlock', '--environment', frozen.name])).stdout, `environment ${frozen.name}: not locked; nothing to unlock\n`);
    assert.match((await environment(developer, ['show', '--environment', frozen.name])).stdout, /^lock +none$/m);

    // A reason is shown as written, its control characters too, but never sent to the terminal as such.
    assert.equal((await f.admin.http.put(`/v1/orgs/${f.orgId}/environments/${frozen.name}/lock`, { reason: 'freeze \u001b]52;c;ZWNobyBvd25lZA==\u0007\u001b[31mred' })).status, 200);
    const escaped = 'freeze \\x1b]52;c;ZWNobyBvd25lZA==\\x07\\x1b[31mred';
    const plainShow = await environment(developer, ['show', '--environment', frozen.name]);
    const plainDeploy = await deployAs(developer, ['--service', service.name, '--environment', frozen.name]);
    assert.equal(plainDeploy.code, 1);
    assert.match(plainDeploy.stderr, new RegExp(`From a shell, as an admin or owner: slipway environment unlock --environment ${frozen.name}\\n$`));
    for (const printed of [plainShow.stdout, plainDeploy.stderr]) {
      assert.ok(printed.includes(escaped), printed);
      assert.ok(!/[\u001b\u0007]/.test(printed), printed);
    }
    assert.equal((await environment(f.admin, ['unlock', '--environment', frozen.name])).code, 0);
  });

  it('reports the API\'s refusals with exit 1, and usage errors with exit 2, creating nothing', async () => {
    const before = (await deployments()).length;
    const unknown = await deployAs(developer, ['--service', 'no-such-service', '--environment', env.name, '--json']);
    assert.equal(unknown.code, 1);
    const error = JSON.parse(unknown.stderr.trim()).error;
    assert.equal(error.code, 'service_not_found');
    assert.equal(error.status, 404);
    assert.deepEqual(error.errors.map((e: { pointer: string }) => e.pointer), ['/service']);

    const viewer = await f.server.actor(f.orgId, 'viewer');
    const refused = await deployAs(viewer, ['--service', service.name, '--environment', env.name]);
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /^slipway: .*developer/m);

    const wrongSecret = await deployAs({ ...developer, clientSecret: 'sws_not-the-secret' }, ['--service', service.name, '--environment', env.name]);
    assert.equal(wrongSecret.code, 1);
    assert.match(wrongSecret.stderr, /refused .*client credentials \(invalid_client/);
    // With --json, the token endpoint's code, as a script can tell wrong credentials from the rest.
    const wrongAsJson = await deployAs({ ...developer, clientSecret: 'sws_not-the-secret' }, ['--service', service.name, '--environment', env.name, '--json']);
    assert.equal(wrongAsJson.code, 1);
    assert.deepEqual([JSON.parse(wrongAsJson.stderr.trim()).error.code, JSON.parse(wrongAsJson.stderr.trim()).error.status], ['invalid_client', 401]);

    for (const [args, message] of [
      [['--environment', env.name], /--service is required/],
      [['--service', service.name, '--environment', env.name, '--timeout', '5'], /--timeout needs --wait/],
      [['--service', service.name, '--environment', env.name, '--var', 'NOEQUALS'], /--var must be KEY=VALUE, got "NOEQUALS"/],
      [['--service', service.name, '--environment', env.name, '--var', 'A=1', '--var', 'A=2'], /--var A is given twice/],
      [['--service', service.name, '--environment', env.name, '--wait', '--timeout', '0'], /--timeout must be a whole number of seconds from 1 to 86400/],
      [['--service', service.name, '--environment', env.name, '--bogus'], /Unknown option '--bogus'/],
      [['--service', service.name, '--environment', env.name, '--revision', ''], /--revision is empty \(an unset variable\?\)/],
      [['--service', service.name, '--environment', env.name, '--from', ''], /--from is empty \(an unset variable\?\)/],
    ] as const) {
      const result = await deployAs(developer, [...args]);
      assert.equal(result.code, 2, `${args.join(' ')}: ${result.stderr}`);
      assert.match(result.stderr, message);
    }
    assert.equal((await deployments()).length, before);
  });

  it('stops at once on Ctrl-C, even with a token request under way, saying nothing was created', async () => {
    // A token endpoint that takes the connection and never answers.
    const held = new Set<net.Socket>();
    const silent = net.createServer((socket) => { held.add(socket); socket.resume(); });
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    try {
      const child = spawnDeploy(['--wait'], f.server.url, `http://127.0.0.1:${(silent.address() as AddressInfo).port}/oauth/v2/token`);
      // Signalled once its token request has reached the token endpoint (a loaded machine may take a while to start it).
      for (let waited = 0; held.size === 0; waited += 50) {
        assert.ok(waited < 10_000, 'the command never asked for a token');
        await sleep(50);
      }
      const signalled = Date.now();
      child.kill('SIGINT');
      assert.equal(await child.exited, 130);
      assert.ok(Date.now() - signalled < 5_000, `exited ${Date.now() - signalled} ms after the signal (the token request's own timeout is 15 s)`);
      assert.match(child.stderr(), /interrupted \(SIGINT\) before the deployment was asked for; nothing was created/);
    } finally {
      for (const socket of held) socket.destroy();
      await new Promise<void>((resolve) => silent.close(() => resolve()));
    }
  });

  it('says nothing was created when Ctrl-C comes while --from looks up what to promote, and that something may have been when it comes while creating', async () => {
    // An API that takes the connection and never answers; the token endpoint is the real one.
    const held = new Set<net.Socket>();
    const silent = net.createServer((socket) => { held.add(socket); socket.resume(); });
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    try {
      for (const [extra, said] of [
        [['--from', 'staging'], /interrupted \(SIGINT\) before the deployment was asked for; nothing was created/],
        [[], /interrupted \(SIGINT\) before the server answered; the deployment may have been created/],
      ] as const) {
        const child = spawnDeploy([...extra], `http://127.0.0.1:${(silent.address() as AddressInfo).port}`, `${f.server.url}/oauth/v2/token`);
        const before = held.size;
        for (let waited = 0; held.size === before; waited += 50) {
          assert.ok(waited < 10_000, 'the command never called the API');
          await sleep(50);
        }
        await sleep(200);
        child.kill('SIGINT');
        assert.equal(await child.exited, 130);
        assert.match(child.stderr(), said, `${extra.join(' ')}: ${child.stderr()}`);
      }
    } finally {
      for (const socket of held) socket.destroy();
      await new Promise<void>((resolve) => silent.close(() => resolve()));
    }
  });

  it('retries a create whose answer was lost under the same Idempotency-Key: one deployment', async () => {
    // A proxy that lets the first create through to the server and then cuts the connection
    // instead of answering: the server made the deployment, the CLI never heard.
    let creates = 0;
    const isCreate = (req: { method: string; url: string }) => req.method === 'POST' && req.url.endsWith('/deployments');
    const proxy = await lossyProxy(f.server.url, (req) => isCreate(req) && creates++ === 0);
    try {
      const before = await deployments();
      const result = await deployAs(developer, ['--service', service.name, '--environment', env.name, '--json'], proxy.url);
      assert.equal(result.code, 0, result.stderr);
      const keys = proxy.seen.filter(isCreate).map((r) => String(r.headers['idempotency-key']));
      assert.equal(keys.length, 2, 'asked twice');
      assert.equal(keys[0], keys[1], 'under one key');
      const made = (await deployments()).filter((d) => !before.some((b) => b.id === d.id));
      assert.deepEqual(made.map((d) => d.id), [JSON.parse(result.stdout).id], 'one deployment, the one printed');
      assert.equal((await f.owner.http.post(`/v1/orgs/${f.orgId}/deployments/${made[0]!.id}/cancel`, {})).status, 200);
    } finally {
      await proxy.close();
    }
  });
});
