// The runners list: which runner processes an organization has, whether each is online, what it
// takes and carries out; what a runner says of itself (protocol step 6); the reference runner
// saying it; and the list forgetting runners long gone.
import assert from 'node:assert/strict';
import { hostname } from 'node:os';
import { after, before, describe, it } from 'node:test';
import { createRunnerService } from '../../src/modules/runner/runner.service.js';
import { createRunnersService } from '../../src/modules/runner/runners.service.js';
import { VERSION } from '../../src/platform/version.js';
import {
  createEnvironment, createService, deploy, eventually, newRunner, startDeployFixture, unique, type DeployFixture,
} from '../support/deployments.js';
import { serviceSpec, settled, startRunner } from '../support/runner-agent.js';
import type { HttpClient } from '../support/harness.js';
import type { RequestContext } from '../../src/platform/context.js';
import { runCli } from '../support/processes.js';

const hostId = () => `rh_${unique('test').replace(/[^A-Za-z0-9_-]/g, '_')}`;

async function listRunners(http: HttpClient, orgId: string, query = ''): Promise<any> {
  const res = await http.get(`/v1/orgs/${orgId}/runners${query}`);
  assert.equal(res.status, 200, res.text);
  return res.body;
}

describe('runners list', () => {
  let f: DeployFixture;
  before(async () => { f = await startDeployFixture(); });
  after(() => f.close());

  it('lists a runner that names itself: online, its environments, what it says of itself, what it carries out and serves', async () => {
    const { server, orgId, admin, developer, viewer } = f;
    const runner = await newRunner(server, orgId);
    const [env, other] = [await createEnvironment(admin.http, orgId), await createEnvironment(admin.http, orgId)];
    const svc = await createService(developer.http, orgId, { spec: { command: ['serve'] } });
    const host = hostId();

    // Nothing claimed yet: not listed.
    assert.equal((await listRunners(viewer.http, orgId)).runners.some((r: any) => r.host === host), false);
    assert.equal((await runner.claim({ environments: [env.name], waitSeconds: 0, host, hostname: 'build-7.example', version: 'acme-runner/2.1 linux' })).status, 204);

    const page = await listRunners(viewer.http, orgId);
    assert.ok(page.onlineWithinSeconds >= 40);
    const listed = page.runners.find((r: any) => r.host === host);
    assert.ok(listed, JSON.stringify(page));
    assert.equal(listed.state, 'online');
    assert.deepEqual(listed.serviceUser, { id: runner.actor.id, name: runner.actor.name });
    assert.deepEqual(listed.environments, [{ id: env.id, name: env.name }]);
    assert.equal(listed.hostname, 'build-7.example');
    assert.equal(listed.version, 'acme-runner/2.1 linux');
    assert.match(listed.address, /^(127\.0\.0\.1|::1|::ffff:127\.0\.0\.1)$/);
    assert.equal(listed.firstSeenAt, listed.lastSeenAt);
    assert.deepEqual([listed.inProgress, listed.serving], [[], 0]);

    // Filtered by environment: it takes `env`'s deployments, not `other`'s.
    assert.ok((await listRunners(viewer.http, orgId, `?environment=${env.name}`)).runners.some((r: any) => r.host === host));
    assert.ok((await listRunners(viewer.http, orgId, `?environment=${env.id}&state=online`)).runners.some((r: any) => r.host === host));
    assert.equal((await listRunners(viewer.http, orgId, `?environment=${other.name}`)).runners.some((r: any) => r.host === host), false);
    assert.equal((await listRunners(viewer.http, orgId, '?state=offline')).runners.some((r: any) => r.host === host), false);
    const unknown = await viewer.http.get(`/v1/orgs/${orgId}/runners?environment=${unique('nowhere')}`);
    assert.equal(unknown.status, 404, unknown.text);

    // What it carries out, then serves.
    const d = await deploy(developer.http, orgId, { service: svc.id, environment: env.id });
    const claim = await runner.take({ environments: [env.name], waitSeconds: 0, host });
    assert.equal(claim.deployment.id, d.id);
    assert.deepEqual((await listRunners(viewer.http, orgId)).runners.find((r: any) => r.host === host).inProgress, [d.id]);
    assert.equal((await runner.complete(d.id, claim.lease.token)).status, 200);
    const serving = (await listRunners(viewer.http, orgId)).runners.find((r: any) => r.host === host);
    assert.deepEqual([serving.inProgress, serving.serving], [[], 1]);
    // What it lets go of (it stops) it no longer runs; adopted again, it does.
    assert.deepEqual((await runner.actor.http.post(`/v1/orgs/${orgId}/runner/release`, { host, deployments: [d.id] })).body, { released: [d.id] });
    assert.equal((await listRunners(viewer.http, orgId)).runners.find((r: any) => r.host === host).serving, 0);
    assert.deepEqual((await runner.actor.http.post(`/v1/orgs/${orgId}/runner/adopt`, { host, environments: [env.id] })).body.adopted.map((a: any) => a.deployment.id), [d.id]);
    assert.equal((await listRunners(viewer.http, orgId)).runners.find((r: any) => r.host === host).serving, 1);

    // An environment renamed shows its new name; one deleted is left out.
    const renamed = unique('renamed');
    assert.equal((await admin.http.patch(`/v1/orgs/${orgId}/environments/${env.id}`, { name: renamed })).status, 200);
    assert.deepEqual((await listRunners(viewer.http, orgId)).runners.find((r: any) => r.host === host).environments, [{ id: env.id, name: renamed }]);
    assert.equal((await admin.http.delete(`/v1/orgs/${orgId}/environments/${env.id}?force=true`)).status, 204);
    assert.deepEqual((await listRunners(viewer.http, orgId)).runners.find((r: any) => r.host === host).environments, []);
  });

  it('lists a runner without environments for every environment, and pages by host', async () => {
    const { server, orgId, admin, viewer } = f;
    const env = await createEnvironment(admin.http, orgId);
    const hosts = [hostId(), hostId(), hostId()];
    for (const host of hosts) assert.equal((await (await newRunner(server, orgId)).claim({ waitSeconds: 0, host })).status, 204);
    const listed = (await listRunners(viewer.http, orgId, `?environment=${env.name}`)).runners.filter((r: any) => hosts.includes(r.host));
    assert.equal(listed.length, 3);
    for (const r of listed) assert.equal(r.environments, null);

    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const page: any = await listRunners(viewer.http, orgId, `?limit=1${cursor !== null ? `&cursor=${cursor}` : ''}`);
      assert.ok(page.runners.length <= 1);
      seen.push(...page.runners.map((r: any) => r.host));
      cursor = page.nextCursor;
    } while (cursor !== null);
    assert.deepEqual(seen, [...seen].sort());
    assert.equal(new Set(seen).size, seen.length);
    for (const host of hosts) assert.ok(seen.includes(host));
    // A cursor belongs to its filters.
    const first = await listRunners(viewer.http, orgId, '?limit=1');
    const mismatched = await viewer.http.get(`/v1/orgs/${orgId}/runners?limit=1&state=online&cursor=${first.nextCursor}`);
    assert.equal(mismatched.status, 400, mismatched.text);
  });

  it('shows a runner not heard from as offline, forgets it after a week, and forgets it with its service user', async () => {
    const { server, orgId, owner, viewer } = { ...f, owner: f.server.owner };
    const runner = await newRunner(server, orgId);
    const host = hostId();
    assert.equal((await runner.claim({ waitSeconds: 0, host })).status, 204);
    const backdate = (ms: number) => server.core.db.updateTable('runners').set({ last_seen_at: new Date(Date.now() - ms).toISOString() })
      .where('org_id', '=', orgId).where('host', '=', host).execute();

    // Not stopped: it never said so.
    assert.equal((await listRunners(viewer.http, orgId)).runners.find((r: any) => r.host === host)?.stoppedAt, null);
    await backdate(5 * 60_000);
    const offline = (await listRunners(viewer.http, orgId, '?state=offline')).runners.find((r: any) => r.host === host);
    assert.equal(offline?.state, 'offline');
    assert.equal((await listRunners(viewer.http, orgId, '?state=online')).runners.some((r: any) => r.host === host), false);

    await server.core.runners.prune();
    assert.ok((await listRunners(viewer.http, orgId)).runners.some((r: any) => r.host === host), 'pruned before a week had passed');
    await backdate(8 * 86_400_000);
    await server.core.runners.prune();
    assert.equal((await listRunners(viewer.http, orgId)).runners.some((r: any) => r.host === host), false);

    const gone = await newRunner(server, orgId);
    const goneHost = hostId();
    assert.equal((await gone.claim({ waitSeconds: 0, host: goneHost })).status, 204);
    assert.equal((await owner.http.delete(`/v1/orgs/${orgId}/service-users/${gone.actor.id}`)).status, 204);
    assert.equal((await listRunners(viewer.http, orgId)).runners.some((r: any) => r.host === goneHost), false);
  });

  it('counts a heartbeat as hearing from the runner that carries the deployment out, and writes each runner down at most so often', async () => {
    const { server, orgId, admin, developer, viewer } = f;
    // This node's own service writes a runner down at most every 10 s; one that writes every time shows the heartbeat's effect.
    const eager = createRunnersService({ db: server.core.db, dialect: server.core.database.dialect, hostTimeoutSeconds: 60, logger: server.core.logger, writeEveryMs: 0 });
    const runner = await newRunner(server, orgId);
    const env = await createEnvironment(admin.http, orgId);
    const svc = await createService(developer.http, orgId, { spec: { command: ['serve'] } });
    const d = await deploy(developer.http, orgId, { service: svc.id, environment: env.id });
    const host = hostId();
    const claim = await runner.take({ environments: [env.name], waitSeconds: 0, host });
    assert.equal(claim.deployment.id, d.id);
    const lastSeen = async () => (await listRunners(viewer.http, orgId)).runners.find((r: any) => r.host === host)?.lastSeenAt as string;
    const backdate = () => server.core.db.updateTable('runners').set({ last_seen_at: new Date(Date.now() - 5 * 60_000).toISOString() })
      .where('org_id', '=', orgId).where('host', '=', host).execute();

    // Through the server: written when it claimed, not again within 10 s.
    await backdate();
    const before = await lastSeen();
    assert.equal((await runner.heartbeat(d.id, claim.lease.token)).status, 200);
    assert.equal((await runner.claim({ environments: [env.name], waitSeconds: 0, host })).status, 204);
    assert.equal(await lastSeen(), before);
    // A heartbeat's runner, heard: its deployment's host.
    await eager.heard(orgId, host, runner.actor.id);
    const heard = await lastSeen();
    assert.ok(Date.parse(heard) > Date.parse(before));
    assert.equal((await listRunners(viewer.http, orgId, '?state=online')).runners.some((r: any) => r.host === host), true);
    // A host that never claimed has no entry to bring up to date.
    await eager.heard(orgId, hostId(), runner.actor.id);
    assert.equal((await runner.complete(d.id, claim.lease.token)).status, 200);
  });

  it('lists a runner that said it stops offline at once, and for good; with nothing to let go, and only its own', async () => {
    // An organization of its own: the runners here take every environment, and stay listed.
    const { server } = f;
    const orgId = (await server.createOrg()).id;
    const viewer = await server.actor(orgId, 'viewer');
    const runner = await newRunner(server, orgId);
    const host = hostId();
    assert.equal((await runner.claim({ waitSeconds: 0, host })).status, 204);
    assert.equal((await listRunners(viewer.http, orgId)).runners.find((r: any) => r.host === host)?.state, 'online');
    // Another runner's service user cannot say this one stopped.
    const other = await newRunner(server, orgId);
    assert.equal((await other.actor.http.post(`/v1/orgs/${orgId}/runner/release`, { host, deployments: [], stopping: true })).status, 200);
    assert.equal((await listRunners(viewer.http, orgId)).runners.find((r: any) => r.host === host)?.state, 'online');

    const said = await runner.actor.http.post(`/v1/orgs/${orgId}/runner/release`, { host, deployments: [], stopping: true });
    assert.equal(said.status, 200, said.text);
    assert.deepEqual(said.body, { released: [] });
    const listed = (await listRunners(viewer.http, orgId)).runners.find((r: any) => r.host === host);
    assert.equal(listed.state, 'offline');
    assert.equal(typeof listed.stoppedAt, 'string');
    // A call of its still under way when it stopped does not bring it back.
    assert.equal((await runner.claim({ waitSeconds: 0, host })).status, 204);
    assert.equal((await listRunners(viewer.http, orgId)).runners.find((r: any) => r.host === host)?.state, 'offline');
    // A release of nothing, without `stopping`, lets nothing go.
    const empty = await runner.actor.http.post(`/v1/orgs/${orgId}/runner/release`, { host, deployments: [] });
    assert.deepEqual([empty.status, empty.body.released], [200, []]);
  });

  it('keeps a runner\'s entry its own: another runner naming the same host changes nothing', async () => {
    const { server, orgId, viewer } = f;
    const [mine, other] = [await newRunner(server, orgId), await newRunner(server, orgId)];
    const host = hostId();
    assert.equal((await mine.claim({ waitSeconds: 0, host, hostname: 'mine' })).status, 204);
    assert.equal((await other.claim({ waitSeconds: 0, host, hostname: 'theirs' })).status, 204);
    const listed = (await listRunners(viewer.http, orgId)).runners.find((r: any) => r.host === host);
    assert.deepEqual([listed.serviceUser.id, listed.hostname], [mine.actor.id, 'mine']);

    // Nor does carrying a deployment out under that host: its heartbeats do not keep the entry online, and it is not the entry's work.
    const { admin, developer } = f;
    const env = await createEnvironment(admin.http, orgId);
    const svc = await createService(developer.http, orgId, { spec: { command: ['serve'] } });
    const d = await deploy(developer.http, orgId, { service: svc.id, environment: env.id });
    const claim = await other.take({ environments: [env.name], waitSeconds: 0, host });
    assert.equal(claim.deployment.id, d.id);
    const gone = new Date(Date.now() - 5 * 60_000).toISOString();
    await server.core.db.updateTable('runners').set({ last_seen_at: gone }).where('org_id', '=', orgId).where('host', '=', host).execute();
    const eager = createRunnersService({ db: server.core.db, dialect: server.core.database.dialect, hostTimeoutSeconds: 60, logger: server.core.logger, writeEveryMs: 0 });
    const c = server.config;
    const beating = createRunnerService({
      db: server.core.db, dialect: server.core.database.dialect, secrets: server.core.secrets, signals: server.core.signals,
      leaseSeconds: c.runnerLeaseSeconds, maxAttempts: c.deploymentMaxAttempts, hostTimeoutSeconds: c.runnerHostTimeoutSeconds, runners: eager,
    });
    await beating.heartbeat(orgId, d.id, claim.lease.token);
    const after = (await listRunners(viewer.http, orgId)).runners.find((r: any) => r.host === host);
    assert.deepEqual([after.serviceUser.id, after.state, Date.parse(after.lastSeenAt), after.inProgress], [mine.actor.id, 'offline', Date.parse(gone), []]);
    assert.equal((await other.complete(d.id, claim.lease.token)).status, 200);
    // Offline for every environment: not for the tests after this one to find.
    await server.core.db.deleteFrom('runners').where('org_id', '=', orgId).where('host', '=', host).execute();
  });

  it('keeps what a runner said of itself in its claims when it reports what it serves', async () => {
    const { server, orgId, admin, viewer } = f;
    const runner = await newRunner(server, orgId);
    const env = await createEnvironment(admin.http, orgId);
    const other = await createEnvironment(admin.http, orgId);
    const host = hostId();
    assert.equal((await runner.claim({ environments: [env.name], waitSeconds: 0, host, hostname: 'build-9', version: 'acme-runner/3' })).status, 204);
    // Its serving report names only the host: it says nothing of its environments, host name or version.
    const report = await runner.actor.http.post(`/v1/orgs/${orgId}/runner/serving`, { deployments: ['dep_none'], host });
    assert.equal(report.status, 200, report.text);
    const listed = (await listRunners(viewer.http, orgId)).runners.find((r: any) => r.host === host);
    assert.deepEqual([listed.environments, listed.hostname, listed.version], [[{ id: env.id, name: env.name }], 'build-9', 'acme-runner/3']);
    assert.equal((await listRunners(viewer.http, orgId, `?environment=${other.name}`)).runners.some((r: any) => r.host === host), false);
    // Written down (this node's own service waits 10 s between writes; one that does not): seen, from where, and nothing else.
    const eager = createRunnersService({ db: server.core.db, dialect: server.core.database.dialect, hostTimeoutSeconds: 60, logger: server.core.logger, writeEveryMs: 0 });
    await eager.present({ actor: { id: runner.actor.id } } as RequestContext, orgId, host, '192.0.2.7');
    const reported = (await listRunners(viewer.http, orgId)).runners.find((r: any) => r.host === host);
    assert.deepEqual([reported.environments, reported.hostname, reported.version, reported.address], [[{ id: env.id, name: env.name }], 'build-9', 'acme-runner/3', '192.0.2.7']);
    // Another service user's runner naming the host changes nothing.
    await eager.present({ actor: { id: f.runner.actor.id } } as RequestContext, orgId, host, '198.51.100.1');
    assert.equal((await listRunners(viewer.http, orgId)).runners.find((r: any) => r.host === host).address, '192.0.2.7');
  });

  it('hands out what a claim took though writing the runner down after it fails', async () => {
    const { server, orgId, admin, developer, runner } = f;
    const env = await createEnvironment(admin.http, orgId);
    const svc = await createService(developer.http, orgId, { spec: { command: ['serve'] } });
    const d = await deploy(developer.http, orgId, { service: svc.id, environment: env.id });
    const runners = server.core.runners;
    const seen = runners.seen;
    let calls = 0;
    // The write before the claim goes through; the one after it fails (a busy database, say).
    runners.seen = async (...args) => {
      if (++calls === 2) throw new Error('the database is busy');
      return seen(...args);
    };
    try {
      const claimed = await runner.claim({ environments: [env.name], waitSeconds: 0, host: hostId() });
      assert.equal(claimed.status, 200, claimed.text);
      assert.equal(claimed.body.deployment.id, d.id);
      assert.equal((await runner.complete(d.id, claimed.body.lease.token)).status, 200);
    } finally {
      runners.seen = seen;
    }
  });

  it('refuses what a runner says of itself when it is not a host name or a version', async () => {
    const { orgId, runner } = f;
    for (const bad of [{ hostname: 'two words' }, { hostname: '' }, { version: 'line\nbreak' }, { version: ' padded' }, { hostname: 'a'.repeat(254) }]) {
      const res = await runner.actor.http.post(`/v1/orgs/${orgId}/runner/claim`, { waitSeconds: 0, host: hostId(), ...bad });
      assert.equal(res.status, 400, `${JSON.stringify(bad)}: ${res.text}`);
    }
  });

  it('slipway runners lists them as a table or JSON, filtered, and refuses what it cannot send', async () => {
    const { server, orgId, admin, viewer } = f;
    const env = await createEnvironment(admin.http, orgId);
    const runner = await newRunner(server, orgId);
    const host = hostId();
    assert.equal((await runner.claim({ environments: [env.name], waitSeconds: 0, host, hostname: 'ci-box' })).status, 204);
    const as = (args: string[]) => runCli(['runners', ...args], {
      SLIPWAY_URL: server.url, SLIPWAY_TOKEN_URL: `${server.url}/oauth/v2/token`, SLIPWAY_ORG: orgId,
      SLIPWAY_CLIENT_ID: viewer.clientId, SLIPWAY_CLIENT_SECRET: viewer.clientSecret, SLIPWAY_SCOPE: viewer.scope,
    });

    const table = await as(['--environment', env.name]);
    assert.equal(table.code, 0, table.stderr);
    assert.match(table.stdout, /^HOST\s+STATE\s+SERVICE_USER\s+HOSTNAME\s+ENVIRONMENTS\s+LAST_SEEN\s+IN_PROGRESS\s+SERVING\n/);
    const line = table.stdout.split('\n').find((l) => l.startsWith(host));
    assert.ok(line, table.stdout);
    assert.match(line, new RegExp(`^${host}\\s+online\\s+${runner.actor.name}\\s+ci-box\\s+${env.name}\\s+\\d+ s ago\\s+0\\s+0$`));

    const json = await as(['--state', 'online', '--json']);
    assert.equal(json.code, 0, json.stderr);
    assert.ok((JSON.parse(json.stdout).runners as any[]).some((r) => r.host === host && r.hostname === 'ci-box'));

    const none = await as(['--state', 'offline', '--environment', env.name]);
    assert.deepEqual([none.code, none.stdout], [0, '']);
    assert.match(none.stderr, new RegExp(`no runner takes ${env.name}'s deployments that is offline`));

    const usage = await as(['--state', 'asleep']);
    assert.equal(usage.code, 2);
    assert.match(usage.stderr, /--state must be online or offline, got "asleep"/);
    const unknown = await as(['--environment', unique('nowhere')]);
    assert.equal(unknown.code, 1);
    assert.match(unknown.stderr, /environment/);

    // Its one environment deleted: it takes nothing, which the table says rather than leave a blank.
    assert.equal((await admin.http.delete(`/v1/orgs/${orgId}/environments/${env.id}`)).status, 204);
    const after = await as([]);
    assert.match(after.stdout.split('\n').find((l) => l.startsWith(host)) ?? '', new RegExp(`^${host}\\s+online\\s+${runner.actor.name}\\s+ci-box\\s+none \\(deleted\\)\\s+`));
  });

  it('is hidden from other organizations', async () => {
    const stranger = await f.server.actor((await f.server.createOrg()).id, 'owner');
    const res = await stranger.http.get(`/v1/orgs/${f.orgId}/runners`);
    assert.equal(res.status, 404, res.text);
  });
});

describe('runners list with the reference runner', () => {
  let f: DeployFixture;
  before(async () => { f = await startDeployFixture(); });
  after(() => f.close());

  it('shows `slipway runner` with its machine\'s host name and version, online while it runs, carrying out and then serving', async () => {
    const { server, orgId, admin, developer, viewer } = f;
    const env = await createEnvironment(admin.http, orgId);
    const runner = await startRunner(server, orgId, { environments: [env.name] });
    const listed = await eventually('the runner listed with its host name', async () =>
      (await listRunners(viewer.http, orgId)).runners.find((r: any) => r.serviceUser.id === runner.actor.id && r.version !== null));
    assert.equal(listed.state, 'online');
    assert.equal(listed.version, `slipway-runner/${VERSION}`);
    assert.equal(listed.hostname, /^[A-Za-z0-9._-]{1,253}$/.test(hostname()) ? hostname() : null);
    assert.deepEqual(listed.environments, [{ id: env.id, name: env.name }]);

    const svc = await createService(developer.http, orgId, { spec: serviceSpec() });
    const d = await deploy(developer.http, orgId, { service: svc.id, environment: env.name });
    assert.equal((await settled(viewer.http, orgId, d.id)).state, 'succeeded');
    await eventually('the runner listed as serving it', async () =>
      ((await listRunners(viewer.http, orgId, `?environment=${env.id}`)).runners.find((r: any) => r.host === listed.host)?.serving === 1 ? true : undefined));
    assert.equal(await runner.stop(), 0);
    // Stopped cleanly, it said so: offline at once, not for the next minute, and serving nothing.
    const stopped = (await listRunners(viewer.http, orgId)).runners.find((r: any) => r.host === listed.host);
    assert.equal(stopped.state, 'offline');
    assert.ok(Date.parse(stopped.stoppedAt) >= Date.parse(stopped.lastSeenAt) - 1000, JSON.stringify(stopped));
    assert.equal(stopped.serving, 0);
    assert.ok((await listRunners(viewer.http, orgId, '?state=offline')).runners.some((r: any) => r.host === listed.host));
    assert.equal((await listRunners(viewer.http, orgId, '?state=online')).runners.some((r: any) => r.host === listed.host), false);
  });
});
