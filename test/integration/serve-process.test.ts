// `slipway serve` as a real child process: the first start bootstraps, SIGTERM lets an in-flight
// request finish and closes the database cleanly, a second start does not bootstrap again, and
// `--workers 2` serves one port from two processes.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { clientCredentialsGrant, freePort, httpClient, tempDir, testDatabase, TEST_DB, type Credentials } from '../support/harness.js';
import { spawnServe, type ServeProcess, type SpawnOptions } from '../support/processes.js';
import { eventually } from '../support/deployments.js';
import { createTcpProxy } from '../support/tcp-proxy.js';

const listening = (line: { msg?: string }) => line.msg === 'slipway listening';

async function accessToken(boot: Credentials): Promise<string> {
  const res = await clientCredentialsGrant(boot.tokenUrl, boot, boot.scope);
  const body = (await res.json()) as { access_token: string };
  assert.equal(res.status, 200, JSON.stringify(body));
  return body.access_token;
}

/**
 * A POST of 1000 secrets held open with `Expect: 100-continue`: resolved once the server has
 * received the request and waits for the body, which `send()` sends.
 */
async function heldSecretsPost(port: number, token: string, prefix: string, agent: http.Agent | false = false) {
  const body = JSON.stringify({ secrets: Array.from({ length: 1000 }, (_, i) => ({ name: `${prefix}-${i}`, values: { KEY: `value-${i}` } })) });
  const req = http.request({
    host: '127.0.0.1', port, method: 'POST', path: '/v1/orgs/default/secrets', agent,
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), expect: '100-continue' },
  });
  const response = new Promise<{ status: number; text: string }>((resolve, reject) => {
    req.on('response', (res) => {
      let text = '';
      res.on('data', (chunk: Buffer) => { text += chunk.toString('utf8'); });
      res.on('end', () => resolve({ status: res.statusCode!, text }));
    });
    req.on('error', reject);
  });
  await new Promise<void>((resolve) => { req.once('continue', () => resolve()); req.flushHeaders(); });
  return { send: () => { req.end(body); return response; } };
}

/** A GET on a connection of its own (the cluster hands each new connection to the next worker). */
function getOnNewConnection(port: number, urlPath: string, requestId: string): Promise<number> {
  return new Promise((resolve, reject) => {
    http.get({ host: '127.0.0.1', port, path: urlPath, agent: false, headers: { 'x-request-id': requestId } }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode!));
    }).on('error', reject);
  });
}

describe('slipway serve (child process)', () => {
  let dataDir: string;
  let database: Awaited<ReturnType<typeof testDatabase>>;
  let env: Record<string, string>;
  let port: number;
  let first: ServeProcess;
  let boot: Credentials;
  const running: ServeProcess[] = [];

  before(async () => {
    dataDir = tempDir('slipway-serve-');
    database = await testDatabase();
    port = await freePort();
    env = { SLIPWAY_DATA_DIR: dataDir, SLIPWAY_PORT: String(port), SLIPWAY_LOG_LEVEL: 'info', ...(database.url ? { SLIPWAY_DATABASE_URL: database.url } : {}) };
  });
  after(async () => {
    for (const proc of running) {
      if (proc.child.exitCode !== null || proc.child.signalCode !== null) continue;
      proc.child.kill('SIGKILL');
      // A process group's workers too.
      try {
        process.kill(-proc.child.pid!, 'SIGKILL');
      } catch {
        // not a group leader
      }
    }
    await Promise.all(running.map((p) => p.exited));
    await database.drop();
    fs.rmSync(dataDir, { recursive: true, force: true });
  });

  function serve(args: string[], extraEnv: Record<string, string> = {}, options: SpawnOptions = {}): ServeProcess {
    const proc = spawnServe(args, { ...env, ...extraEnv }, options);
    running.push(proc);
    return proc;
  }

  it('bootstraps on first start: bootstrap.json (0600) with working credentials, named in the log without the secret', async () => {
    // A file already there, readable by all (left from elsewhere, or planted) does not lend its mode.
    const file = path.join(dataDir, 'bootstrap.json');
    fs.writeFileSync(file, '{}', { mode: 0o644 });
    fs.chmodSync(file, 0o644);
    first = serve([]);
    await first.waitForLog(listening, 'that it listens');
    assert.equal(fs.statSync(file).mode & 0o777, 0o600);
    assert.deepEqual(fs.readdirSync(dataDir).filter((f) => f.endsWith('.tmp')), []);
    boot = JSON.parse(fs.readFileSync(file, 'utf8')) as Credentials;
    assert.deepEqual(Object.keys(boot).sort(), ['baseUrl', 'clientId', 'clientSecret', 'orgId', 'scope', 'tokenUrl']);
    assert.equal(boot.tokenUrl, `http://127.0.0.1:${port}/oauth/v2/token`);
    assert.equal((boot as Credentials & { baseUrl: string }).baseUrl, `http://127.0.0.1:${port}`);
    assert.ok(first.logs().some((l) => l.file === file && /bootstrap/.test(String(l.msg))), 'the log names the bootstrap file');
    const token = await accessToken(boot);
    assert.equal((await httpClient(`http://127.0.0.1:${port}`, token).get('/v1/orgs/default')).body.id, boot.orgId);
    for (const secret of [boot.clientSecret, token]) assert.deepEqual(first.output.filter((l) => l.includes(secret)), []);
  });

  it('on SIGTERM finishes the request in flight, closes the database cleanly and exits 0', async () => {
    // `Expect: 100-continue` holds the request open deterministically: the server has received it
    // (and said so with 100 Continue) but waits for the body, which is sent only after SIGTERM. The
    // connection is keep-alive, as most clients' are: it must not hold the server open afterwards.
    const agent = new http.Agent({ keepAlive: true });
    const held = await heldSecretsPost(port, await accessToken(boot), 'inflight', agent);

    first.child.kill('SIGTERM');
    await first.waitForLog((l) => /shutting down/.test(String(l.msg)), 'that it is shutting down');
    const res = await held.send();
    assert.equal(res.status, 201, res.text);
    assert.equal((JSON.parse(res.text) as { secrets: unknown[] }).secrets.length, 1000);
    assert.deepEqual(await first.exited, { code: 0, signal: null });
    agent.destroy();
    assert.ok(first.logs().some((l) => l.msg === 'stopped cleanly'), first.output.join('\n'));
    // Everything it wrote is a structured log line: no runtime or framework warning on stderr.
    const notLogLines = first.output.filter((line) => {
      try {
        return typeof JSON.parse(line) !== 'object';
      } catch {
        return true;
      }
    });
    assert.deepEqual(notLogLines, []);
    // A clean SQLite close checkpoints the write-ahead log into the database file and removes it.
    if (TEST_DB === 'sqlite') assert.equal(fs.existsSync(path.join(dataDir, 'slipway.db-wal')), false);
  });

  it('does not bootstrap again on a second start, and keeps what the first one wrote', async () => {
    const before = fs.readFileSync(path.join(dataDir, 'bootstrap.json'), 'utf8');
    const second = serve([], { SLIPWAY_WORKRES: '2' });
    await second.waitForLog(listening, 'that it listens');
    assert.deepEqual(second.logs().filter((l) => l.level === 'warn').map((l) => l.msg), ['SLIPWAY_WORKRES is not a Slipway setting and is ignored; did you mean SLIPWAY_WORKERS?']);
    assert.equal(second.logs().some((l) => /bootstrap|first start/.test(String(l.msg))), false);
    assert.equal(fs.readFileSync(path.join(dataDir, 'bootstrap.json'), 'utf8'), before);

    const api = httpClient(`http://127.0.0.1:${port}`, await accessToken(boot));
    const names: string[] = [];
    let cursor: string | null = null;
    do {
      const page: { status: number; text: string; body: { secrets: Array<{ name: string }>; nextCursor: string | null } } = await api.get(`/v1/orgs/default/secrets?limit=200${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
      assert.equal(page.status, 200, page.text);
      names.push(...page.body.secrets.map((s) => s.name));
      cursor = page.body.nextCursor;
    } while (cursor);
    assert.equal(names.filter((n) => n.startsWith('inflight-')).length, 1000);

    // A connection that never sends a byte must not hold the shutdown: Node would keep it until its
    // header timeout (a minute), past the 30 s grace after which serve gives up and exits 1.
    const silent = net.connect({ host: '127.0.0.1', port });
    await new Promise<void>((resolve, reject) => { silent.once('connect', () => resolve()); silent.once('error', reject); });
    const ended = new Promise<void>((resolve) => silent.once('close', () => resolve()));
    silent.on('error', () => {});

    second.child.kill('SIGTERM');
    assert.deepEqual(await second.exited, { code: 0, signal: null });
    await ended;
    assert.ok(second.logs().some((l) => l.msg === 'stopped cleanly'), second.output.join('\n'));
  });

  it('gives the requests in flight SLIPWAY_SHUTDOWN_GRACE_SECONDS to finish, then exits 1 saying so', async () => {
    const own = await freePort();
    const third = serve([], { SLIPWAY_PORT: String(own), SLIPWAY_SHUTDOWN_GRACE_SECONDS: '1' });
    await third.waitForLog(listening, 'that it listens');
    // A request whose body never comes holds the shutdown past its grace.
    const token = await accessToken({ ...boot, tokenUrl: `http://127.0.0.1:${own}/oauth/v2/token` });
    const held = http.request({
      host: '127.0.0.1', port: own, method: 'POST', path: '/v1/orgs/default/secrets', agent: false,
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', 'content-length': 1000, expect: '100-continue' },
    });
    held.on('error', () => {}); // cut when the server gives up
    await new Promise<void>((resolve) => { held.once('continue', () => resolve()); held.flushHeaders(); });
    const stopping = Date.now();
    third.child.kill('SIGTERM');
    assert.deepEqual(await third.exited, { code: 1, signal: null });
    assert.ok(Date.now() - stopping < 20_000, 'well before the default grace of 30 s');
    assert.ok(third.logs().some((l) => l.msg === 'in-flight requests did not finish within SLIPWAY_SHUTDOWN_GRACE_SECONDS; exiting' && l.graceSeconds === 1), third.output.join('\n'));
    held.destroy();
  });

  it('exits on SIGTERM within its grace period when PostgreSQL hangs, its connections left unanswered', { skip: TEST_DB !== 'postgres' && 'a PostgreSQL server that stops answering' }, async () => {
    const proxy = createTcpProxy();
    try {
      const url = new URL(database.url!);
      url.port = String(await proxy.open(url.hostname, Number(url.port)));
      const own = await freePort();
      // A grace period of its own well below the statement deadline (15 s), and well above the half
      // second a shutdown gives background statements, on a machine that may be slow.
      const hung = serve([], { SLIPWAY_PORT: String(own), SLIPWAY_DATABASE_URL: url.href, SLIPWAY_SHUTDOWN_GRACE_SECONDS: '5' });
      await hung.waitForLog(listening, 'that it listens');
      // Connections in the pool, as a node that has served has: more than the background work below holds.
      const token = await accessToken({ ...boot, tokenUrl: `http://127.0.0.1:${own}/oauth/v2/token` });
      const api = httpClient(`http://127.0.0.1:${own}`, token);
      for (const res of await Promise.all([1, 2, 3].map(() => api.get('/v1/orgs/default/secrets')))) assert.equal(res.status, 200);
      // The database stops answering, closing nothing: the server's close of each connection is never answered.
      proxy.silence();
      // Background work (a webhook delivery round, every second) waits for an answer meanwhile: a
      // shutdown that waited for it would wait for the statement deadline, past the grace period.
      await eventually('a background statement left unanswered', async () => (proxy.unanswered() > 0 ? true : undefined));
      hung.child.kill('SIGTERM');
      const exited = await hung.exited;
      // Nothing was in flight: it stopped cleanly within its grace period (past it, the exit code is
      // 1), and ends although its connections have not closed.
      assert.deepEqual(exited, { code: 0, signal: null }, hung.output.join('\n'));
      assert.ok(hung.logs().some((l) => l.msg === 'stopped cleanly'));
      assert.ok(hung.logs().some((l) => /a database connection has not closed/.test(String(l.msg))), hung.output.join('\n'));
    } finally {
      await proxy.cut();
    }
  });

  it('refuses a port in use and a host it cannot listen on with exit 2 and one line naming the setting', async () => {
    const taken = net.createServer();
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
    try {
      const busyPort = (taken.address() as net.AddressInfo).port;
      for (const workers of ['1', '2']) {
        // Found before anything is made: a first start into a new data directory leaves none behind.
        const freshDir = path.join(tempDir('slipway-serve-busy-'), 'data');
        const inUse = serve([], { SLIPWAY_PORT: String(busyPort), SLIPWAY_WORKERS: workers, SLIPWAY_DATA_DIR: freshDir });
        assert.equal((await inUse.exited).code, 2, `${workers} worker(s): ${inUse.output.join('\n')}`);
        assert.ok(inUse.output.some((l) => l === `slipway: SLIPWAY_PORT (--port): 127.0.0.1:${busyPort} is in use by another process; stop it or choose another port`), inUse.output.join('\n'));
        assert.equal(fs.existsSync(freshDir), false, 'a data directory was made for a server that cannot listen');
        fs.rmSync(path.dirname(freshDir), { recursive: true, force: true });
      }
    } finally {
      taken.close();
    }
    const badHost = serve([], { SLIPWAY_HOST: 'no-such-host.invalid' });
    assert.equal((await badHost.exited).code, 2);
    assert.ok(badHost.output.some((l) => l.startsWith('slipway: SLIPWAY_HOST (--host): cannot listen on "no-such-host.invalid"')), badHost.output.join('\n'));
  });

  it('--workers 2 serves one port from two worker processes, the primary logging once what every worker would warn of', async () => {
    const workersPort = await freePort();
    const keyFile = path.join(dataDir, 'master.key');
    fs.chmodSync(keyFile, 0o644);
    const cluster = serve(['--workers', '2'], { SLIPWAY_PORT: String(workersPort), SLIPWAY_DATABSE_URL: 'postgres://elsewhere/slipway' });
    const listeningPids = () => new Set(cluster.logs().filter(listening).map((l) => l.pid));
    await cluster.waitForLog((l) => listening(l) && listeningPids().size >= 2, 'two workers listening');
    fs.chmodSync(keyFile, 0o600);
    const workers = listeningPids();
    assert.equal(workers.has(cluster.child.pid), false, 'the primary only supervises');
    // A misspelt variable and a key file others may read: a warning each in the log, by the primary alone.
    const warnings = cluster.logs().filter((l) => l.level === 'warn');
    assert.deepEqual(warnings.map((l) => [l.pid, l.msg]), [
      [cluster.child.pid, 'SLIPWAY_DATABSE_URL is not a Slipway setting and is ignored; did you mean SLIPWAY_DATABASE_URL?'],
      [cluster.child.pid, `the key file ${keyFile} has mode 0644, which lets other users read or write it: chmod 600 ${keyFile}`],
    ], cluster.output.join('\n'));
    assert.deepEqual(cluster.output.filter((l) => !l.startsWith('{')), [], 'nothing but log lines');

    const answeredBy = new Set<number | undefined>();
    for (let i = 0; i < 10; i++) {
      const id = `workers-${i}`;
      assert.equal(await getOnNewConnection(workersPort, '/healthz', id), 200);
      answeredBy.add((await cluster.waitForLog((l) => l.requestId === id && l.msg === 'request', `the access log of ${id}`)).pid);
    }
    assert.deepEqual([...answeredBy].sort(), [...workers].sort());

    // A worker that crashes is started again; the log names it as workerPid (pid is the primary's).
    const crashed = [...workers][0]!;
    process.kill(crashed, 'SIGKILL');
    const exitLine = await cluster.waitForLog((l) => l.msg === 'worker exited; starting another', 'that the primary starts another worker');
    assert.equal(exitLine.workerPid, crashed);
    assert.equal(exitLine.pid, cluster.child.pid);
    assert.equal(cluster.output.find((l) => l.includes('worker exited; starting another'))!.match(/"pid":/g)?.length, 1);
    await cluster.waitForLog((l) => listening(l) && listeningPids().size >= 3, 'the new worker listening');

    cluster.child.kill('SIGTERM');
    assert.deepEqual(await cluster.exited, { code: 0, signal: null });
    assert.equal(cluster.logs().filter((l) => l.msg === 'stopped cleanly').length, 2);
  });

  it('--workers 2: SIGTERM to the whole process group (a service manager stopping it) lets the request in flight finish and exits 0', async () => {
    // Each worker gets the group's SIGTERM and then the one the primary forwards: the second must
    // not end a worker that is still finishing a request.
    const group = serve(['--workers', '2'], {}, { processGroup: true });
    const workerPids = () => new Set(group.logs().filter(listening).map((l) => l.pid));
    await group.waitForLog((l) => listening(l) && workerPids().size >= 2, 'two workers listening');
    const held = await heldSecretsPost(port, await accessToken(boot), 'group');

    process.kill(-group.child.pid!, 'SIGTERM');
    await group.waitForLog((l) => l.msg === 'shutting down: stopping the workers', 'that the primary stops the workers');
    await group.waitForLog(() => group.logs().filter((l) => /^shutting down: finishing/.test(String(l.msg))).length >= 2, 'that both workers are shutting down');
    await new Promise((resolve) => setTimeout(resolve, 200));

    const res = await held.send();
    assert.equal(res.status, 201, res.text);
    assert.deepEqual(await group.exited, { code: 0, signal: null }, group.output.join('\n'));
    assert.equal(group.logs().filter((l) => l.msg === 'stopped cleanly').length, 2, group.output.join('\n'));
  });

  it('expires no lease right after it was frozen longer than a lease (SIGSTOP, a paused VM): the runners\' heartbeats land first', async () => {
    // A lease of 3 s renewed every second: a heartbeat may land up to 2 s late on a loaded machine.
    const proc = serve([], { SLIPWAY_RUNNER_LEASE_SECONDS: '3' });
    await proc.waitForLog(listening, 'that it listens');
    const base = `http://127.0.0.1:${port}`;
    const api = httpClient(base, await accessToken(boot));
    const env = await api.post('/v1/orgs/default/environments', { name: 'frozen' });
    assert.equal(env.status, 201, env.text);
    assert.equal((await api.post('/v1/orgs/default/services', { name: 'frozen', spec: { command: ['x'] } })).status, 201);
    const user = await api.post('/v1/orgs/default/service-users', { name: 'frozen-runner', role: 'runner' });
    const runner = httpClient(base, await accessToken({ ...boot, clientId: user.body.clientId, clientSecret: user.body.clientSecret }));
    const made = await api.post('/v1/orgs/default/deployments', { service: 'frozen', environment: 'frozen' });
    assert.equal(made.status, 201, made.text);
    const claimed = await runner.post('/v1/orgs/default/runner/claim', { waitSeconds: 5, environments: ['frozen'] });
    assert.equal(claimed.status, 200, claimed.text);
    const beat = () => runner.post(`/v1/orgs/default/runner/deployments/${made.body.id}/heartbeat`, { leaseToken: claimed.body.lease.token });
    // Past the grace after its start, the lease kept alive.
    for (let i = 0; i < 4; i++) {
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      assert.equal((await beat()).status, 200);
    }
    // Frozen for longer than the lease.
    proc.child.kill('SIGSTOP');
    await new Promise((resolve) => setTimeout(resolve, 4_000));
    proc.child.kill('SIGCONT');
    // Time for the server's timers to run first: its load reading then covers the stop, which was
    // no load (it was read as a lag of seconds, and the heartbeat refused with 503 as overloaded).
    await new Promise((resolve) => setTimeout(resolve, 300));
    const after = await beat();
    assert.equal(after.status, 200, after.text);
    const now = (await api.get(`/v1/orgs/default/deployments/${made.body.id}`)).body;
    assert.deepEqual([now.state, now.attempt], ['in_progress', 1]);
    proc.child.kill('SIGTERM');
    assert.deepEqual(await proc.exited, { code: 0, signal: null }, proc.output.join('\n'));
  });
});

describe('slipway serve stopped while it starts', () => {
  const cleanups: Array<() => Promise<void>> = [];
  after(async () => {
    for (const cleanup of cleanups) await cleanup();
  });

  /** `serve` on a new data directory and database: a first start, with migrations and bootstrap to do. */
  async function firstStart(args: string[]): Promise<ServeProcess> {
    const dataDir = tempDir('slipway-serve-early-');
    const database = await testDatabase();
    const proc = spawnServe(args, {
      SLIPWAY_DATA_DIR: dataDir, SLIPWAY_PORT: String(await freePort()), SLIPWAY_LOG_LEVEL: 'info', ...(database.url ? { SLIPWAY_DATABASE_URL: database.url } : {}),
    }, { processGroup: true });
    cleanups.push(async () => {
      try {
        process.kill(-proc.child.pid!, 'SIGKILL');
      } catch {
        // already gone
      }
      await proc.exited;
      await database.drop();
      fs.rmSync(dataDir, { recursive: true, force: true });
    });
    return proc;
  }

  it('one process: SIGTERM before it listens stops it cleanly with exit 0, its log lines written', async () => {
    const proc = await firstStart([]);
    await proc.waitForLog((l) => /generated a master key/.test(String(l.msg)), 'the first start under way');
    proc.child.kill('SIGTERM');
    assert.deepEqual(await proc.exited, { code: 0, signal: null }, proc.output.join('\n'));
    assert.ok(proc.logs().some((l) => l.msg === 'stopped cleanly'), proc.output.join('\n'));
    assert.ok(proc.logs().some((l) => /bootstrap/.test(String(l.msg))), proc.output.join('\n'));
  });

  it('--workers 2: SIGTERM while the workers start stops it with exit 0', async () => {
    const proc = await firstStart(['--workers', '2']);
    await proc.waitForLog((l) => l.pid !== undefined && l.pid !== proc.child.pid, 'a worker\'s first log line');
    proc.child.kill('SIGTERM');
    assert.deepEqual(await proc.exited, { code: 0, signal: null }, proc.output.join('\n'));
    assert.equal(proc.output.some((l) => /did not stop cleanly/.test(l)), false, proc.output.join('\n'));
  });
});
