// `slipway events` as a real child process against a real server, as a service user: the last
// events oldest first, narrowed by type, subject, actor and time, past one page, and followed; and
// what it says of a server older than the actor and time filters.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { sql } from 'kysely';
import { createEnvironment, createService, deploy, eventsSettled, eventually, holding, lockWaiters } from '../support/deployments.js';
import { TEST_DB, type Actor } from '../support/harness.js';
import { startWithOrg, type OrgFixture } from '../support/org-fixture.js';
import { CLI_ENTRY, runCli, clientVariables, spawnSlipway } from '../support/processes.js';

describe('slipway events', () => {
  let f: OrgFixture;
  let developer: Actor;

  /** A service user's credentials in the environment, as a CI job or a shell has them. */
  const credentials = (who: Actor) => clientVariables(f.server.url, f.orgId, who);

  before(async () => {
    f = await startWithOrg();
    developer = await f.server.actor(f.orgId, 'developer');
  });
  after(async () => { await f.close(); });

  it('slipway events prints the last events, oldest first, and follows those committed from then on', async () => {
    const first = await createEnvironment(f.admin.http, f.orgId);
    const second = await createEnvironment(f.admin.http, f.orgId);
    await eventsSettled(f.server);
    const last = await runCli(['events', '--type', 'environment.*', '--limit', '2'], credentials(f.admin));
    assert.equal(last.code, 0, last.stderr);
    const lines = last.stdout.trim().split('\n');
    assert.equal(lines.length, 2);
    assert.match(lines[0]!, new RegExp(`^\\S+  environment\\.created  environment ${first.id}  by ${f.admin.id}  \\{.*"name":"${first.name}"`));
    assert.match(lines[1]!, new RegExp(`  environment\\.created  environment ${second.id}  `));
    const asJson = await runCli(['events', '--subject', second.id, '--json'], credentials(f.admin));
    assert.deepEqual(asJson.stdout.trim().split('\n').map((l) => JSON.parse(l).type), ['environment.created']);

    // Followed: what is committed after it started comes, in order, a JSON object a line.
    const follower = spawn(process.execPath, [CLI_ENTRY, 'events', '--follow', '--type', 'environment.*', '--limit', '1', '--json'], { env: credentials(f.admin), stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    follower.stdout.on('data', (c: Buffer) => { out += c.toString('utf8'); });
    const exited = new Promise<NodeJS.Signals | number | null>((resolve) => follower.on('exit', (code, signal) => resolve(signal ?? code)));
    const seen = (id: string) => eventually(`${id} followed`, async () => (out.includes(id) ? true : undefined));
    await seen(second.id);
    const third = await createEnvironment(f.admin.http, f.orgId);
    assert.equal((await f.admin.http.patch(`/v1/orgs/${f.orgId}/environments/${third.id}`, { description: 'changed' })).status, 200);
    await seen(`"type":"environment.updated"`);
    follower.kill('SIGINT');
    assert.equal(await exited, 'SIGINT');
    assert.deepEqual(out.trim().split('\n').map((l) => JSON.parse(l)).map((e) => [e.type, e.subject.id]),
      [['environment.created', second.id], ['environment.created', third.id], ['environment.updated', third.id]]);

    const refused = await runCli(['events'], credentials(developer));
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /^slipway: .*admin/m);
    const usage = await runCli(['events', '--limit', '20000'], credentials(f.admin));
    assert.equal(usage.code, 2);
    assert.match(usage.stderr, /--limit must be a whole number from 1 to 10000/);
    const badSince = await runCli(['events', '--since', 'yesterday'], credentials(f.admin));
    assert.equal(badSince.code, 2);
    assert.match(badSince.stderr, /--since must be a time ago \(90m, 2h, 7d\) or an RFC 3339 time/);
  });

  it('slipway events reads past one page: --limit above 200, and --since a time', async () => {
    const org = (await f.server.createOrg()).id;
    const admin = await f.server.actor(org, 'admin');
    const made: string[] = [];
    for (let i = 0; i < 230; i++) made.push((await createEnvironment(admin.http, org)).id as string);
    const ids = (out: string) => out.trim().split('\n').filter((l) => l !== '').map((l) => JSON.parse(l).subject.id as string);
    const env = clientVariables(f.server.url, org, admin);
    // Oldest first, the newest 210 of them, read over two pages.
    await eventsSettled(f.server);
    const many = await runCli(['events', '--type', 'environment.created', '--limit', '210', '--json'], env);
    assert.equal(many.code, 0, many.stderr);
    assert.deepEqual(ids(many.stdout), made.slice(-210));

    await sleep(20);
    const from = new Date().toISOString();
    await sleep(20);
    const later = [(await createEnvironment(admin.http, org)).id, (await createEnvironment(admin.http, org)).id];
    const since = await runCli(['events', '--type', 'environment.created', '--since', from, '--json'], env);
    assert.equal(since.code, 0, since.stderr);
    assert.deepEqual(ids(since.stdout), later);
    assert.equal(since.stderr, '');
    // Everything of the last hour, over two pages; and what --limit leaves out is said.
    const hour = await runCli(['events', '--type', 'environment.created', '--since', '1h', '--json'], env);
    assert.deepEqual(ids(hour.stdout), [...made, ...later]);
    const capped = await runCli(['events', '--type', 'environment.created', '--since', '1h', '--limit', '5', '--json'], env);
    assert.deepEqual(ids(capped.stdout), [...made, ...later].slice(-5));
    assert.match(capped.stderr, /more events since then than --limit 5: these are the newest/);
  });

  /**
   * PostgreSQL: in an organization of its own, `n` deployments take their time, then wait for their
   * environment's row; meanwhile another environment is made (`made`), and committed first. The
   * deployments go on when `commit` lets the row go: their events are older than its, and come after.
   */
  async function deploymentsHeldBehind(n: number) {
    const org = (await f.server.createOrg()).id;
    const admin = await f.server.actor(org, 'admin');
    const dev = await f.server.actor(org, 'developer');
    const svc = await createService(dev.http, org);
    const env = await createEnvironment(admin.http, org);
    const commit = await holding(f.server, (trx) => sql`select 1 from environments where id = ${env.id} for update`.execute(trx));
    const waiting = Array.from({ length: n }, () => deploy(dev.http, org, { service: svc.id, environment: env.id }));
    await lockWaiters(f.server, n);
    await sleep(50);
    const made = await createEnvironment(admin.http, org);
    return { org, admin, made, waiting, commit };
  }

  it('slipway events --since finds events listed after older ones: those whose transactions waited', { skip: TEST_DB !== 'postgres' && 'SQLite commits in the order requests take their time' }, async () => {
    const { org, admin, made, waiting, commit } = await deploymentsHeldBehind(2);
    await commit();
    await Promise.all(waiting);
    const since = await runCli(['events', '--since', made.createdAt, '--limit', '1', '--json'], clientVariables(f.server.url, org, admin));
    assert.equal(since.code, 0, since.stderr);
    assert.deepEqual(since.stdout.trim().split('\n').map((l) => JSON.parse(l).subject.id), [made.id]);
  });

  /** The subjects of the events printed with --json, a line each. */
  const subjects = (out: string) => out.trim().split('\n').filter((l) => l !== '').map((l) => JSON.parse(l).subject.id as string);

  it('slipway events --actor prints one actor\'s events, and --until those made before a time', async () => {
    const org = (await f.server.createOrg()).id;
    const admin = await f.server.actor(org, 'admin');
    const other = await f.server.actor(org, 'admin');
    const env = clientVariables(f.server.url, org, admin);
    // Each made a few milliseconds after the one before: their times differ.
    const made: Array<{ id: string; createdAt: string }> = [];
    for (const who of [admin, other, admin, admin]) {
      made.push(await createEnvironment(who.http, org));
      await sleep(5);
    }
    const [a, b, c, d] = made.map((e) => e.id);

    await eventsSettled(f.server);
    const theOther = await runCli(['events', '--actor', other.id, '--json'], env);
    assert.equal(theOther.code, 0, theOther.stderr);
    assert.deepEqual(subjects(theOther.stdout), [b]);
    const lines = (await runCli(['events', '--actor', admin.id], env)).stdout.trim().split('\n');
    assert.equal(lines.length, 3);
    assert.ok(lines.every((l) => l.includes(`  by ${admin.id}  `)), lines.join('\n'));
    // The service users were made from the command line: `cli` is an actor as events name it.
    assert.deepEqual(subjects((await runCli(['events', '--actor', 'cli', '--type', 'service_user.*', '--json'], env)).stdout), [admin.id, other.id]);

    // --until leaves out what was made from then on; with --since, the events between the two.
    const until = await runCli(['events', '--type', 'environment.created', '--until', made[3]!.createdAt, '--json'], env);
    assert.equal(until.code, 0, until.stderr);
    assert.deepEqual(subjects(until.stdout), [a, b, c]);
    assert.deepEqual(subjects((await runCli(['events', '--since', made[1]!.createdAt, '--until', made[3]!.createdAt, '--json'], env)).stdout), [b, c]);
    assert.deepEqual(subjects((await runCli(['events', '--actor', admin.id, '--type', 'environment.*', '--until', made[3]!.createdAt, '--json'], env)).stdout), [a, c]);
    const capped = await runCli(['events', '--actor', admin.id, '--since', made[1]!.createdAt, '--until', '0s', '--limit', '1', '--json'], env);
    assert.deepEqual(subjects(capped.stdout), [d]);
    assert.match(capped.stderr, /more events in that time than --limit 1: these are the newest; narrow with --type, --subject, --actor, a later --since or an earlier --until/);
  });

  it('refuses --until with --follow, an --until not after --since, and a time it cannot read, with exit 2', async () => {
    for (const [args, message] of [
      [['--until', '1h', '--follow'], /--until and --follow do not go together: --follow prints the events committed from now on/],
      [['--since', '2h', '--until', '3h'], /--until \(\S+Z\) must be later than --since \(\S+Z\)/],
      [['--since', '2026-11-02T09:00:00Z', '--until', '2026-11-02T10:00:00+01:00'], /--until \(2026-11-02T09:00:00.000Z\) must be later than --since \(2026-11-02T09:00:00.000Z\)/],
      [['--until', 'yesterday'], /--until must be a time ago \(90m, 2h, 7d\) or an RFC 3339 time/],
      [['--actor', ''], /--actor is empty/],
    ] as const) {
      const refused = await runCli(['events', ...args], credentials(f.admin));
      assert.equal(refused.code, 2, `${args.join(' ')}: ${refused.stderr}`);
      assert.match(refused.stderr, message);
    }
  });

  /**
   * A proxy in front of the server, which records the queries of event lists and can play a server
   * older than the actor and time filters: one that refuses them as query parameters it does not
   * take, or one older still, which answered as if they had not been sent.
   */
  async function front(older: 'no' | 'refuses' | 'ignores'): Promise<{ via: string; queries: URLSearchParams[]; close: () => void }> {
    const queries: URLSearchParams[] = [];
    const server = http.createServer((req, res) => {
      const url = new URL(req.url!, f.server.url);
      const newer = ['actor', 'since', 'until'].filter((name) => url.searchParams.has(name));
      if (url.pathname.endsWith('/events')) queries.push(new URLSearchParams(url.searchParams));
      if (url.pathname.endsWith('/events') && newer.length > 0 && older === 'refuses') {
        const message = 'is not a query parameter of this operation (it takes limit, cursor, type, subject, order)';
        res.writeHead(400, { 'content-type': 'application/problem+json' }).end(JSON.stringify({
          title: 'Invalid request', status: 400, code: 'invalid_request',
          detail: `The request is not valid: /query/${newer[0]} ${message}.`, errors: [{ pointer: `/query/${newer[0]}`, message }],
        }));
        return;
      }
      if (older === 'ignores') for (const name of newer) url.searchParams.delete(name);
      const upstream = http.request(url, { method: req.method, headers: req.headers }, (answer) => {
        res.writeHead(answer.statusCode!, answer.headers);
        answer.pipe(res);
      });
      req.pipe(upstream);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return { via: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, queries, close: () => server.close() };
  }

  it('says that a server older than the actor and time filters is, and prints nothing it would not filter', async () => {
    const other = await f.server.actor(f.orgId, 'admin');
    await createEnvironment(f.admin.http, f.orgId);
    await createEnvironment(other.http, f.orgId);
    for (const older of ['refuses', 'ignores'] as const) {
      const proxy = await front(older);
      try {
        const env = clientVariables(f.server.url, f.orgId, f.admin, proxy.via);
        const plain = await runCli(['events', '--type', 'environment.*'], env);
        assert.equal(plain.code, 0, `${older}: ${plain.stderr}`);
        const filtered = await runCli(['events', '--actor', other.id, '--since', '1h'], env);
        assert.equal(filtered.code, 1, `${older}: ${filtered.stderr}`);
        assert.equal(filtered.stdout, '');
        assert.match(filtered.stderr, older === 'refuses'
          ? /^slipway: the server refuses --actor and --since \(as query parameters it does not know\): its Slipway is older than this command's, and lists events by type and subject only\. Upgrade the server, or leave out --actor and --since\.$/m
          : /^slipway: the server listed events that --actor leaves out: its Slipway is older than this command's and ignores that filter\. Upgrade the server, or leave out --actor\.$/m);
      } finally {
        proxy.close();
      }
    }
  });

  it('slipway events --since --follow goes on with the events committed from then on, made before --since too', { skip: TEST_DB !== 'postgres' && 'SQLite commits in the order requests take their time' }, async () => {
    // The follower starts from the time of the environment made while the deployment waits.
    const { org, admin, made, waiting, commit } = await deploymentsHeldBehind(1);
    const proxy = await front('no');
    const follower = spawnSlipway(['events', '--since', made.createdAt, '--follow', '--json'], clientVariables(f.server.url, org, admin, proxy.via));
    try {
      // Once it reads on from where it started (without `order`), the deployment commits.
      await eventually('the follower to follow', async () => (proxy.queries.some((q) => !q.has('order')) ? true : undefined));
      await commit();
      const [deployment] = await Promise.all(waiting);
      await eventually('the deployment to be followed', async () => (follower.output.some((l) => l.includes(deployment.id)) ? true : undefined));
      const followed = follower.output.map((l) => JSON.parse(l));
      assert.deepEqual(followed.map((e) => e.subject.id).sort(), [made.id, deployment.id].sort());
      assert.ok(Date.parse(followed.find((e) => e.subject.id === deployment.id).createdAt) < Date.parse(made.createdAt));
      // The follower was given the time once: its place in the log, not --since, goes on.
      assert.ok(proxy.queries.filter((q) => !q.has('order')).every((q) => !q.has('since')));
    } finally {
      follower.child.kill('SIGINT');
      await follower.exited;
      proxy.close();
    }
  });
});
