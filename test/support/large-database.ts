// A SQLite database made large, for what takes long on one: copying it, checking it.
import { SQLite } from '../../src/platform/db/sqlite-library.js';

/** Adds ~400 MB to the database at `file` (a table of its own), so that copying it takes a second or more. */
export function addBulk(file: string): void {
  const db = new SQLite(file, { fileMustExist: true });
  try {
    db.exec(`create table bulk (b blob);
      with recursive n(i) as (select 1 union all select i + 1 from n where i < 100000) insert into bulk select zeroblob(4000) from n`);
    db.pragma('wal_checkpoint(TRUNCATE)');
  } finally {
    db.close();
  }
}
