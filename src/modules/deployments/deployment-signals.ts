// Wakes runners that wait in a long-polling claim when something may have become claimable in
// their organization (a deployment created, re-queued, finished or cancelled). Within one process
// the wake-up is immediate; across PostgreSQL nodes it travels by LISTEN/NOTIFY; and a short poll
// covers what neither reaches (several SQLite processes, a lost LISTEN connection). A signal only
// says "look again": the claim itself is always decided by the database.
import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import pg from 'pg';
import type { Db, Dialect } from '../../platform/db/database.js';
import type { Logger } from '../../platform/logging.js';

const CHANNEL = 'slipway_deployments';
const RECONNECT_MS = 1000;

export interface DeploymentSignalsDeps {
  db: Db;
  dialect: Dialect;
  /** For the LISTEN connection (PostgreSQL only). */
  databaseUrl: string | null;
  logger: Logger;
  /** How often a waiting claim looks again with no signal (default: 250 ms on SQLite, 2 s on PostgreSQL). */
  pollMs?: number;
}

export function createDeploymentSignals(deps: DeploymentSignalsDeps) {
  const node = randomUUID();
  const pollMs = deps.pollMs ?? (deps.dialect === 'postgres' ? 2000 : 250);
  const versions = new Map<string, number>();
  const waiters = new Map<string, Set<() => void>>();
  let closed = false;
  let listener: pg.Client | null = null;
  let listening: Promise<void> | null = null;

  function version(orgId: string): number {
    return versions.get(orgId) ?? 0;
  }

  function bump(orgId: string): void {
    versions.set(orgId, (versions.get(orgId) ?? 0) + 1);
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
    const sent = listener !== null
      ? listener.query('SELECT pg_notify($1, $2)', [CHANNEL, payload])
      : sql`select pg_notify(${CHANNEL}, ${payload})`.execute(deps.db);
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
      const client = new pg.Client({ connectionString: deps.databaseUrl! });
      const lost = (err?: unknown) => {
        if (listener !== client) return;
        listener = null;
        listening = null;
        client.end().catch(() => {});
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
      }
    })();
    return listening;
  }

  return {
    /** A counter per organization; a claim reads it before looking, and waits for it to move. */
    version,

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

    get closed(): boolean {
      return closed;
    },

    /** Ends every wait at once (the server is stopping) and the LISTEN connection. */
    async close(): Promise<void> {
      closed = true;
      for (const set of waiters.values()) for (const wake of [...set]) wake();
      const client = listener;
      listener = null;
      if (client) await client.end().catch(() => {});
    },
  };
}

export type DeploymentSignals = ReturnType<typeof createDeploymentSignals>;
