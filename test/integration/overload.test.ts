// An overloaded server (its event loop lagging past SLIPWAY_MAX_EVENT_LOOP_DELAY_MS) refuses new
// requests with a 503 problem and Retry-After instead of queueing them, keeps answering liveness,
// and serves again once it has caught up.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { setImmediate as nextTurn, setTimeout as sleep } from 'node:timers/promises';
import { sql } from 'kysely';
import pg from 'pg';
import { isDatabaseUnreachable } from '../../src/platform/db/database.js';
import { createEnvironment, createService, deploy, eventually, newRunner } from '../support/deployments.js';
import { clientCredentialsGrant, startServer, startServerBehindProxy, TEST_DB, type TestServer } from '../support/harness.js';
import { assertProblem } from '../support/problems.js';
import type { TcpProxy } from '../support/tcp-proxy.js';

/** Busy work in slices with a turn of the event loop between them, as a server drowning in requests would be. */
async function lag(ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    const slice = Date.now() + 150;
    while (Date.now() < slice) { /* busy */ }
    await nextTurn();
  }
}

describe('overload protection', () => {
  let server: TestServer;
  before(async () => { server = await startServer({ env: { SLIPWAY_MAX_EVENT_LOOP_DELAY_MS: '50' } }); });
  after(async () => { await server.close(); });

  // The server samples its event-loop delay once a second.
  const measuredDelay = () => server.slipway.server.memoryUsage().eventLoopDelay;

  it('answers 503 with Retry-After while the event loop lags, keeps /healthz up, and recovers', async () => {
    // Readings taken in the first two seconds after start measure start-up, and refuse nothing.
    await sleep(2_100);
    const deadline = Date.now() + 20_000;
    while (measuredDelay() <= 50) {
      assert.ok(Date.now() < deadline, 'the server noticed the lag within 20 s');
      await lag(300);
    }
    // Sent while the lag goes on, so that they meet the overloaded reading.
    const api = server.owner.http.get('/v1/orgs');
    const token = clientCredentialsGrant(`${server.url}/oauth/v2/token`, server.bootstrap, server.bootstrap.scope);
    const live = server.http().get('/healthz');
    const ready = server.http().get('/readyz');
    await lag(300);

    const refused = await api;
    const problem = assertProblem(refused, 503, 'unavailable');
    assert.match(String(problem.detail), /SLIPWAY_MAX_EVENT_LOOP_DELAY_MS/);
    assert.equal(refused.headers.get('retry-after'), '2');
    // The token endpoint says it in OAuth's words.
    const tokenAnswer = await token;
    assert.equal(tokenAnswer.status, 503);
    assert.equal(((await tokenAnswer.json()) as { error?: string }).error, 'temporarily_unavailable');
    assert.equal((await live).status, 200);
    assert.equal((await ready).status, 503);
    // Each refusal is in the access log; the overload is said once, not as an error per refusal.
    const lines = server.logs.map((l) => JSON.parse(l) as { level: string; msg: string; route?: string; status?: number });
    assert.ok(lines.some((l) => l.msg === 'request' && l.route === '/v1/orgs' && l.status === 503));
    assert.deepEqual(lines.filter((l) => l.level === 'error'), []);
    const said = lines.filter((l) => l.msg.startsWith('overloaded:'));
    assert.equal(said.length, 1, JSON.stringify(said));
    assert.equal(said[0]!.level, 'warn');

    while (measuredDelay() > 50) {
      assert.ok(Date.now() < deadline + 10_000, 'the server caught up within 10 s');
      await sleep(200);
    }
    assert.equal((await server.owner.http.get('/v1/orgs')).status, 200);
    assert.deepEqual(server.undeclared, []);
  });
});

// PostgreSQL out of reach (here: the connection between Slipway and it cut, through a TCP proxy
// that the test closes and opens again): requests answer a 503 problem with Retry-After, readiness
// says so, nothing is half-written, and the server serves again once the database is back.
describe('a database that takes no writes', () => {
  let server: TestServer;
  before(async () => { server = await startServer(); });
  after(async () => { await server.close(); });

  /**
   * Writes refused the way a disk remounted read-only, or a PostgreSQL standby, refuses them:
   * SQLite's connection made query-only; PostgreSQL's sessions made read-only by default (its
   * connections are ended so that the pool opens new ones, which take the setting).
   */
  async function readOnly(on: boolean): Promise<void> {
    if (server.core.database.dialect === 'sqlite') {
      await sql`pragma query_only = ${sql.raw(on ? '1' : '0')}`.execute(server.core.db);
      return;
    }
    // A session of its own, read-write whatever the database's default.
    const admin = new pg.Client({ connectionString: server.config.databaseUrl! });
    await admin.connect();
    try {
      await admin.query('set default_transaction_read_only = off');
      await admin.query(`alter database "${new URL(server.config.databaseUrl!).pathname.slice(1)}" set default_transaction_read_only = ${on ? 'on' : 'off'}`);
      await admin.query('select pg_terminate_backend(pid) from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid()');
    } finally {
      await admin.end();
    }
  }

  it('answers 503 with Retry-After, writes nothing, keeps reading, and writes again once it can', async () => {
    const http = server.owner.http;
    const body = { secrets: [{ name: 'while-read-only', values: { K: 'read-only-sentinel-value' } }] };
    await readOnly(true);
    try {
      const refused = await eventually('a write to be refused as the database takes none', async () => {
        const res = await http.post('/v1/orgs/default/secrets', body);
        return res.status === 503 && res.body.code === 'unavailable' && /takes no writes/.test(String(res.body.detail)) ? res : undefined;
      });
      assert.equal(refused.headers.get('retry-after'), '30');
      assert.match(String(refused.body.detail), /Nothing was written/);
      assert.doesNotMatch(refused.text, /read-only-sentinel-value/);
      assert.equal((await http.get('/v1/orgs/default/secrets')).status, 200, 'reads go on');
      const logged = server.logs.map((l) => JSON.parse(l) as { level: number; msg: string; err?: { message?: string } }).filter((l) => l.msg === 'request failed');
      assert.ok(logged.some((l) => /read-?only/.test(l.err?.message ?? '')), JSON.stringify(logged));
    } finally {
      await readOnly(false);
    }
    await eventually('writes to go through again', async () => {
      const res = await http.post('/v1/orgs/default/secrets', body);
      return res.status === 201 ? true : undefined;
    });
    assert.deepEqual(server.undeclared, []);
  });
});

describe('leases across a database out of reach', { skip: TEST_DB !== 'postgres' && 'PostgreSQL only (SQLite is a file: a busy one is covered by the CLI tests)' }, () => {
  it('expires no lease for one lease after the database comes back: the runners\' retried heartbeats land first', async () => {
    const { server, proxy, close } = await startServerBehindProxy({ env: { SLIPWAY_RUNNER_LEASE_SECONDS: '3' } });
    try {
      const orgId = server.bootstrap.orgId;
      const env = await createEnvironment(server.owner.http, orgId);
      const svc = await createService(server.owner.http, orgId);
      const d = await deploy(server.owner.http, orgId, { service: svc.id, environment: env.id });
      const runner = await newRunner(server, orgId);
      const claimed = await runner.take({ waitSeconds: 0, environments: [env.name] });
      assert.equal(claimed.deployment.id, d.id);
      // Past the grace after the start, the lease kept alive; then out of reach for longer than the lease.
      for (let i = 0; i < 4; i++) {
        await sleep(1_000);
        assert.equal((await runner.heartbeat(d.id, claimed.lease.token)).status, 200);
      }
      await proxy.cut();
      await sleep(4_500);
      await proxy.open();
      // The sweep that would expire it, run now that the database answers again, before the runner's
      // retried heartbeat lands: it finds the database back, and holds the lease for a lease from now.
      await server.core.runner.sweep();
      const beat = await runner.heartbeat(d.id, claimed.lease.token);
      assert.equal(beat.status, 200, beat.text);
      const now = await server.owner.http.get(`/v1/orgs/${orgId}/deployments/${d.id}`);
      assert.deepEqual([now.body.state, now.body.attempt], ['in_progress', 1]);
    } finally {
      await close();
    }
  });
});

describe('database out of reach', { skip: TEST_DB !== 'postgres' && 'PostgreSQL only (SQLite is a file: a busy one is covered by the CLI tests)' }, () => {
  let server: TestServer;
  let proxy: TcpProxy;
  let close: () => Promise<void>;
  before(async () => {
    ({ server, proxy, close } = await startServerBehindProxy());
  });
  after(() => close());

  it('answers 503 with Retry-After while the database cannot be reached, writes nothing, and recovers', async () => {
    const http = server.owner.http;
    assert.equal((await http.get('/v1/orgs/default/secrets')).status, 200);
    await proxy.cut();

    const list = await http.get('/v1/orgs/default/secrets');
    assertProblem(list, 503, 'unavailable');
    assert.equal(list.headers.get('retry-after'), '5');
    assert.match(String(list.body.detail), /database cannot be reached/);
    const write = await http.post('/v1/orgs/default/secrets', { secrets: [{ name: 'during-outage', values: { K: 'v' } }] }, { headers: { 'idempotency-key': 'outage-1' } });
    assertProblem(write, 503, 'unavailable');
    assertProblem(await server.http().get('/readyz'), 503, 'unavailable');
    assert.equal((await server.http().get('/healthz')).status, 200);

    await proxy.open();
    await eventually('the server to serve again', async () => ((await http.get('/v1/orgs/default/secrets')).status === 200 ? true : undefined));
    assert.equal((await server.http().get('/readyz')).status, 200);
    assert.equal((await http.get('/v1/orgs/default/secrets/during-outage')).status, 404, 'nothing was written');
    // The key was not kept with the 503: the same request with it now runs.
    assert.equal((await http.post('/v1/orgs/default/secrets', { secrets: [{ name: 'during-outage', values: { K: 'v' } }] }, { headers: { 'idempotency-key': 'outage-1' } })).status, 201);
    assert.deepEqual(server.undeclared, []);
  });

  it('outlives PostgreSQL ending a connection in use between two statements of a transaction', async () => {
    // pg-pool listens for errors on idle connections only: one checked out when its backend goes
    // (PostgreSQL restarting, pg_terminate_backend) emitted an 'error' nothing heard, ending the process.
    await assert.rejects(server.core.db.transaction().execute(async (trx) => {
      await sql`select 1`.execute(trx);
      await proxy.cut();
      await sleep(100);
      await sql`select 1`.execute(trx);
    }), (error: unknown) => isDatabaseUnreachable(error));
    await proxy.open();
    await eventually('the server to serve again', async () => ((await server.owner.http.get('/v1/orgs/default/secrets')).status === 200 ? true : undefined));
  });

  it('fails a transaction whose connection PostgreSQL ended with that reason, not with the rollback that could not follow', async () => {
    let pid = 0;
    const running = server.core.db.transaction().execute(async (trx) => {
      pid = (await sql<{ pid: number }>`select pg_backend_pid() as pid`.execute(trx)).rows[0]!.pid;
      await sql`select pg_sleep(30)`.execute(trx);
    });
    await eventually('the statement to run', async () => {
      if (pid === 0) return undefined;
      const { rows } = await sql<{ n: number }>`select count(*)::int as n from pg_stat_activity where pid = ${pid} and query like '%pg_sleep%' and state = 'active'`.execute(server.core.db);
      return rows[0]!.n === 1 ? true : undefined;
    });
    await sql`select pg_terminate_backend(${pid})`.execute(server.core.db);
    await assert.rejects(running, (error: unknown) => {
      assert.match((error as Error).message, /terminating connection due to administrator command/);
      assert.equal((error as { code?: string }).code, '57P01');
      return true;
    });
    assert.equal((await server.owner.http.get('/v1/orgs/default/secrets')).status, 200);
  });

  it('answers 503 when PostgreSQL goes silent, within the statement deadline, rather than waiting for TCP', async () => {
    const http = server.owner.http;
    assert.equal((await http.get('/v1/orgs/default/secrets')).status, 200);
    server.core.database.setStatementDeadline(500);
    try {
      proxy.silence();
      const started = Date.now();
      const [list, ready] = await Promise.all([http.get('/v1/orgs/default/secrets'), server.http().get('/readyz')]);
      assertProblem(list, 503, 'unavailable');
      assertProblem(ready, 503, 'unavailable');
      // The deadline, not a TCP timeout (minutes), nor the test's own limit.
      assert.ok(Date.now() - started < 30_000);
      await proxy.cut();
      await proxy.open();
      await eventually('the server to serve again', async () => ((await http.get('/v1/orgs/default/secrets')).status === 200 ? true : undefined));
    } finally {
      server.core.database.setStatementDeadline(null);
    }
  });
});
