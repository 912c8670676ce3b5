import { sql, type ExpressionBuilder, type Updateable } from 'kysely';
import { insertRows, runPrepared, type Dialect, type Executor } from '../../platform/db/database.js';
import type { DeploymentLogsTable, DeploymentsTable, Schema } from '../../platform/db/schema.js';

export type DeploymentRow = DeploymentsTable;
export type DeploymentPatch = Omit<Updateable<DeploymentsTable>, 'id' | 'org_id' | 'service_id' | 'environment_id' | 'snapshot'>;
export type LogRow = DeploymentLogsTable;
/** What a runner reports of a serving deployment's process. */
export type ProcessColumn = 'process_state' | 'process_exits' | 'process_last_exit';
/** Where a process answers, as its runner reports it. */
export type AddressColumn = 'process_hostname' | 'process_port';
const NO_PROCESS_REPORT = { process_state: null, process_exits: null, process_last_exit: null, process_reported_at: null, process_hostname: null, process_port: null } as const;

export interface DeploymentFilter {
  serviceId?: string | undefined;
  environmentId?: string | undefined;
  states?: string[] | undefined;
  after: string | null;
  limit: number;
}

/**
 * An orphan: a serving deployment that a runner reported once, and has not since `cutoff` (or let
 * go of). The one definition that finding orphans and adopting one both hold to.
 */
const orphanedSince = (cutoff: string) => (eb: ExpressionBuilder<Schema, 'deployments'>) => eb.and([
  eb('state', '=', 'succeeded'),
  eb('host_id', 'is not', null),
  eb.or([eb('host_seen_at', 'is', null), eb('host_seen_at', '<', cutoff)]),
  // One that cannot be started again is not handed out again and again.
  eb.or([eb('process_state', 'is', null), eb('process_state', '!=', 'stopped')]),
]);

/**
 * The predicate of the partial index deployments_logs_kept (migration 0024), word for word and with
 * literals, not parameters: a query uses a partial index only when its WHERE clause says as much.
 */
export const LOGS_KEPT_AND_ENDED = sql<boolean>`logs_removed_at is null and (state = 'failed' or state = 'cancelled' or state = 'superseded')`;

export const deploymentsRepo = {
  /** Through the shared insert of SQL compiled once: every deployment created or rolled back comes here. */
  async insert(db: Executor, row: DeploymentRow): Promise<void> {
    await insertRows(db, 'deployments', [row]);
  },

  /** Every read of one deployment (the API, each runner call, each state change): SQL compiled once. */
  async findInOrg(db: Executor, orgId: string, id: string): Promise<DeploymentRow | undefined> {
    const [row] = await runPrepared(db, 'deployments.findInOrg', [id, orgId],
      () => db.selectFrom('deployments').selectAll().where('id', '=', id).where('org_id', '=', orgId));
    return row;
  },

  /** Newest first. */
  async list(db: Executor, dialect: Dialect, orgId: string, f: DeploymentFilter): Promise<DeploymentRow[]> {
    return deploymentsRepo.listQuery(db, dialect, orgId, f).execute();
  },

  /** The query behind list (its plan is tested). */
  listQuery(db: Executor, dialect: Dialect, orgId: string, f: DeploymentFilter) {
    // SQLite keeps no statistics: with a state, it would read every deployment of the organization
    // in that state (two columns of deployments_org_state matched) to find a page of a service's.
    // A service's are read through its own index (the service is the organization's): the
    // organization is compared with a unary +, which keeps SQLite from using an index for it.
    // PostgreSQL weighs the indexes by its statistics.
    const org = f.serviceId !== undefined && dialect !== 'postgres' ? sql<string>`+org_id` : sql.ref('org_id');
    let q = db.selectFrom('deployments').selectAll().where(org, '=', orgId);
    if (f.serviceId !== undefined) q = q.where('service_id', '=', f.serviceId);
    if (f.environmentId !== undefined) q = q.where('environment_id', '=', f.environmentId);
    if (f.states !== undefined && f.states.length > 0) q = q.where('state', 'in', f.states);
    if (f.after !== null) q = q.where('id', '<', f.after);
    return q.orderBy('id', 'desc').limit(f.limit + 1);
  },

  /** The compare-and-set under every state change: no row back means the deployment was not as expected. */
  async compareAndSet(db: Executor, c: {
    orgId: string; id: string; from: string; set: DeploymentPatch; leaseToken?: string | undefined; leaseExpiredBefore?: string | undefined;
  }): Promise<DeploymentRow | undefined> {
    let q = db.updateTable('deployments').set(c.set).where('id', '=', c.id).where('org_id', '=', c.orgId).where('state', '=', c.from);
    if (c.leaseToken !== undefined) q = q.where('lease_token', '=', c.leaseToken);
    if (c.leaseExpiredBefore !== undefined) q = q.where('lease_expires_at', '<', c.leaseExpiredBefore);
    return q.returningAll().executeTakeFirst();
  },

  /**
   * The oldest claimable deployment: queued, in one of the environments (all when null), and the
   * oldest unfinished one of its service and environment (nothing of that pair in progress, nothing
   * older queued). `lock` takes it with FOR UPDATE SKIP LOCKED (PostgreSQL): concurrent claimers
   * pass over each other's rows instead of waiting on them.
   */
  async findClaimable(db: Executor, orgId: string, environmentIds: string[] | null, lock: boolean, avoid?: { host: string; lostSince: string }): Promise<string | undefined> {
    let q = db.selectFrom('deployments as d').select('d.id')
      .where('d.org_id', '=', orgId)
      .where('d.state', '=', 'queued')
      .where(({ not, exists, selectFrom, or, and }) => not(exists(
        selectFrom('deployments as o').select(sql<number>`1`.as('one'))
          .whereRef('o.service_id', '=', 'd.service_id')
          .whereRef('o.environment_id', '=', 'd.environment_id')
          .where((w) => or([w('o.state', '=', 'in_progress'), and([w('o.state', '=', 'queued'), w('o.id', '<', w.ref('d.id'))])])),
      )));
    if (environmentIds !== null) q = q.where('d.environment_id', 'in', environmentIds);
    // Not straight back to the runner that lost its lease (a claim of it waiting still, while it is frozen).
    if (avoid !== undefined) {
      q = q.where((w) => w.or([w('d.host_id', 'is', null), w('d.host_id', '!=', avoid.host), w('d.host_seen_at', '<', avoid.lostSince)]));
    }
    q = q.orderBy('d.id', 'asc').limit(1);
    if (lock) q = q.forUpdate('d').skipLocked();
    return (await q.executeTakeFirst())?.id;
  },

  /** In-progress deployments whose lease ran out (of one organization, or of all). */
  async expiredLeases(db: Executor, now: string, orgId: string | null, limit: number): Promise<Array<Pick<DeploymentRow, 'id' | 'org_id' | 'attempt' | 'lease_token'>>> {
    let q = db.selectFrom('deployments').select(['id', 'org_id', 'attempt', 'lease_token'])
      // A literal, so that both databases can plan with the partial lease index.
      .where('state', '=', sql.lit('in_progress')).where('lease_expires_at', '<', now);
    if (orgId !== null) q = q.where('org_id', '=', orgId);
    return q.orderBy('lease_expires_at', 'asc').limit(limit).execute();
  },

  /** Those of `ids` that are the organization's and serve (state `succeeded`). */
  /** Those of `ids` that serve (in these environments, when given). */
  async servingAmong(db: Executor, orgId: string, ids: string[], environmentIds: string[] | null = null): Promise<string[]> {
    if (environmentIds !== null && environmentIds.length === 0) return [];
    let q = db.selectFrom('deployments').select('id').where('org_id', '=', orgId).where('id', 'in', ids).where('state', '=', 'succeeded');
    if (environmentIds !== null) q = q.where('environment_id', 'in', environmentIds);
    return (await q.execute()).map((r) => r.id);
  },

  /**
   * A runner's report of the deployments it runs (`host`: its id): those of `ids` that serve and are
   * its own, or no runner's yet, become its own, seen now. Ids another runner has adopted since are
   * not among those returned: their processes here are to stop.
   */
  async reportHosted(db: Executor, orgId: string, ids: string[], host: string, now: string, environmentIds: string[] | null = null): Promise<string[]> {
    if (environmentIds !== null && environmentIds.length === 0) return [];
    let q = db.updateTable('deployments').set({ host_id: host, host_seen_at: now })
      .where('org_id', '=', orgId).where('id', 'in', ids).where('state', '=', 'succeeded')
      .where((w) => w.or([w('host_id', '=', host), w('host_id', 'is', null)]));
    if (environmentIds !== null) q = q.where('environment_id', 'in', environmentIds);
    return (await q.returning('id').execute()).map((r) => r.id);
  },

  /**
   * Serving deployments whose runner went away, oldest first: run by a runner that has not reported
   * them since `cutoff`, or that let them go. Deployments no runner ever reported are not among them.
   */
  async orphans(db: Executor, orgId: string, environmentIds: string[] | null, cutoff: string, limit: number): Promise<string[]> {
    let q = db.selectFrom('deployments').select('id').where('org_id', '=', orgId).where(orphanedSince(cutoff));
    if (environmentIds !== null) q = q.where('environment_id', 'in', environmentIds);
    return (await q.orderBy('id', 'asc').limit(limit).execute()).map((r) => r.id);
  },

  /** Makes an orphan `host`'s, if it still is one: of runners adopting it at once, one gets it. */
  async adopt(db: Executor, orgId: string, id: string, host: string, now: string, cutoff: string): Promise<DeploymentRow | undefined> {
    // What the runner that went away reported of the process is its own: the new one starts afresh.
    return db.updateTable('deployments').set({ host_id: host, host_seen_at: now, ...NO_PROCESS_REPORT })
      .where('id', '=', id).where('org_id', '=', orgId).where(orphanedSince(cutoff))
      .returningAll().executeTakeFirst();
  },

  /** What `host` last reported of the processes of these deployments, among those it runs that serve. */
  async processesOf(db: Executor, orgId: string, ids: string[], host: string): Promise<Array<Pick<DeploymentRow, 'id' | ProcessColumn | AddressColumn>>> {
    return db.selectFrom('deployments').select(['id', 'process_state', 'process_exits', 'process_last_exit', 'process_hostname', 'process_port'])
      .where('org_id', '=', orgId).where('id', 'in', ids).where('host_id', '=', host).where('state', '=', 'succeeded')
      .execute();
  },

  /**
   * Replaces what `host` last reported (`seen`, as read) with `report`; false when it changed since
   * it was read (another report of the same runner got there first), so that its news is told once.
   */
  async setProcess(db: Executor, id: string, host: string, seen: Pick<DeploymentRow, ProcessColumn>, report: Pick<DeploymentRow, ProcessColumn | AddressColumn | 'process_reported_at'> & { reason?: null }): Promise<boolean> {
    let q = db.updateTable('deployments').set(report).where('id', '=', id).where('host_id', '=', host);
    for (const column of ['process_state', 'process_exits', 'process_last_exit'] as const) {
      q = seen[column] === null ? q.where(column, 'is', null) : q.where(column, '=', seen[column]);
    }
    return Number((await q.executeTakeFirst()).numUpdatedRows) === 1;
  },

  /** `host` reported these processes again, as they were. */
  async processReportedAgain(db: Executor, ids: string[], host: string, at: string): Promise<void> {
    if (ids.length > 0) await db.updateTable('deployments').set({ process_reported_at: at }).where('id', 'in', ids).where('host_id', '=', host).execute();
  },

  /**
   * A serving deployment that cannot be started again: its process is `stopped`, for `reason`. It
   * stays `host`'s (the runner it was taken from): should that runner still run it and report it,
   * its report is answered and says how the process is doing again.
   */
  async setStopped(db: Executor, id: string, host: string, reason: string, reported: Pick<DeploymentRow, 'process_exits' | 'process_last_exit'>, at: string): Promise<void> {
    // The exits `host` reported stay: should it report again, only exits after those are news.
    await db.updateTable('deployments')
      .set({ process_state: 'stopped', process_exits: reported.process_exits, process_last_exit: reported.process_last_exit, process_reported_at: at, reason, host_id: host })
      .where('id', '=', id).execute();
  },

  /** `host` lets these go (it stopped their processes): they are orphans at once. */
  async release(db: Executor, orgId: string, ids: string[], host: string, environmentIds: string[] | null = null): Promise<string[]> {
    if (environmentIds !== null && environmentIds.length === 0) return [];
    let q = db.updateTable('deployments').set({ host_seen_at: null })
      .where('org_id', '=', orgId).where('id', 'in', ids).where('host_id', '=', host).where('state', '=', 'succeeded');
    if (environmentIds !== null) q = q.where('environment_id', 'in', environmentIds);
    return (await q.returning('id').execute()).map((r) => r.id);
  },

  /** The succeeded (serving) deployment of a service in an environment, other than `exceptId`. */
  async succeededOf(db: Executor, serviceId: string, environmentId: string, exceptId: string): Promise<DeploymentRow | undefined> {
    return db.selectFrom('deployments').selectAll()
      .where('service_id', '=', serviceId).where('environment_id', '=', environmentId).where('state', '=', 'succeeded').where('id', '!=', exceptId)
      .executeTakeFirst();
  },

  /** Succeeded deployments in an environment: what serves there, one per service. */
  async activeIn(db: Executor, orgId: string, environmentId: string, opts: { serviceId?: string | undefined; after: string | null; limit: number }): Promise<DeploymentRow[]> {
    let q = db.selectFrom('deployments').selectAll()
      .where('org_id', '=', orgId).where('environment_id', '=', environmentId).where('state', '=', 'succeeded');
    if (opts.serviceId !== undefined) q = q.where('service_id', '=', opts.serviceId);
    // Paged by service, not by deployment: a service deployed again meanwhile keeps its place
    // (its new deployment would have an id past a cursor, its old one no longer succeeded).
    if (opts.after !== null) q = q.where('service_id', '>', opts.after);
    return q.orderBy('service_id').limit(opts.limit + 1).execute();
  },

  async withStates(db: Executor, column: 'service_id' | 'environment_id', id: string, states: readonly string[], limit: number): Promise<Array<Pick<DeploymentRow, 'id' | 'state'>>> {
    return db.selectFrom('deployments').select(['id', 'state']).where(column, '=', id).where('state', 'in', [...states]).orderBy('id').limit(limit).execute();
  },

  /**
   * Deletes the deployments of a service or environment that are not in `keep` states, with their
   * logs. A deployment in such a state that a concurrent request created stays, and then blocks
   * the service's or environment's own deletion by its foreign key.
   */
  async deleteAllOf(db: Executor, column: 'service_id' | 'environment_id', id: string, keep: readonly string[], lock: boolean): Promise<number> {
    // PostgreSQL: the rows locked first, in id order. An environment's deletion and a service's
    // share the deployments of that pair, which each would otherwise reach through its own index
    // (by id, or by state and id), locking their logs in orders that can cross: a deadlock.
    if (lock) await db.selectFrom('deployments').select('id').where(column, '=', id).where('state', 'not in', keep).orderBy('id').forUpdate().execute();
    await db.deleteFrom('deployment_logs')
      .where('deployment_id', 'in', (eb) => eb.selectFrom('deployments').select('id').where(column, '=', id).where('state', 'not in', keep))
      .execute();
    const result = await db.deleteFrom('deployments').where(column, '=', id).where('state', 'not in', keep).executeTakeFirst();
    return Number(result.numDeletedRows);
  },

  /**
   * The fenced touch behind heartbeats and log appends: renews the lease and reserves `lines`
   * log sequence numbers, only while the deployment is in progress under this lease token.
   */
  async renewLease(db: Executor, c: { orgId: string; id: string; leaseToken: string; expiresAt: string; lines: number }): Promise<DeploymentRow | undefined> {
    return db.updateTable('deployments')
      .set((eb) => ({ lease_expires_at: c.expiresAt, log_seq: eb('log_seq', '+', c.lines) }))
      .where('id', '=', c.id).where('org_id', '=', c.orgId).where('state', '=', 'in_progress').where('lease_token', '=', c.leaseToken)
      .returningAll()
      .executeTakeFirst();
  },

  /**
   * Deployments queued and in progress in every organization, and when the oldest queued one was
   * created: for the metrics. Environment by environment, each a seek in the claim's index, so the
   * finished deployments, however many, are not read.
   */
  async pending(db: Executor): Promise<{ queued: number; inProgress: number; oldestQueuedAt: string | null }> {
    // Subqueries per environment: a join would let SQLite's planner scan the whole index instead.
    const inEnvironment = (state: string) => sql`from deployments d where d.environment_id = e.id and d.state = ${state}`;
    const { rows } = await sql<{ queued: string | number | null; in_progress: string | number | null; first: string | null }>`
      select sum((select count(*) ${inEnvironment('queued')})) as queued,
             sum((select count(*) ${inEnvironment('in_progress')})) as in_progress,
             min((select min(d.id) ${inEnvironment('queued')})) as first
      from environments e`.execute(db);
    const totals = rows[0];
    const first = totals?.first ?? null;
    const oldest = first === null ? undefined : await db.selectFrom('deployments').select('created_at').where('id', '=', first).executeTakeFirst();
    return { queued: Number(totals?.queued ?? 0), inProgress: Number(totals?.in_progress ?? 0), oldestQueuedAt: oldest?.created_at ?? null };
  },

  async insertLogs(db: Executor, rows: LogRow[]): Promise<void> {
    await insertRows(db, 'deployment_logs', rows);
  },

  /** One line of the server's own at the end of a deployment's log (a lease that expired), numbered after the rest. */
  async appendServerLine(db: Executor, d: { orgId: string; id: string; attempt: number }, line: string, at: string): Promise<void> {
    const row = await db.updateTable('deployments').set((eb) => ({ log_seq: eb('log_seq', '+', 1) }))
      .where('id', '=', d.id).where('org_id', '=', d.orgId).returning('log_seq').executeTakeFirst();
    if (row !== undefined) await insertRows(db, 'deployment_logs', [{ deployment_id: d.id, seq: Number(row.log_seq), attempt: d.attempt, stream: 'runner', line, at }]);
  },

  /**
   * Removes the logs of up to `limit` deployments that failed, were cancelled or were superseded
   * before `cutoff` (their last change), oldest first, and says when on each; returns how many it
   * marked (those another node took meanwhile are not counted). Those serving keep theirs. Read
   * through the partial index of those whose log is kept. With `lock` (PostgreSQL) the deployments
   * are locked first, in id order, before their logs, as their environment's or service's deletion
   * locks them (deleteAllOf): in the other order the two could deadlock.
   */
  async removeLogsEndedBefore(db: Executor, cutoff: string, now: string, limit: number, lock: boolean): Promise<{ found: number; removed: number }> {
    const ended = await db.selectFrom('deployments').select('id')
      .where(LOGS_KEPT_AND_ENDED).where('updated_at', '<', cutoff)
      .orderBy('updated_at').limit(limit).execute();
    if (ended.length === 0) return { found: 0, removed: 0 };
    let ids = ended.map((r) => r.id);
    if (lock) {
      ids = (await db.selectFrom('deployments').select('id').where('id', 'in', ids).where('logs_removed_at', 'is', null).orderBy('id').forUpdate().execute()).map((r) => r.id);
      if (ids.length === 0) return { found: ended.length, removed: 0 };
    }
    await db.deleteFrom('deployment_logs').where('deployment_id', 'in', ids).execute();
    const marked = await db.updateTable('deployments').set({ logs_removed_at: now }).where('id', 'in', ids).where('logs_removed_at', 'is', null).executeTakeFirst();
    return { found: ended.length, removed: Number(marked.numUpdatedRows) };
  },

  async readLogs(db: Executor, deploymentId: string, after: number, limit: number): Promise<LogRow[]> {
    return db.selectFrom('deployment_logs').selectAll()
      .where('deployment_id', '=', deploymentId).where('seq', '>', after)
      .orderBy('seq', 'asc').limit(limit + 1).execute();
  },

  /** The last `count` lines, in order. */
  async readLastLogs(db: Executor, deploymentId: string, count: number): Promise<LogRow[]> {
    const rows = await db.selectFrom('deployment_logs').selectAll()
      .where('deployment_id', '=', deploymentId)
      .orderBy('seq', 'desc').limit(count).execute();
    return rows.reverse();
  },
};
