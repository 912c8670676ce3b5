// What a deletion that promises the values are gone does once it has committed, in the server: a
// permanent delete of a secret and the purge of deleted ones. Deleting a row leaves its bytes in the
// database's files until they are overwritten: SQLite runs with secure_delete, so the file itself is
// zeroed where a row was, but the pages as they were before stay in the write-ahead log until it is
// checkpointed and truncated; PostgreSQL keeps a deleted row in its table until VACUUM reuses the
// space. Copies in PostgreSQL's own write-ahead log, in its archives and in any backup are out of
// reach here (see README, Secrets). Only the server truncates: it holds the file's one long-lived
// connection, which a truncation by another process could catch in the middle of its writes.
import { sql, SqliteAdapter } from 'kysely';
import type { Db } from './database.js';

/**
 * Leaves no copy of the rows deleted so far from `tables` in the database's live files, as far as
 * the database allows: SQLite checkpoints its write-ahead log and truncates it (another process
 * reading the file at that moment can keep it from truncating: then the next scrub does);
 * PostgreSQL vacuums the tables. True when it did all of that.
 */
export async function scrubDeleted(db: Db, tables: readonly string[]): Promise<boolean> {
  if (db.getExecutor().adapter instanceof SqliteAdapter) {
    const { rows } = await sql<{ busy: number }>`pragma wal_checkpoint(TRUNCATE)`.execute(db);
    return rows[0]?.busy === 0;
  }
  // VACUUM runs outside a transaction, one table list per statement.
  await sql`vacuum ${sql.join(tables.map((t) => sql.table(t)))}`.execute(db);
  return true;
}
