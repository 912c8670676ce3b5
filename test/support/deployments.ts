// Factories and a runner client for the environment, service, deployment and runner-protocol
// suites: everything goes over HTTP to the real server, the runner side through the protocol
// module's own paths and types.
import assert from 'node:assert/strict';
import { after, before } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { sql } from 'kysely';
import {
  runnerUrl, type AppendLogsRequestT, type ClaimRequestT, type ClaimResponseT, type OutcomeT,
} from '../../src/modules/runner/runner.protocol.js';
import { startServer, type Actor, type HttpClient, type HttpResult, type RequestOptions, type StartOptions, type TestServer } from './harness.js';

let counter = 0;
export const unique = (prefix: string) => `${prefix}-${process.pid}-${++counter}`;

export async function createEnvironment(http: HttpClient, orgId: string, body: Record<string, unknown> = {}): Promise<any> {
  const res = await http.post(`/v1/orgs/${orgId}/environments`, { name: unique('env'), ...body });
  assert.equal(res.status, 201, res.text);
  return res.body;
}

/** A secret of `orgId` under a fresh name, with these values; its name. */
export async function createSecret(http: HttpClient, orgId: string, values: Record<string, string>): Promise<string> {
  const name = unique('sec');
  const res = await http.post(`/v1/orgs/${orgId}/secrets`, { secrets: [{ name, values }] });
  assert.equal(res.status, 201, res.text);
  return name;
}

export async function createService(http: HttpClient, orgId: string, body: Record<string, unknown> = {}): Promise<any> {
  const res = await http.post(`/v1/orgs/${orgId}/services`, { name: unique('svc'), spec: { command: ['node', 'server.js'] }, ...body });
  assert.equal(res.status, 201, res.text);
  return res.body;
}

export async function deploy(http: HttpClient, orgId: string, body: Record<string, unknown>): Promise<any> {
  const res = await http.post(`/v1/orgs/${orgId}/deployments`, body);
  assert.equal(res.status, 201, res.text);
  return res.body;
}

export async function getDeployment(http: HttpClient, orgId: string, id: string): Promise<any> {
  const res = await http.get(`/v1/orgs/${orgId}/deployments/${id}`);
  assert.equal(res.status, 200, res.text);
  return res.body;
}

/** A runner service user of the organization, speaking the protocol. */
export function runnerClient(actor: Actor, orgId: string) {
  const http = actor.http;
  return {
    actor,
    claim: (body: ClaimRequestT = { waitSeconds: 0 }): Promise<HttpResult<ClaimResponseT>> => http.post(runnerUrl('claim', orgId), body ?? undefined),
    heartbeat: (id: string, leaseToken: string) => http.post(runnerUrl('heartbeat', orgId, id), { leaseToken }),
    logs: (id: string, body: AppendLogsRequestT, opts?: RequestOptions) => http.post(runnerUrl('logs', orgId, id), body, opts),
    complete: (id: string, leaseToken: string, outcome: OutcomeT = 'succeeded', reason?: string) =>
      http.post(runnerUrl('complete', orgId, id), { leaseToken, outcome, ...(reason !== undefined ? { reason } : {}) }),
    abandon: (id: string, leaseToken: string, reason?: string) =>
      http.post(runnerUrl('abandon', orgId, id), { leaseToken, ...(reason !== undefined ? { reason } : {}) }),
    /** Claims and expects a deployment. */
    async take(body: ClaimRequestT = { waitSeconds: 0 }): Promise<ClaimResponseT> {
      const res = await http.post<ClaimResponseT>(runnerUrl('claim', orgId), body ?? undefined);
      assert.equal(res.status, 200, res.text);
      return res.body;
    },
  };
}
export type RunnerClient = ReturnType<typeof runnerClient>;

export async function newRunner(server: TestServer, orgId: string): Promise<RunnerClient> {
  return runnerClient(await server.actor(orgId, 'runner'), orgId);
}

/** Polls until `check` returns a value (not undefined), within a bound; no timing is asserted. */
export async function eventually<T>(what: string, check: () => Promise<T | undefined>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) assert.fail(`gave up waiting for ${what}`);
    await sleep(100);
  }
}

/** PostgreSQL: waits until `n` sessions of the test database wait for a lock (the requests sent have reached it). */
export function lockWaiters(server: TestServer, n: number): Promise<true> {
  return eventually(`${n} session(s) to wait for a lock`, async () => {
    const { rows } = await sql<{ n: number }>`select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`.execute(server.core.db);
    return rows[0]!.n >= n ? true : undefined;
  });
}

/**
 * Runs `hold` in a transaction of its own, which stays open (holding the row locks it took) until
 * the returned function commits it.
 */
export async function holding(server: TestServer, hold: (trx: TestServer['core']['db']) => Promise<unknown>): Promise<() => Promise<void>> {
  let release!: () => void;
  const released = new Promise<void>((resolve) => { release = resolve; });
  let held!: () => void;
  const taken = new Promise<void>((resolve) => { held = resolve; });
  const holder = server.core.db.transaction().execute(async (trx) => {
    await hold(trx);
    held();
    await released;
  });
  await taken;
  return async () => { release(); await holder; };
}

/**
 * Waits until every event written so far can be listed. On PostgreSQL an event is listed once every
 * transaction that was running when it was written has ended, on the whole server: another test
 * file's transaction holds the log back for as long as it is open. SQLite lists at once. Bounded:
 * a test that holds a transaction itself gets its answer after the bound, not never.
 */
export async function eventsSettled(server: TestServer): Promise<void> {
  if (server.core.database.dialect !== 'postgres') return;
  const db = server.core.db;
  const { rows: [mark] } = await sql<{ x: string }>`select pg_current_xact_id()::text as x`.execute(db);
  for (let tries = 0; tries < 200; tries++) {
    const { rows: [now] } = await sql<{ past: boolean }>`select pg_snapshot_xmin(pg_current_snapshot()) > ${mark!.x}::xid8 as past`.execute(db);
    if (now!.past) return;
    await sleep(50);
  }
}

/** Events of a subject, oldest first (read as the bootstrap owner, an instance administrator). */
export async function eventsOf(server: TestServer, orgId: string, subjectId: string): Promise<any[]> {
  await eventsSettled(server);
  const res = await server.owner.http.get(`/v1/orgs/${orgId}/events?subject=${subjectId}&limit=200`);
  assert.equal(res.status, 200, res.text);
  return res.body.events;
}

/**
 * Changes of one field, as `[from, to]` pairs of their events, form one chain from `start`: each
 * change started from what the one before it left. On PostgreSQL events are listed by transaction
 * id, which need not be the order in which changes that waited for one another committed, so the
 * chain is followed by its links, not by the order of the list.
 */
export function assertOneChain(pairs: Array<[unknown, unknown]>, start: unknown): void {
  const next = new Map<unknown, unknown>();
  for (const [from, to] of pairs) {
    assert.ok(!next.has(from), `two changes started from ${String(from)}: ${JSON.stringify(pairs)}`);
    next.set(from, to);
  }
  let at = start;
  for (let i = 0; i < pairs.length; i++) {
    assert.ok(next.has(at), `no change started from ${String(at)}: ${JSON.stringify(pairs)}`);
    at = next.get(at);
  }
}

/** A server with a fresh organization and one actor per role these suites use. */
export interface DeployFixture {
  server: TestServer;
  orgId: string;
  admin: Actor;
  developer: Actor;
  viewer: Actor;
  runner: RunnerClient;
  /** Checks that every answer was a declared status, then stops the server. */
  close(): Promise<void>;
}

export async function startDeployFixture(options: StartOptions = {}): Promise<DeployFixture> {
  const server = await startServer(options);
  const orgId = (await server.createOrg()).id;
  return {
    server,
    orgId,
    admin: await server.actor(orgId, 'admin'),
    developer: await server.actor(orgId, 'developer'),
    viewer: await server.actor(orgId, 'viewer'),
    runner: await newRunner(server, orgId),
    async close() {
      assert.deepEqual(server.undeclared, []);
      await server.close();
    },
  };
}

/**
 * The deploy fixture of one `describe`: started before its tests and closed after them, its fields
 * there from the first test on.
 */
export function useDeployFixture(options: StartOptions = {}): DeployFixture {
  const fixture = {} as DeployFixture;
  before(async () => { Object.assign(fixture, await startDeployFixture(options)); });
  after(() => fixture.close());
  return fixture;
}

/** Deploys, has `runner` claim exactly that deployment, and completes it. */
export async function ship(http: HttpClient, runner: RunnerClient, orgId: string, body: { service: string; environment: string } & Record<string, unknown>, outcome: OutcomeT = 'succeeded') {
  const created = await deploy(http, orgId, body);
  const claim = await runner.take({ environments: [body.environment], waitSeconds: 0 });
  assert.equal(claim.deployment.id, created.id);
  const done = await runner.complete(created.id, claim.lease.token, outcome, outcome === 'failed' ? 'it failed' : undefined);
  assert.equal(done.status, 200, done.text);
  return { deployment: done.body, claim };
}

/** A resource of `orgId` at `path` (`/services/svc_…`) is a 404 to an owner of another organization, whichever organization it names. */
export async function assertHiddenFromOtherOrgs(server: TestServer, orgId: string, path: string): Promise<void> {
  const otherOrg = (await server.createOrg()).id;
  const stranger = await server.actor(otherOrg, 'owner');
  for (const res of [
    await stranger.http.get(`/v1/orgs/${otherOrg}${path}`),
    await stranger.http.patch(`/v1/orgs/${otherOrg}${path}`, { description: 'mine' }),
    await stranger.http.delete(`/v1/orgs/${otherOrg}${path}`),
    await stranger.http.get(`/v1/orgs/${orgId}${path}`),
  ]) assert.equal(res.status, 404, res.text);
}
