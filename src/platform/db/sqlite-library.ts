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
      const newer = require('better-sqlite3-13') as typeof BetterSqlite3;
      // 13 loads its prebuilt binary only when a database is opened: one that is missing for this
      // platform shows here, not at require.
      new newer(':memory:').close();
      return newer;
    } catch (error) {
      // Not installed (an optional dependency), or no binary for this platform: 12, built at
      // install, still runs on Node 22; on Node 24 it is the one that can crash.
      if (NODE_MAJOR >= 24) {
        process.emitWarning(`better-sqlite3 13 cannot be used here (${(error as Error).message}); falling back to 12, which can crash Node ${NODE_MAJOR}`);
      }
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
