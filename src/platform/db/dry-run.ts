// A dry run (`?dryRun=true`): the change is made in its transaction, with every check, constraint
// and lock a real one meets, and then rolled back. The caller gets the answer the change would have
// had (what it would make, or the problem that refuses it) and nothing is written: no version, no
// event, no webhook delivery.
import { SqliteAdapter, type Transaction } from 'kysely';
import type { Db } from './database.js';
import type { Schema } from './schema.js';

/** Carries a dry run's answer out of its transaction, which throwing it rolls back. */
class RolledBack<T> {
  constructor(readonly answer: T) {}
}

/**
 * `work` in a transaction, committed, or (`dryRun`) rolled back once it has its answer. On SQLite a
 * transaction runs in a group that commits together (sqlite-driver.ts), and reads what the group's
 * others wrote before they are durable: a dry run answers once they are, by a transaction of
 * nothing that joins the group and waits for its COMMIT, so that it never answers from writes the
 * group then loses (it fails as they do, and is tried again).
 */
export async function transaction<T>(db: Db, dryRun: boolean, work: (trx: Transaction<Schema>) => Promise<T>): Promise<T> {
  if (!dryRun) return db.transaction().execute(work);
  let answer: T;
  try {
    await db.transaction().execute(async (trx) => {
      throw new RolledBack(await work(trx));
    });
    throw new Error('unreachable: a dry run always rolls back');
  } catch (error) {
    if (!(error instanceof RolledBack)) throw error;
    answer = error.answer as T;
  }
  if (db.getExecutor().adapter instanceof SqliteAdapter) await db.transaction().execute(async () => {});
  return answer;
}
