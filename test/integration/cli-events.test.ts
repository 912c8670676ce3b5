// `slipway events` as a real child process against a real server, as a service user: the last
// events oldest first, narrowed by type and subject, past one page, since a time, and followed.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { sql } from 'kysely';
import { createEnvironment, createService, deploy, eventually, holding, lockWaiters } from '../support/deployments.js';
import { TEST_DB, type Actor } from '../support/harness.js';
import { startWithOrg, type OrgFixture } from '../support/org-fixture.js';
import { CLI_ENTRY, runCli, clientVariables } from '../support/processes.js';

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

  it('slipway events --since finds events listed after older ones: those whose transactions waited', { skip: TEST_DB !== 'postgres' && 'SQLite commits in the order requests take their time' }, async () => {
    const org = (await f.server.createOrg()).id;
    const admin = await f.server.actor(org, 'admin');
    const dev = await f.server.actor(org, 'developer');
    const svc = await createService(dev.http, org);
    const env = await createEnvironment(admin.http, org);
    // Two deployments take their time, then wait for the environment's row; meanwhile another
    // environment is made, and committed first.
    const commit = await holding(f.server, (trx) => sql`select 1 from environments where id = ${env.id} for update`.execute(trx));
    const waiting = [deploy(dev.http, org, { service: svc.id, environment: env.id }), deploy(dev.http, org, { service: svc.id, environment: env.id })];
    await lockWaiters(f.server, 2);
    await sleep(50);
    const made = await createEnvironment(admin.http, org);
    await commit();
    await Promise.all(waiting);
    const since = await runCli(['events', '--since', made.createdAt, '--limit', '1', '--json'], clientVariables(f.server.url, org, admin));
    assert.equal(since.code, 0, since.stderr);
    assert.deepEqual(since.stdout.trim().split('\n').map((l) => JSON.parse(l).subject.id), [made.id]);
  });
});
