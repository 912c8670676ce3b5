import type { IdempotencyClaim } from '../../platform/context.js';
import type { Executor } from '../../platform/db/database.js';
import type { IdempotencyKeysTable } from '../../platform/db/schema.js';
import { nowIso } from '../../platform/clock.js';

export type IdempotencyRow = IdempotencyKeysTable;

const rowOf = (db: Executor, subject: string, key: string) =>
  db.updateTable('idempotency_keys').where('subject', '=', subject).where('idempotency_key', '=', key);

export const idempotencyRepo = {
  /** True when this call created the row, i.e. holds the key now. */
  async insertIfAbsent(db: Executor, row: IdempotencyRow): Promise<boolean> {
    const result = await db.insertInto('idempotency_keys').values(row)
      .onConflict((oc) => oc.columns(['subject', 'idempotency_key']).doNothing())
      .executeTakeFirst();
    return Number(result.numInsertedOrUpdatedRows ?? 0) === 1;
  },

  async find(db: Executor, subject: string, key: string): Promise<IdempotencyRow | undefined> {
    return db.selectFrom('idempotency_keys').selectAll().where('subject', '=', subject).where('idempotency_key', '=', key).executeTakeFirst();
  },

  /**
   * Replaces `seen`, a row found free, unless it changed since it was read (compare-and-set on its
   * holder, the holder's last renewal and its commit mark): false when someone else got there
   * first, or when its holder turned out to be alive, renewing or committing its change.
   */
  async takeOver(db: Executor, seen: IdempotencyRow, row: IdempotencyRow): Promise<boolean> {
    const result = await rowOf(db, row.subject, row.idempotency_key)
      .where('lock_token', '=', seen.lock_token).where('locked_at', '=', seen.locked_at)
      .where('committed_at', seen.committed_at === null ? 'is' : '=', seen.committed_at)
      .set(row).executeTakeFirst();
    return Number(result.numUpdatedRows) === 1;
  },

  async complete(db: Executor, subject: string, key: string, lockToken: string,
    response: Pick<IdempotencyRow, 'status' | 'headers' | 'body_sealed' | 'completed_at'>): Promise<boolean> {
    const result = await rowOf(db, subject, key).where('lock_token', '=', lockToken).where('state', '=', 'in_progress')
      .set({ ...response, state: 'completed' }).executeTakeFirst();
    return Number(result.numUpdatedRows) === 1;
  },

  /** Marks the holder of an in-progress key alive now. */
  async renew(db: Executor, subject: string, key: string, lockToken: string, at: string): Promise<void> {
    await rowOf(db, subject, key).where('lock_token', '=', lockToken).where('state', '=', 'in_progress').set({ locked_at: at }).execute();
  },

  /**
   * In the holder's own transaction, with its change: from now on the request must not run again.
   * False when the holder lost its key (a retry took it over, taking this request for dead): the
   * change must then roll back, as the retry runs in its place. The hold is renewed with it: a
   * holder whose renewals failed for a while (a busy pool) is alive all the same, and its retries
   * wait for its response rather than being told it was lost.
   */
  async markCommitted(db: Executor, claim: IdempotencyClaim, at: string): Promise<boolean> {
    const result = await rowOf(db, claim.subject, claim.key).where('lock_token', '=', claim.lockToken).where('state', '=', 'in_progress')
      .set({ committed_at: at, locked_at: nowIso() }).executeTakeFirst();
    return Number(result.numUpdatedRows) === 1;
  },

  /**
   * Gives up the hold at once, as if the holder's node had died: for a request that committed a
   * change and then failed, whose retries are told so instead of running it again.
   */
  async relinquish(db: Executor, subject: string, key: string, lockToken: string): Promise<boolean> {
    const result = await rowOf(db, subject, key).where('lock_token', '=', lockToken).where('state', '=', 'in_progress')
      .set({ locked_at: new Date(0).toISOString() }).executeTakeFirst();
    return Number(result.numUpdatedRows) === 1;
  },

  /** Deletes the holder's row, unless its request committed a change: false then, or when the claim was lost. */
  async release(db: Executor, subject: string, key: string, lockToken: string): Promise<boolean> {
    const result = await db.deleteFrom('idempotency_keys').where('subject', '=', subject).where('idempotency_key', '=', key)
      .where('lock_token', '=', lockToken).where('state', '=', 'in_progress').where('committed_at', 'is', null).executeTakeFirst();
    return Number(result.numDeletedRows) === 1;
  },

  /**
   * In batches, each its own statement: a backlog (a node down for a day under a busy CI) is
   * deleted in steps that each take moments, never in one that holds locks or outlasts a deadline.
   */
  async deleteCreatedBefore(db: Executor, before: string, batch = 5_000): Promise<number> {
    for (let total = 0; ;) {
      const result = await db.deleteFrom('idempotency_keys')
        .where((eb) => eb(eb.refTuple('subject', 'idempotency_key'), 'in',
          eb.selectFrom('idempotency_keys').select(['subject', 'idempotency_key']).where('created_at', '<', before).limit(batch).$asTuple('subject', 'idempotency_key')))
        .executeTakeFirst();
      const deleted = Number(result.numDeletedRows);
      total += deleted;
      if (deleted < batch) return total;
    }
  },
};
