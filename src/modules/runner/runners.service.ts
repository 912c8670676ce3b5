// Which runners an organization has, and whether they are up: every claim, heartbeat, serving
// report and adoption of a runner that names itself (`host`) says it is there. A node writes that
// down at most every SEEN_WRITE_EVERY_MS for one runner (sooner when what it says of itself
// changes), so a runner that polls costs a write now and then, not one a call.
import { LRUCache } from 'lru-cache';
import type { Logger } from 'pino';
import type { RequestContext } from '../../platform/context.js';
import { isForeignKeyViolation, type Db, type Dialect } from '../../platform/db/database.js';
import { cursorList, pageRequest, toPage, type Page } from '../../platform/pagination.js';
import { environmentsRepo } from '../environments/environments.repo.js';
import { loadEnvironment } from '../environments/environments.service.js';
import { CLAIM_WAIT_MAX_SECONDS } from './runner.protocol.js';
import { runnersRepo, type RunnerRow } from './runners.repo.js';
import type { Runner, RunnerState } from './runners.schemas.js';
import { nowIso, nowMs } from '../../platform/clock.js';

/** A node records that a runner is there at most this often (its `lastSeenAt` lags by up to this). */
export const SEEN_WRITE_EVERY_MS = 10_000;
/** A runner heard from within this is online, whatever the host timeout: a claim waits up to 30 s, and the writes lag. */
const ONLINE_AT_LEAST_SECONDS = CLAIM_WAIT_MAX_SECONDS + SEEN_WRITE_EVERY_MS / 1000;

/** How recently a runner that has not said it stopped was heard from, at most, to count as online. */
export function onlineWithinSeconds(hostTimeoutSeconds: number): number {
  return Math.max(hostTimeoutSeconds, ONLINE_AT_LEAST_SECONDS);
}

/** Runners not heard from for this long are forgotten. */
export const RUNNER_RETENTION_DAYS = 7;

/** What a runner's call says of it. */
export interface Sighting {
  host: string;
  /** The environments it asked for, by name or id, as it gave them; undefined: all. */
  environments?: string[] | undefined;
  hostname?: string | undefined;
  version?: string | undefined;
  /** The address the call came from. */
  address: string | null;
}

export interface RunnersDeps {
  db: Db;
  dialect: Dialect;
  hostTimeoutSeconds: number;
  logger: Logger;
  /** SEEN_WRITE_EVERY_MS unless given. */
  writeEveryMs?: number;
}

export function createRunnersService(deps: RunnersDeps) {
  const { db } = deps;
  const onlineWithin = onlineWithinSeconds(deps.hostTimeoutSeconds);
  /** When this node last wrote each runner down, and what it said then. */
  const written = new LRUCache<string, { at: number; said: string }>({ max: 10_000 });
  const writeEveryMs = deps.writeEveryMs ?? SEEN_WRITE_EVERY_MS;

  function due(key: string, said: string | null, now: number): boolean {
    const last = written.get(key);
    return last === undefined || now - last.at >= writeEveryMs || (said !== null && last.said !== said);
  }

  /** This node's key for one service user's runner process `host`. */
  const keyOf = (orgId: string, host: string, serviceUserId: string) => `${orgId}\0${host}\0${serviceUserId}`;

  /** The runner is there, saying nothing of itself (from `address`, when given): its row's time moves, at most every writeEveryMs. */
  async function heardFrom(orgId: string, host: string, serviceUserId: string, address?: string | null): Promise<void> {
    const key = keyOf(orgId, host, serviceUserId);
    const now = nowMs();
    if (!due(key, null, now)) return;
    await runnersRepo.heardFrom(db, orgId, host, serviceUserId, new Date(now).toISOString(), address);
    written.set(key, { at: now, said: written.get(key)?.said ?? '' });
  }

  /** A runner's row gone with its service user or organization meanwhile: nothing to keep. */
  function unlessGone(error: unknown): void {
    if (!isForeignKeyViolation(error)) throw error;
  }

  /** What it asks for (null: all), within what its service user is kept to. */
  function effectiveEnvironments(row: RunnerRow): string[] | null {
    const asked = row.environment_ids === null ? null : (JSON.parse(row.environment_ids) as string[]);
    const kept = row.kept_to === null ? null : (JSON.parse(row.kept_to) as string[]);
    return kept === null ? asked : (asked ?? kept).filter((id) => kept.includes(id));
  }

  function toRunner(row: RunnerRow, now: number, names: Map<string, string>, work: Awaited<ReturnType<typeof runnersRepo.workOf>>): Runner {
    const ids = effectiveEnvironments(row);
    const state: RunnerState = row.stopped_at === null && now - Date.parse(row.last_seen_at) <= onlineWithin * 1000 ? 'online' : 'offline';
    return {
      host: row.host,
      state,
      serviceUser: { id: row.service_user_id, name: row.service_user_name },
      environments: ids === null ? null : ids.flatMap((id) => (names.has(id) ? [{ id, name: names.get(id)! }] : [])),
      hostname: row.hostname,
      version: row.version,
      address: row.address,
      firstSeenAt: row.first_seen_at,
      lastSeenAt: row.last_seen_at,
      stoppedAt: row.stopped_at,
      inProgress: work.inProgress.get(row.host) ?? [],
      serving: work.serving.get(row.host) ?? 0,
    };
  }

  return {
    onlineWithinSeconds: onlineWithin,

    /** `ctx.actor`'s runner process `sighting.host` is there, saying this of itself. */
    async seen(ctx: RequestContext, orgId: string, sighting: Sighting): Promise<void> {
      const key = keyOf(orgId, sighting.host, ctx.actor.id);
      const said = JSON.stringify([ctx.actor.id, sighting.environments ?? null, sighting.hostname ?? null, sighting.version ?? null, sighting.address]);
      const now = nowMs();
      if (!due(key, said, now)) return;
      const at = new Date(now).toISOString();
      // Ids, in a stable order: names change. Those that do not exist are the claim's to refuse.
      const environmentIds = sighting.environments === undefined ? null
        : JSON.stringify((await environmentsRepo.findManyInOrg(db, orgId, sighting.environments)).map((e) => e.id).sort());
      try {
        await runnersRepo.seen(db, {
          org_id: orgId, host: sighting.host, service_user_id: ctx.actor.id, environment_ids: environmentIds,
          hostname: sighting.hostname ?? null, version: sighting.version ?? null, address: sighting.address, first_seen_at: at, last_seen_at: at, stopped_at: null,
        });
      } catch (error) {
        unlessGone(error);
      }
      written.set(key, { at: now, said });
    },

    /**
     * `ctx.actor`'s runner process `host` is there, calling from `address`, and says nothing of
     * itself (a serving report): what its claims and adoptions said (its environments, host name,
     * version) stays as it was.
     */
    present: (ctx: RequestContext, orgId: string, host: string, address: string | null): Promise<void> => heardFrom(orgId, host, ctx.actor.id, address),

    /**
     * The runner `host` of `serviceUserId` is there (a heartbeat of a deployment it carries out);
     * nothing else said. Another service user's runner naming the same host is not it: its entry
     * is left alone. The heartbeat it came with is answered whatever becomes of this: it renewed
     * the lease already.
     */
    async heard(orgId: string, host: string, serviceUserId: string): Promise<void> {
      try {
        await heardFrom(orgId, host, serviceUserId);
      } catch (err) {
        deps.logger.warn({ err }, 'recording that a runner is there failed');
      }
    },

    async list(orgId: string, query: { limit?: number; cursor?: string; environment?: string; state?: RunnerState }): Promise<Page<Runner>> {
      const environmentId = query.environment !== undefined ? (await loadEnvironment(db, orgId, query.environment)).id : undefined;
      const list = cursorList('runners', { org: orgId, environment: environmentId, state: query.state });
      const page = pageRequest(list, query);
      const now = nowMs();
      const since = new Date(now - onlineWithin * 1000).toISOString();
      const rows = await runnersRepo.list(db, deps.dialect, orgId, {
        ...page, environmentId, seen: query.state === undefined ? undefined : { since, online: query.state === 'online' },
      });
      const result = toPage(list, rows, page.limit, (r) => r.host);
      const ids = [...new Set(result.items.flatMap((r) => effectiveEnvironments(r) ?? []))];
      const names = new Map((await environmentsRepo.findManyInOrg(db, orgId, ids)).map((e) => [e.id, e.name]));
      const work = await runnersRepo.workOf(db, orgId, result.items);
      return { items: result.items.map((r) => toRunner(r, now, names, work)), nextCursor: result.nextCursor };
    },

    /** `ctx.actor`'s runner process `host` says it stops: offline from now on (a host never comes back). */
    async stopped(ctx: RequestContext, orgId: string, host: string): Promise<void> {
      await runnersRepo.stopped(db, orgId, host, ctx.actor.id, nowIso());
      written.delete(keyOf(orgId, host, ctx.actor.id));
    },

    /** Forgets runners not heard from for RUNNER_RETENTION_DAYS. */
    async prune(): Promise<number> {
      return runnersRepo.prune(db, new Date(nowMs() - RUNNER_RETENTION_DAYS * 86_400_000).toISOString());
    },
  };
}

export type RunnersService = ReturnType<typeof createRunnersService>;
