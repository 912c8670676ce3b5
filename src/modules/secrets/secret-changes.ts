// Changes to one secret: replace, patch and restore-a-version make a new version (or none, when
// the values come out identical); delete, undelete and permanent delete change its life. Each is
// one transaction that reads the secret locked, checks If-Match, and appends its event.
import type { RequestContext } from '../../platform/context.js';
import { nowIso, type Executor } from '../../platform/db/database.js';
import { AppError, errors, isAppError } from '../../platform/errors.js';
import { appendEvents } from '../events/event-log.js';
import { checkExpected as checkTagged, type Expected } from '../../platform/etags.js';
import { applyPatch, checkWithinLimits, keyDiff, keysOf, sameValues, toChange, type Values } from './secret-model.js';
import type { SecretStore } from './secret-store.js';
import { concurrentChange } from './secret-writes.js';
import { secretsRepo, type SecretRow } from './secrets.repo.js';
import type { SecretChangeT, SecretRestoreT } from './secrets.schemas.js';

export type { Expected };

/** Refuses with 412 a change (or a reveal) of a secret whose preconditions it does not meet. */
export function checkExpected(row: SecretRow, expected: Expected | undefined): void {
  checkTagged({ kind: 'secret', name: row.name, version: row.version, createdAt: row.created_at }, expected);
}

const PURGE_BATCH = 200;

export function createSecretChanges(store: SecretStore) {
  const { db, dataKeys, limits } = store.deps;

  /**
   * The one path every versioned change takes: lock, check If-Match, compute the new values from
   * the current ones, and make a version only if they differ.
   */
  async function change(
    ctx: RequestContext, orgId: string, name: string, expected: Expected | undefined,
    how: { kind: 'replace' | 'patch' | 'restore'; next: (current: Values, trx: Executor, row: SecretRow) => Values | Promise<Values>; data?: Record<string, unknown> },
  ): Promise<SecretChangeT> {
    const now = nowIso();
    return db.transaction().execute(async (trx) => {
      const { secret: row, current: currentVersion } = await store.liveWithCurrent(trx, orgId, name, now);
      checkExpected(row, expected);
      const current = await store.open(trx, orgId, currentVersion);
      const next = await how.next(current, trx, row);
      if (sameValues(current, next)) return toChange(row, 'unchanged');

      const keys = keysOf(next);
      const version = store.sealVersion(await dataKeys.current(trx, orgId), orgId, row.id, row.version + 1, next, now, ctx, keys);
      await secretsRepo.insertVersions(trx, [version]);
      if (await secretsRepo.bumpVersions(trx, [{ id: row.id, expected: row.version, keys: version.keys }], now, ctx.actor.id) !== 1) throw concurrentChange();
      const diff = keyDiff(current, next, keys);
      await appendEvents(trx, ctx, [{
        orgId, type: 'secret.updated', subject: { type: 'secret', id: row.id },
        data: { name, version: version.version, keys, change: how.kind, ...diff, ...how.data },
      }], now);
      return toChange({ ...row, version: version.version, keys: version.keys, updated_at: now }, 'updated', keys, diff);
    });
  }

  return {
    replace(ctx: RequestContext, orgId: string, name: string, values: Values, expected?: Expected) {
      return change(ctx, orgId, name, expected, { kind: 'replace', next: () => values });
    },

    patch(ctx: RequestContext, orgId: string, name: string, patch: { set?: Values | undefined; unset?: string[] | undefined }, expected?: Expected) {
      return change(ctx, orgId, name, expected, { kind: 'patch', next: (current) => applyPatch(current, patch, limits) });
    },

    /** A new version holding an earlier version's values (none if they are the current ones). */
    async restoreVersion(ctx: RequestContext, orgId: string, name: string, from: number, expected?: Expected) {
      try {
        return await change(ctx, orgId, name, expected, {
          kind: 'restore', data: { restoredFrom: from },
          next: async (current, trx, row) => {
            // A version made under higher limits than now's is no way past them.
            const values = await store.open(trx, orgId, await store.version(trx, row, from));
            checkWithinLimits(values, current, limits, { what: `Restoring version ${from}`, pointer: '/version' });
            return values;
          },
        });
      } catch (error) {
        // Deleted: the restore it asks for is the other one.
        if (isAppError(error) && error.code === 'secret_deleted') throw errors.secretDeleted(name, String(error.extras.restorableUntil), true);
        throw error;
      }
    },

    /**
     * Soft delete: the secret disappears from lists and reads but keeps its name and versions
     * until the retention window ends. Permanent: its row and every version's ciphertext are
     * removed now and the name is free; works on a deleted secret too.
     */
    async remove(ctx: RequestContext, orgId: string, name: string, opts: { permanent: boolean; expected?: Expected }): Promise<void> {
      const now = nowIso();
      const destroyed = await db.transaction().execute(async (trx) => {
        const row = opts.permanent ? await secretsRepo.findByName(trx, orgId, name, store.lock) : await store.live(trx, orgId, name, now);
        // A deletion past retention that the purge has not reached yet is still destroyed on request.
        if (row === undefined) throw errors.secretNotFound(name);
        checkExpected(row, opts.expected);
        const subject = { type: 'secret', id: row.id };
        if (opts.permanent) {
          await secretsRepo.destroy(trx, [row.id]);
          await appendEvents(trx, ctx, [{ orgId, type: 'secret.destroyed', subject, data: { name, version: row.version, wasDeleted: row.deleted_at !== null } }], now);
          return true;
        }
        if (!(await secretsRepo.markDeleted(trx, row.id, row.version, now))) throw concurrentChange();
        await appendEvents(trx, ctx, [{ orgId, type: 'secret.deleted', subject, data: { name, version: row.version, restorableUntil: store.keep.until(now) } }], now);
        return false;
      });
      if (destroyed) await store.scrub();
    },

    /** Brings a deleted secret back exactly as it was, within the retention window. */
    async undelete(ctx: RequestContext, orgId: string, name: string, expected?: Expected): Promise<SecretRestoreT> {
      const now = nowIso();
      return db.transaction().execute(async (trx) => {
        const row = await secretsRepo.findByName(trx, orgId, name, store.lock);
        if (row === undefined || store.isExpired(row, now)) throw errors.secretNotFound(name);
        if (row.deleted_at === null) {
          throw errors.conflict('secret_not_deleted', `The secret "${name}" is not deleted. To bring back an earlier version's values, send { "version": n }.`);
        }
        checkExpected(row, expected);
        if (!(await secretsRepo.markRestored(trx, row.id, row.deleted_at))) throw concurrentChange();
        await appendEvents(trx, ctx, [{ orgId, type: 'secret.restored', subject: { type: 'secret', id: row.id }, data: { name, version: row.version, deletedAt: row.deleted_at } }], now);
        return toChange(row, 'restored');
      });
    },

    /**
     * Purges every deletion whose retention has ended, a batch of one organization's per
     * transaction (whose row it holds first, as every change to its secrets does); returns how many.
     */
    async purgeExpired(now = nowIso()): Promise<number> {
      const cutoff = store.keep.cutoff(now);
      let purged = 0;
      for (;;) {
        const n = await db.transaction().execute(async (trx) => {
          const orgId = await secretsRepo.orgWithExpired(trx, cutoff);
          if (orgId === undefined) return null;
          const rows = await secretsRepo.findExpired(trx, orgId, cutoff, PURGE_BATCH, store.lock);
          await store.purge(trx, rows, null, now);
          return rows.length;
        }).catch((error: unknown) => {
          // Its organization deleted meanwhile, its secrets with it: on to the next one.
          if (error instanceof AppError && error.code === 'organization_not_found') return 0;
          throw error;
        });
        if (n === null) {
          // What this sweep purged, and what writing a name purged since the last one.
          if (purged > 0 || store.purgedSinceScrub()) await store.scrub();
          return purged;
        }
        purged += n;
      }
    },
  };
}
