// Prometheus metrics on their own listener (SLIPWAY_METRICS_ADDRESS): responses by route template,
// deployments waiting and running read from the database, webhook attempts, and nothing that names
// an organization, a secret or a value. With `--workers 2` the primary serves each worker's series.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import net, { type AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { after, before, describe, it } from 'node:test';
import { createEnvironment, createService, deploy, eventually, newRunner } from '../support/deployments.js';
import { freePort, startServer, tempDir, testDatabase, TEST_DB, type TestServer } from '../support/harness.js';
import { spawnServe, type ServeProcess } from '../support/processes.js';
import { createTcpProxy } from '../support/tcp-proxy.js';

/** Each sample of an exposition, keyed `name{label="value",…}` with its labels sorted. */
function samples(text: string): Map<string, number> {
  const found = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    assert.ok(match, `not a sample line: ${line}`);
    const labels = [...(match[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)].map((m) => `${m[1]}="${m[2]}"`).sort();
    found.set(`${match[1]}{${labels.join(',')}}`, Number(match[3]));
  }
  return found;
}

async function scrape(address: string, method = 'GET', path = '/metrics'): Promise<{ status: number; headers: http.IncomingHttpHeaders; text: string }> {
  const [host, port] = [address.slice(0, address.lastIndexOf(':')), Number(address.slice(address.lastIndexOf(':') + 1))];
  return new Promise((resolve, reject) => {
    http.request({ host, port, method, path, agent: false }, (res) => {
      let text = '';
      res.on('data', (c: Buffer) => { text += c.toString('utf8'); });
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, text }));
    }).on('error', reject).end();
  });
}

const value = (all: Map<string, number>, key: string) => all.get(key) ?? 0;

describe('metrics', () => {
  let server: TestServer;
  let address: string;
  before(async () => {
    server = await startServer({ env: { SLIPWAY_METRICS_ADDRESS: '127.0.0.1:0', SLIPWAY_WEBHOOK_ALLOW_PRIVATE: 'true' } });
    address = server.slipway.metricsAddress!;
  });
  after(async () => {
    assert.deepEqual(server.undeclared, []);
    await server.close();
  });

  it('is off unless SLIPWAY_METRICS_ADDRESS is set', async () => {
    const plain = await startServer();
    try {
      assert.equal(plain.slipway.metricsAddress, null);
      assert.equal(plain.logs.some((l) => l.includes('metrics listening')), false);
    } finally {
      await plain.close();
    }
  });

  it('counts responses by method, route template and status; no path, id, name, token or value is in them', async () => {
    const org = await server.createOrg();
    const admin = await server.actor(org.id, 'admin');
    const sentinel = `metrics-sentinel-${process.pid}-value`;
    const name = `metrics-sentinel-${process.pid}-name`;
    const beforeScrape = samples((await scrape(address)).text);
    for (let i = 0; i < 3; i++) assert.equal((await admin.http.get('/v1/orgs')).status, 200);
    assert.equal((await admin.http.post(`/v1/orgs/${org.id}/secrets`, { secrets: [{ name, values: { KEY: sentinel } }] })).status, 201);
    assert.equal((await admin.http.get(`/v1/orgs/${org.id}/secrets/${name}-missing`)).status, 404);
    assert.equal((await admin.http.get(`/${name}/nowhere`)).status, 404);
    assert.equal((await server.http().get('/v1/orgs')).status, 401);

    const res = await scrape(address);
    assert.equal(res.status, 200);
    assert.match(String(res.headers['content-type']), /^text\/plain; version=0\.0\.4/);
    const now = samples(res.text);
    const delta = (key: string) => value(now, key) - value(beforeScrape, key);
    assert.equal(delta('slipway_http_requests_total{method="GET",route="/v1/orgs",status="200"}'), 3);
    assert.equal(delta('slipway_http_requests_total{method="GET",route="/v1/orgs",status="401"}'), 1);
    assert.equal(delta('slipway_http_requests_total{method="POST",route="/v1/orgs/:orgId/secrets",status="201"}'), 1);
    assert.equal(delta('slipway_http_requests_total{method="GET",route="/v1/orgs/:orgId/secrets/:name",status="404"}'), 1);
    assert.equal(delta('slipway_http_requests_total{method="GET",route="(unmatched)",status="404"}'), 1);
    assert.equal(delta('slipway_http_request_duration_seconds_count{method="GET",route="/v1/orgs"}'), 4);
    assert.ok(delta('slipway_http_request_duration_seconds_sum{method="GET",route="/v1/orgs"}') > 0);
    assert.equal(value(now, 'slipway_info{version="0.1.0"}'), 1);
    // This machine's clock and the database's are one (SQLite) or nearly (a PostgreSQL on it).
    assert.ok(now.has('slipway_clock_offset_seconds{}'), 'the clock offset is there');
    assert.ok(Math.abs(value(now, 'slipway_clock_offset_seconds{}')) < 1, String(value(now, 'slipway_clock_offset_seconds{}')));
    assert.ok(value(now, 'process_resident_memory_bytes{}') > 0, 'the process metrics are there');
    for (const needle of [sentinel, name, org.id, org.slug, admin.token, admin.clientId]) {
      assert.equal(res.text.includes(needle), false, `the metrics carry ${needle}`);
    }
  });

  it('logs and counts, as 499, a request whose client went away before its answer', async () => {
    const org = await server.createOrg();
    const admin = await server.actor(org.id, 'admin');
    const runner = await server.actor(org.id, 'runner');
    const env = await createEnvironment(admin.http, org.id);
    const beforeScrape = samples((await scrape(address)).text);
    const { hostname, port } = new URL(server.url);
    /** Sends `head` and `body` on a connection of its own, and once `sent` resolves closes it unanswered. */
    const abandoned = async (head: string, body: string, sent: () => Promise<unknown>) => {
      const socket = net.connect(Number(port), hostname);
      let answer = '';
      socket.on('data', (chunk: Buffer) => { answer += chunk.toString('utf8'); });
      // Handed to the system before the connection is closed: the server reads the request, then the close.
      await new Promise((resolve) => socket.write(`${head}\r\nHost: ${hostname}\r\nContent-Type: application/json\r\n\r\n${body}`, resolve));
      await sent();
      const closed = new Promise((resolve) => socket.once('close', resolve));
      socket.destroy();
      await closed;
      assert.equal(answer, '', 'nothing was answered before the client went away');
    };
    // A runner's long poll given up while it waits for work.
    const claim = JSON.stringify({ environments: [env.name], waitSeconds: 30 });
    await abandoned(`POST /v1/orgs/${org.id}/runner/claim HTTP/1.1\r\nX-Request-Id: gone-claim\r\nAuthorization: Bearer ${runner.token}\r\nContent-Length: ${claim.length}`, claim,
      () => eventually('the claim to wait', async () => (server.core.signals.waiting(org.id) > 0 ? true : undefined)));
    // A body never sent in full.
    await abandoned(`POST /v1/orgs/${org.id}/secrets HTTP/1.1\r\nX-Request-Id: gone-body\r\nAuthorization: Bearer ${admin.token}\r\nContent-Length: 100`, '{"secrets":', async () => {});
    const lineOf = (id: string) => eventually(`the access-log line of ${id}`, async () => {
      const lines = server.logs.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.requestId === id && l.msg === 'request');
      return lines.length > 0 ? lines : undefined;
    });
    for (const [id, route] of [['gone-claim', '/v1/orgs/:orgId/runner/claim'], ['gone-body', '/v1/orgs/:orgId/secrets']] as const) {
      const lines = await lineOf(id);
      assert.equal(lines.length, 1, id);
      assert.deepEqual([lines[0]!.method, lines[0]!.route, lines[0]!.status, lines[0]!.ip], ['POST', route, 499, '127.0.0.1'], id);
    }
    const now = samples((await scrape(address)).text);
    const delta = (key: string) => value(now, key) - value(beforeScrape, key);
    assert.equal(delta('slipway_http_requests_total{method="POST",route="/v1/orgs/:orgId/runner/claim",status="499"}'), 1);
    assert.equal(delta('slipway_http_requests_total{method="POST",route="/v1/orgs/:orgId/secrets",status="499"}'), 1);
    assert.equal(delta('slipway_http_request_duration_seconds_count{method="POST",route="/v1/orgs/:orgId/runner/claim"}'), 1);
  });

  it('reports deployments queued and in progress, read from the database, and how long the oldest has waited', async () => {
    const org = await server.createOrg();
    const admin = await server.actor(org.id, 'admin');
    const env = await createEnvironment(admin.http, org.id);
    const [one, two] = [await createService(admin.http, org.id), await createService(admin.http, org.id)];
    const gauges = async () => {
      const all = samples((await scrape(address)).text);
      return { queued: all.get('slipway_deployments{state="queued"}'), running: all.get('slipway_deployments{state="in_progress"}'), oldest: all.get('slipway_deployment_oldest_queued_age_seconds{}') };
    };
    const start = await gauges();
    const first = await deploy(admin.http, org.id, { service: one.name, environment: env.name });
    await deploy(admin.http, org.id, { service: two.name, environment: env.name });
    const queued = await gauges();
    assert.equal(queued.queued, start.queued! + 2);
    assert.equal(queued.running, start.running);
    assert.ok(queued.oldest! >= 0 && queued.oldest! < 600, String(queued.oldest));

    const runner = await newRunner(server, org.id);
    const claim = await runner.take({ environments: [env.name], waitSeconds: 0 });
    assert.equal(claim.deployment.id, first.id, 'the oldest is claimed first');
    const running = await gauges();
    assert.equal(running.queued, start.queued! + 1);
    assert.equal(running.running, start.running! + 1);
  });

  it('says how long an open transaction has held the event log back (PostgreSQL), 0 when none does', async () => {
    const held = async () => samples((await scrape(address)).text).get('slipway_event_log_held_seconds{}');
    if (TEST_DB !== 'postgres') {
      assert.equal(await held(), 0, 'SQLite writes one at a time: nothing holds its log');
      return;
    }
    // Another session of the same database, left open after it wrote: a psql that was not committed.
    const other = new pg.Client({ connectionString: server.config.databaseUrl! });
    await other.connect();
    try {
      await other.query('begin');
      await other.query('select pg_current_xact_id()');
      await sleep(1_100);
      // A scrape shares a read still under way (one begun before the transaction, on a loaded machine): the next one sees it.
      await eventually('the open transaction to be seen', async () => ((await held())! >= 1 ? true : undefined));
      await other.query('commit');
      await eventually('the gauge back under a second', async () => ((await held())! < 1 ? true : undefined));
    } finally {
      await other.end();
    }
  });

  it('counts webhook attempts by outcome', async () => {
    const org = await server.createOrg();
    const admin = await server.actor(org.id, 'admin');
    let status = 500;
    const receiver = http.createServer((req, res) => { req.resume(); req.on('end', () => { res.statusCode = status; res.end(); }); });
    await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
    try {
      const start = samples((await scrape(address)).text);
      const url = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
      assert.equal((await admin.http.post(`/v1/orgs/${org.id}/webhooks`, { url })).status, 201);
      const failed = await eventually('a failed attempt counted', async () => {
        const all = samples((await scrape(address)).text);
        return value(all, 'slipway_webhook_deliveries_total{outcome="failed"}') > value(start, 'slipway_webhook_deliveries_total{outcome="failed"}') ? all : undefined;
      });
      status = 204;
      await eventually('a delivery counted', async () => {
        const all = samples((await scrape(address)).text);
        return value(all, 'slipway_webhook_deliveries_total{outcome="delivered"}') > value(start, 'slipway_webhook_deliveries_total{outcome="delivered"}') ? all : undefined;
      });
      assert.ok(value(failed, 'slipway_webhook_delivery_duration_seconds_count{}') > value(start, 'slipway_webhook_delivery_duration_seconds_count{}'));
    } finally {
      receiver.closeAllConnections();
      await new Promise<void>((resolve) => receiver.close(() => resolve()));
    }
  });

  it('answers GET and HEAD /metrics only', async () => {
    const head = await scrape(address, 'HEAD');
    assert.equal(head.status, 200);
    assert.equal(head.text, '');
    const post = await scrape(address, 'POST');
    assert.equal(post.status, 405);
    assert.equal(post.headers.allow, 'GET, HEAD');
    assert.equal((await scrape(address, 'GET', '/v1/orgs')).status, 404);
  });
});

describe('metrics of slipway serve --workers 2 (child processes)', () => {
  let dataDir: string;
  let database: Awaited<ReturnType<typeof testDatabase>>;
  const running: ServeProcess[] = [];
  before(async () => {
    dataDir = tempDir('slipway-metrics-');
    database = await testDatabase();
  });
  after(async () => {
    for (const proc of running) if (proc.child.exitCode === null && proc.child.signalCode === null) proc.child.kill('SIGKILL');
    await Promise.all(running.map((p) => p.exited));
    await database.drop();
    fs.rmSync(dataDir, { recursive: true, force: true });
  });

  const serve = (env: Record<string, string>) => {
    const proc = spawnServe([], { SLIPWAY_DATA_DIR: dataDir, SLIPWAY_LOG_LEVEL: 'info', ...(database.url ? { SLIPWAY_DATABASE_URL: database.url } : {}), ...env });
    running.push(proc);
    return proc;
  };

  it('the primary serves each worker\'s series, labelled with it, and the others\' when one is gone', async () => {
    const [port, metricsPort] = [await freePort(), await freePort()];
    const cluster = serve({ SLIPWAY_PORT: String(port), SLIPWAY_WORKERS: '2', SLIPWAY_METRICS_ADDRESS: String(metricsPort) });
    const listeningPids = () => new Set(cluster.logs().filter((l) => l.msg === 'slipway listening').map((l) => l.pid));
    await cluster.waitForLog((l) => l.msg === 'slipway listening' && listeningPids().size >= 2, 'two workers listening');
    const metricsLine = cluster.logs().find((l) => String(l.msg).startsWith('metrics listening'));
    assert.equal(metricsLine?.pid, cluster.child.pid, 'the primary listens for the metrics');

    const answeredBy = new Set<number | undefined>();
    for (let i = 0; i < 10; i++) {
      const id = `metrics-${i}`;
      await new Promise<void>((resolve, reject) => {
        http.get({ host: '127.0.0.1', port, path: '/healthz', agent: false, headers: { 'x-request-id': id } }, (res) => { res.resume(); res.on('end', () => resolve()); }).on('error', reject);
      });
      answeredBy.add((await cluster.waitForLog((l) => l.requestId === id && l.msg === 'request', `the access log of ${id}`)).pid);
    }
    assert.equal(answeredBy.size, 2, 'both workers answered');

    // Each worker's series, labelled with it: their sum is every request.
    const all = samples((await scrape(`127.0.0.1:${metricsPort}`)).text);
    const healthz = [...all].filter(([key]) => key.startsWith('slipway_http_requests_total{') && key.includes('route="/healthz"') && key.includes('status="200"'));
    assert.equal(healthz.length, 2, 'one series per worker');
    assert.ok(healthz.every(([key]) => /worker="\d+"/.test(key)));
    assert.equal(healthz.reduce((sum, [, n]) => sum + n, 0), 10);
    assert.equal([...all].filter(([key]) => key.startsWith('slipway_info{')).length, 2);
    assert.equal(all.get('slipway_metrics_workers{answered="true"}'), 2);
    assert.ok([...all].some(([key, n]) => key.startsWith('slipway_deployments{') && key.includes('state="queued"') && n === 0));

    // A worker gone does not take the page with it: the other's series are served, at once.
    const [gone] = [...answeredBy] as number[];
    process.kill(gone!, 'SIGKILL');
    const after = await scrape(`127.0.0.1:${metricsPort}`);
    assert.equal(after.status, 200);
    assert.ok([...samples(after.text).keys()].some((key) => key.startsWith('slipway_http_requests_total{') && key.includes('route="/healthz"')), 'the other worker\'s series');

    cluster.child.kill('SIGTERM');
    assert.equal((await cluster.exited).signal, null);
  });

  it('serves every worker\'s series while PostgreSQL does not answer, without the deployment gauges, and stops', { skip: TEST_DB !== 'postgres' && 'a PostgreSQL server that stops answering' }, async () => {
    const proxy = createTcpProxy();
    try {
      const url = new URL(database.url!);
      url.port = String(await proxy.open(url.hostname, Number(url.port)));
      const [port, metricsPort] = [await freePort(), await freePort()];
      const cluster = serve({ SLIPWAY_PORT: String(port), SLIPWAY_WORKERS: '2', SLIPWAY_METRICS_ADDRESS: String(metricsPort), SLIPWAY_DATABASE_URL: url.href, SLIPWAY_SHUTDOWN_GRACE_SECONDS: '2' });
      const listeningPids = () => new Set(cluster.logs().filter((l) => l.msg === 'slipway listening').map((l) => l.pid));
      await cluster.waitForLog((l) => l.msg === 'slipway listening' && listeningPids().size >= 2, 'two workers listening');
      const before = samples((await scrape(`127.0.0.1:${metricsPort}`)).text);
      assert.ok([...before.keys()].some((key) => key.startsWith('slipway_deployments{')));

      proxy.silence();
      // Each worker gives up on the database after 2 s and the primary waits 3 s for them: a worker
      // that a busy machine slows past that misses one scrape, not the next.
      const during = await eventually('both workers to answer a scrape', async () => {
        const read = samples((await scrape(`127.0.0.1:${metricsPort}`)).text);
        return read.get('slipway_metrics_workers{answered="true"}') === 2 ? read : undefined;
      });
      assert.equal([...during.keys()].filter((key) => key.startsWith('slipway_info{')).length, 2);
      assert.equal([...during.keys()].some((key) => key.startsWith('slipway_deployments{')), false, 'no gauge read from the database');

      // The gauges' read is still waiting for its answer (for up to the statement deadline, 15 s):
      // the workers end once their grace period has run out, and say so with their status.
      const stopping = Date.now();
      cluster.child.kill('SIGTERM');
      assert.deepEqual(await cluster.exited, { code: 1, signal: null }, cluster.output.join('\n'));
      assert.ok(Date.now() - stopping < 10_000, `exited ${Date.now() - stopping} ms after SIGTERM`);
    } finally {
      await proxy.cut();
    }
  });

  it('refuses to start, before opening anything, when the metrics address is taken', async () => {
    const taken = http.createServer();
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
    try {
      const busy = (taken.address() as AddressInfo).port;
      for (const workers of ['1', '2']) {
        // Found before anything is made: a first start into a new data directory leaves none behind.
        const fresh = path.join(tempDir('slipway-metrics-busy-'), 'data');
        const proc = serve({ SLIPWAY_PORT: String(await freePort()), SLIPWAY_WORKERS: workers, SLIPWAY_DATA_DIR: fresh, SLIPWAY_METRICS_ADDRESS: `127.0.0.1:${busy}` });
        assert.equal((await proc.exited).code, 2, proc.output.join('\n'));
        assert.ok(proc.output.some((l) => l === `slipway: SLIPWAY_METRICS_ADDRESS (--metrics-address): 127.0.0.1:${busy} is in use by another process; stop it or choose another port`), proc.output.join('\n'));
        assert.equal(fs.existsSync(fresh), false, 'a data directory was made for a server that cannot listen');
        fs.rmSync(path.dirname(fresh), { recursive: true, force: true });
      }
    } finally {
      await new Promise<void>((resolve) => taken.close(() => resolve()));
    }
  });
});
