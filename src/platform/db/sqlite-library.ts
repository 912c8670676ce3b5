// better-sqlite3 in the version that works on the Node.js running: 12 is the last line that runs on
// Node 20 (built from source at install), but on Node 24 it can crash the process when the garbage
// collector finalizes a statement; 13 (Node-API, shipped prebuilt) fixes that and needs Node 22.
// Both are installed (13 under the alias `better-sqlite3-13`, optional), and the API is the same.
import { createRequire } from 'node:module';
import type BetterSqlite3 from 'better-sqlite3';

const require = createRequire(import.meta.url);
const NODE_MAJOR = Number(process.versions.node.split('.')[0]);

function load(): typeof BetterSqlite3 {
  if (NODE_MAJOR >= 22) {
    try {
      return require('better-sqlite3-13') as typeof BetterSqlite3;
    } catch (error) {
      // Not installed (an optional dependency): 12 still runs on Node 22.
      if ((error as NodeJS.ErrnoException).code !== 'MODULE_NOT_FOUND') throw error;
    }
  }
  return require('better-sqlite3') as typeof BetterSqlite3;
}

/** The better-sqlite3 `Database` class (and, as types, its namespace: `SQLite.Database`, `SQLite.Statement`). */
export const SQLite = load();
// eslint-disable-next-line @typescript-eslint/no-namespace
export declare namespace SQLite {
  type Database = BetterSqlite3.Database;
  type Statement<P extends unknown[] | object = unknown[], R = unknown> = BetterSqlite3.Statement<P, R>;
  type Options = BetterSqlite3.Options;
}
