// A dry run (`?dryRun=true`): the change is made in its transaction, with every check, constraint
// and lock a real one meets, and then rolled back. The caller gets the answer the change would have
// had (what it would make, or the problem that refuses it) and nothing is written: no version, no
// event, no webhook delivery.
import type { Transaction } from 'kysely';
import type { Db } from './database.js';
import type { Schema } from './schema.js';

/** Carries a dry run's answer out of its transaction, which throwing it rolls back. */
class RolledBack<T> {
  constructor(readonly answer: T) {}
}

/** `work` in a transaction, committed, or (`dryRun`) rolled back once it has its answer. */
export async function transaction<T>(db: Db, dryRun: boolean, work: (trx: Transaction<Schema>) => Promise<T>): Promise<T> {
  if (!dryRun) return db.transaction().execute(work);
  try {
    await db.transaction().execute(async (trx) => {
      throw new RolledBack(await work(trx));
    });
  } catch (error) {
    if (error instanceof RolledBack) return error.answer as T;
    throw error;
  }
  throw new Error('unreachable: a dry run always rolls back');
}
