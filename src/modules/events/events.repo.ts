import { sql, type ExpressionBuilder, type Selectable } from 'kysely';
import { insertRows, type Dialect, type Executor } from '../../platform/db/database.js';
import type { EventsTable, Schema } from '../../platform/db/schema.js';
import { idFloor } from '../../platform/ids.js';
import { nowMs } from '../../platform/clock.js';

/** An event as written (its place in commit order is the database's to give). */
export type EventRow = Omit<EventsTable, 'seq' | 'tx_id'>;
/** An event as read back, with that place. */
export type StoredEvent = Selectable<EventsTable>;

/**
 * Where a page starts: after the event at this place in commit order. SQLite numbers events as
 * they commit (`seq`); PostgreSQL orders them by the transaction that wrote them, then by id.
 */
export type EventPosition = { seq: number } | { txId: string; id: string };

export interface EventFilter {
  after: EventPosition | null;
  /** Newest first: the page goes back in commit order from `after` (from the newest event when null). */
  newestFirst: boolean;
  limit: number;
  type?: string | undefined;
  subjectId?: string | undefined;
  actorId?: string | undefined;
  /** Made at or after `since` and before `until` (ISO 8601 UTC, as `created_at`). */
  since?: string | undefined;
  until?: string | undefined;
  /** SQLite: read a time range through the time index when it holds at most this many events (TIME_RANGE_SORTED_AT_MOST). */
  sortedAtMost?: number;
}

/**
 * PostgreSQL: the transaction id below which every transaction that could write this database's
 * events has ended, as this statement's snapshot sees it. The transactions still running when the
 * snapshot was taken hold it back, except those positively seen running (or prepared) in another
 * database of the cluster: transaction ids are cluster-wide, and a busy neighbour must not hold
 * this log back. A transaction that has ended since the snapshot was taken still counts: that errs
 * on the side of showing an event one page later, never of passing it.
 */
export const COMMITTED_HORIZON = sql`(
  select coalesce(min(running.xid), pg_snapshot_xmax(pg_current_snapshot()))
  from pg_snapshot_xip(pg_current_snapshot()) as running(xid)
  where not exists (
    select 1 from pg_stat_activity a
    where a.datname <> current_database() and a.backend_xid::text::bigint = running.xid::text::bigint % 4294967296
  ) and not exists (
    select 1 from pg_prepared_xacts p
    where p.database <> current_database() and p.transaction::text::bigint = running.xid::text::bigint % 4294967296
  )
)`;

/**
 * PostgreSQL: a reading of since when the event log has been held back (null: it is not), for the
 * metrics. The transaction that holds it is the one COMMITTED_HORIZON waits for: its start shows in
 * pg_stat_activity only to its own role and to those granted pg_read_all_stats, so the reading is
 * the earlier of the oldest start this role can see and the first reading that found the horizon
 * where it still is (a hold this role cannot see is then dated from when it was first seen). SQLite
 * writes one at a time: never held.
 */
export function eventLogHold(db: Executor, dialect: Dialect): () => Promise<string | null> {
  if (dialect !== 'postgres') return async () => null;
  let held: { horizon: string; since: number } | null = null;
  return async () => {
    // A transaction given its id after the last one to end is past the snapshot's xmax, not among
    // its running ones: on a quiet server the horizon is then the xmax, though that transaction
    // holds the log. Its session shows it: a transaction id of its own in pg_stat_activity.
    const { rows } = await sql<{ horizon: string; next: string; since: Date | string | null; writers: number }>`
      select ${COMMITTED_HORIZON}::text as horizon, pg_snapshot_xmax(pg_current_snapshot())::text as next, w.since, w.writers
      from (select min(xact_start) as since, count(*)::int as writers from pg_stat_activity
            where datname = current_database() and backend_xid is not null and pid <> pg_backend_pid()) as w`.execute(db);
    const row = rows[0]!;
    if (row.horizon === row.next && row.writers === 0) {
      held = null;
      return null;
    }
    if (held?.horizon !== row.horizon) held = { horizon: row.horizon, since: nowMs() };
    const seen = row.since === null ? Number.POSITIVE_INFINITY : new Date(row.since).getTime();
    return new Date(Math.min(held.since, seen)).toISOString();
  };
}

/** SQLite: a time range with at most this many of an organization's events is read through the time index. */
export const TIME_RANGE_SORTED_AT_MOST = 10_000;

/** Whether the organization has at most `atMost` events in the range (counted through the time index, no further). */
async function fewInTimeRange(db: Executor, orgId: string, since: string | undefined, until: string | undefined, atMost: number): Promise<boolean> {
  let inRange = db.selectFrom('events').select('org_id').where('org_id', '=', orgId);
  if (since !== undefined) inRange = inRange.where('created_at', '>=', since);
  if (until !== undefined) inRange = inRange.where('created_at', '<', until);
  const row = await db.selectFrom(inRange.limit(atMost + 1).as('in_range')).select((eb) => eb.fn.countAll<number>().as('n')).executeTakeFirstOrThrow();
  return Number(row.n) <= atMost;
}

// Looked for organization by organization, through the (org_id, tx_id, id) index: this runs at every start.
const everyOrg = (eb: ExpressionBuilder<Schema, 'events'>) => eb('org_id', 'in', eb.selectFrom('organizations').select('id'));

/** An event whose transaction id is at or past the next one this cluster gives out: restored from another. */
const fromAnotherCluster = sql<boolean>`tx_id >= pg_snapshot_xmax(pg_current_snapshot())`;

export const eventsRepo = {
  async insert(db: Executor, rows: EventRow[]): Promise<void> {
    await insertRows(db, 'events', rows);
  },

  /**
   * What the request with this id changed, from the events it wrote at or after `since` (ms) and
   * by `until` (the time its change committed at): ids are time-ordered, so the look-up reads only
   * the events written since (through the id's index).
   */
  async subjectsOfRequest(db: Executor, actorId: string, requestId: string, since: number, until: string): Promise<Array<{ type: string; id: string }>> {
    // Its caller's own events only, and none after its commit: a request id is whatever the caller
    // sent as X-Request-Id, and another request may carry the same one (a CI job's every call).
    const rows = await db.selectFrom('events').select(['subject_type', 'subject_id'])
      .where('id', '>=', idFloor('event', since)).where('created_at', '<=', until).where('request_id', '=', requestId).where('actor_id', '=', actorId)
      .orderBy('id').limit(100).execute();
    const seen = new Map<string, { type: string; id: string }>();
    for (const row of rows) seen.set(`${row.subject_type}/${row.subject_id}`, { type: row.subject_type, id: row.subject_id });
    return [...seen.values()];
  },

  /**
   * PostgreSQL: events restored from another cluster (a dump and restore, a logical-replication
   * move) carry that cluster's transaction ids. Those this cluster has not reached would stay
   * hidden and sort after every new event; the others would keep a place among ids that mean
   * something else here. An id at or past the next one to be given out can only come from a
   * restore; when there is one, every event is set to the lowest id, so they come first, in id
   * order (ids are time-ordered), before anything this cluster writes. One statement: a node that
   * starts at the same time finds nothing left to do. Returns how many were renumbered.
   */
  async renumberRestored(db: Executor): Promise<number> {
    const result = await db.updateTable('events').set({ tx_id: sql<string>`'1'::xid8` })
      .where(everyOrg)
      .where(sql<boolean>`tx_id <> '1'::xid8`)
      .where(({ exists, selectFrom }) => exists(selectFrom('events').select('id').where(everyOrg).where(fromAnotherCluster)))
      .executeTakeFirst();
    return Number(result.numUpdatedRows);
  },

  /** PostgreSQL: whether events carry transaction ids this cluster has not given yet (see renumberRestored). */
  async restoredFromElsewhere(db: Executor): Promise<boolean> {
    return (await db.selectFrom('events').select('id').where(everyOrg).where(fromAnotherCluster).limit(1).executeTakeFirst()) !== undefined;
  },

  /**
   * The place in commit order of an event of the organization, or undefined: named by its id, or on
   * SQLite by its sequence number (cursors made before they named events).
   */
  async positionOf(db: Executor, dialect: Dialect, orgId: string, id: string | { seq: number }): Promise<EventPosition | undefined> {
    const ofOrg = db.selectFrom('events').where('org_id', '=', orgId);
    const q = typeof id === 'string' ? ofOrg.where('id', '=', id) : ofOrg.where('seq', '=', id.seq);
    if (dialect === 'postgres') {
      const row = await q.select('tx_id').executeTakeFirst();
      return row === undefined ? undefined : { txId: String(row.tx_id), id: id as string };
    }
    const row = await q.select('seq').executeTakeFirst();
    return row === undefined ? undefined : { seq: Number(row.seq) };
  },

  /**
   * A page of events in commit order, or its reverse. On PostgreSQL only transactions older than
   * every one still running in this database are read: one still committing can then never appear
   * behind a page already returned (oldest first); newest first, it appears on the next first page.
   */
  async list(db: Executor, dialect: Dialect, orgId: string, opts: EventFilter): Promise<StoredEvent[]> {
    let q = db.selectFrom('events').selectAll().where('org_id', '=', orgId);
    if (opts.type !== undefined) {
      // `secret.*` selects a family of types. The prefix is compared as it is: LIKE would read `_`
      // (as in `service_user.*`) and `%` as wildcards, and ignores case in SQLite.
      const prefix = opts.type.endsWith('.*') ? opts.type.slice(0, -1) : null;
      q = prefix === null ? q.where('type', '=', opts.type)
        : q.where((eb) => eb(eb.fn<string>('substr', [eb.ref('type'), eb.lit(1), eb.lit(prefix.length)]), '=', prefix));
    }
    if (opts.subjectId !== undefined) q = q.where('subject_id', '=', opts.subjectId);
    if (opts.actorId !== undefined) q = q.where('actor_id', '=', opts.actorId);
    const after = opts.after;
    const direction = opts.newestFirst ? 'desc' : 'asc';
    if (dialect === 'postgres') {
      // Its planner weighs the time index against commit order by the table's statistics.
      if (opts.since !== undefined) q = q.where('created_at', '>=', opts.since);
      if (opts.until !== undefined) q = q.where('created_at', '<', opts.until);
      q = q.where(sql<boolean>`tx_id < ${COMMITTED_HORIZON}`);
      if (after !== null && 'txId' in after) {
        const position = sql`(${after.txId}::xid8, ${after.id})`;
        q = q.where(opts.newestFirst ? sql<boolean>`(tx_id, id) < ${position}` : sql<boolean>`(tx_id, id) > ${position}`);
      }
      return q.orderBy('tx_id', direction).orderBy('id', direction).limit(opts.limit + 1).execute();
    }
    // SQLite keeps no statistics, and takes the time index whenever the time is bounded: right for
    // an hour's events, ruinous for a range that holds most of the log (every event in it read and
    // sorted for each page). So it is told. A range with few events: their places in commit order
    // are read from the time index alone and sorted, and the page's rows fetched by them. A larger
    // one: read in commit order, the time compared (a unary + keeps SQLite from using an index for
    // a comparison).
    const narrow = (opts.since !== undefined || opts.until !== undefined) && await fewInTimeRange(db, orgId, opts.since, opts.until, opts.sortedAtMost ?? TIME_RANGE_SORTED_AT_MOST);
    const time = narrow ? sql.ref('created_at') : sql<string>`+created_at`;
    if (opts.since !== undefined) q = q.where(time, '>=', opts.since);
    if (opts.until !== undefined) q = q.where(time, '<', opts.until);
    if (after !== null && 'seq' in after) q = q.where(narrow ? sql<number>`+seq` : sql.ref('seq'), opts.newestFirst ? '<' : '>', after.seq);
    q = q.orderBy('seq', direction).limit(opts.limit + 1);
    if (!narrow) return q.execute();
    return db.selectFrom('events').selectAll().where('seq', 'in', q.clearSelect().select('seq')).orderBy('seq', direction).execute();
  },
};
