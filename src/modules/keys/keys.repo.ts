// Every row that holds something wrapped under the master key, seen through one shape so that a
// rotation treats them alike. Adding a table that stores master-key-wrapped data means adding it
// here, or a rotation would leave it under a key that is about to be removed.
import { sql, type Kysely, type Transaction } from 'kysely';
import type { Dialect, Executor } from '../../platform/db/database.js';
import { signingKeyBinding } from '../auth/signing-keys.js';
import { instanceKeyBinding } from '../instance/instance.service.js';
import { dataKeyBinding } from '../secrets/data-keys.js';

export interface WrappedRow {
  table: WrappedTable;
  id: string;
  sealed: Buffer;
  masterKeyId: string;
  /** The associated data it was wrapped with; re-wrapping keeps it. */
  binding: string;
}

type Row = Record<string, unknown>;

/** Primary key, sealed column and wrap binding of each table; the bindings are the ones its writer uses. */
const WRAPPED = {
  org_data_keys: { id: 'id', sealed: 'wrapped', binding: (r: Row) => dataKeyBinding(String(r.org_id), String(r.id)) },
  signing_keys: { id: 'kid', sealed: 'private_sealed', binding: (r: Row) => signingKeyBinding(String(r.kid)) },
  instance_keys: { id: 'name', sealed: 'sealed', binding: (r: Row) => instanceKeyBinding(String(r.name)) },
} as const;

export type WrappedTable = keyof typeof WRAPPED;
export const WRAPPED_TABLES = Object.keys(WRAPPED) as WrappedTable[];

// The three tables differ only in column names, which the typed builder cannot take as values.
const loose = (db: Executor) => db as unknown as Kysely<any> | Transaction<any>;

function toWrappedRow(table: WrappedTable, r: Row): WrappedRow {
  const spec = WRAPPED[table];
  return { table, id: String(r[spec.id]), sealed: r[spec.sealed] as Buffer, masterKeyId: String(r.master_key_id), binding: spec.binding(r) };
}

export interface KeyUsage {
  table: WrappedTable;
  masterKeyId: string;
  rows: number;
}

export const keysRepo = {
  /** How many rows of each table each master key wraps. */
  async usage(db: Executor): Promise<KeyUsage[]> {
    const out: KeyUsage[] = [];
    for (const table of WRAPPED_TABLES) {
      const rows = await loose(db).selectFrom(table)
        .select(['master_key_id', (eb) => eb.fn.countAll<number>().as('n')])
        .groupBy('master_key_id').orderBy('master_key_id').execute();
      out.push(...rows.map((r) => ({ table, masterKeyId: String(r.master_key_id), rows: Number(r.n) })));
    }
    return out;
  },

  async countNotUnder(db: Executor, masterKeyId: string): Promise<number> {
    let total = 0;
    for (const table of WRAPPED_TABLES) {
      const row = await loose(db).selectFrom(table).select((eb) => eb.fn.countAll<number>().as('n'))
        .where('master_key_id', '<>', masterKeyId).executeTakeFirstOrThrow();
      total += Number(row.n);
    }
    return total;
  },

  /** The next rows of one table still wrapped under another key than `masterKeyId`. */
  async notUnder(db: Executor, table: WrappedTable, masterKeyId: string, limit: number): Promise<WrappedRow[]> {
    const rows = await loose(db).selectFrom(table).selectAll()
      .where('master_key_id', '<>', masterKeyId).orderBy(WRAPPED[table].id).limit(limit).execute() as Row[];
    return rows.map((r) => toWrappedRow(table, r));
  },

  /** Every wrapped row of one table (for checks; a rotation works in batches). */
  async list(db: Executor, table: WrappedTable): Promise<WrappedRow[]> {
    const rows = await loose(db).selectFrom(table).selectAll().orderBy(WRAPPED[table].id).execute() as Row[];
    return rows.map((r) => toWrappedRow(table, r));
  },

  /** Compare-and-set: only if the row is still wrapped as it was read. */
  async replaceSealed(db: Executor, row: WrappedRow, sealed: Buffer, masterKeyId: string): Promise<boolean> {
    const spec = WRAPPED[row.table];
    const result = await loose(db).updateTable(row.table).set({ [spec.sealed]: sealed, master_key_id: masterKeyId })
      .where(spec.id, '=', row.id).where('master_key_id', '=', row.masterKeyId).executeTakeFirst();
    return Number(result.numUpdatedRows) === 1;
  },

  /**
   * Inside a transaction: waits for every transaction that has written one of these tables to
   * commit, and keeps new writers out until this one ends. SQLite's write transaction (BEGIN
   * IMMEDIATE) is already that; PostgreSQL needs a SHARE lock, which conflicts with the ROW
   * EXCLUSIVE lock every INSERT and UPDATE takes.
   */
  async fence(trx: Executor, dialect: Dialect): Promise<void> {
    if (dialect === 'postgres') await sql`lock table ${sql.join(WRAPPED_TABLES.map((t) => sql.table(t)))} in share mode`.execute(trx);
  },
};
