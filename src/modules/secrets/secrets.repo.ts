import { sql, type Compilable } from 'kysely';
import { insertRows, runPrepared, type Executor } from '../../platform/db/database.js';
import type { SecretsTable, SecretVersionsTable } from '../../platform/db/schema.js';
import { orgsRepo } from '../orgs/orgs.repo.js';

export type SecretRow = SecretsTable;
export type SecretVersionRow = SecretVersionsTable;

// Rows (or names) per statement: well under SQLite's and PostgreSQL's bound-parameter limits.
const CHUNK = 400;

function chunks<T>(items: T[]): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += CHUNK) out.push(items.slice(i, i + CHUNK));
  return out;
}


/**
 * How rows are read before a change: `lock` takes PostgreSQL row locks (SQLite serializes writers
 * anyway), after the organization's row (orgsRepo.holdForChange): a change holding a secret's row
 * while it waited for the organization's, to append its event, would deadlock with the
 * organization's deletion, which holds that row and then deletes the secrets.
 */
export interface ReadOptions {
  lock: boolean;
}

/** A version bump of one existing secret, applied only if it is still at `expected` (compare-and-set). */
export interface VersionBump {
  id: string;
  expected: number;
  keys: string;
}

export interface WithCurrent {
  secret: SecretRow;
  current: SecretVersionRow;
}

/** Secrets joined with their current version, whose columns come back prefixed `v_`. */
function withCurrent(db: Executor) {
  return db.selectFrom('secrets')
    .innerJoin('secret_versions as v', (j) => j.onRef('v.secret_id', '=', 'secrets.id').onRef('v.version', '=', 'secrets.version'))
    .selectAll('secrets')
    .select(['v.keys as v_keys', 'v.data_key_id as v_data_key_id', 'v.ciphertext as v_ciphertext', 'v.created_at as v_created_at', 'v.created_by as v_created_by']);
}

type JoinedRow = SecretRow & { v_keys: string; v_data_key_id: string; v_ciphertext: Buffer; v_created_at: string; v_created_by: string | null };

function splitCurrent(row: JoinedRow): WithCurrent {
  const { v_keys, v_data_key_id, v_ciphertext, v_created_at, v_created_by, ...secret } = row;
  return { secret, current: { secret_id: secret.id, version: secret.version, keys: v_keys, data_key_id: v_data_key_id, ciphertext: v_ciphertext, created_at: v_created_at, created_by: v_created_by } };
}

/**
 * Many compare-and-set bumps in one statement: the secrets joined with a VALUES list of (id, keys,
 * expected version). Each row is found through its id: the expected version is cast where it is
 * compared, not in the list, since a typed list column leads SQLite to scan the whole table and
 * look each row up in the list instead (a test checks the plan). A CASE list keyed by id, the other
 * way to write this, compares every row with every id: quadratic in the chunk.
 */
export function bumpManyStatement(db: Executor, bumps: VersionBump[], at: string, by: string): Compilable<{ id: string }> {
  const list = sql.join(bumps.map((b) => sql`(${b.id}, ${b.keys}, ${b.expected})`));
  const update = sql<{ id: string }>`update secrets set version = version + 1, keys = b.column2, updated_at = ${at}, updated_by = ${by}
    from (values ${list}) as b where secrets.id = b.column1 and secrets.version = cast(b.column3 as integer) returning secrets.id`;
  return { compile: () => update.compile(db) };
}

export const secretsRepo = {
  /**
   * The organization's rows with these names, deleted ones included, ordered by name (the lock order).
   * `share` (PostgreSQL) holds them FOR SHARE: a change or a deletion of one waits for the caller's
   * transaction, and one being made is waited for and read as it left the secret.
   */
  async findByNames(db: Executor, orgId: string, names: string[], opts: ReadOptions & { share?: boolean }): Promise<SecretRow[]> {
    const found: SecretRow[] = [];
    if (opts.lock) await orgsRepo.holdForChange(db, orgId);
    for (const part of chunks([...names].sort())) {
      // Compiled once per list length (and lock mode): a batch of a thousand names is three statements.
      found.push(...await runPrepared(db, `secrets.findByNames:${opts.lock}:${opts.share === true}:${part.length}`, [orgId, ...part], () => {
        const q = db.selectFrom('secrets').selectAll().where('org_id', '=', orgId).where('name', 'in', part).orderBy('name');
        return opts.lock ? q.forUpdate() : opts.share === true ? q.forShare() : q;
      }));
    }
    return found;
  },

  /**
   * The organization's rows with these ids, deleted ones included. `hold` (PostgreSQL) keeps them
   * until the transaction ends (FOR KEY SHARE, in name order as changes lock them): a permanent
   * deletion waits for the caller, and one being made is waited for and then finds them gone.
   */
  async findByIds(db: Executor, orgId: string, ids: string[], hold = false): Promise<SecretRow[]> {
    const found: SecretRow[] = [];
    for (const part of chunks(ids)) {
      const q = db.selectFrom('secrets').selectAll().where('org_id', '=', orgId).where('id', 'in', part);
      found.push(...await (hold ? q.orderBy('name').forKeyShare() : q).execute());
    }
    return found;
  },

  async findByName(db: Executor, orgId: string, name: string, opts: ReadOptions): Promise<SecretRow | undefined> {
    let q = db.selectFrom('secrets').selectAll().where('org_id', '=', orgId).where('name', '=', name);
    if (opts.lock) {
      await orgsRepo.holdForChange(db, orgId);
      q = q.forUpdate();
    }
    return q.executeTakeFirst();
  },

  /**
   * A secret with its current version's row, in one read. With `lock`, the secret's row is locked
   * by a statement of its own first: a locking read through the join would, after waiting for a
   * concurrent change, re-check the join against the version row it saw before and lose the secret.
   * The read then goes by the locked row's id, not the name: a secret that a concurrent request
   * created under the name meanwhile (after deleting the one locked for good) is not this one.
   */
  async findWithCurrent(db: Executor, orgId: string, name: string, opts: ReadOptions): Promise<WithCurrent | undefined> {
    if (opts.lock) {
      await orgsRepo.holdForChange(db, orgId);
      const [locked] = await runPrepared(db, 'secrets.lockByName', [orgId, name], () => db.selectFrom('secrets').select('id').where('org_id', '=', orgId).where('name', '=', name).forUpdate());
      if (locked === undefined) return undefined;
      const [row] = await runPrepared(db, 'secrets.findWithCurrentById', [locked.id], () => withCurrent(db).where('secrets.id', '=', locked.id));
      return row === undefined ? undefined : splitCurrent(row);
    }
    const [row] = await runPrepared(db, 'secrets.findWithCurrent', [orgId, name], () => withCurrent(db).where('secrets.org_id', '=', orgId).where('secrets.name', '=', name));
    return row === undefined ? undefined : splitCurrent(row);
  },

  /** The organization's secrets with these names (deleted ones included), each with its current version's row, by name; locked as findWithCurrent. */
  async findManyWithCurrent(db: Executor, orgId: string, names: string[], opts: ReadOptions): Promise<WithCurrent[]> {
    const found: WithCurrent[] = [];
    if (opts.lock) await orgsRepo.holdForChange(db, orgId);
    for (const part of chunks([...names].sort())) {
      if (opts.lock) {
        // As findWithCurrent: what is read is what was locked, by id.
        const locked = await runPrepared(db, `secrets.lockByNames:${part.length}`, [orgId, ...part], () => db.selectFrom('secrets').select('id')
          .where('org_id', '=', orgId).where('name', 'in', part).orderBy('name').forUpdate());
        if (locked.length === 0) continue;
        const ids = locked.map((r) => r.id);
        const rows = await runPrepared(db, `secrets.findManyWithCurrentByIds:${ids.length}`, ids, () => withCurrent(db)
          .where('secrets.id', 'in', ids).orderBy('secrets.name'));
        for (const row of rows) found.push(splitCurrent(row));
        continue;
      }
      const rows = await runPrepared(db, `secrets.findManyWithCurrent:${part.length}`, [orgId, ...part], () => withCurrent(db)
        .where('secrets.org_id', '=', orgId).where('secrets.name', 'in', part).orderBy('secrets.name'));
      for (const row of rows) found.push(splitCurrent(row));
    }
    return found;
  },

  async findVersion(db: Executor, secretId: string, version: number): Promise<SecretVersionRow | undefined> {
    return db.selectFrom('secret_versions').selectAll().where('secret_id', '=', secretId).where('version', '=', version).executeTakeFirst();
  },

  /** These (secret, version) pairs' rows, those that exist. */
  async findVersions(db: Executor, pairs: Array<{ secretId: string; version: number }>): Promise<SecretVersionRow[]> {
    const found: SecretVersionRow[] = [];
    for (const part of chunks(pairs)) {
      found.push(...await db.selectFrom('secret_versions').selectAll()
        .where((eb) => eb.or(part.map((p) => eb.and([eb('secret_id', '=', p.secretId), eb('version', '=', p.version)])))).execute());
    }
    return found;
  },

  /** Versions of one secret, newest first, below `before` when paging. */
  async listVersions(db: Executor, secretId: string, opts: { before: number | null; limit: number }): Promise<SecretVersionRow[]> {
    let q = db.selectFrom('secret_versions').selectAll().where('secret_id', '=', secretId);
    if (opts.before !== null) q = q.where('version', '<', opts.before);
    return q.orderBy('version', 'desc').limit(opts.limit + 1).execute();
  },

  /**
   * A page of secrets by name. Live ones, or deleted ones not yet past `restorableAfter` (older
   * deletions are as good as purged). The prefix is compared with substr so that neither LIKE's
   * case rules (SQLite) nor a locale collation (PostgreSQL) can widen it.
   */
  async list(db: Executor, orgId: string, opts: { after: string | null; limit: number; prefix?: string | undefined; deleted: boolean; restorableAfter: string }): Promise<SecretRow[]> {
    let q = db.selectFrom('secrets').selectAll().where('org_id', '=', orgId);
    q = opts.deleted ? q.where('deleted_at', 'is not', null).where('deleted_at', '>=', opts.restorableAfter) : q.where('deleted_at', 'is', null);
    if (opts.prefix) q = q.where(sql<string>`substr(name, 1, ${opts.prefix.length})`, '=', opts.prefix);
    if (opts.after !== null) q = q.where('name', '>', opts.after);
    return q.orderBy('name', 'asc').limit(opts.limit + 1).execute();
  },

  /** The organization of the oldest deletion whose retention ended before `cutoff`, if any. */
  async orgWithExpired(db: Executor, cutoff: string): Promise<string | undefined> {
    const row = await db.selectFrom('secrets').select('org_id').where('deleted_at', 'is not', null).where('deleted_at', '<', cutoff).orderBy('deleted_at').limit(1).executeTakeFirst();
    return row?.org_id;
  },

  /** One organization's deleted secrets whose retention ended before `cutoff`, oldest first, locked for purging (see ReadOptions). */
  async findExpired(db: Executor, orgId: string, cutoff: string, limit: number, opts: ReadOptions): Promise<SecretRow[]> {
    let q = db.selectFrom('secrets').selectAll().where('org_id', '=', orgId).where('deleted_at', 'is not', null).where('deleted_at', '<', cutoff).orderBy('deleted_at').limit(limit);
    if (opts.lock) {
      await orgsRepo.holdForChange(db, orgId);
      q = q.forUpdate();
    }
    return q.execute();
  },

  async insertSecrets(db: Executor, rows: SecretRow[]): Promise<void> {
    await insertRows(db, 'secrets', rows);
  },

  async insertVersions(db: Executor, rows: SecretVersionRow[]): Promise<void> {
    await insertRows(db, 'secret_versions', rows);
  },

  /** Compare-and-set bumps, one statement per chunk (see bumpManyStatement); returns how many rows moved. */
  async bumpVersions(db: Executor, bumps: VersionBump[], at: string, by: string): Promise<number> {
    if (bumps.length === 1) {
      // The common case, one secret changed: SQL compiled once.
      const [{ id, expected, keys }] = bumps as [VersionBump];
      const [row] = await runPrepared(db, 'secrets.bumpOne', [keys, at, by, id, expected], () => db.updateTable('secrets')
        .set((eb) => ({ version: eb('version', '+', eb.lit(1)), keys, updated_at: at, updated_by: by }))
        .where('id', '=', id).where('version', '=', expected).returning('id'));
      return row === undefined ? 0 : 1;
    }
    let moved = 0;
    for (const part of chunks(bumps)) {
      const params = [at, by, ...part.flatMap((b) => [b.id, b.keys, b.expected])];
      const rows = await runPrepared(db, `secrets.bumpMany:${part.length}`, params, () => bumpManyStatement(db, part, at, by));
      moved += rows.length;
    }
    return moved;
  },

  /** Marks a live secret deleted (compare-and-set on its version); false when it moved meanwhile. */
  async markDeleted(db: Executor, id: string, version: number, at: string): Promise<boolean> {
    const result = await db.updateTable('secrets').set({ deleted_at: at }).where('id', '=', id).where('version', '=', version).where('deleted_at', 'is', null).executeTakeFirst();
    return Number(result.numUpdatedRows) === 1;
  },

  async markRestored(db: Executor, id: string, deletedAt: string): Promise<boolean> {
    const result = await db.updateTable('secrets').set({ deleted_at: null }).where('id', '=', id).where('deleted_at', '=', deletedAt).executeTakeFirst();
    return Number(result.numUpdatedRows) === 1;
  },

  /** Removes secrets and every version's ciphertext; the name is free again afterwards. */
  async destroy(db: Executor, ids: string[]): Promise<void> {
    for (const part of chunks(ids)) {
      await db.deleteFrom('secret_versions').where('secret_id', 'in', part).execute();
      await db.deleteFrom('secrets').where('id', 'in', part).execute();
    }
  },
};
