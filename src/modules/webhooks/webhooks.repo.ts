import { sql } from 'kysely';
import type { Dialect, Executor } from '../../platform/db/database.js';
import { COMMITTED_HORIZON } from '../events/events.repo.js';
import { orgsRepo } from '../orgs/orgs.repo.js';
import type { WebhookDeliveriesTable, WebhooksTable } from '../../platform/db/schema.js';

export type WebhookRow = WebhooksTable;
export type DeliveryRow = WebhookDeliveriesTable;

/** Deliveries kept per webhook, the newest. */
export const DELIVERIES_KEPT = 100;

export const webhooksRepo = {
  async insert(db: Executor, row: WebhookRow): Promise<void> {
    await db.insertInto('webhooks').values(row).execute();
  },

  async countInOrg(db: Executor, orgId: string): Promise<number> {
    const row = await db.selectFrom('webhooks').select((eb) => eb.fn.countAll<number>().as('n')).where('org_id', '=', orgId).executeTakeFirstOrThrow();
    return Number(row.n);
  },

  /**
   * `lock` (PostgreSQL) holds the row until the transaction ends, after the organization's row
   * (orgsRepo.holdForChange), so that a change waits for an organization's deletion instead of
   * deadlocking with it.
   */
  async find(db: Executor, orgId: string, id: string, lock = false): Promise<WebhookRow | undefined> {
    const q = db.selectFrom('webhooks').selectAll().where('org_id', '=', orgId).where('id', '=', id);
    if (!lock) return q.executeTakeFirst();
    await orgsRepo.holdForChange(db, orgId);
    return q.forUpdate().executeTakeFirst();
  },

  async list(db: Executor, orgId: string, opts: { after: string | null; limit: number }): Promise<WebhookRow[]> {
    let q = db.selectFrom('webhooks').selectAll().where('org_id', '=', orgId);
    if (opts.after !== null) q = q.where('id', '>', opts.after);
    return q.orderBy('id').limit(opts.limit + 1).execute();
  },

  async update(db: Executor, id: string, patch: Partial<WebhookRow>): Promise<WebhookRow | undefined> {
    return db.updateTable('webhooks').set(patch).where('id', '=', id).returningAll().executeTakeFirst();
  },

  /** With its delivery records: their foreign key cascades. */
  async delete(db: Executor, id: string): Promise<void> {
    await db.deleteFrom('webhooks').where('id', '=', id).execute();
  },

  async byId(db: Executor, id: string): Promise<WebhookRow | undefined> {
    return db.selectFrom('webhooks').selectAll().where('id', '=', id).executeTakeFirst();
  },

  /**
   * Active webhooks with events past their position, whose next attempt is due and that no node
   * holds (or whose holder's lease ran out). On PostgreSQL only events every reader can list count.
   */
  async due(db: Executor, dialect: Dialect, now: string, limit: number): Promise<WebhookRow[]> {
    return db.selectFrom('webhooks as w').selectAll('w')
      .where('w.active', '=', 1)
      .where((eb) => eb.or([eb('w.next_attempt_at', 'is', null), eb('w.next_attempt_at', '<=', now)]))
      .where((eb) => eb.or([eb('w.lease_until', 'is', null), eb('w.lease_until', '<', now)]))
      .where(({ exists, selectFrom }) => exists(selectFrom('events as e').select('e.id').whereRef('e.org_id', '=', 'w.org_id')
        .where(dialect === 'postgres'
          ? sql<boolean>`e.tx_id < ${COMMITTED_HORIZON} and (w.position_tx is null or (e.tx_id, e.id) > (w.position_tx::xid8, w.position_event_id))`
          : sql<boolean>`e.seq > coalesce(w.position_seq, 0)`)))
      // The one that has waited longest for its turn first.
      .orderBy((eb) => eb.fn.coalesce('w.turn_at', 'w.created_at')).orderBy('w.id').limit(limit).execute();
  },

  /** Takes the webhook for this node until `until`, if it is still due and free; false if another node has it. */
  async lease(db: Executor, id: string, owner: string, now: string, until: string): Promise<boolean> {
    const result = await db.updateTable('webhooks').set({ lease_owner: owner, lease_until: until, turn_at: now })
      .where('id', '=', id).where('active', '=', 1)
      .where((eb) => eb.or([eb('lease_until', 'is', null), eb('lease_until', '<', now)]))
      .executeTakeFirst();
    return Number(result.numUpdatedRows) === 1;
  },

  /**
   * A change by the node holding the lease, while it holds it, the webhook is active and nobody
   * changed it since `updatedAt` (a new URL, events or secret, turned off and on); undefined if not.
   */
  async updateLeased(db: Executor, id: string, owner: string, updatedAt: string, patch: Partial<WebhookRow>): Promise<WebhookRow | undefined> {
    return db.updateTable('webhooks').set(patch)
      .where('id', '=', id).where('lease_owner', '=', owner).where('active', '=', 1).where('updated_at', '=', updatedAt)
      .returningAll().executeTakeFirst();
  },

  /**
   * PostgreSQL, before a restore into another cluster renumbers the restored events to transaction
   * id 1, in id order (see eventsRepo.renumberRestored): each position is moved to where no event
   * that came after it in the old order comes before it in the new one, just before the lowest id
   * among those. An event committed after another that took its id earlier (as under concurrent
   * writes) is then delivered, not passed over; some already delivered may go again, as after any
   * lost answer. No event before it: from the start.
   */
  async followRenumberedEvents(db: Executor): Promise<void> {
    await sql`
      update webhooks w set position_tx = case when moved.id is null then null else '1' end, position_event_id = moved.id
      from (
        select w2.id as webhook_id, (
          select max(e.id) from events e
          where e.org_id = w2.org_id and (later.first is null or e.id < later.first)
        ) as id
        from webhooks w2 cross join lateral (
          select min(a.id) as first from events a
          where a.org_id = w2.org_id and (a.tx_id, a.id) > (w2.position_tx::xid8, w2.position_event_id)
        ) later
        where w2.position_tx is not null
      ) moved
      where w.id = moved.webhook_id`.execute(db);
  },

  async release(db: Executor, id: string, owner: string): Promise<void> {
    await db.updateTable('webhooks').set({ lease_owner: null, lease_until: null }).where('id', '=', id).where('lease_owner', '=', owner).execute();
  },

  async insertDelivery(db: Executor, row: DeliveryRow): Promise<void> {
    await db.insertInto('webhook_deliveries').values(row).execute();
  },

  /** Keeps the newest DELIVERIES_KEPT deliveries of a webhook. */
  async pruneDeliveries(db: Executor, webhookId: string): Promise<void> {
    const oldestKept = await db.selectFrom('webhook_deliveries').select('id').where('webhook_id', '=', webhookId)
      .orderBy('id', 'desc').offset(DELIVERIES_KEPT - 1).limit(1).executeTakeFirst();
    if (oldestKept !== undefined) await db.deleteFrom('webhook_deliveries').where('webhook_id', '=', webhookId).where('id', '<', oldestKept.id).execute();
  },

  async deliveries(db: Executor, webhookId: string, opts: { after: string | null; limit: number }): Promise<DeliveryRow[]> {
    let q = db.selectFrom('webhook_deliveries').selectAll().where('webhook_id', '=', webhookId);
    if (opts.after !== null) q = q.where('id', '<', opts.after);
    return q.orderBy('id', 'desc').limit(opts.limit + 1).execute();
  },
};
