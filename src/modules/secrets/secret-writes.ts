// Bulk writes: create (all new, all or nothing) and upsert (create the missing, version the
// changed, leave the identical alone), each one transaction of set-based statements.
import type { RequestContext } from '../../platform/context.js';
import { isTransactionAborted, isUniqueViolation, nowIso, type Executor } from '../../platform/db/database.js';
import { transaction } from '../../platform/db/dry-run.js';
import { errors } from '../../platform/errors.js';
import { appendEvents, type NewEvent } from '../events/event-log.js';
import { duplicateNamePointers, keyDiff, keysOf, sameValues, toChange, toMetadata, type SecretInput } from './secret-model.js';
import type { NewSecret, SecretStore } from './secret-store.js';
import { secretsRepo, type SecretRow, type SecretVersionRow, type VersionBump } from './secrets.repo.js';
import type { SecretMetadataT, UpsertItemT } from './secrets.schemas.js';

/** A name of the request that is taken, and by what: a live secret or a deleted one (restorable until purged). */
interface Taken {
  name: string;
  deleted: boolean;
}

function conflictList(items: SecretInput[], taken: Taken[]) {
  const by = new Map(taken.map((t) => [t.name, t.deleted ? 'deleted' : 'exists']));
  return items.flatMap((item, i) => (by.has(item.name) ? [{ pointer: `/secrets/${i}/name`, name: item.name, state: by.get(item.name)! }] : []));
}

function listed(names: string[]): string {
  return `${names.slice(0, 10).join(', ')}${names.length > 10 ? ', …' : ''}`;
}

/** What the detail says of the taken names: which exist, which are deleted and what frees those. */
function takenSentences(taken: Taken[], create: boolean): string {
  const live = taken.filter((t) => !t.deleted).map((t) => t.name);
  const deleted = taken.filter((t) => t.deleted).map((t) => t.name);
  const n = live.length;
  return [
    ...(n > 0 ? [`${n} secret name${n === 1 ? '' : 's'} already exist${n === 1 ? 's' : ''} in this organization: ${listed(live)}.${create ? ' Use PUT to create or update.' : ''}`] : []),
    ...(deleted.length > 0 ? [`Deleted secrets keep their names until they are purged: ${listed(deleted)}; restore them (POST …/secrets/{name}/restore) or delete them permanently (DELETE …/secrets/{name}?permanent=true) first.`] : []),
  ].join(' ');
}

/**
 * Names of the request that are taken, in one problem: 409 `secret_exists` when a live secret holds
 * one, `secret_deleted` when only deleted ones do. Each conflict names its item and its state.
 */
function takenConflict(items: SecretInput[], taken: Taken[], create: boolean) {
  const code = taken.some((t) => !t.deleted) ? 'secret_exists' : 'secret_deleted';
  return errors.conflict(code, `${takenSentences(taken, create)} Nothing was written.`, { conflicts: conflictList(items, taken) });
}

const takenBy = (rows: SecretRow[]): Taken[] => rows.map((r) => ({ name: r.name, deleted: r.deleted_at !== null }));

/**
 * Items in name order, the order rows are inserted and locked in: two batches that overlap then
 * queue behind each other on PostgreSQL instead of deadlocking.
 */
function byName(items: SecretInput[]): SecretInput[] {
  return [...items].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

const createdEvent = ({ secret: s, keys }: NewSecret): NewEvent => ({
  orgId: s.org_id, type: 'secret.created', subject: { type: 'secret', id: s.id }, data: { name: s.name, version: 1, keys },
});

export function createSecretWrites(store: SecretStore) {
  const { db, dataKeys } = store.deps;

  /** Expired deletions among `rows` are purged (their names are free); the rest are returned. */
  async function dropExpired(trx: Executor, rows: SecretRow[], ctx: RequestContext, now: string): Promise<SecretRow[]> {
    await store.purge(trx, rows.filter((r) => store.isExpired(r, now)), ctx.requestId, now);
    return rows.filter((r) => !store.isExpired(r, now));
  }

  return {
    /**
     * Creates every secret or none: an existing name, or a name twice in the request, fails the
     * whole batch and the problem lists every offending item.
     */
    async bulkCreate(ctx: RequestContext, orgId: string, items: SecretInput[]): Promise<SecretMetadataT[]> {
      await assertDistinct(orgId, items, true);
      const now = nowIso();
      // Names are usually free: insert at once, and look at what holds them only when one is taken
      // (a live secret, a deletion still restorable, or one past retention that is purged first).
      try {
        return await createAll(ctx, orgId, items, now, { check: false });
      } catch (error) {
        if (!isUniqueViolation(error)) throw error;
      }
      try {
        return await createAll(ctx, orgId, items, now, { check: true });
      } catch (error) {
        // A concurrent batch took a name between our check and our insert: report it like any other.
        if (isUniqueViolation(error)) throw takenConflict(items, takenBy(await secretsRepo.findByNames(db, orgId, items.map((i) => i.name), { lock: false })), true);
        throw error;
      }
    },

    /**
     * One transaction: missing names are created at version 1, existing ones whose values differ
     * get a new version, identical ones are left as they are. A deleted secret (still
     * restorable) fails the whole batch, since writing it would silently undo the deletion.
     */
    async upsert(ctx: RequestContext, orgId: string, items: SecretInput[], dryRun = false): Promise<UpsertItemT[]> {
      await assertDistinct(orgId, items, false);
      // A concurrent upsert may create one of our missing names first (the retry then updates it),
      // or, past one statement's worth of names, lock them in another order (PostgreSQL aborts one).
      for (let attempt = 1; ; attempt++) {
        try {
          return await upsertOnce(ctx, orgId, items, dryRun);
        } catch (error) {
          if (!(isUniqueViolation(error) || isTransactionAborted(error)) || attempt >= 3) throw error;
        }
      }
    },
  };

  /**
   * Refuses a name twice in one request (400; an empty batch is refused by the body's schema); the
   * problem also lists the names that are taken besides (for a create, by any secret; for an
   * upsert, by a deleted one), so that one answer says everything to fix.
   */
  async function assertDistinct(orgId: string, items: SecretInput[], create: boolean): Promise<void> {
    const duplicates = duplicateNamePointers(items);
    if (duplicates.length === 0) return;
    const now = nowIso();
    const rows = await secretsRepo.findByNames(db, orgId, [...new Set(items.map((i) => i.name))], { lock: false });
    const taken = takenBy(rows.filter((r) => !store.isExpired(r, now) && (create || r.deleted_at !== null)));
    throw errors.duplicateNames(duplicates, taken.length > 0 ? { also: takenSentences(taken, create), conflicts: conflictList(items, taken) } : undefined);
  }

  function createAll(ctx: RequestContext, orgId: string, items: SecretInput[], now: string, opts: { check: boolean }): Promise<SecretMetadataT[]> {
    return db.transaction().execute(async (trx) => {
      if (opts.check) {
        const existing = await dropExpired(trx, await secretsRepo.findByNames(trx, orgId, items.map((i) => i.name), store.lock), ctx, now);
        // A deleted name is not free either, but PUT would refuse it too: say what does free it.
        if (existing.length > 0) throw takenConflict(items, takenBy(existing), true);
      }
      const dataKey = await dataKeys.current(trx, orgId);
      const made = new Map(byName(items).map((item) => [item.name, store.newSecret(dataKey, orgId, item.name, item.values, now, ctx)]));
      const rows = [...made.values()];
      await secretsRepo.insertSecrets(trx, rows.map((r) => r.secret));
      await secretsRepo.insertVersions(trx, rows.map((r) => r.version));
      await appendEvents(trx, ctx, items.map((item) => createdEvent(made.get(item.name)!)), now);
      return items.map((item) => {
        const { secret, keys } = made.get(item.name)!;
        return toMetadata(secret, undefined, keys);
      });
    });
  }

  async function upsertOnce(ctx: RequestContext, orgId: string, items: SecretInput[], dryRun: boolean): Promise<UpsertItemT[]> {
    const now = nowIso();
    return transaction(db, dryRun, async (trx) => {
      const pairs = await secretsRepo.findManyWithCurrent(trx, orgId, items.map((i) => i.name), store.lock);
      const found = await dropExpired(trx, pairs.map((p) => p.secret), ctx, now);
      const deleted = found.filter((r) => r.deleted_at !== null);
      if (deleted.length > 0) throw takenConflict(items, takenBy(deleted), false);
      const existing = new Map(found.map((r) => [r.name, r]));
      const current = await store.openCurrent(trx, orgId, pairs.filter((p) => existing.has(p.secret.name)));
      const dataKey = await dataKeys.current(trx, orgId);

      const newSecrets: SecretRow[] = [];
      const versions: SecretVersionRow[] = [];
      const bumps: VersionBump[] = [];
      const events: NewEvent[] = [];
      const results = new Map<string, UpsertItemT>();
      for (const item of byName(items)) {
        const row = existing.get(item.name);
        if (row === undefined) {
          const made = store.newSecret(dataKey, orgId, item.name, item.values, now, ctx);
          newSecrets.push(made.secret);
          versions.push(made.version);
          events.push(createdEvent(made));
          results.set(item.name, toChange(made.secret, 'created', made.keys));
          continue;
        }
        const before = current.get(row.id)!;
        if (sameValues(before, item.values)) {
          results.set(item.name, toChange(row, 'unchanged'));
          continue;
        }
        const keys = keysOf(item.values);
        const version = store.sealVersion(dataKey, orgId, row.id, row.version + 1, item.values, now, ctx, keys);
        versions.push(version);
        bumps.push({ id: row.id, expected: row.version, keys: version.keys });
        const diff = keyDiff(before, item.values, keys);
        events.push({
          orgId, type: 'secret.updated', subject: { type: 'secret', id: row.id },
          data: { name: row.name, version: version.version, keys, change: 'upsert', ...diff },
        });
        results.set(item.name, toChange({ ...row, version: version.version, keys: version.keys, updated_at: now }, 'updated', keys, diff));
      }

      await secretsRepo.insertSecrets(trx, newSecrets);
      await secretsRepo.insertVersions(trx, versions);
      if (await secretsRepo.bumpVersions(trx, bumps, now, ctx.actor.id) !== bumps.length) throw concurrentChange();
      await appendEvents(trx, ctx, events, now);
      return items.map((item) => results.get(item.name)!);
    });
  }
}

/** The rows were read locked (or under SQLite's write lock), so this only fires if that promise breaks. */
export function concurrentChange() {
  return errors.raced('secret_changed', 'The secret changed while this request was being applied; nothing was written. Retry.');
}
