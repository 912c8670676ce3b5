// Opens the one database Slipway runs on: SQLite in the data directory by default, PostgreSQL
// when SLIPWAY_DATABASE_URL says postgres://. Both are reached through the same Kysely API.
import fs from 'node:fs';
import path from 'node:path';
import { CompiledQuery, Kysely, PostgresDialect, PostgresDriver, SqliteAdapter, sql, type Compilable, type RawBuilder, type DatabaseConnection, type Driver, type PostgresDialectConfig, type Transaction } from 'kysely';
import pg from 'pg';
import type { Schema } from './schema.js';
import { startCheckpointer } from './checkpointer.js';
import { SQLite } from './sqlite-library.js';
import { GroupCommitSqliteDialect, type GroupLimits } from './sqlite-driver.js';
import { isDatabaseUnreachable, sqliteFile } from './facts.js';
import { ConfigError } from '../config.js';

// What callers may need without loading a database driver (the CLI's first moments, say).
export { cannotConnect, isDatabaseBusy, isDatabaseUnreachable, isDatabaseUnwritable, isForeignKeyViolation, isOrganizationDeleted, isTransactionAborted, isUniqueViolation, sqliteFile } from './facts.js';

export type Dialect = 'sqlite' | 'postgres';
export type Db = Kysely<Schema>;
/** What repositories take: the database itself or a transaction on it. */
export type Executor = Kysely<Schema> | Transaction<Schema>;

export interface Database {
  readonly db: Db;
  readonly dialect: Dialect;
  /** The SQLite file, for the tests that read its raw bytes; null on PostgreSQL. */
  readonly file: string | null;
  /**
   * PostgreSQL: a statement without an answer within `ms` ends its connection, and fails as one
   * lost (a 503), instead of waiting for TCP to notice a network that went silent (many minutes).
   * Servers set it once migrated; null (the default: migrations, CLI rotations) waits as long as
   * it takes. SQLite has no network to lose: it ignores it.
   */
  setStatementDeadline(ms: number | null): void;
  /**
   * PostgreSQL: the statements running now, too, end their connection when they get no answer
   * within `ms` from now, and so does every later one (a server stopping, with no request left in
   * flight: its background work is not to hold the shutdown for a database that went silent).
   * SQLite: nothing to do.
   */
  endStatementsWithin(ms: number): void;
  /**
   * SQLite: `listener` runs when a group commit fails, undoing transactions that had already
   * ended well and whose writes later ones of the group may have read (and cached). PostgreSQL
   * never shows a transaction another's uncommitted writes: it never calls it.
   */
  onWritesLost(listener: () => void): void;
  /**
   * SQLite: a number that changes whenever another connection (another process, a CLI command)
   * has committed to the file since it was last asked; this connection's own commits leave it be.
   * A cache of what only changes through this process may be trusted while it stays the same.
   * PostgreSQL: null, nothing tells: every other node writes through its own connections.
   */
  writesElsewhere(): number | null;
  /**
   * SQLite: whether the file this process has open is still the one at its path. Once it has been
   * deleted or replaced, the process goes on reading and writing the file it has open, and what it
   * writes is lost when it ends. PostgreSQL: always true.
   */
  fileInPlace(): boolean;
  close(): Promise<void>;
}

/**
 * Kysely prepares every statement anew; preparing costs more than running a small query in
 * SQLite, so statements are kept per SQL text (the set is small: it is our own query shapes,
 * bounded here in case a caller builds many shapes, e.g. IN lists of every length).
 */
function withStatementCache(sqlite: SQLite.Database, max = 500): SQLite.Database {
  const cache = new Map<string, SQLite.Statement>();
  const prepare = sqlite.prepare.bind(sqlite);
  return new Proxy(sqlite, {
    get(target, prop) {
      if (prop === 'prepare') {
        return (source: string) => {
          let stmt = cache.get(source);
          if (stmt === undefined) {
            stmt = prepare(source);
            if (cache.size >= max) cache.delete(cache.keys().next().value!);
            cache.set(source, stmt);
          }
          return stmt;
        };
      }
      const value = Reflect.get(target, prop);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

/** Why a SQLite file cannot be used, said as what to change: the file system's code, or SQLite's. */
const UNWRITABLE = new Set(['EACCES', 'EPERM', 'EROFS', 'EEXIST', 'ENOTDIR', 'ENOENT', 'SQLITE_READONLY', 'SQLITE_CANTOPEN', 'SQLITE_READONLY_DIRECTORY']);

function unwritable(file: string, error: unknown): unknown {
  const code = String((error as { code?: unknown }).code ?? '');
  // Renamed away while this opened it, which SQLite then writes nothing to: `slipway restore` put
  // another database in its place.
  if (code === 'SQLITE_READONLY_DBMOVED') return new ConfigError(`the SQLite database ${file} was replaced while this opened it (by slipway restore?): start again, to open the one there now; nothing was written`);
  if (!UNWRITABLE.has(code)) return error;
  const dir = path.dirname(file);
  const why = code === 'EEXIST' || code === 'ENOTDIR' ? `${dir} is not a directory`
    // A path through a link to nowhere (a volume not mounted) cannot be made.
    : code === 'ENOENT' ? `${dir} cannot be made (a link in its path that leads nowhere?)`
    : `${dir} or the file is not writable by this user`;
  return new ConfigError(`cannot open the SQLite database ${file} for writing (${code}): ${why}; check --data-dir (SLIPWAY_DATA_DIR) and its permissions, or --database-url (SLIPWAY_DATABASE_URL)`);
}

function openSqlite(file: string, onCheckpointError: ((message: string | null) => void) | null, groupLimits: GroupLimits | undefined, synchronous: 'full' | 'normal'): Database {
  let sqlite: InstanceType<typeof SQLite>;
  try {
    fs.mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
    // Create the file owner-only before SQLite does; its -wal and -shm files inherit the mode.
    fs.closeSync(fs.openSync(file, 'a', 0o600));
    sqlite = new SQLite(file);
    // The first write: a database that is there but cannot be written is found here.
    sqlite.pragma('journal_mode = WAL');
  } catch (error) {
    throw unwritable(file, error);
  }
  // An answered write is on disk: the COMMIT syncs the write-ahead log (one sync per group commit).
  sqlite.pragma(`synchronous = ${synchronous === 'full' ? 'FULL' : 'NORMAL'}`);
  sqlite.pragma('busy_timeout = 10000');
  sqlite.pragma('foreign_keys = ON');
  // A deleted row is overwritten with zeros in the file, not left in a free page or cell: a value
  // destroyed (a permanent delete, a purge, an organization deleted) leaves no ciphertext behind to
  // open with a data key later (see scrub.ts for the write-ahead log).
  sqlite.pragma('secure_delete = ON');
  // Each transaction of a group commit runs in a savepoint, whose journal (the pages it changed, as
  // they were) SQLite keeps in a temporary file once it outgrows 64 KiB, and then writes every page
  // there with system calls of its own. In memory, a deployment's creation costs a fifth less; the
  // journal never outlives its transaction, so nothing durable is lost.
  sqlite.pragma('temp_store = MEMORY');
  // A server copies the log back in a worker thread; its own automatic checkpoint (inside a
  // COMMIT, on the event loop) is left only as a backstop should the worker fall behind.
  const checkpointer = onCheckpointError === null ? null : startCheckpointer(file, onCheckpointError);
  if (checkpointer !== null) sqlite.pragma(`wal_autocheckpoint = ${BACKSTOP_CHECKPOINT_PAGES}`);
  const lostListeners: Array<() => void> = [];
  const db = new Kysely<Schema>({ dialect: new GroupCommitSqliteDialect(withStatementCache(sqlite), groupLimits, () => { for (const l of lostListeners) l(); }) });
  const dataVersion = sqlite.prepare('PRAGMA data_version').pluck();
  const opened = fs.statSync(file);
  return {
    db,
    dialect: 'sqlite',
    file,
    setStatementDeadline: () => {},
    endStatementsWithin: () => {},
    onWritesLost: (listener) => { lostListeners.push(listener); },
    writesElsewhere: () => dataVersion.get() as number,
    fileInPlace: () => {
      try {
        const now = fs.statSync(file);
        return now.ino === opened.ino && now.dev === opened.dev;
      } catch {
        return false;
      }
    },
    close: async () => {
      await checkpointer?.stop();
      await db.destroy();
    },
  };
}

/**
 * A transaction that fails because its connection was lost is rolled back by Kysely on that same
 * connection, which fails too ("Client has encountered a connection error and is not queryable"),
 * and that second error took the first one's place: logs said the client was not queryable instead
 * of why (the server shutting down, the backend terminated). PostgreSQL has rolled the transaction
 * back itself then, and the first error is the one that goes on; the pool drops the client.
 */
class RollbackKeepsCause extends PostgresDriver {
  override async rollbackTransaction(connection: DatabaseConnection): Promise<void> {
    try {
      await super.rollbackTransaction(connection);
    } catch (error) {
      if (!isDatabaseUnreachable(error)) throw error;
    }
  }
}

class PostgresDialectKeepingCause extends PostgresDialect {
  readonly #config: PostgresDialectConfig;

  constructor(config: PostgresDialectConfig) {
    super(config);
    this.#config = config;
  }

  override createDriver(): Driver {
    return new RollbackKeepsCause(this.#config);
  }
}

// Timestamps come back as the same ISO strings SQLite holds, and counts as numbers.
pg.types.setTypeParser(pg.types.builtins.TIMESTAMPTZ, (value) => new Date(value).toISOString());
pg.types.setTypeParser(pg.types.builtins.INT8, (value) => Number(value));

function openPostgres(url: string, poolSize: number): Database {
  // A connection that cannot be had within 10 s (the server unreachable, or every connection busy
  // that long) fails the request with a 503 instead of holding it until the client gives up.
  // TCP keep-alive, so that a connection to a server that went away is found dead while idle too.
  const pool = new pg.Pool({ connectionString: url, max: poolSize, idleTimeoutMillis: 30_000, connectionTimeoutMillis: 10_000, keepAlive: true, keepAliveInitialDelayMillis: 10_000 });
  // An idle client losing its connection must not crash the process; the next query reconnects.
  pool.on('error', () => {});
  const deadline: StatementDeadline = { ms: null, running: new Set() };
  pool.on('connect', (client) => {
    // Nor one in use: pg-pool listens to idle clients only, and a client checked out between two
    // statements of a transaction when PostgreSQL restarts, or its backend is terminated, would
    // otherwise emit an 'error' nobody listens to, and end the process. Its statement fails (503)
    // and the pool drops it when it is released.
    client.on('error', () => {});
    watchStatements(client, deadline);
  });
  const db = new Kysely<Schema>({ dialect: new PostgresDialectKeepingCause({ pool }) });
  return {
    db,
    dialect: 'postgres',
    file: null,
    setStatementDeadline: (ms) => { deadline.ms = ms; },
    endStatementsWithin: (ms) => {
      deadline.ms = deadline.ms === null ? ms : Math.min(deadline.ms, ms);
      for (const client of deadline.running!) setTimeout(() => { if (deadline.running!.has(client)) endSilent(client, ms); }, ms).unref();
    },
    onWritesLost: () => {},
    writesElsewhere: () => null,
    fileInPlace: () => true,
    close: async () => {
      await db.destroy();
    },
  };
}

/**
 * Ends a client's connection when a statement gets no answer within the deadline: its statement
 * fails with "Connection terminated: …" (isDatabaseUnreachable), and the client, no longer
 * queryable, is dropped by the pool on release. pg's own query_timeout is no substitute: it
 * leaves the connection in use, where the late answer would be read as the next statement's.
 */
export interface StatementDeadline {
  ms: number | null;
  /** The clients with a statement under way (that the deadline watches), for endStatementsWithin. */
  running?: Set<pg.PoolClient | pg.Client>;
}

export function watchStatements(client: pg.PoolClient | pg.Client, deadline: StatementDeadline): void {
  const query = client.query.bind(client) as (...args: unknown[]) => unknown;
  (client as unknown as { query: (...args: unknown[]) => unknown }).query = (...args: unknown[]) => {
    const result = query(...args);
    const ms = deadline.ms;
    if (ms === null || !(result instanceof Promise)) return result;
    const timer = setTimeout(() => endSilent(client, ms), ms);
    deadline.running?.add(client);
    return result.finally(() => {
      clearTimeout(timer);
      deadline.running?.delete(client);
    });
  };
}

/** Ends the connection of a client whose statement got no answer within `ms`: the statement fails as one whose database is out of reach. */
function endSilent(client: pg.PoolClient | pg.Client, ms: number): void {
  socketOf(client)?.destroy(new Error(`Connection terminated: PostgreSQL did not answer within ${ms} ms`));
}

/** A pg client's socket (pg keeps it private), to end a connection that went silent. */
export function socketOf(client: pg.PoolClient | pg.Client): { destroy(error?: Error): void } | undefined {
  return (client as unknown as { connection?: { stream?: { destroy(error?: Error): void } } }).connection?.stream;
}

/** WAL pages (4 KiB each) after which a COMMIT checkpoints by itself when a worker does it normally. */
const BACKSTOP_CHECKPOINT_PAGES = 10_000;

export interface OpenOptions {
  databaseUrl: string | null;
  dataDir: string;
  poolSize?: number;
  /**
   * SQLite: checkpoint in a worker thread (long-running servers); called with the error when one
   * fails (once while they keep failing the same way), and with null once one works again.
   */
  onBackgroundCheckpointError?: (message: string | null) => void;
  /** SQLite: how many transactions, or how long, one group commit may hold. */
  groupLimits?: GroupLimits;
  /**
   * SQLite: `full` (the default) makes each COMMIT durable before it returns (the write-ahead log
   * is synced); `normal` syncs only at checkpoints, so a power cut or an OS crash (not a killed
   * process) can lose the last commits, answered or not.
   */
  sqliteSynchronous?: 'full' | 'normal';
}

export function openDatabase(options: OpenOptions): Database {
  const checkpoints = options.onBackgroundCheckpointError ?? null;
  const file = sqliteFile(options.databaseUrl, options.dataDir);
  if (file !== null) return openSqlite(file, checkpoints, options.groupLimits, options.sqliteSynchronous ?? 'full');
  return openPostgres(options.databaseUrl!, options.poolSize ?? 20);
}

/** Now, as stored: by the database's clock (platform/clock.ts). */
export { nowIso } from '../clock.js';

/**
 * Runs a query whose SQL is built once per kind of database and reused with new values. Kysely
 * compiles a query anew on every call, which on a hot path costs more than SQLite takes to answer
 * it. `build` is called only the first time; `params` are the values it binds, in order (checked
 * against that first compilation). The SQL is kept per dialect adapter, so a transaction reuses
 * what its database compiled.
 */
const prepared = new WeakMap<object, Map<string, string>>();

export async function runPrepared<Row>(db: Executor, name: string, params: readonly unknown[], build: () => Compilable<Row>): Promise<Row[]> {
  const adapter = db.getExecutor().adapter;
  let cache = prepared.get(adapter);
  if (cache === undefined) prepared.set(adapter, (cache = new Map()));
  let text = cache.get(name);
  if (text === undefined) {
    const compiled = build().compile();
    if (compiled.parameters.length !== params.length || compiled.parameters.some((value, i) => value !== params[i])) {
      throw new Error(`prepared query ${name}: its parameters are not the ones given`);
    }
    text = compiled.sql;
    cache.set(name, text);
  }
  return (await db.executeQuery<Row>(CompiledQuery.raw(text, params as unknown[]))).rows;
}

/**
 * Whether a text column holds `needle` (case-sensitive, anywhere): a search of JSON kept as text
 * for one quoted id, say, which the caller then reads exactly. SQLite's instr, PostgreSQL's strpos.
 */
export function textContains(dialect: Dialect, column: string, needle: string): RawBuilder<boolean> {
  return dialect === 'postgres' ? sql<boolean>`strpos(${sql.ref(column)}, ${needle}) > 0` : sql<boolean>`instr(${sql.ref(column)}, ${needle}) > 0`;
}

/** Rows per INSERT statement: well under SQLite's (32,766) and PostgreSQL's (65,535) bound-parameter limits. */
const INSERT_CHUNK = 500;

/**
 * Inserts many rows of one table, a few statements of up to INSERT_CHUNK rows each, their SQL
 * compiled once per shape. Every row must have the same columns in the same order.
 */
export async function insertRows<T extends keyof Schema & string>(db: Executor, table: T, rows: ReadonlyArray<Schema[T]>): Promise<void> {
  if (rows.length === 0) return;
  const columns = Object.keys(rows[0] as object);
  const sqlite = db.getExecutor().adapter instanceof SqliteAdapter;
  for (let i = 0; i < rows.length; i += INSERT_CHUNK) {
    // Values are read by column name, in the first row's column order (rows built in different
    // places may list their properties in another), straight into the statement's parameters.
    const part = rows.slice(i, i + INSERT_CHUNK) as ReadonlyArray<Record<string, unknown>>;
    const shared = sqlite ? sharedColumns(part, columns) : [];
    if (shared.length === 0 || shared.length === columns.length) {
      const params: unknown[] = [];
      for (const row of part) for (const column of columns) params.push(row[column]);
      // eslint-disable-next-line @typescript-eslint/no-explicit-any
      await runPrepared(db, `insert:${table}:${columns.join(',')}:${part.length}`, params, () => db.insertInto(table).values(part as any));
    } else {
      await insertSharing(db, table, columns, shared, part);
    }
  }
}

/** The columns that hold one value in every row (none for a single row). */
function sharedColumns(rows: ReadonlyArray<Record<string, unknown>>, columns: string[]): string[] {
  const first = rows[0]!;
  if (rows.length === 1) return [];
  return columns.filter((column) => {
    for (let row = 1; row < rows.length; row++) if (rows[row]![column] !== first[column]) return false;
    return true;
  });
}

/**
 * SQLite: the `shared` columns, which hold one value in every row (a batch's organization,
 * timestamp, actor…), are bound once: `insert … select s.column1, r.column1, … from (values
 * (shared…)) s, (values (the rest of each row), …) r`. better-sqlite3 converts and copies every
 * string it binds twice, which costs more than SQLite takes to store it: a thousand-row insert of
 * secrets, their versions or their events costs ~40% less this way. (PostgreSQL would need every
 * value of this form cast to its column's type; it keeps the plain form.)
 */
async function insertSharing(db: Executor, table: string, columns: string[], shared: string[], rows: ReadonlyArray<Record<string, unknown>>): Promise<void> {
  const own = columns.filter((column) => !shared.includes(column));
  const params = shared.map((column) => rows[0]![column]);
  for (const row of rows) for (const column of own) params.push(row[column]);
  await runPrepared(db, `insert:${table}:${columns.join(',')}:shared:${shared.join(',')}:${rows.length}`, params, () => {
    const select = columns.map((column) => sql.raw(shared.includes(column) ? `s.column${shared.indexOf(column) + 1}` : `r.column${own.indexOf(column) + 1}`));
    const tuples = rows.map((row) => sql`(${sql.join(own.map((column) => row[column]))})`);
    const insert = sql`insert into ${sql.table(table)} (${sql.join(columns.map((column) => sql.ref(column)))}) select ${sql.join(select)}
      from (values (${sql.join(params.slice(0, shared.length))})) as s, (values ${sql.join(tuples)}) as r`;
    return { compile: () => insert.compile(db) };
  });
}
