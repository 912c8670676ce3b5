// The runner protocol over real HTTP: claim (long poll, FIFO, exactly once under a race), the
// snapshot with secret values, heartbeats, logs in order, completion, the fencing token, and
// leases that expire into a re-queue or a failure.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Writable } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import { assertProblem } from '../support/problems.js';
import { createSlipway } from '../../src/app.js';
import { deploymentsRepo } from '../../src/modules/deployments/deployments.repo.js';
import { LOG_LINE_MAX_CHARS } from '../../src/modules/runner/runner.protocol.js';
import { freePort, httpClient, type Actor, type TestServer } from '../support/harness.js';
import {
  createEnvironment, createService, deploy, eventsOf, eventsSettled, eventually, getDeployment, newRunner, runnerClient, startDeployFixture, unique, type DeployFixture,
  type RunnerClient,
} from '../support/deployments.js';

describe('runner protocol', () => {
  let f: DeployFixture;
  let server: TestServer;
  let orgId: string;
  let admin: Actor;
  let developer: Actor;
  let runner: RunnerClient;

  before(async () => {
    f = await startDeployFixture();
    ({ server, orgId, admin, developer, runner } = f);
  });
  after(() => f.close());

  it('claims the oldest deployment of its environments with the secret values resolved, no-store', async () => {
    const secret = unique('creds');
    assert.equal((await developer.http.post(`/v1/orgs/${orgId}/secrets`, { secrets: [{ name: secret, values: { USER: 'app', PASSWORD: 'claim-only-value' } }] })).status, 201);
    const [env, other] = [await createEnvironment(admin.http, orgId), await createEnvironment(admin.http, orgId)];
    const svc = await createService(developer.http, orgId, {
      spec: { command: ['serve'], port: 8000, healthCheck: { path: '/up', timeoutSeconds: 10 }, variables: { A: '1' }, secrets: [{ secret, key: 'PASSWORD', as: 'DB_PASSWORD' }] },
    });
    const older = await deploy(developer.http, orgId, { service: svc.id, environment: other.id });
    const mine = await deploy(developer.http, orgId, { service: svc.id, environment: env.id, variables: { B: '2' } });

    assert.equal((await runner.claim({ environments: [env.name, unique('nowhere')], waitSeconds: 0 })).status, 404);
    const res = await runner.claim({ environments: [env.name], waitSeconds: 0 });
    assert.equal(res.status, 200, res.text);
    assert.equal(res.headers.get('cache-control'), 'no-store');
    const { deployment, lease, run } = res.body;
    assert.equal(deployment.id, mine.id);
    assert.equal(deployment.state, 'in_progress');
    assert.equal(deployment.lease?.runner, runner.actor.id);
    assert.ok(deployment.startedAt);
    assert.deepEqual(run, { command: ['serve'], port: 8000, healthCheck: { path: '/up', timeoutSeconds: 10 }, variables: { A: '1', B: '2' }, secrets: { DB_PASSWORD: 'claim-only-value' } });
    assert.deepEqual({ attempt: lease.attempt, durationSeconds: lease.durationSeconds, heartbeatSeconds: lease.heartbeatSeconds }, { attempt: 1, durationSeconds: 30, heartbeatSeconds: 10 });
    assert.ok(lease.token.length >= 32);

    // Without a filter, every environment: the older one comes first.
    const rest = await runner.take();
    assert.equal(rest.deployment.id, older.id);
    assert.equal((await runner.claim()).status, 204);

    const viewed = await developer.http.get(`/v1/orgs/${orgId}/deployments/${mine.id}`);
    assert.ok(!viewed.text.includes('claim-only-value'));
    const events = await eventsOf(server, orgId, mine.id);
    assert.ok(!JSON.stringify(events).includes('claim-only-value'));
    assert.ok(!server.logs.some((l) => l.includes('claim-only-value')));
    assert.ok(!server.logs.some((l) => l.includes(lease.token)));
    for (const c of [res.body, rest]) assert.equal((await runner.complete(c.deployment.id, c.lease.token)).status, 200);
  });

  it('hands a claim retried under its Idempotency-Key the same deployment and lease, without keeping the values', async () => {
    const sentinel = `claim-kept-nowhere-${randomUUID()}`;
    const secret = unique('claimed-again');
    assert.equal((await developer.http.post(`/v1/orgs/${orgId}/secrets`, { secrets: [{ name: secret, values: { TOKEN: sentinel } }] })).status, 201);
    const env = await createEnvironment(admin.http, orgId);
    const svc = await createService(developer.http, orgId, { spec: { command: ['serve'], port: 8000, secrets: [{ secret, key: 'TOKEN', as: 'TOKEN' }] } });
    const d = await deploy(developer.http, orgId, { service: svc.id, environment: env.id });
    const keyed = (key: string) => ({ headers: { 'idempotency-key': key } });
    const claimUrl = `/v1/orgs/${orgId}/runner/claim`;
    const key = randomUUID();
    const first = await runner.actor.http.post(claimUrl, { environments: [env.id], waitSeconds: 0 }, keyed(key));
    assert.equal(first.status, 200, first.text);
    assert.equal(first.body.deployment.id, d.id);
    assert.equal(first.body.run.secrets.TOKEN, sentinel);
    // Its answer was lost: the retry gets the same deployment and lease, with the value resolved again.
    const retry = await runner.actor.http.post(claimUrl, { environments: [env.id], waitSeconds: 0 }, keyed(key));
    assert.equal(retry.status, 200, retry.text);
    assert.equal(retry.headers.get('idempotent-replayed'), 'true');
    assert.equal(retry.headers.get('cache-control'), 'no-store');
    const apartFromTimeLeft = (answer: any) => ({ ...answer, lease: { ...answer.lease, expiresInMs: undefined } });
    assert.deepEqual(apartFromTimeLeft(retry.body), apartFromTimeLeft(first.body));
    // The same lease, with what it has left by now.
    assert.ok(retry.body.lease.expiresInMs <= first.body.lease.expiresInMs, JSON.stringify([retry.body.lease, first.body.lease]));
    assert.equal((await eventsOf(server, orgId, d.id)).filter((e) => e.type === 'deployment.state_changed').length, 1, 'claimed once');
    // Only which deployment under which lease is kept (sealed), not the answer with its values.
    const row = await server.core.db.selectFrom('idempotency_keys').select(['body_sealed', 'committed_at']).where('idempotency_key', '=', key).executeTakeFirstOrThrow();
    assert.ok(row.committed_at !== null);
    assert.ok(row.body_sealed!.length < 200, `${row.body_sealed!.length} bytes kept`);
    assert.ok(!server.logs.some((l) => l.includes(sentinel)));

    // A claim that found nothing replays as nothing.
    const none = randomUUID();
    assert.equal((await runner.actor.http.post(claimUrl, { environments: [env.id], waitSeconds: 0 }, keyed(none))).status, 204);
    const noneAgain = await runner.actor.http.post(claimUrl, { environments: [env.id], waitSeconds: 0 }, keyed(none));
    assert.deepEqual({ status: noneAgain.status, replayed: noneAgain.headers.get('idempotent-replayed') }, { status: 204, replayed: 'true' });

    // Once the lease is no longer held, the retry is told so, as any call under it would be.
    assert.equal((await runner.complete(d.id, first.body.lease.token)).status, 200);
    const late = await runner.actor.http.post(claimUrl, { environments: [env.id], waitSeconds: 0 }, keyed(key));
    assert.equal(late.status, 409, late.text);
    assert.equal(late.body.code, 'deployment_finished');
    assert.ok(!late.text.includes(sentinel));
  });

  it('fails, for good, a deployment whose claim is retried after its pinned secret was destroyed', async () => {
    const secret = unique('gone-before-retry');
    assert.equal((await developer.http.post(`/v1/orgs/${orgId}/secrets`, { secrets: [{ name: secret, values: { K: 'v' } }] })).status, 201);
    const env = await createEnvironment(admin.http, orgId);
    const svc = await createService(developer.http, orgId, { spec: { command: ['x'], secrets: [{ secret }] } });
    const d = await deploy(developer.http, orgId, { service: svc.id, environment: env.id });
    const key = { headers: { 'idempotency-key': randomUUID() } };
    const claimUrl = `/v1/orgs/${orgId}/runner/claim`;
    const first = await runner.actor.http.post(claimUrl, { environments: [env.id], waitSeconds: 0 }, key);
    assert.equal(first.status, 200, first.text);
    // The first answer is lost; meanwhile the pinned version is destroyed.
    assert.equal((await admin.http.delete(`/v1/orgs/${orgId}/secrets/${secret}?permanent=true`)).status, 204);
    const retry = await runner.actor.http.post(claimUrl, { environments: [env.id], waitSeconds: 0 }, key);
    assert.equal(retry.status, 409, retry.text);
    assert.equal(retry.body.code, 'deployment_finished');
    // The failure the retry found is kept, not rolled back with its refusal: no lease left to run out.
    const failed = await getDeployment(developer.http, orgId, d.id);
    assert.equal(failed.state, 'failed');
    assert.match(failed.reason, new RegExp(`${secret}@1`));
    const moves = (await eventsOf(server, orgId, d.id)).filter((e) => e.type === 'deployment.state_changed').map((e) => `${e.data.from}->${e.data.to}`);
    assert.deepEqual(moves, ['queued->in_progress', 'in_progress->failed']);
    assert.equal((await runner.heartbeat(d.id, first.body.lease.token)).status, 409);
  });

  it('lets only runners speak the protocol, and runners nothing else', async () => {
    assert.equal((await developer.http.post(`/v1/orgs/${orgId}/runner/claim`, { waitSeconds: 0 })).status, 403);
    assert.equal((await admin.http.post(`/v1/orgs/${orgId}/runner/claim`, { waitSeconds: 0 })).status, 403);
    assert.equal((await runner.actor.http.get(`/v1/orgs/${orgId}/deployments`)).status, 403);
    assert.equal((await runner.actor.http.post(`/v1/orgs/${orgId}/deployments`, { service: 'x', environment: 'y' })).status, 403);
    const stranger = runnerClient(await server.actor((await server.createOrg()).id, 'runner'), orgId);
    assert.equal((await stranger.claim()).status, 404);
  });

  it('says which deployments still serve: succeeded ones of this organization, not superseded, queued or unknown ones', async () => {
    const env = await createEnvironment(admin.http, orgId);
    const svc = await createService(developer.http, orgId);
    const ship = async () => {
      const d = await deploy(developer.http, orgId, { service: svc.id, environment: env.id });
      const claim = await runner.take({ environments: [env.id], waitSeconds: 0 });
      assert.equal((await runner.complete(d.id, claim.lease.token)).status, 200);
      return d.id;
    };
    const superseded = await ship();
    const serving = await ship();
    const queued = (await deploy(developer.http, orgId, { service: svc.id, environment: env.id })).id;
    const res = await runner.actor.http.post(`/v1/orgs/${orgId}/runner/serving`, { deployments: [superseded, serving, queued, 'dep_unknown'] });
    assert.equal(res.status, 200, res.text);
    assert.deepEqual(res.body, { serving: [serving] });
    // Another organization's runner learns nothing of these.
    const other = (await server.createOrg()).id;
    const stranger = await server.actor(other, 'runner');
    assert.deepEqual((await stranger.http.post(`/v1/orgs/${other}/runner/serving`, { deployments: [serving] })).body, { serving: [] });
    const claim = await runner.take({ environments: [env.id], waitSeconds: 0 });
    assert.equal((await runner.complete(queued, claim.lease.token)).status, 200);
    // An empty question, an oversized one and one that names an id twice are refused.
    for (const deployments of [[], Array.from({ length: 501 }, (_, i) => `dep_${i}`), [serving, serving]]) {
      assert.equal((await runner.actor.http.post(`/v1/orgs/${orgId}/runner/serving`, { deployments })).status, 400);
    }
  });

  it('wakes a waiting claim when a deployment is created', async () => {
    const env = await createEnvironment(admin.http, orgId);
    const svc = await createService(developer.http, orgId);
    const waiting = runner.claim({ environments: [env.id], waitSeconds: 25 });
    await sleep(200);
    const d = await deploy(developer.http, orgId, { service: svc.id, environment: env.id });
    const res = await waiting;
    assert.equal(res.status, 200, res.text);
    assert.equal(res.body.deployment.id, d.id);
    assert.equal((await runner.complete(d.id, res.body.lease.token)).status, 200);
  });

  it('hands nothing to a runner disabled, deleted or given another role while its claim waits', async () => {
    for (const [how, change, status] of [
      ['disabled', (id: string) => admin.http.patch(`/v1/orgs/${orgId}/service-users/${id}`, { disabled: true }), 401],
      ['deleted', (id: string) => admin.http.delete(`/v1/orgs/${orgId}/service-users/${id}`), 401],
      ['made a viewer', (id: string) => admin.http.patch(`/v1/orgs/${orgId}/service-users/${id}`, { role: 'viewer' }), 403],
    ] as const) {
      const env = await createEnvironment(admin.http, orgId);
      const svc = await createService(developer.http, orgId);
      const doomed = await newRunner(server, orgId);
      const waiting = doomed.claim({ environments: [env.id], waitSeconds: 25 });
      // The claim is admitted and waits before the change: only the check after its wait can refuse it.
      await eventually('the claim to wait', async () => (server.core.signals.waiting(orgId) > 0 ? true : undefined));
      const changed = await change(doomed.actor.id);
      assert.ok(changed.status === 200 || changed.status === 204, changed.text);
      const d = await deploy(developer.http, orgId, { service: svc.id, environment: env.id });
      const res = await waiting;
      assert.equal(res.status, status, `${how}: ${res.text}`);
      assert.equal((await getDeployment(developer.http, orgId, d.id)).state, 'queued', how);
      assert.equal((await runner.take({ environments: [env.id], waitSeconds: 0 })).deployment.id, d.id);
    }
  });

  it('wakes a claim waiting on another node of the same database', async () => {
    const port = await freePort();
    const other = await createSlipway({ ...server.config, port, baseUrl: `http://127.0.0.1:${port}` }, {
      bootstrap: false, logStream: new Writable({ write: (_c, _e, done) => done() }),
    });
    await other.listen();
    try {
      const env = await createEnvironment(admin.http, orgId);
      const svc = await createService(developer.http, orgId);
      const waiting = runner.claim({ environments: [env.id], waitSeconds: 25 });
      await sleep(200);
      const viaOther = httpClient(`http://127.0.0.1:${port}`, developer.token);
      const d = await deploy(viaOther, orgId, { service: svc.id, environment: env.id });
      const res = await waiting;
      assert.equal(res.status, 200, res.text);
      assert.equal(res.body.deployment.id, d.id);
      assert.equal((await runner.complete(d.id, res.body.lease.token)).status, 200);
      // On PostgreSQL a deployment created on the other node reaches this one by NOTIFY (SQLite processes poll instead).
      if (server.core.database.dialect === 'postgres') {
        const quiet = await createEnvironment(admin.http, orgId);
        const seen = server.core.signals.version(orgId);
        await eventually('a NOTIFY from the other node', async () => {
          await deploy(viaOther, orgId, { service: svc.id, environment: quiet.id });
          return server.core.signals.version(orgId) > seen ? true : undefined;
        });
      }
    } finally {
      await other.close();
    }
  });

  it('keeps the times a runner gives as every time is answered: UTC with milliseconds', async () => {
    const env = await createEnvironment(admin.http, orgId);
    const svc = await createService(developer.http, orgId);
    const d = await deploy(developer.http, orgId, { service: svc.id, environment: env.id });
    const c = await runner.take({ environments: [env.id], waitSeconds: 0 });
    const zoned = await runner.logs(d.id, { leaseToken: c.lease.token, lines: [
      { line: 'zoned', at: '2026-11-27T07:00:00+02:00' }, { line: 'fine', at: '2026-11-27t05:00:00.123456789z' },
      // A leap second, which RFC 3339 allows and a Date cannot hold: its second's last millisecond.
      { line: 'leap', at: '2026-06-30T23:59:60Z' }, { line: 'leap, zoned', at: '2026-07-01T01:59:60.25+02:00' },
    ] });
    assert.equal(zoned.status, 200, zoned.text);
    const lines = (await developer.http.get(`/v1/orgs/${orgId}/deployments/${d.id}/logs`)).body.lines;
    assert.deepEqual(lines.map((l: any) => l.at), ['2026-11-27T05:00:00.000Z', '2026-11-27T05:00:00.123Z', '2026-06-30T23:59:59.999Z', '2026-06-30T23:59:59.999Z']);
    assert.equal((await runner.complete(d.id, c.lease.token)).status, 200);
  });

  it('says in claim and heartbeat answers what the lease has left from when the request was taken up, and not in log appends, which a key may replay', async () => {
    const env = await createEnvironment(admin.http, orgId);
    const svc = await createService(developer.http, orgId);
    const d = await deploy(developer.http, orgId, { service: svc.id, environment: env.id });
    const c = await runner.take({ environments: [env.id], waitSeconds: 0 });
    const leaseMs = c.lease.durationSeconds * 1000;
    // Taken up before the lease was granted or renewed: a whole lease from then, at the least.
    assert.ok(c.lease.expiresInMs! >= leaseMs, JSON.stringify(c.lease));
    const beat = await runner.heartbeat(d.id, c.lease.token);
    assert.equal(beat.status, 200, beat.text);
    assert.ok(beat.body.lease.expiresInMs >= leaseMs, JSON.stringify(beat.body.lease));
    const appended = await runner.logs(d.id, { leaseToken: c.lease.token, lines: [{ line: 'one' }] });
    assert.equal(appended.status, 200, appended.text);
    assert.equal(appended.body.lease.expiresInMs, undefined);
    assert.equal((await runner.complete(d.id, c.lease.token)).status, 200);
  });

  it('renews the lease, stores log lines in order with paging, and refuses a wrong token changing nothing', async () => {
    const env = await createEnvironment(admin.http, orgId);
    const svc = await createService(developer.http, orgId);
    const d = await deploy(developer.http, orgId, { service: svc.id, environment: env.id });
    const c = await runner.take({ environments: [env.id], waitSeconds: 0 });
    const token = c.lease.token;

    await sleep(20);
    const beat = await runner.heartbeat(d.id, token);
    assert.equal(beat.status, 200, beat.text);
    assert.ok(beat.body.lease.expiresAt > c.lease.expiresAt);
    assert.equal(beat.body.lease.token, token);

    const sent: string[] = [];
    for (let batch = 0; batch < 3; batch++) {
      const lines = Array.from({ length: 5 }, (_, i) => `line ${batch * 5 + i + 1}`);
      const res = await runner.logs(d.id, { leaseToken: token, lines: lines.map((line, i) => ({ line, stream: i % 2 ? 'stderr' : 'stdout' })) });
      assert.equal(res.status, 200, res.text);
      assert.deepEqual({ appended: res.body.appended, lastSeq: res.body.lastSeq }, { appended: 5, lastSeq: (batch + 1) * 5 });
      sent.push(...lines);
    }
    const at = '2030-01-02T03:04:05.678Z';
    // The runner sends each batch under an Idempotency-Key: a retry appends nothing twice, even
    // when the first response was lost after its lines went in (the append marks its key committed).
    const key = randomUUID();
    const keyed = { leaseToken: token, lines: [{ line: 'from the runner', stream: 'runner' as const, at }] };
    const first = await runner.logs(d.id, keyed, { headers: { 'idempotency-key': key } });
    assert.equal(first.status, 200, first.text);
    const replay = await runner.logs(d.id, keyed, { headers: { 'idempotency-key': key } });
    assert.equal(replay.headers.get('idempotent-replayed'), 'true');
    assert.equal(replay.text, first.text);
    const keyRow = await server.core.db.selectFrom('idempotency_keys').select('committed_at').where('idempotency_key', '=', key).executeTakeFirstOrThrow();
    assert.ok(keyRow.committed_at !== null, 'the append marked its key committed');
    sent.push('from the runner');

    const tooLong = await runner.logs(d.id, { leaseToken: token, lines: [{ line: 'x'.repeat(LOG_LINE_MAX_CHARS + 1) }] });
    assert.equal(tooLong.status, 400);
    assert.deepEqual([tooLong.body.code, tooLong.body.errors[0].pointer], ['invalid_request', '/lines/0/line']);
    const stale = await runner.logs(d.id, { leaseToken: `${token}x`, lines: [{ line: 'intruder' }] });
    assert.equal(stale.status, 409);
    assert.equal(stale.body.code, 'lease_lost');
    for (const res of [await runner.heartbeat(d.id, 'not-the-token'), await runner.complete(d.id, 'not-the-token', 'failed')]) {
      assert.equal(res.status, 409);
      assert.equal(res.body.code, 'lease_lost');
    }

    const read: any[] = [];
    let afterSeq = 0;
    for (;;) {
      const page = await developer.http.get(`/v1/orgs/${orgId}/deployments/${d.id}/logs?after=${afterSeq}&limit=4`);
      assert.equal(page.status, 200, page.text);
      assert.equal(page.body.state, 'in_progress');
      read.push(...page.body.lines);
      afterSeq = page.body.nextAfter;
      if (!page.body.hasMore) break;
    }
    assert.deepEqual(read.map((l) => l.line), sent);
    assert.deepEqual(read.map((l) => l.seq), sent.map((_, i) => i + 1));
    assert.deepEqual(new Set(read.map((l) => l.attempt)), new Set([1]));
    assert.deepEqual(read.slice(0, 2).map((l) => l.stream), ['stdout', 'stderr']);
    assert.deepEqual(read.at(-1), { seq: 16, attempt: 1, stream: 'runner', line: 'from the runner', at });
    assert.equal((await getDeployment(developer.http, orgId, d.id)).state, 'in_progress');

    const done = await runner.complete(d.id, token, 'succeeded');
    assert.equal(done.status, 200);
    const again = await runner.complete(d.id, token, 'succeeded');
    assert.equal(again.status, 200);
    assert.deepEqual(again.body, done.body);
    const late = await runner.logs(d.id, { leaseToken: token, lines: [{ line: 'after the end' }] });
    assert.equal(late.status, 409);
    assert.equal(late.body.code, 'deployment_finished');
    const final = await developer.http.get(`/v1/orgs/${orgId}/deployments/${d.id}/logs?after=15`);
    assert.deepEqual({ lines: final.body.lines.map((l: any) => l.seq), nextAfter: final.body.nextAfter, hasMore: final.body.hasMore, state: final.body.state },
      { lines: [16], nextAfter: 16, hasMore: false, state: 'succeeded' });
    // The last lines, in order, where a reader of a long log starts; and tail with a page's parameters is refused.
    const tail = await developer.http.get(`/v1/orgs/${orgId}/deployments/${d.id}/logs?tail=3`);
    assert.deepEqual({ lines: tail.body.lines.map((l: any) => l.seq), nextAfter: tail.body.nextAfter, hasMore: tail.body.hasMore },
      { lines: [14, 15, 16], nextAfter: 16, hasMore: false });
    assert.deepEqual((await developer.http.get(`/v1/orgs/${orgId}/deployments/${d.id}/logs?tail=100`)).body.lines.map((l: any) => l.seq), sent.map((_, i) => i + 1));
    for (const other of ['after=0', 'limit=5']) {
      const both = await developer.http.get(`/v1/orgs/${orgId}/deployments/${d.id}/logs?tail=3&${other}`);
      assert.deepEqual((assertProblem(both, 400, 'invalid_request').errors as Array<{ pointer: string }>).map((e) => e.pointer), [`/query/${other.split('=')[0]}`]);
    }
  });

  it('fails a deployment whose pinned secret version is gone, and moves on', async () => {
    const secret = unique('gone');
    assert.equal((await developer.http.post(`/v1/orgs/${orgId}/secrets`, { secrets: [{ name: secret, values: { K: 'v' } }] })).status, 201);
    const env = await createEnvironment(admin.http, orgId);
    const svc = await createService(developer.http, orgId, { spec: { command: ['x'], secrets: [{ secret }] } });
    const doomed = await deploy(developer.http, orgId, { service: svc.id, environment: env.id });
    const destroyed = await admin.http.delete(`/v1/orgs/${orgId}/secrets/${secret}?permanent=true`);
    assert.equal(destroyed.status, 204, destroyed.text);
    assert.equal((await runner.claim({ environments: [env.id], waitSeconds: 0 })).status, 204);
    const failed = await getDeployment(developer.http, orgId, doomed.id);
    assert.equal(failed.state, 'failed');
    assert.match(failed.reason, new RegExp(secret));
  });

  it('fails a deployment whose pinned secret was deleted for good, even when a new secret has taken its name', async () => {
    const secret = unique('reborn');
    const [oldValue, newValue] = ['old-value-A', 'new-value-B-must-not-reach-the-old-deployment'];
    assert.equal((await developer.http.post(`/v1/orgs/${orgId}/secrets`, { secrets: [{ name: secret, values: { K: oldValue } }] })).status, 201);
    const env = await createEnvironment(admin.http, orgId);
    const svc = await createService(developer.http, orgId, { spec: { command: ['x'], secrets: [{ secret }] } });
    const doomed = await deploy(developer.http, orgId, { service: svc.id, environment: env.id });
    assert.deepEqual(doomed.spec.secrets.map((s: any) => ({ secret: s.secret, version: s.version })), [{ secret, version: 1 }]);
    const destroyed = await admin.http.delete(`/v1/orgs/${orgId}/secrets/${secret}?permanent=true`);
    assert.equal(destroyed.status, 204, destroyed.text);
    assert.equal((await developer.http.post(`/v1/orgs/${orgId}/secrets`, { secrets: [{ name: secret, values: { K: newValue } }] })).status, 201);

    const claimed = await runner.claim({ environments: [env.id], waitSeconds: 0 });
    assert.equal(claimed.status, 204, claimed.text);
    assert.ok(!claimed.text.includes(newValue) && !claimed.text.includes(oldValue));
    const failed = await getDeployment(developer.http, orgId, doomed.id);
    assert.equal(failed.state, 'failed');
    assert.match(failed.reason, new RegExp(`${secret}@1`));
    assert.ok(!JSON.stringify(failed).includes(newValue));

    // A new deployment pins the new secret (another id) and gets its values.
    const fresh = await deploy(developer.http, orgId, { service: svc.id, environment: env.id });
    assert.notEqual(fresh.spec.secrets[0].secretId, doomed.spec.secrets[0].secretId);
    const taken = await runner.take({ environments: [env.id], waitSeconds: 0 });
    assert.equal(taken.deployment.id, fresh.id);
    assert.deepEqual(taken.run.secrets, { K: newValue });
    assert.equal((await runner.complete(fresh.id, taken.lease.token)).status, 200);
  });

  it('hands each of 100 queued deployments to exactly one of 4 racing runners', async () => {
    const org = (await server.createOrg()).id;
    const [adm, dev] = [await server.actor(org, 'admin'), await server.actor(org, 'developer')];
    const envs = [];
    const svcs = [];
    for (let i = 0; i < 10; i++) {
      envs.push(await createEnvironment(adm.http, org));
      svcs.push(await createService(dev.http, org));
    }
    const made = new Set<string>();
    for (const svc of svcs) for (const env of envs) made.add((await deploy(dev.http, org, { service: svc.id, environment: env.id })).id);
    const runners = await Promise.all(Array.from({ length: 4 }, () => newRunner(server, org)));
    const claimedBy = await Promise.all(runners.map(async (r) => {
      const mine: string[] = [];
      for (;;) {
        const res = await r.claim({ waitSeconds: 0 });
        if (res.status === 204) return mine;
        assert.equal(res.status, 200, res.text);
        mine.push(res.body.deployment.id);
      }
    }));
    const all = claimedBy.flat();
    assert.equal(all.length, 100);
    assert.deepEqual(new Set(all), made);
    const inProgress = await dev.http.get(`/v1/orgs/${org}/deployments?state=in_progress&limit=200`);
    assert.equal(inProgress.body.deployments.length, 100);
    await eventsSettled(server);
    const claims = await server.owner.http.get(`/v1/orgs/${org}/events?type=deployment.state_changed&limit=200`);
    assert.equal(claims.body.events.filter((e: any) => e.data.to === 'in_progress').length, 100);
  });
});

describe('runner leases', () => {
  let f: DeployFixture;
  let server: TestServer;
  let orgId: string;
  let developer: Actor;
  let admin: Actor;

  // Short enough for the tests that wait for one to expire; the others send no heartbeat, and make
  // their calls within one lease (3 s, so that a second or two of a loaded machine does not end it).
  before(async () => {
    f = await startDeployFixture({ env: { SLIPWAY_RUNNER_LEASE_SECONDS: '3', SLIPWAY_DEPLOYMENT_MAX_ATTEMPTS: '2' } });
    ({ server, orgId, developer, admin } = f);
  });
  after(() => f.close());

  const stateOf = (id: string, state: string) => async () => {
    const d = await getDeployment(developer.http, orgId, id);
    return d.state === state ? d : undefined;
  };

  it('re-queues an expired lease for another runner, refuses the old one, and completes once', async () => {
    const env = await createEnvironment(admin.http, orgId);
    const svc = await createService(developer.http, orgId);
    const [lost, rescuer] = [await newRunner(server, orgId), await newRunner(server, orgId)];
    const d = await deploy(developer.http, orgId, { service: svc.id, environment: env.id });
    const first = await lost.take({ environments: [env.id], waitSeconds: 0 });
    assert.equal((await lost.logs(d.id, { leaseToken: first.lease.token, lines: [{ line: 'attempt one' }] })).status, 200);

    const requeued = await eventually('the lease to expire', stateOf(d.id, 'queued'));
    assert.equal(requeued.attempt, 2);
    assert.match(requeued.reason, /lease of attempt 1 expired/);
    for (const res of [
      await lost.heartbeat(d.id, first.lease.token),
      await lost.logs(d.id, { leaseToken: first.lease.token, lines: [{ line: 'too late' }] }),
      await lost.complete(d.id, first.lease.token),
    ]) {
      assert.equal(res.status, 409);
      assert.equal(res.body.code, 'lease_lost');
    }
    assert.deepEqual(await getDeployment(developer.http, orgId, d.id), requeued);

    const second = await rescuer.take({ environments: [env.id], waitSeconds: 5 });
    assert.equal(second.deployment.id, d.id);
    assert.equal(second.lease.attempt, 2);
    assert.notEqual(second.lease.token, first.lease.token);
    assert.equal((await lost.complete(d.id, first.lease.token)).status, 409);
    assert.equal((await rescuer.logs(d.id, { leaseToken: second.lease.token, lines: [{ line: 'attempt two' }] })).status, 200);
    const done = await rescuer.complete(d.id, second.lease.token);
    assert.equal(done.status, 200);
    assert.equal(done.body.state, 'succeeded');
    assert.equal((await lost.complete(d.id, first.lease.token)).status, 409);

    const logs = await developer.http.get(`/v1/orgs/${orgId}/deployments/${d.id}/logs`);
    // Attempt 1's lines end with why it ended, written when its lease expired.
    assert.deepEqual(logs.body.lines.map((l: any) => [l.attempt, l.stream, l.line]),
      [[1, 'stdout', 'attempt one'], [1, 'runner', 'slipway: The lease of attempt 1 expired without a heartbeat; re-queued.'], [2, 'stdout', 'attempt two']]);
    const moves = (await eventsOf(server, orgId, d.id)).filter((e) => e.type === 'deployment.state_changed').map((e) => `${e.data.from}→${e.data.to}@${e.data.attempt}`);
    assert.deepEqual(moves, ['queued→in_progress@1', 'in_progress→queued@2', 'queued→in_progress@2', 'in_progress→succeeded@2']);
  });

  it('fails the deployment with a reason once the attempts are spent', async () => {
    const env = await createEnvironment(admin.http, orgId);
    const svc = await createService(developer.http, orgId);
    const r = await newRunner(server, orgId);
    const d = await deploy(developer.http, orgId, { service: svc.id, environment: env.id });
    assert.equal((await r.take({ environments: [env.id], waitSeconds: 0 })).lease.attempt, 1);
    await eventually('the first lease to expire', stateOf(d.id, 'queued'));
    assert.equal((await r.take({ environments: [env.id], waitSeconds: 5 })).lease.attempt, 2);
    const failed = await eventually('the last lease to expire', stateOf(d.id, 'failed'));
    assert.equal(failed.attempt, 2);
    assert.match(failed.reason, /SLIPWAY_DEPLOYMENT_MAX_ATTEMPTS/);
    assert.ok(failed.finishedAt);
    assert.equal((await r.claim({ environments: [env.id], waitSeconds: 0 })).status, 204);
  });
  it('takes a deployment its runner gives back into the queue at once, as the next attempt, and wakes a waiting claim', async () => {
    const env = await createEnvironment(admin.http, orgId);
    const svc = await createService(developer.http, orgId);
    const [stopping, other] = [await newRunner(server, orgId), await newRunner(server, orgId)];
    const d = await deploy(developer.http, orgId, { service: svc.id, environment: env.id });
    const first = await stopping.take({ environments: [env.id], waitSeconds: 0 });
    const waiting = other.claim({ environments: [env.id], waitSeconds: 20 });

    // Only under the lease it holds; a refusal changes nothing.
    const refused = await stopping.abandon(d.id, 'not-the-token');
    assert.equal(refused.status, 409, refused.text);
    assert.equal(refused.body.code, 'lease_lost');
    assert.equal((await stopping.abandon(d.id, first.lease.token, 'x'.repeat(501))).status, 400);
    assert.equal((await getDeployment(developer.http, orgId, d.id)).state, 'in_progress');

    const back = await stopping.abandon(d.id, first.lease.token, 'the runner got SIGTERM');
    assert.equal(back.status, 200, back.text);
    assert.equal(back.body.state, 'queued');
    assert.equal(back.body.attempt, 2);
    assert.equal(back.body.reason, 'Attempt 1 was given back by its runner: the runner got SIGTERM; re-queued.');
    assert.equal(back.body.startedAt, undefined, 'its start is the next claim\'s');

    // The claim waiting meanwhile is woken for it: long before its wait, or a lease, is over.
    const claimed = await waiting;
    assert.equal(claimed.status, 200, claimed.text);
    assert.equal(claimed.body.deployment.id, d.id);
    assert.equal(claimed.body.lease.attempt, 2);
    for (const res of [await stopping.heartbeat(d.id, first.lease.token), await stopping.abandon(d.id, first.lease.token), await stopping.complete(d.id, first.lease.token)]) {
      assert.equal(res.status, 409);
      assert.equal(res.body.code, 'lease_lost');
    }

    // The last attempt given back fails the deployment, as its lease running out would.
    const last = await other.abandon(d.id, claimed.body.lease.token);
    assert.equal(last.status, 200, last.text);
    assert.equal(last.body.state, 'failed');
    assert.match(last.body.reason, /^Attempt 2 was given back by its runner, and 2 attempts are the limit \(SLIPWAY_DEPLOYMENT_MAX_ATTEMPTS\)\.$/);
    assert.ok(last.body.finishedAt);
    const again = await other.abandon(d.id, claimed.body.lease.token);
    assert.equal(again.status, 409);
    assert.equal(again.body.code, 'lease_lost', 'the lease ended with the attempt');

    const moves = (await eventsOf(server, orgId, d.id)).filter((e) => e.type === 'deployment.state_changed').map((e) => `${e.data.from}→${e.data.to}@${e.data.attempt}`);
    assert.deepEqual(moves, ['queued→in_progress@1', 'in_progress→queued@2', 'queued→in_progress@2', 'in_progress→failed@2']);
  });

  it('refuses to take back a completed or cancelled deployment', async () => {
    const env = await createEnvironment(admin.http, orgId);
    const svc = await createService(developer.http, orgId);
    const r = await newRunner(server, orgId);
    const done = await deploy(developer.http, orgId, { service: svc.id, environment: env.id });
    const claim = await r.take({ environments: [env.id], waitSeconds: 0 });
    assert.equal((await r.complete(done.id, claim.lease.token)).status, 200);
    const afterDone = await r.abandon(done.id, claim.lease.token);
    assert.equal(afterDone.status, 409);
    assert.equal(afterDone.body.code, 'deployment_finished');
    assert.equal((await getDeployment(developer.http, orgId, done.id)).state, 'succeeded');

    const cancelled = await deploy(developer.http, orgId, { service: svc.id, environment: env.id });
    const second = await r.take({ environments: [env.id], waitSeconds: 0 });
    assert.equal((await developer.http.post(`/v1/orgs/${orgId}/deployments/${cancelled.id}/cancel`, {})).status, 200);
    const afterCancel = await r.abandon(cancelled.id, second.lease.token);
    assert.equal(afterCancel.status, 409);
    assert.equal(afterCancel.body.code, 'deployment_cancelled');
    assert.equal((await getDeployment(developer.http, orgId, cancelled.id)).state, 'cancelled');
  });
});

// Hosting (protocol step 5): a runner that names itself reports what it runs; what its runner no
// longer reports, or released, is adopted by one runner, with what to run, its state unchanged.
describe('runner protocol: hosts and adoption', () => {
  // Short, for the waits past it; long enough that what a test does in one go (a report, then an
  // adoption that must find nothing) fits well inside it on a loaded machine.
  const HOST_TIMEOUT_SECONDS = 4;
  let f: DeployFixture;
  before(async () => {
    f = await startDeployFixture({ env: { SLIPWAY_RUNNER_HOST_TIMEOUT_SECONDS: String(HOST_TIMEOUT_SECONDS) } });
  });
  after(() => f.close());

  const hostA = 'rh_host-a-0001';
  const hostB = 'rh_host-b-0002';
  const post = (runner: RunnerClient, route: 'serving' | 'adopt' | 'release', body: unknown) => runner.actor.http.post(`/v1/orgs/${f.orgId}/runner/${route}`, body);

  /** A service with a secret, deployed into a new environment by `runner` as `host`. */
  async function served(runner: RunnerClient, host: string | undefined, value: string) {
    const secret = unique('hosted');
    assert.equal((await f.developer.http.post(`/v1/orgs/${f.orgId}/secrets`, { secrets: [{ name: secret, values: { KEY: value } }] })).status, 201);
    const env = await createEnvironment(f.admin.http, f.orgId);
    const svc = await createService(f.developer.http, f.orgId, { spec: { command: ['serve'], secrets: [{ secret, key: 'KEY' }] } });
    const d = await deploy(f.developer.http, f.orgId, { service: svc.id, environment: env.id });
    const claim = await runner.take({ environments: [env.id], waitSeconds: 0, ...(host !== undefined ? { host } : {}) });
    assert.equal((await runner.complete(d.id, claim.lease.token)).status, 200);
    return { id: d.id, env };
  }

  it('hands a deployment its runner stopped reporting to exactly one runner, with its secrets; the old runner then learns it is no longer its own', async () => {
    const other = await newRunner(f.server, f.orgId);
    const { id, env } = await served(f.runner, hostA, 'adopted-value-1');
    // Reported: not an orphan.
    assert.deepEqual((await post(f.runner, 'serving', { deployments: [id], host: hostA })).body, { serving: [id] });
    assert.deepEqual((await post(other, 'adopt', { host: hostB, environments: [env.id] })).body, { adopted: [], hostTimeoutSeconds: HOST_TIMEOUT_SECONDS, acceptsProcessReports: true, acceptsProcessAddresses: true, acceptsRunnerDetails: true, acceptsStopNotice: true });

    await sleep(HOST_TIMEOUT_SECONDS * 1000 + 300);
    const racers = await Promise.all([post(other, 'adopt', { host: hostB, environments: [env.id] }), post(f.runner, 'adopt', { host: 'rh_host-c-0003', environments: [env.id] })]);
    for (const r of racers) assert.equal(r.status, 200, r.text);
    const winners = racers.filter((r) => r.body.adopted.length > 0);
    assert.equal(winners.length, 1, 'one runner adopts it');
    const [adopted] = winners[0]!.body.adopted;
    assert.equal(adopted.deployment.id, id);
    assert.equal(adopted.deployment.state, 'succeeded');
    assert.deepEqual(adopted.run.secrets, { KEY: 'adopted-value-1' });
    assert.equal(winners[0]!.headers.get('cache-control'), 'no-store');
    const winner = racers[0] === winners[0] ? hostB : 'rh_host-c-0003';

    // The old runner's next report does not answer it: it stops its process there.
    assert.deepEqual((await post(f.runner, 'serving', { deployments: [id], host: hostA })).body, { serving: [] });
    assert.deepEqual((await post(other, 'serving', { deployments: [id], host: winner })).body, { serving: [id] });
    assert.equal((await getDeployment(f.developer.http, f.orgId, id)).state, 'succeeded');
    const events = (await eventsOf(f.server, f.orgId, id)).filter((e) => e.type === 'deployment.adopted');
    assert.equal(events.length, 1);
    assert.deepEqual({ host: events[0].data.host, previousHost: events[0].data.previousHost }, { host: winner, previousHost: hostA });
    assert.ok(!JSON.stringify(events).includes('adopted-value-1'));
    assert.ok(!f.server.logs.some((l) => l.includes('adopted-value-1')), 'the value reached the server log');
  });

  it('keeps what its runner reports of a serving process: a crash loop shows on the deployment, one event per report of new exits', async () => {
    const { id } = await served(f.runner, hostA, 'process-value');
    const report = (processes: unknown[], host = hostA) => post(f.runner, 'serving', { deployments: [id], host, processes });
    const processOf = async () => (await getDeployment(f.developer.http, f.orgId, id)).process;
    const exitEvents = async () => (await eventsOf(f.server, f.orgId, id)).filter((e) => e.type === 'deployment.process_exited');
    assert.equal(await processOf(), undefined, 'nothing reported yet');

    assert.deepEqual((await report([{ deployment: id, state: 'running', exits: 0 }])).body, { serving: [id] });
    const running = await processOf();
    assert.deepEqual({ ...running, reportedAt: undefined }, { state: 'running', exits: 0, lastExit: null, reportedAt: undefined });
    assert.ok(Date.parse(running.reportedAt) > Date.now() - 60_000);

    // A report of the deployment without its processes (from a node older than the runner) says nothing of them.
    await sleep(5);
    assert.deepEqual((await post(f.runner, 'serving', { deployments: [id], host: hostA })).body, { serving: [id] });
    assert.equal((await processOf()).reportedAt, running.reportedAt);
    await sleep(5);
    await report([{ deployment: id, state: 'running', exits: 0 }]);
    assert.ok((await processOf()).reportedAt > running.reportedAt, 'the same report again moves when it was reported');

    const crashed = { code: 3, signal: null, at: new Date().toISOString() };
    for (let i = 0; i < 2; i++) assert.deepEqual((await report([{ deployment: id, state: 'restarting', exits: 2, lastExit: crashed }])).body, { serving: [id] });
    assert.deepEqual({ ...(await processOf()), reportedAt: undefined }, { state: 'restarting', exits: 2, lastExit: crashed, reportedAt: undefined });
    const killed = { code: null, signal: 'SIGKILL', at: new Date().toISOString() };
    await report([{ deployment: id, state: 'running', exits: 3, lastExit: killed }]);
    assert.deepEqual({ ...(await processOf()), reportedAt: undefined }, { state: 'running', exits: 3, lastExit: killed, reportedAt: undefined });
    assert.deepEqual((await exitEvents()).map((e) => e.data), [
      { host: hostA, exits: 2, newExits: 2, lastExit: crashed, state: 'restarting' },
      { host: hostA, exits: 3, newExits: 1, lastExit: killed, state: 'running' },
    ]);
    // The same news sent several times at once (a retried report) is told once.
    const again = { code: 1, signal: null, at: new Date().toISOString() };
    await Promise.all(Array.from({ length: 6 }, () => report([{ deployment: id, state: 'restarting', exits: 4, lastExit: again }])));
    assert.deepEqual((await exitEvents()).map((e) => e.data.exits), [2, 3, 4]);
    // An older report that arrives late (its retry overtook it) is not news: the count never goes back.
    assert.deepEqual((await report([{ deployment: id, state: 'running', exits: 3, lastExit: killed }])).body, { serving: [id] });
    assert.deepEqual({ ...(await processOf()), reportedAt: undefined }, { state: 'restarting', exits: 4, lastExit: again, reportedAt: undefined });
    await report([{ deployment: id, state: 'restarting', exits: 4, lastExit: again }]);
    assert.deepEqual((await exitEvents()).map((e) => e.data.exits), [2, 3, 4], 'the exit is told once, however the reports arrive');

    // Where the process answers, when its runner says: kept with the rest, and moved by a report of it alone.
    const address = { hostname: 'build-01.example', port: 40123 };
    await report([{ deployment: id, state: 'restarting', exits: 4, lastExit: again, address }]);
    assert.deepEqual((await processOf()).address, address);
    assert.deepEqual((await exitEvents()).map((e) => e.data.exits), [2, 3, 4], 'an address is not an exit');
    for (const bad of [{ hostname: 'build 01', port: 40123 }, { hostname: 'build-01', port: 0 }, { hostname: 'build-01' }]) {
      assert.equal((await report([{ deployment: id, state: 'restarting', exits: 4, lastExit: again, address: bad }])).status, 400, JSON.stringify(bad));
    }
    // An exit code no operating system gives.
    for (const code of [1e300, 2 ** 32, -(2 ** 31) - 1]) {
      assert.equal((await report([{ deployment: id, state: 'restarting', exits: 4, lastExit: { ...again, code } }])).status, 400, String(code));
    }
    assert.deepEqual((await processOf()).address, address);

    // Another runner's report on it is not answered and changes nothing; nor does a report on a deployment not asked about.
    assert.deepEqual((await report([{ deployment: id, state: 'restarting', exits: 9 }], hostB)).body, { serving: [] });
    assert.equal((await processOf()).exits, 4);
    // What is not a report is refused, and changes nothing either.
    for (const bad of [{ state: 'crashed', exits: 1 }, { state: 'running', exits: -1 }, { state: 'running', exits: 1, lastExit: { code: 1, signal: 'KILL', at: crashed.at } }, { state: 'running', exits: 1, extra: true }]) {
      const res = await report([{ deployment: id, ...bad }]);
      assert.equal(res.status, 400, JSON.stringify(bad));
    }
    assert.equal((await processOf()).exits, 4);
    assert.equal((await exitEvents()).length, 3);

    // Let go: no runner reports it any more, so nothing is shown.
    assert.deepEqual((await post(f.runner, 'release', { host: hostA, deployments: [id] })).body, { released: [id] });
    assert.equal(await processOf(), undefined);
  });

  it('marks an orphan whose pinned secret is gone for good as stopped, with why, once, and offers it to no runner again', async () => {
    const value = 'stopped-value-Q';
    const { id, env } = await served(f.runner, hostA, value);
    const { spec } = await getDeployment(f.developer.http, f.orgId, id);
    const secret = spec.secrets[0].secret as string;
    const crashed = { code: 1, signal: null, at: new Date().toISOString() };
    await post(f.runner, 'serving', { deployments: [id], host: hostA, processes: [{ deployment: id, state: 'running', exits: 2, lastExit: crashed, address: { hostname: 'build-01', port: 40001 } }] });
    assert.equal((await f.admin.http.delete(`/v1/orgs/${f.orgId}/secrets/${secret}?permanent=true`)).status, 204);
    // How many serving deployments the list says each host runs (earlier tests' ones included).
    const servingOf = async () => {
      const runners = (await f.admin.http.get(`/v1/orgs/${f.orgId}/runners`)).body.runners as Array<{ host: string; serving: number }>;
      return [hostA, hostB].map((host) => runners.find((r) => r.host === host)?.serving ?? 0);
    };
    const [servingA, servingB] = await servingOf();
    assert.deepEqual((await post(f.runner, 'release', { host: hostA, deployments: [id] })).body, { released: [id] });

    for (let i = 0; i < 2; i++) assert.deepEqual((await post(f.runner, 'adopt', { host: hostB, environments: [env.id] })).body.adopted, []);
    const stopped = await getDeployment(f.developer.http, f.orgId, id);
    assert.equal(stopped.state, 'succeeded');
    assert.deepEqual({ state: stopped.process.state, exits: stopped.process.exits, lastExit: stopped.process.lastExit }, { state: 'stopped', exits: 2, lastExit: crashed });
    assert.equal(stopped.process.address, undefined, 'a process that cannot be started again answers nowhere');
    // The runner it stays with let it go, and no runner runs it: none counts it as serving.
    assert.deepEqual(await servingOf(), [servingA! - 1, servingB]);
    assert.match(stopped.reason, new RegExp(`^Its runner went away, and it cannot be started again: the pinned secret version ${secret}@1 no longer exists .*Deploy the service again`));
    const events = (await eventsOf(f.server, f.orgId, id)).filter((e) => e.type === 'deployment.process_stopped' || e.type === 'deployment.adopted');
    assert.deepEqual(events.map((e) => [e.type, e.data.host, e.data.previousHost]), [['deployment.process_stopped', hostB, hostA]]);
    assert.ok(!JSON.stringify(events).includes(value));
    await sleep(HOST_TIMEOUT_SECONDS * 1000 + 300);
    assert.deepEqual((await post(f.runner, 'adopt', { host: 'rh_host-c-0003', environments: [env.id] })).body.adopted, []);
    assert.equal((await eventsOf(f.server, f.orgId, id)).filter((e) => e.type === 'deployment.process_stopped').length, 1);

    // It stays with the runner it was taken from: one that still runs it after all says so, and that holds again.
    assert.deepEqual((await post(f.runner, 'serving', { deployments: [id], host: hostA, processes: [{ deployment: id, state: 'running', exits: 2, lastExit: crashed }] })).body, { serving: [id] });
    const back = await getDeployment(f.developer.http, f.orgId, id);
    assert.equal(back.process.state, 'running');
    assert.equal(back.reason, undefined);
    // The exits it had reported before are not news.
    assert.equal((await eventsOf(f.server, f.orgId, id)).filter((e) => e.type === 'deployment.process_exited').length, 1);
  });

  it('refuses process reports without a host, or two of one deployment, recording nothing', async () => {
    const { id } = await served(f.runner, hostA, 'refused-report-value');
    const seen = () => f.server.core.db.selectFrom('deployments').select(['host_seen_at', 'process_state', 'process_exits']).where('id', '=', id).executeTakeFirstOrThrow();
    const before = await seen();
    await sleep(5);
    const report = (exits: number) => ({ deployment: id, state: 'running', exits });
    const noHost = await post(f.runner, 'serving', { deployments: [id], processes: [report(7)] });
    assert.equal(noHost.status, 400, noHost.text);
    assert.deepEqual(noHost.body.errors, [{ pointer: '/host', message: 'is required with processes' }]);
    const twice = await post(f.runner, 'serving', { deployments: [id], host: hostA, processes: [report(3), report(1)] });
    assert.equal(twice.status, 400, twice.text);
    assert.deepEqual(twice.body.errors.map((e: { pointer: string }) => e.pointer), ['/processes/1/deployment']);
    assert.deepEqual(await seen(), before);
  });

  it('keeps a serving report whole or not at all: a process report that fails leaves the host report unmoved too', async () => {
    const { id } = await served(f.runner, hostA, 'whole-report-value');
    const seen = () => f.server.core.db.selectFrom('deployments').select(['host_seen_at', 'process_state']).where('id', '=', id).executeTakeFirstOrThrow();
    assert.deepEqual((await post(f.runner, 'serving', { deployments: [id], host: hostA })).body, { serving: [id] });
    const before = await seen();
    await sleep(5);
    const setProcess = deploymentsRepo.setProcess;
    deploymentsRepo.setProcess = async () => { throw new Error('the disk is full'); };
    try {
      assert.equal((await post(f.runner, 'serving', { deployments: [id], host: hostA, processes: [{ deployment: id, state: 'running', exits: 0 }] })).status, 500);
    } finally {
      deploymentsRepo.setProcess = setProcess;
    }
    assert.deepEqual(await seen(), before);
    assert.deepEqual((await post(f.runner, 'serving', { deployments: [id], host: hostA, processes: [{ deployment: id, state: 'running', exits: 0 }] })).body, { serving: [id] });
    const after = await seen();
    assert.equal(after.process_state, 'running');
    assert.ok(after.host_seen_at! > before.host_seen_at!);
  });

  it('makes a released deployment an orphan at once, only for the runner that held it; one never reported is never adopted', async () => {
    const { id, env } = await served(f.runner, hostA, 'released-value');
    const legacy = await served(f.runner, undefined, 'legacy-value');
    assert.deepEqual((await post(f.runner, 'release', { host: hostB, deployments: [id] })).body, { released: [] }, 'not its own');
    assert.deepEqual((await post(f.runner, 'release', { host: hostA, deployments: [id, legacy.id] })).body, { released: [id] });
    const adopted = await post(f.runner, 'adopt', { host: hostB, environments: [env.id, legacy.env.id] });
    assert.deepEqual(adopted.body.adopted.map((a: { deployment: { id: string } }) => a.deployment.id), [id]);
    await sleep(HOST_TIMEOUT_SECONDS * 1000 + 300);
    assert.deepEqual((await post(f.runner, 'adopt', { host: hostB, environments: [legacy.env.id] })).body.adopted, []);
  });

  it('counts a deployment as seen when it succeeds, however long its start took; a claim without host makes it no runner\'s', async () => {
    const env = await createEnvironment(f.admin.http, f.orgId);
    const svc = await createService(f.developer.http, f.orgId, { spec: { command: ['serve'] } });
    const slow = await deploy(f.developer.http, f.orgId, { service: svc.id, environment: env.id });
    const claim = await f.runner.take({ environments: [env.id], waitSeconds: 0, host: hostA });
    // A start longer than the host timeout, heartbeats all along.
    await sleep(HOST_TIMEOUT_SECONDS * 1000 + 300);
    assert.equal((await f.runner.heartbeat(slow.id, claim.lease.token)).status, 200);
    assert.equal((await f.runner.complete(slow.id, claim.lease.token)).status, 200);
    assert.deepEqual((await post(f.runner, 'adopt', { host: hostB, environments: [env.id] })).body.adopted, [], 'adopted the moment it succeeded');

    // An old runner (no host) takes over the next deployment: what it runs is nobody's to adopt.
    const next = await deploy(f.developer.http, f.orgId, { service: svc.id, environment: env.id });
    const old = await f.runner.take({ environments: [env.id], waitSeconds: 0 });
    assert.equal((await f.runner.complete(next.id, old.lease.token)).status, 200);
    await sleep(HOST_TIMEOUT_SECONDS * 1000 + 300);
    assert.deepEqual((await post(f.runner, 'adopt', { host: hostB, environments: [env.id] })).body.adopted, []);
    const row = await f.server.core.db.selectFrom('deployments').select(['host_id', 'host_seen_at']).where('id', '=', next.id).executeTakeFirstOrThrow();
    assert.equal(row.host_id, null);
  });

  it('after a server restart, adopts only what was let go until a whole host timeout has passed', async () => {
    const unreported = await served(f.runner, hostA, 'restart-value-1');
    const released = await served(f.runner, hostA, 'restart-value-2');
    assert.deepEqual((await post(f.runner, 'release', { host: hostA, deployments: [released.id] })).body, { released: [released.id] });
    await sleep(HOST_TIMEOUT_SECONDS * 1000 + 300);
    // Made before the restart (its token stays good), so that the first adoption comes soon after the start.
    const runner = await newRunner(f.server, f.orgId);
    const before = f.server;
    const restarted = await before.restart();
    try {
      const adopt = async () => (await runner.actor.http.post(`/v1/orgs/${f.orgId}/runner/adopt`, { host: hostB, environments: [unreported.env.id, released.env.id] })).body.adopted.map((a: { deployment: { id: string } }) => a.deployment.id);
      // The runners' reports could not reach a server that was down: not yet an orphan.
      assert.deepEqual(await adopt(), [released.id]);
      await sleep(HOST_TIMEOUT_SECONDS * 1000 + 300);
      // Its new runner reports it; the other one nobody reported for a whole timeout of this server's.
      assert.deepEqual((await runner.actor.http.post(`/v1/orgs/${f.orgId}/runner/serving`, { deployments: [released.id], host: hostB })).body, { serving: [released.id] });
      assert.deepEqual(await adopt(), [unreported.id]);
      assert.deepEqual(restarted.undeclared, []);
    } finally {
      // The fixture closes the server it started; this one is the test's own.
      f = { ...f, server: restarted, runner: await newRunner(restarted, f.orgId), close: async () => { assert.deepEqual(restarted.undeclared, []); await restarted.close(); } };
    }
  });

  it('shares the orphans between runners that ask at once: each goes to one of them, and between them they take all', async () => {
    const left = [];
    for (let i = 0; i < 10; i++) left.push(await served(f.runner, hostA, `shared-value-${i}`));
    assert.deepEqual((await post(f.runner, 'release', { host: hostA, deployments: left.map((d) => d.id) })).body.released.length, 10);
    const environments = left.map((d) => d.env.id);
    const other = await newRunner(f.server, f.orgId);
    const [one, two] = await Promise.all([post(f.runner, 'adopt', { host: hostB, environments, limit: 5 }), post(other, 'adopt', { host: 'rh_host-c-0003', environments, limit: 5 })]);
    const ids = [...one.body.adopted, ...two.body.adopted].map((a: { deployment: { id: string } }) => a.deployment.id);
    assert.equal(new Set(ids).size, ids.length, 'one runner each');
    assert.deepEqual(ids.sort(), left.map((d) => d.id).sort(), 'between them, every orphan');
  });

  it('refuses what is not a host id, and lets only runners adopt and release', async () => {
    for (const host of ['short', 'has space-in-it', 'x'.repeat(101)]) {
      assert.equal((await post(f.runner, 'adopt', { host })).status, 400);
      assert.equal((await post(f.runner, 'release', { host, deployments: ['dep_x'] })).status, 400);
    }
    assert.equal((await f.developer.http.post(`/v1/orgs/${f.orgId}/runner/adopt`, { host: hostA })).status, 403);
    assert.equal((await f.admin.http.post(`/v1/orgs/${f.orgId}/runner/release`, { host: hostA, deployments: ['dep_x'] })).status, 403);
    assert.equal((await post(f.runner, 'adopt', { host: hostA, environments: [unique('nowhere')] })).status, 404);
  });
});
