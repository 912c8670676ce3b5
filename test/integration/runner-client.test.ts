// The runner's HTTP side against a real server: the token source caches, shares and renews
// tokens and gets a new one when the API refuses the cached one; the protocol client turns
// refusals into `Refused` (with `mustStop` for the ones that end work on a deployment) and keeps
// retrying a server it cannot reach until told to stop.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { createLogger } from '../../src/platform/logging.js';
import { Refused } from '../../src/runner-agent/http-call.js';
import { createRunner } from '../../src/runner-agent/runner.js';
import { createProtocolClient, type ProtocolClient } from '../../src/runner-agent/protocol-client.js';
import { createTokenSource, type ClientCredentials } from '../../src/runner-agent/token-source.js';
import { clientCredentialsGrant, freePort, tempDir, type Actor } from '../support/harness.js';
import { runCli, spawnSlipway } from '../support/processes.js';
import { createEnvironment, createService, deploy, eventually, getDeployment, runnerClient, startDeployFixture, type DeployFixture } from '../support/deployments.js';
import { alive, ask, servedBy, serviceSpec, settled } from '../support/runner-agent.js';

describe('runner token source and protocol client', () => {
  let f: DeployFixture;
  let runner: Actor;
  let credentials: ClientCredentials;
  const never = new AbortController().signal;

  before(async () => {
    f = await startDeployFixture();
    runner = f.runner.actor;
    credentials = { tokenUrl: runner.tokenUrl, clientId: runner.clientId, clientSecret: runner.clientSecret, scope: runner.scope };
  });
  after(() => f.close());

  /**
   * A runner (in this process) of a new environment, where a new service deploys SERVICE_SCRIPT,
   * on a protocol client that `wrap` may change to stage a race; `stop` ends it.
   */
  async function runnerOn(wrap: (real: ProtocolClient) => ProtocolClient, options: { concurrency?: number; reconcileSeconds?: number } = {}) {
    const real = createProtocolClient({ baseUrl: f.server.url, orgId: f.orgId, tokens: createTokenSource(credentials) });
    const env = await createEnvironment(f.admin.http, f.orgId);
    const svc = await createService(f.developer.http, f.orgId, { spec: serviceSpec() });
    const runner = createRunner({
      client: wrap(real), environments: [env.name], concurrency: options.concurrency ?? 1, logger: createLogger('info', { write: () => {} }), waitSeconds: 1,
      ...(options.reconcileSeconds !== undefined ? { reconcileSeconds: options.reconcileSeconds } : {}),
    });
    const running = runner.run();
    return { env, svc, runner, stop: async () => { runner.stop(); await running; } };
  }

  const tokenRequestsSince = (mark: number) => f.server.logs.slice(mark).filter((l) => l.includes('"route":"/oauth/v2/token"')).length;

  it('caches a token, and concurrent callers share one request for it', async () => {
    const tokens = createTokenSource(credentials);
    const mark = f.server.logs.length;
    const [a, b, c] = await Promise.all([tokens.get(never), tokens.get(never), tokens.get(never)]);
    assert.ok(a && a === b && b === c);
    assert.equal(await tokens.get(never), a);
    assert.equal(tokenRequestsSince(mark), 1);
  });

  it('renews a token before it expires', async () => {
    let now = Date.now();
    const tokens = createTokenSource(credentials, { now: () => now });
    const first = await tokens.get(never);
    const lifetime = f.server.config.tokenTtlSeconds * 1000;
    now += lifetime * 0.7;
    assert.equal(await tokens.get(never), first);
    now += lifetime * 0.2;
    const renewed = await tokens.get(never);
    assert.notEqual(renewed, first);
    assert.equal((await f.server.http(renewed).post(`/v1/orgs/${f.orgId}/runner/claim`, { waitSeconds: 0 })).status, 204);
  });

  it('gets a new token when the API answers 401 to the cached one', async () => {
    const tokens = createTokenSource(credentials);
    const client = createProtocolClient({ baseUrl: f.server.url, orgId: f.orgId, tokens });
    const revoked = await tokens.get(never);
    const res = await fetch(`${f.server.url}/oauth/v2/revoke`, {
      method: 'POST',
      headers: { authorization: `Basic ${Buffer.from(`${runner.clientId}:${runner.clientSecret}`).toString('base64')}`, 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ token: revoked }).toString(),
    });
    assert.equal(res.status, 200);
    assert.equal((await f.server.http(revoked).post(`/v1/orgs/${f.orgId}/runner/claim`, { waitSeconds: 0 })).status, 401);
    assert.equal(await client.claim({ waitSeconds: 0 }, never), null);
    assert.notEqual(await tokens.get(never), revoked);
  });

  /**
   * A proxy in front of the API that answers what `refuses` picks 401 whatever token it carries, as
   * a node does that still signs with a key that it, or the node verifying, already refuses.
   */
  async function refusingFront(refuses: (req: http.IncomingMessage) => boolean): Promise<{ front: http.Server; via: string }> {
    const front = http.createServer((req, res) => {
      if (refuses(req)) {
        res.writeHead(401, { 'content-type': 'application/problem+json' }).end(JSON.stringify({ code: 'invalid_token', detail: 'The access token was signed with an unknown key.' }));
        return;
      }
      const upstream = http.request(`${f.server.url}${req.url}`, { method: req.method, headers: req.headers }, (answer) => {
        res.writeHead(answer.statusCode!, answer.headers);
        answer.pipe(res);
      });
      req.pipe(upstream);
    });
    await new Promise<void>((resolve) => front.listen(0, '127.0.0.1', resolve));
    return { front, via: `http://127.0.0.1:${(front.address() as AddressInfo).port}` };
  }

  it('asks again, for a while, when the API refuses a token just issued (a server between two signing keys)', async () => {
    // The first API requests are refused.
    let refuse = 3;
    const { front, via } = await refusingFront(() => refuse > 0 && refuse-- > 0);
    try {
      const retries: string[] = [];
      const client = createProtocolClient({ baseUrl: via, orgId: f.orgId, tokens: createTokenSource(credentials), onRetry: (_call, error) => retries.push(error.message) });
      assert.equal(await client.claim({ waitSeconds: 0 }, never), null);
      assert.equal(refuse, 0);
      assert.ok(retries.length >= 1 && retries.every((m) => /refused a token just issued .*between two signing keys/.test(m)), retries.join('\n'));

      // Past the grace, a refusal it is: wrong credentials of another kind, a token of another issuer.
      refuse = 1_000;
      const strict = createProtocolClient({ baseUrl: via, orgId: f.orgId, tokens: createTokenSource(credentials), freshTokenGraceMs: 0 });
      await assert.rejects(strict.claim({ waitSeconds: 0 }, never), (e: unknown) => e instanceof Refused && e.status === 401);
    } finally {
      front.close();
    }
  });

  it('counts the grace of refused fresh tokens per call: serving reports that go through do not keep refused claims asking', async () => {
    // Claims are refused whatever token they carry; everything else goes through.
    const { front, via } = await refusingFront((req) => req.url?.includes('/runner/claim') === true);
    const stop = new AbortController();
    try {
      const client = createProtocolClient({ baseUrl: via, orgId: f.orgId, tokens: createTokenSource(credentials), freshTokenGraceMs: 3_000 });
      const reports = (async () => {
        while (!stop.signal.aborted) {
          await client.serving({ deployments: [] }, stop.signal).catch(() => undefined);
          await new Promise((resolve) => setTimeout(resolve, 200));
        }
      })();
      await assert.rejects(client.claim({ waitSeconds: 0 }, never), (e: unknown) => e instanceof Refused && e.status === 401);
      stop.abort();
      await reports;
    } finally {
      stop.abort();
      front.close();
    }
  });

  it('refuses wrong client credentials with the token endpoint\'s reason', async () => {
    const tokens = createTokenSource({ ...credentials, clientSecret: 'not-the-secret' });
    await assert.rejects(tokens.get(never), (e: unknown) => e instanceof Refused && e.status === 401 && e.code === 'invalid_client' && !e.mustStop);
    const res = await clientCredentialsGrant(credentials.tokenUrl, credentials, credentials.scope);
    assert.equal(res.status, 200, 'the real credentials still work');
  });

  it('refuses with mustStop what ends work on a deployment, and without it what ends the runner', async () => {
    const client = createProtocolClient({ baseUrl: f.server.url, orgId: f.orgId, tokens: createTokenSource(credentials) });
    const env = await createEnvironment(f.admin.http, f.orgId);
    const svc = await createService(f.developer.http, f.orgId);
    const d = await deploy(f.developer.http, f.orgId, { service: svc.id, environment: env.id });
    const claimed = await client.claim({ environments: [env.name], waitSeconds: 0 }, never);
    assert.ok(claimed !== null);
    assert.equal(claimed.deployment.id, d.id);
    assert.equal((await client.heartbeat(d.id, claimed.lease.token, never)).lease.token, claimed.lease.token);
    await assert.rejects(client.heartbeat(d.id, 'not-the-lease-token', never), (e: unknown) => e instanceof Refused && e.status === 409 && e.code === 'lease_lost' && e.mustStop);
    assert.equal((await client.complete(d.id, { leaseToken: claimed.lease.token, outcome: 'succeeded' }, never)).state, 'succeeded');
    // A retried completion answers the same; a log line after it is refused.
    assert.equal((await client.complete(d.id, { leaseToken: claimed.lease.token, outcome: 'succeeded' }, never)).state, 'succeeded');
    await assert.rejects(client.appendLogs(d.id, { leaseToken: claimed.lease.token, lines: [{ line: 'late' }] }, never), (e: unknown) => e instanceof Refused && e.code === 'deployment_finished' && e.mustStop);
    await assert.rejects(client.claim({ environments: ['no-such-environment'], waitSeconds: 0 }, never), (e: unknown) => e instanceof Refused && e.status === 404 && !e.mustStop);
    // Another organization's runner cannot claim here.
    const stranger = await f.server.actor((await f.server.createOrg()).id, 'runner');
    const strangerClient = createProtocolClient({ baseUrl: f.server.url, orgId: f.orgId, tokens: createTokenSource({ ...credentials, clientId: stranger.clientId, clientSecret: stranger.clientSecret }) });
    await assert.rejects(strangerClient.claim({ waitSeconds: 0 }, never), (e: unknown) => e instanceof Refused && e.status === 404);
    assert.equal((await runnerClient(runner, f.orgId).claim()).status, 204);
  });

  it('stops at once when its first claim is refused, but outlives an environment renamed later', async () => {
    const lines: string[] = [];
    const logger = createLogger('info', { write: (line: string) => { lines.push(line); } });
    const client = createProtocolClient({ baseUrl: f.server.url, orgId: f.orgId, tokens: createTokenSource(credentials) });
    const misspelt = createRunner({ client, environments: ['no-such-environment'], concurrency: 1, logger, waitSeconds: 0 });
    await assert.rejects(misspelt.run(), (e: unknown) => e instanceof Refused && e.code === 'environment_not_found');

    const env = await createEnvironment(f.admin.http, f.orgId);
    // Its claims counted as they are answered: the rename comes after the first one (204: nothing queued).
    let answered = 0;
    const counting: ProtocolClient = { ...client, claim: async (claim, signal) => { const got = await client.claim(claim, signal); answered++; return got; } };
    const runner = createRunner({ client: counting, environments: [env.name], concurrency: 1, logger, waitSeconds: 1 });
    let settled = false;
    const running = runner.run().finally(() => { settled = true; });
    await eventually('its first claim to be answered', async () => (answered > 0 ? true : undefined));
    const renamed = await f.admin.http.patch(`/v1/orgs/${f.orgId}/environments/${env.id}`, { name: `${env.name}-renamed` });
    assert.equal(renamed.status, 200, renamed.text);
    await eventually('the runner to say it cannot claim', async () => (lines.some((l) => l.includes('cannot claim') && l.includes('keep running')) ? true : undefined));
    assert.equal(settled, false, 'the runner keeps running');
    runner.stop();
    await running;
  });

  it('outlives its own credentials refused later (its service user disabled): what it runs keeps serving, and it claims again once they work', async () => {
    const lines: string[] = [];
    const logger = createLogger('info', { write: (line: string) => { lines.push(line); } });
    const own = await f.server.actor(f.orgId, 'runner');
    const client = createProtocolClient({ baseUrl: f.server.url, orgId: f.orgId, tokens: createTokenSource({ ...credentials, clientId: own.clientId, clientSecret: own.clientSecret }) });
    const env = await createEnvironment(f.admin.http, f.orgId);
    const svc = await createService(f.developer.http, f.orgId, { spec: serviceSpec() });
    const agent = createRunner({ client, environments: [env.name], concurrency: 1, logger, waitSeconds: 1, refusedRetryMs: 200 });
    let ended = false;
    const running = agent.run().finally(() => { ended = true; });
    try {
      const first = await deploy(f.developer.http, f.orgId, { service: svc.id, environment: env.id });
      assert.equal((await settled(f.developer.http, f.orgId, first.id)).state, 'succeeded');
      const served = await servedBy(f.developer.http, f.orgId, first.id);

      assert.equal((await f.admin.http.patch(`/v1/orgs/${f.orgId}/service-users/${own.id}`, { disabled: true })).status, 200);
      await eventually('the runner to say it cannot claim', async () => (lines.some((l) => l.includes('cannot claim') && l.includes('invalid_client') && l.includes('keep running')) ? true : undefined));
      await sleep(500); // a few refused claims later
      assert.equal(ended, false, 'the runner keeps running');
      assert.ok(alive(served.pid), 'its service keeps running');
      assert.equal((await ask(served.port) as { pid: number }).pid, served.pid, 'and answers');

      assert.equal((await f.admin.http.patch(`/v1/orgs/${f.orgId}/service-users/${own.id}`, { disabled: false })).status, 200);
      const second = await deploy(f.developer.http, f.orgId, { service: svc.id, environment: env.id });
      assert.equal((await settled(f.developer.http, f.orgId, second.id)).state, 'succeeded', 'claimed again once its credentials work');
    } finally {
      agent.stop();
      await running;
    }
  });

  it('keeps the previous process serving when the server refuses a success (cancelled as it was reported)', async () => {
    // The cancel lands between the new process turning healthy and the runner reporting it.
    let cancelOnCompletion: string | undefined;
    const { env, svc, stop } = await runnerOn((real) => ({
      ...real,
      async complete(id, body, signal) {
        if (id === cancelOnCompletion) assert.equal((await f.developer.http.post(`/v1/orgs/${f.orgId}/deployments/${id}/cancel`, {})).status, 200);
        return real.complete(id, body, signal);
      },
    }));
    try {
      const first = await deploy(f.developer.http, f.orgId, { service: svc.id, environment: env.id, variables: { REVISION: 'one' } });
      assert.equal((await settled(f.developer.http, f.orgId, first.id)).state, 'succeeded');
      const one = await servedBy(f.developer.http, f.orgId, first.id);

      const second = await deploy(f.developer.http, f.orgId, { service: svc.id, environment: env.id, variables: { REVISION: 'two' } });
      cancelOnCompletion = second.id;
      assert.equal((await settled(f.developer.http, f.orgId, second.id)).state, 'cancelled');
      const two = await servedBy(f.developer.http, f.orgId, second.id);
      await eventually('the cancelled revision\'s process to stop', async () => (alive(two.pid) ? undefined : true));
      assert.equal(alive(one.pid), true, 'the previous process was not touched');
      assert.equal(((await ask(one.port)) as { revision: string }).revision, 'one');
      assert.equal((await f.developer.http.get(`/v1/orgs/${f.orgId}/deployments/${first.id}`)).body.state, 'succeeded');
    } finally {
      await stop();
    }
  });

  it('stops a process whose deployment no longer serves: superseded through another runner, or deleted with its service', async () => {
    // This runner claims only while `claiming`, so that another can take the next deployment.
    let claiming = true;
    let inFlight: Promise<unknown> = Promise.resolve();
    let questions = 0;
    const { env, svc, runner, stop } = await runnerOn((real) => ({
      ...real,
      async claim(claim, signal) {
        if (claiming) return (inFlight = real.claim(claim, signal)) as ReturnType<typeof real.claim>;
        await sleep(100, undefined, { signal }).catch(() => undefined);
        return null;
      },
      async serving(body, signal) {
        const answer = await real.serving(body, signal);
        questions++;
        return answer;
      },
    }), { reconcileSeconds: 1 });
    try {
      const first = await deploy(f.developer.http, f.orgId, { service: svc.id, environment: env.id, variables: { REVISION: 'one' } });
      assert.equal((await settled(f.developer.http, f.orgId, first.id)).state, 'succeeded');
      const one = await servedBy(f.developer.http, f.orgId, first.id);

      claiming = false;
      await inFlight.catch(() => undefined);
      const second = await deploy(f.developer.http, f.orgId, { service: svc.id, environment: env.id, variables: { REVISION: 'two' } });
      const elsewhere = await f.runner.take({ environments: [env.id], waitSeconds: 0 });
      assert.equal(elsewhere.deployment.id, second.id);
      assert.equal((await f.runner.complete(second.id, elsewhere.lease.token)).status, 200);
      await eventually('the superseded revision\'s process to stop', async () => (alive(one.pid) ? undefined : true));
      assert.equal(runner.processes.current(`${svc.id}/${env.id}`), undefined, 'nor is it started again');

      claiming = true;
      const other = await createService(f.developer.http, f.orgId, { spec: serviceSpec() });
      const third = await deploy(f.developer.http, f.orgId, { service: other.id, environment: env.id });
      assert.equal((await settled(f.developer.http, f.orgId, third.id)).state, 'succeeded');
      const three = await servedBy(f.developer.http, f.orgId, third.id);
      // What still serves is left running, round after round.
      const asked = questions;
      await eventually('two more rounds of questions', async () => (questions >= asked + 2 ? true : undefined));
      assert.equal(alive(three.pid), true, 'a serving deployment\'s process keeps running');
      assert.equal(runner.processes.current(`${other.id}/${env.id}`)?.pid, three.pid);
      assert.equal((await f.admin.http.delete(`/v1/orgs/${f.orgId}/services/${other.id}?force=true`)).status, 204);
      await eventually('the deleted service\'s process to stop', async () => (alive(three.pid) ? undefined : true));
    } finally {
      await stop();
    }
  });

  it('keeps the newer deployment serving when the answer to an older one\'s completion comes back late', async () => {
    // The completion of `late` reaches the server, but its answer is lost; the retry is answered
    // only once the next deployment has succeeded (it answers the deployment as it is then).
    let late: string | undefined;
    let release!: () => void;
    const released = new Promise<void>((resolve) => { release = resolve; });
    const { env, svc, runner, stop } = await runnerOn((real) => ({
      ...real,
      async complete(id, body, signal) {
        if (id !== late) return real.complete(id, body, signal);
        await real.complete(id, body, signal);
        await released;
        return real.complete(id, body, signal);
      },
    }), { concurrency: 2 });
    try {
      const older = await deploy(f.developer.http, f.orgId, { service: svc.id, environment: env.id, variables: { REVISION: 'older' } });
      late = older.id;
      assert.equal((await settled(f.developer.http, f.orgId, older.id)).state, 'succeeded');
      const newer = await deploy(f.developer.http, f.orgId, { service: svc.id, environment: env.id, variables: { REVISION: 'newer' } });
      assert.equal((await settled(f.developer.http, f.orgId, newer.id)).state, 'succeeded');
      const serving = await servedBy(f.developer.http, f.orgId, newer.id);
      await eventually('the newer process in place', async () => (runner.processes.current(`${svc.id}/${env.id}`)?.pid === serving.pid ? true : undefined));
      const stale = await servedBy(f.developer.http, f.orgId, older.id);
      release();
      await eventually('the older process to stop', async () => (alive(stale.pid) ? undefined : true));
      assert.equal(alive(serving.pid), true, 'the newer one keeps serving');
      assert.equal(((await ask(serving.port)) as { revision: string }).revision, 'newer');
      assert.equal(runner.processes.current(`${svc.id}/${env.id}`)?.pid, serving.pid);
    } finally {
      release();
      await stop();
    }
  });

  it('works with a server older than hosting: no host in its claims and reports, and adoption asked once', async () => {
    const seen: unknown[] = [];
    let adoptions = 0;
    const older = (real: ProtocolClient): ProtocolClient => ({
      ...real,
      async claim(claim, signal) {
        seen.push(claim);
        return real.claim(claim, signal);
      },
      async serving(body, signal) {
        seen.push({ serving: body.host, processes: body.processes });
        return real.serving(body, signal);
      },
      async adopt() {
        adoptions++;
        throw new Refused(404, 'route_not_found', 'adopt was refused (404): There is no route POST /v1/orgs/x/runner/adopt.');
      },
    });
    const { env, svc, stop } = await runnerOn(older, { reconcileSeconds: 1 });
    const d = await deploy(f.developer.http, f.orgId, { service: svc.id, environment: env.id });
    assert.equal((await settled(f.developer.http, f.orgId, d.id)).state, 'succeeded');
    await eventually('a report of what it runs', async () => (seen.some((s) => typeof s === 'object' && s !== null && 'serving' in s) ? true : undefined));
    await stop();
    assert.equal(adoptions, 1);
    assert.ok(seen.length > 1 && seen.every((s) => !JSON.stringify(s).includes('"host"') && (s as { serving?: unknown }).serving === undefined), JSON.stringify(seen));
  });

  it('lets its deployments go when it stops though the node that answers refuses the stop notice (an older one, mid-upgrade)', async () => {
    const releases: Array<{ deployments: number; stopping: boolean; refused: boolean }> = [];
    const mixed = (real: ProtocolClient): ProtocolClient => ({
      ...real,
      async release(body, signal) {
        const refused = body.stopping !== undefined;
        releases.push({ deployments: body.deployments.length, stopping: body.stopping === true, refused });
        if (refused) throw new Refused(400, 'invalid_request', 'release was refused (400): /stopping is not a known field.');
        return real.release(body, signal);
      },
    });
    const { env, svc, stop } = await runnerOn(mixed, { reconcileSeconds: 1 });
    const d = await deploy(f.developer.http, f.orgId, { service: svc.id, environment: env.id });
    assert.equal((await settled(f.developer.http, f.orgId, d.id)).state, 'succeeded');
    await eventually('the server to know where it runs', async () => {
      const row = await f.server.core.db.selectFrom('deployments').select('host_id').where('id', '=', d.id).executeTakeFirstOrThrow();
      return row.host_id !== null ? true : undefined;
    });
    await stop();
    assert.deepEqual(releases, [{ deployments: 1, stopping: true, refused: true }, { deployments: 1, stopping: false, refused: false }]);
    const row = await f.server.core.db.selectFrom('deployments').select('host_seen_at').where('id', '=', d.id).executeTakeFirstOrThrow();
    assert.equal(row.host_seen_at, null, 'let go of, for another runner to adopt at once');
  });

  for (const older of ['processes', 'addresses'] as const) {
    it(`reports what it runs, with as much as it can, to a node that refuses ${older === 'processes' ? 'how its processes are doing' : 'where they answer'} (an older one, mid-upgrade)`, async () => {
      // Every report sent, in order: refused (it carried what that node does not know) or answered.
      const sent: Array<{ host?: string; deployments: number; processes: boolean; addresses: boolean; refused: boolean }> = [];
      const mixed = (real: ProtocolClient): ProtocolClient => ({
        ...real,
        async serving(body, signal) {
          // The adoption was answered by an upgraded node; every report lands on one that is not.
          const addresses = body.processes?.some((p) => p.address !== undefined) ?? false;
          const refused = older === 'processes' ? body.processes !== undefined : addresses;
          sent.push({ host: body.host, deployments: body.deployments.length, processes: body.processes !== undefined, addresses, refused });
          if (refused) throw new Refused(400, 'invalid_request', 'serving was refused (400): /processes: must NOT have additional properties.');
          return real.serving(body, signal);
        },
      });
      const answered = () => sent.filter((s) => !s.refused);
      const { env, svc, stop } = await runnerOn(mixed, { reconcileSeconds: 1 });
      try {
        const d = await deploy(f.developer.http, f.orgId, { service: svc.id, environment: env.id });
        assert.equal((await settled(f.developer.http, f.orgId, d.id)).state, 'succeeded');
        await eventually('a report that reached the server', async () => (answered().some((a) => a.deployments > 0 && (older === 'processes' || a.processes)) ? true : undefined));
        // A refused report goes again at once with less, for the same deployments: without the
        // addresses first, then without the processes; what that node knows is kept.
        const first = sent.findIndex((s) => s.refused && s.addresses);
        assert.ok(first >= 0, JSON.stringify(sent));
        assert.deepEqual(sent[first + 1], { ...sent[first]!, addresses: false, refused: older === 'processes' }, JSON.stringify(sent));
        if (older === 'processes') assert.deepEqual(sent[first + 2], { ...sent[first]!, addresses: false, processes: false, refused: false }, JSON.stringify(sent));
        assert.ok(answered().every((a) => typeof a.host === 'string'), JSON.stringify(sent));
        // The server saw its runner after the deployment succeeded (so it does not take it for an
        // orphan), and the process still serves.
        const { pid } = await servedBy(f.developer.http, f.orgId, d.id);
        await eventually('the server to have seen the runner since', async () => {
          const row = await f.server.core.db.selectFrom('deployments').select(['host_seen_at', 'finished_at']).where('id', '=', d.id).executeTakeFirstOrThrow();
          return Date.parse(row.host_seen_at!) > Date.parse(row.finished_at!) ? true : undefined;
        });
        assert.ok(alive(pid));
        if (older === 'addresses') {
          const shown = await eventually('how the process is doing, without where', async () => (await getDeployment(f.developer.http, f.orgId, d.id)).process);
          assert.equal(shown.state, 'running');
          assert.equal(shown.address, undefined);
        }
      } finally {
        await stop();
      }
    });
  }

  /** A server of its own that hands out tokens, and answers the API's calls with `api`; a client of it. */
  async function fakeApi(api: (req: http.IncomingMessage, res: http.ServerResponse) => void) {
    const fake = http.createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        if (req.url !== '/oauth/v2/token') return api(req, res);
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ access_token: 'a.b.c', token_type: 'Bearer', expires_in: 3600 }));
      });
    });
    await new Promise<void>((resolve) => fake.listen(0, '127.0.0.1', resolve));
    const { port } = fake.address() as AddressInfo;
    const baseUrl = `http://127.0.0.1:${port}`;
    const client = createProtocolClient({
      baseUrl, orgId: f.orgId,
      tokens: createTokenSource({ ...credentials, tokenUrl: `${baseUrl}/oauth/v2/token` }),
    });
    return {
      client,
      baseUrl,
      close: async () => {
        fake.closeAllConnections();
        await new Promise((resolve) => fake.close(resolve));
      },
    };
  }

  it('gives up the key of a claim whose first try the server still holds, and claims again under a new one', async () => {
    // A server whose node died with the first try's long poll: it answers that try's retries 409
    // in progress (with Retry-After) until its lock timeout frees the key.
    const keys: string[] = [];
    const { client, close } = await fakeApi((req, res) => {
      keys.push(String(req.headers['idempotency-key']));
      res.writeHead(409, { 'content-type': 'application/problem+json', 'retry-after': '3' })
        .end(JSON.stringify({ status: 409, code: 'idempotency_request_in_progress', detail: 'A request with this Idempotency-Key is still being processed.' }));
    });
    try {
      // A pause for the Retry-After would take 3 s (and a retry under the same key, until the signal ends it).
      const started = Date.now();
      assert.equal(await client.claim({ waitSeconds: 0 }, AbortSignal.timeout(5000)), null);
      assert.equal(await client.claim({ waitSeconds: 0 }, AbortSignal.timeout(5000)), null);
      assert.ok(Date.now() - started < 2_500, 'no pause for the Retry-After of a key that is given up');
      assert.equal(keys.length, 2);
      assert.notEqual(keys[0], keys[1]);
    } finally {
      await close();
    }
  });

  it('gives up a heartbeat on a node that took it and went silent within the heartbeat interval, and renews through another try', async () => {
    // Behind a balancer, one node stopped (SIGSTOP, a long pause): it holds the connection and never answers.
    let heartbeats = 0;
    const { client, close } = await fakeApi((_req, res) => {
      if (++heartbeats === 1) return;
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ lease: { token: 't', expiresAt: new Date(Date.now() + 30_000).toISOString(), heartbeatSeconds: 10, attempt: 1 } }));
    });
    try {
      const started = Date.now();
      const beat = await client.heartbeat('dep_x', 't', AbortSignal.timeout(20_000), 1_000);
      assert.equal(beat.lease.heartbeatSeconds, 10);
      assert.equal(heartbeats, 2);
      assert.ok(Date.now() - started < 10_000, `renewed after ${Date.now() - started} ms, not after the 30 s a call may take`);
    } finally {
      await close();
    }
  });

  it('asks a heartbeat again within the heartbeat interval whatever Retry-After says, and counts the lease from when the try that renewed it was sent', async () => {
    const lease = { token: 't', attempt: 1, expiresAt: new Date(Date.now() + 30_000).toISOString(), durationSeconds: 30, heartbeatSeconds: 10 };
    const problem = (code: string) => JSON.stringify({ status: 503, code, detail: 'no' });
    const answers: Array<[number, Record<string, string>, string]> = [
      // A node whose database is out of reach, a balancer's page, a node overloaded or stopping.
      [503, { 'content-type': 'application/problem+json; charset=utf-8', 'retry-after': '5' }, problem('unavailable')],
      [503, { 'content-type': 'text/html', 'retry-after': '30' }, '<html>busy</html>'],
      [503, { 'content-type': 'application/problem+json; charset=utf-8', 'retry-after': '30' }, problem('unavailable')],
      [200, { 'content-type': 'application/json' }, JSON.stringify({ lease: { ...lease, expiresInMs: 29_000 } })],
    ];
    const { close, baseUrl } = await fakeApi((_req, res) => {
      const [status, headers, body] = answers.shift()!;
      res.writeHead(status, headers).end(body);
    });
    const pauses: number[] = [];
    const client = createProtocolClient({
      baseUrl, orgId: f.orgId, tokens: createTokenSource({ ...credentials, tokenUrl: `${baseUrl}/oauth/v2/token` }),
      onRetry: (_call, _error, _attempt, delayMs) => pauses.push(delayMs),
    });
    try {
      const before = performance.now();
      const renewed = await client.heartbeat('dep_x', 't', AbortSignal.timeout(20_000), 1_000);
      // Counted from when the try that renewed it was sent, after the three others and their pauses.
      assert.ok(renewed.heldUntil >= before + 3_000 + 29_000 && renewed.heldUntil <= performance.now() + 29_000, String(renewed.heldUntil));
      // Retry-After says 30 s; a heartbeat asks again within its interval.
      assert.deepEqual(pauses, [1_000, 1_000, 1_000]);
    } finally {
      await close();
    }
  });

  it('names the token endpoint, not the API, when the token endpoint is what cannot be reached', async () => {
    const tokenUrl = `http://127.0.0.1:${await freePort()}/oauth/v2/token`;
    const stop = new AbortController();
    const failures: string[] = [];
    const client = createProtocolClient({
      baseUrl: f.server.url, orgId: f.orgId,
      tokens: createTokenSource({ ...credentials, tokenUrl }),
      onRetry: (_call, error, attempt) => {
        failures.push(error.message);
        if (attempt === 2) stop.abort(new Error('enough'));
      },
    });
    await assert.rejects(client.claim({ waitSeconds: 0 }, stop.signal), /enough/);
    assert.deepEqual(failures, [1, 2].map(() => `the token endpoint ${tokenUrl} cannot be reached: ECONNREFUSED`));
  });

  it('slipway runner: its log names the token endpoint it cannot reach, and warns of a SLIPWAY_* variable it does not know', async () => {
    const dir = tempDir('slipway-runner-token-');
    const tokenUrl = `http://127.0.0.1:${await freePort()}/oauth/v2/token`;
    const file = path.join(dir, 'runner.json');
    fs.writeFileSync(file, JSON.stringify({ ...credentials, tokenUrl, orgId: f.orgId, baseUrl: f.server.url }), { mode: 0o600 });
    const proc = spawnSlipway(['runner', '--credentials', file], { SLIPWAY_RUNNER_CONCURENCY: '2' });
    try {
      const retry = await proc.waitForLog((l) => /retrying/.test(String(l.msg)), 'a retry');
      assert.equal(retry.level, 'warn');
      assert.match(String(retry.msg), new RegExp(`: the token endpoint ${tokenUrl.replace(/[.?]/g, '\\$&')} cannot be reached: ECONNREFUSED$`));
      assert.deepEqual(proc.logs().filter((l) => /not a Slipway setting/.test(String(l.msg))).map((l) => [l.level, l.msg]),
        [['warn', 'SLIPWAY_RUNNER_CONCURENCY is not a Slipway setting and is ignored; did you mean SLIPWAY_RUNNER_CONCURRENCY?']]);
    } finally {
      proc.child.kill('SIGTERM');
      await proc.exited;
      fs.rmSync(dir, { recursive: true, force: true });
    }
    // Settings it refuses: the warning comes first, as a line of its own.
    const refused = await runCli(['runner', '--url', f.server.url, '--org', 'default', '--client-id', 'x', '--scope', 's'], { SLIPWAY_CLIENT_SECERT: 'y' });
    assert.equal(refused.code, 2, refused.stderr);
    assert.equal(refused.stderr, 'slipway: warning: SLIPWAY_CLIENT_SECERT is not a Slipway setting and is ignored; did you mean SLIPWAY_CLIENT_SECRET?\n'
      + 'slipway: --client-secret (SLIPWAY_CLIENT_SECRET) is required, or --credentials FILE that has it\n');
  });

  it('keeps trying a server it cannot reach, pausing longer each time, until its signal aborts', async () => {
    const port = await freePort();
    const stop = new AbortController();
    const pauses: number[] = [];
    const client = createProtocolClient({
      baseUrl: `http://127.0.0.1:${port}`, orgId: f.orgId,
      tokens: createTokenSource({ ...credentials, tokenUrl: `http://127.0.0.1:${port}/oauth/v2/token` }),
      onRetry: (call, error, attempt, delayMs) => {
        assert.equal(call, 'claim');
        assert.match(error.message, /cannot be reached: ECONNREFUSED/);
        pauses.push(delayMs);
        if (attempt === 4) stop.abort(new Error('enough'));
      },
    });
    await assert.rejects(client.claim({ waitSeconds: 0 }, stop.signal), /enough/);
    assert.equal(pauses.length, 4);
    // Jittered between half and all of a doubling ceiling: 200, 400, 800, 1600 ms.
    pauses.forEach((ms, i) => assert.ok(ms >= 100 * 2 ** i && ms <= 200 * 2 ** i, `pause ${i + 1} was ${ms} ms`));
  });
});
