// Wakes runners that wait in a long-polling claim when something may have become claimable in
// their organization (a deployment created, re-queued, finished or cancelled). Within one process
// the wake-up is immediate; across PostgreSQL nodes it travels by LISTEN/NOTIFY; and a short poll
// covers what neither reaches (several SQLite processes, a lost LISTEN connection). A signal only
// says "look again": the claim itself is always decided by the database.
import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import pg from 'pg';
import { socketOf, watchStatements, type Db, type Dialect } from '../../platform/db/database.js';
import type { Logger } from '../../platform/logging.js';

const CHANNEL = 'slipway_deployments';
const RECONNECT_MS = 1000;
/**
 * The LISTEN connection is asked `SELECT 1` this often, and taken for lost when no answer comes
 * within PING_DEADLINE_MS: a connection that went silent (a network that drops packets, a server
 * that froze) raises no error by itself, and meanwhile no notification arrives. TCP keep-alive
 * finds a dead peer too, but only after minutes.
 */
const PING_EVERY_MS = 15_000;
const PING_DEADLINE_MS = 5_000;
/** How long a stopping server waits for PostgreSQL to acknowledge the end of the LISTEN connection. */
const END_WITHIN_MS = 1_000;
/**
 * Counters kept before those of organizations no claim waits in are dropped. Every node counts
 * every organization it hears of (its own deployments, the other nodes' notifications), and only the
 * node that deletes one forgets it at once.
 */
const COUNTED_MAX = 10_000;

/** Ends a client's connection: politely, and if the server does not answer soon, by closing the socket. */
async function endConnection(client: pg.Client): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const ended = client.end().catch(() => {});
  await Promise.race([ended, new Promise<void>((resolve) => { timer = setTimeout(resolve, END_WITHIN_MS); })]);
  clearTimeout(timer);
  socketOf(client)?.destroy();
}

export interface DeploymentSignalsDeps {
  db: Db;
  dialect: Dialect;
  /** For the LISTEN connection (PostgreSQL only). */
  databaseUrl: string | null;
  logger: Logger;
  /** How often a waiting claim looks again with no signal (default: 250 ms on SQLite, 2 s on PostgreSQL). */
  pollMs?: number;
  /** How often the LISTEN connection is asked whether it answers, and how long it has to (PING_EVERY_MS, PING_DEADLINE_MS). */
  pingEveryMs?: number;
  pingDeadlineMs?: number;
}

export function createDeploymentSignals(deps: DeploymentSignalsDeps) {
  const node = randomUUID();
  const pollMs = deps.pollMs ?? (deps.dialect === 'postgres' ? 2000 : 250);
  const pingEveryMs = deps.pingEveryMs ?? PING_EVERY_MS;
  const pingDeadlineMs = deps.pingDeadlineMs ?? PING_DEADLINE_MS;
  // An organization's counter takes the next of one sequence at each signal; one no longer counted
  // reads as `floor`, the sequence where counters were last dropped. So a counter read before a
  // signal never reads the same after it, dropped or not: a claim that read it does not wait
  // through the signal.
  const versions = new Map<string, number>();
  let sequence = 0;
  let floor = 0;
  const waiters = new Map<string, Set<() => void>>();
  let closed = false;
  let listener: pg.Client | null = null;
  let listening: Promise<void> | null = null;
  /** Asks the LISTEN connection whether it still answers (see PING_EVERY_MS). */
  let ping: NodeJS.Timeout | undefined;

  function version(orgId: string): number {
    return versions.get(orgId) ?? floor;
  }

  function bump(orgId: string): void {
    versions.set(orgId, ++sequence);
    if (versions.size > Math.max(COUNTED_MAX, 2 * waiters.size)) {
      for (const counted of versions.keys()) if (!waiters.has(counted)) versions.delete(counted);
      floor = sequence;
    }
    const set = waiters.get(orgId);
    if (set) for (const wake of [...set]) wake();
  }

  /** Per organization with a pg_notify on its way: whether another one is owed once it is sent. */
  const sending = new Map<string, boolean>();

  /**
   * At most one pg_notify per organization at a time: notifies that come while one is on its way
   * are folded into a single one sent after it. That one still starts after each of them, so a
   * waiter on another node always looks again after the change it is told about; and a burst of
   * deployments costs a few queries instead of one each.
   */
  function tellOtherNodes(orgId: string): void {
    if (sending.has(orgId)) {
      sending.set(orgId, true);
      return;
    }
    sending.set(orgId, false);
    const payload = `${node}:${orgId}`;
    // Through the pool, whose statements have a deadline: one stuck on a silent connection would
    // hold every later notify of the organization back.
    const sent = sql`select pg_notify(${CHANNEL}, ${payload})`.execute(deps.db);
    sent.catch((err: unknown) => deps.logger.warn({ err }, 'could not signal other nodes; their waiting claims will poll'))
      .finally(() => {
        const owed = sending.get(orgId) === true;
        sending.delete(orgId);
        if (owed && !closed) tellOtherNodes(orgId);
      });
  }

  /** One LISTEN connection per process, opened when the first claim waits, reopened when lost. */
  function listen(): Promise<void> {
    if (deps.dialect !== 'postgres' || deps.databaseUrl === null || closed) return Promise.resolve();
    listening ??= (async () => {
      const client = new pg.Client({ connectionString: deps.databaseUrl!, keepAlive: true, keepAliveInitialDelayMillis: 10_000, connectionTimeoutMillis: 10_000 });
      // Every statement on it (LISTEN, the pings) ends the connection when unanswered, as the pool's do.
      watchStatements(client, { ms: pingDeadlineMs });
      const lost = (err?: unknown) => {
        if (listener !== client) return;
        listener = null;
        listening = null;
        clearInterval(ping);
        void endConnection(client);
        if (closed) return;
        deps.logger.warn({ err }, 'deployment signal connection lost; waiting claims poll until it is back');
        setTimeout(() => { if (!closed && waiters.size > 0) void listen(); }, RECONNECT_MS).unref();
      };
      client.on('error', lost);
      client.on('end', () => lost());
      client.on('notification', (msg) => {
        const payload = msg.payload ?? '';
        const cut = payload.indexOf(':');
        // Our own notifications were delivered locally already.
        if (cut > 0 && payload.slice(0, cut) !== node) bump(payload.slice(cut + 1));
      });
      try {
        listener = client;
        await client.connect();
        await client.query(`LISTEN ${CHANNEL}`);
      } catch (err) {
        lost(err);
        return;
      }
      if (listener !== client) return;
      ping = setInterval(() => { client.query('SELECT 1').catch(() => {}); }, pingEveryMs);
      ping.unref();
      // What other nodes said while no connection listened was lost: every waiting claim looks again.
      for (const orgId of waiters.keys()) bump(orgId);
    })();
    return listening;
  }

  return {
    /** A counter per organization; a claim reads it before looking, and waits for it to move. */
    version,

    /** Whether this process keeps a counter for `orgId`. */
    counts(orgId: string): boolean {
      return versions.has(orgId);
    },

    /** How many claims of this process wait in `orgId` now. */
    waiting(orgId: string): number {
      return waiters.get(orgId)?.size ?? 0;
    },

    /**
     * Something in `orgId` may be claimable now: wake this process's waiters (a map update when
     * nobody waits) and tell the other nodes.
     */
    notify(orgId: string): void {
      bump(orgId);
      if (deps.dialect !== 'postgres' || closed) return;
      tellOtherNodes(orgId);
    },

    /**
     * Resolves when the organization's version moves past `seen`, after at most `ms` (capped at the
     * poll interval, so a signal that never comes costs one poll), or when `signal` aborts.
     */
    async wait(orgId: string, seen: number, ms: number, signal?: AbortSignal): Promise<void> {
      if (closed || signal?.aborted || version(orgId) !== seen) return;
      // Not awaited: until LISTEN is up (or if it never comes up) the poll interval still bounds the wait.
      void listen();
      await new Promise<void>((resolve) => {
        let set = waiters.get(orgId);
        if (!set) waiters.set(orgId, (set = new Set()));
        const done = () => {
          clearTimeout(timer);
          signal?.removeEventListener('abort', done);
          set!.delete(done);
          if (set!.size === 0 && waiters.get(orgId) === set) waiters.delete(orgId);
          resolve();
        };
        const timer = setTimeout(done, Math.max(0, Math.min(ms, pollMs)));
        signal?.addEventListener('abort', done);
        set.add(done);
      });
    },

    /**
     * Forgets a deleted organization: its waiting claims are woken (to find it gone) and its
     * counter dropped, so that organizations created and deleted over a server's life leave
     * nothing behind in memory. A claim that read the counter before stops waiting at once.
     */
    forget(orgId: string): void {
      const set = waiters.get(orgId);
      if (set) for (const wake of [...set]) wake();
      versions.delete(orgId);
      // What it reads as from now on is no value it was read as before.
      floor = ++sequence;
    },

    get closed(): boolean {
      return closed;
    },

    /** Ends every wait at once (the server is stopping) and the LISTEN connection. */
    async close(): Promise<void> {
      closed = true;
      for (const set of waiters.values()) for (const wake of [...set]) wake();
      const client = listener;
      listener = null;
      clearInterval(ping);
      // Not a plain end(): on a connection gone silent it would wait for an answer that never comes.
      if (client) await endConnection(client);
    },
  };
}

export type DeploymentSignals = ReturnType<typeof createDeploymentSignals>;
