// SQLite's one connection, shared by every request of the process, with group commit.
//
// A write transaction's cost on SQLite is mostly its COMMIT: each dirty page goes to the WAL with
// its own system calls, and the same index and table pages are dirtied by every small change. So
// transactions that arrive together run one after another inside one SQLite transaction, each in
// a savepoint of its own, and are committed together once no more are waiting (or the group is
// full, see GroupLimits). A transaction that fails rolls back to its savepoint and leaves the
// others alone. None is told it succeeded before the COMMIT that made it durable; if that COMMIT
// fails, every transaction of the group fails.
//
// A statement outside a transaction never runs inside an open group: the group is committed
// first, so a read never sees a change that might still fail.
import type SQLite from 'better-sqlite3';
import { CompiledQuery, SqliteAdapter, SqliteIntrospector, SqliteQueryCompiler, type DatabaseConnection, type Dialect, type Driver, type Kysely, type QueryResult } from 'kysely';

export interface GroupLimits {
  /** Transactions committed together at most (the write lock is held meanwhile, so latency grows with it). */
  maxTransactions: number;
  /** How long a group may stay open, in ms, before the next transaction's end commits it. */
  maxMs: number;
}

export const DEFAULT_GROUP_LIMITS: GroupLimits = { maxTransactions: 64, maxMs: 10 };

/** Who holds the connection, in arrival order: a FIFO hand-over, so nobody starves. */
class Mutex {
  #held = false;
  #waiting: Array<() => void> = [];

  get waiters(): number {
    return this.#waiting.length;
  }

  lock(): Promise<void> {
    if (!this.#held) {
      this.#held = true;
      return Promise.resolve();
    }
    return new Promise((resolve) => this.#waiting.push(resolve));
  }

  tryLock(): boolean {
    if (this.#held) return false;
    this.#held = true;
    return true;
  }

  unlock(): void {
    const next = this.#waiting.shift();
    if (next === undefined) this.#held = false;
    else next();
  }
}

interface Group {
  started: number;
  jobs: number;
  /** Transactions that released their savepoint and wait for the group's COMMIT. */
  waiting: Array<{ resolve: () => void; reject: (error: unknown) => void }>;
}

/** One hold of the connection, from acquireConnection to releaseConnection (Kysely passes it back to the driver). */
class Lease implements DatabaseConnection {
  /** Between beginTransaction and its commit or rollback. */
  inJob = false;
  /** The hold was given back early (a transaction's end) or normally. */
  released = false;

  constructor(readonly driver: GroupCommitSqliteDriver) {}

  executeQuery<R>(query: CompiledQuery): Promise<QueryResult<R>> {
    if (this.released) return Promise.reject(new Error('the SQLite connection was used after it was released'));
    try {
      if (!this.inJob) this.driver.commitGroup();
      return Promise.resolve(this.driver.run<R>(query));
    } catch (error) {
      return Promise.reject(error);
    }
  }

  // eslint-disable-next-line require-yield
  async *streamQuery<R>(): AsyncIterableIterator<QueryResult<R>> {
    throw new Error('streaming queries are not used with SQLite');
  }
}

export class GroupCommitSqliteDriver implements Driver {
  readonly #db: SQLite.Database;
  readonly #limits: GroupLimits;
  readonly #onGroupLost: () => void;
  readonly #mutex = new Mutex();
  #group: Group | null = null;
  #flushScheduled = false;

  constructor(db: SQLite.Database, limits: GroupLimits, onGroupLost: () => void = () => {}) {
    this.#db = db;
    this.#limits = limits;
    this.#onGroupLost = onGroupLost;
  }

  /** A group that holds as many transactions, or as long, as the limits allow is committed now. */
  #commitIfFull(): void {
    const group = this.#group;
    if (group !== null && (group.jobs >= this.#limits.maxTransactions || Date.now() - group.started >= this.#limits.maxMs)) this.commitGroup();
  }

  async init(): Promise<void> {}

  async acquireConnection(): Promise<DatabaseConnection> {
    await this.#mutex.lock();
    return new Lease(this);
  }

  async beginTransaction(connection: DatabaseConnection): Promise<void> {
    this.#commitIfFull();
    if (this.#group === null) {
      // IMMEDIATE: take the write lock now, waiting busy_timeout for another process to give it
      // up, rather than fail at once when a deferred transaction upgrades later.
      this.run(CompiledQuery.raw('begin immediate'));
      this.#group = { started: Date.now(), jobs: 0, waiting: [] };
    }
    this.run(CompiledQuery.raw('savepoint job'));
    (connection as Lease).inJob = true;
  }

  async commitTransaction(connection: DatabaseConnection): Promise<void> {
    const lease = connection as Lease;
    this.run(CompiledQuery.raw('release job'));
    lease.inJob = false;
    const group = this.#group!;
    group.jobs++;
    const durable = new Promise<void>((resolve, reject) => group.waiting.push({ resolve, reject }));
    this.#release(lease);
    await durable;
  }

  async rollbackTransaction(connection: DatabaseConnection): Promise<void> {
    const lease = connection as Lease;
    // Kysely rolls back after a failed commit too; by then this job has left the connection.
    if (lease.released) return;
    lease.inJob = false;
    if (this.#db.inTransaction) {
      this.run(CompiledQuery.raw('rollback to job'));
      this.run(CompiledQuery.raw('release job'));
    } else {
      // Some errors (I/O, a full disk) make SQLite roll back the whole transaction: every job
      // of the group is lost with it.
      this.#failGroup(new Error('SQLite rolled back the transaction after an error; retry'));
    }
    this.#release(lease);
  }

  async releaseConnection(connection: DatabaseConnection): Promise<void> {
    const lease = connection as Lease;
    if (!lease.released) this.#release(lease);
  }

  async destroy(): Promise<void> {
    // Whoever still holds the connection finishes first; then the last group is committed.
    await this.#mutex.lock();
    try {
      this.commitGroup();
    } finally {
      this.#db.close();
    }
  }

  run<R>(query: CompiledQuery): QueryResult<R> {
    const stmt = this.#db.prepare(query.sql);
    if (stmt.reader) return { rows: stmt.all(query.parameters) as R[] };
    const { changes, lastInsertRowid } = stmt.run(query.parameters);
    return { numAffectedRows: BigInt(changes), insertId: BigInt(lastInsertRowid), rows: [] };
  }

  /** Commits the open group and tells its transactions; the caller holds the connection. */
  commitGroup(): void {
    const group = this.#group;
    if (group === null) return;
    this.#group = null;
    try {
      this.run(CompiledQuery.raw('commit'));
    } catch (error) {
      this.#abandon(group, error);
      return;
    }
    for (const w of group.waiting) w.resolve();
  }

  #failGroup(error: unknown): void {
    const group = this.#group;
    if (group === null) return;
    this.#group = null;
    this.#abandon(group, error);
  }

  /** Rolls back what is left of a group's transaction and fails every transaction in it. */
  #abandon(group: Group, error: unknown): void {
    try {
      if (this.#db.inTransaction) this.#db.exec('rollback');
    } catch {
      // Nothing more can be done here; the group's transactions fail either way.
    }
    // What the group's transactions read of each other's writes (a row one of them inserted, that
    // the next one found) was never committed: whoever cached it must forget it.
    try {
      this.#onGroupLost();
    } catch {
      // A listener's failure must not keep the group's transactions from being told.
    }
    for (const w of group.waiting) w.reject(error);
  }

  /**
   * Gives the connection to the next in line. An open group stays open while transactions are
   * waiting for the connection (they join it); otherwise it is committed once a turn of the event
   * loop has taken in nothing more to join it (see #scheduleFlush).
   */
  #release(lease: Lease): void {
    lease.released = true;
    this.#commitIfFull();
    if (this.#group !== null && this.#mutex.waiters === 0) this.#scheduleFlush();
    this.#mutex.unlock();
  }

  /**
   * Commits the open group after the event loop's next turn, unless that turn brought more
   * transactions into it: then after the turn after that, and so on, within the group's limits. A
   * lone transaction waits one turn; under load, where each turn takes in requests that reached
   * the server meanwhile, a group gathers what is in flight and its COMMIT (every page its
   * transactions dirtied, written with system calls of its own) is shared by more of them.
   */
  #scheduleFlush(): void {
    if (this.#flushScheduled) return;
    this.#flushScheduled = true;
    const joined = this.#group?.jobs ?? 0;
    setImmediate(() => {
      this.#flushScheduled = false;
      const group = this.#group;
      if (group === null) return;
      if (group.jobs > joined && group.jobs < this.#limits.maxTransactions && Date.now() - group.started < this.#limits.maxMs) {
        this.#scheduleFlush();
        return;
      }
      // Someone holds the connection: their release commits or schedules again.
      if (!this.#mutex.tryLock()) return;
      try {
        this.commitGroup();
      } finally {
        this.#mutex.unlock();
      }
    });
  }
}

/**
 * SQLite runs DDL in transactions as it runs everything else; Kysely's adapter says it does not, and
 * its migrator then runs each statement on its own. Said as it is, the migrator runs every pending
 * migration, and its record of them, in one transaction: a start killed halfway through a migration
 * leaves the schema as it was, for the next start to migrate again.
 */
class TransactionalDdlSqliteAdapter extends SqliteAdapter {
  override get supportsTransactionalDdl(): boolean {
    return true;
  }
}

/** Kysely's SQLite dialect on the group-committing driver. */
export class GroupCommitSqliteDialect implements Dialect {
  constructor(
    private readonly database: SQLite.Database,
    private readonly limits: GroupLimits = DEFAULT_GROUP_LIMITS,
    private readonly onGroupLost: () => void = () => {},
  ) {}

  createDriver(): Driver {
    return new GroupCommitSqliteDriver(this.database, this.limits, this.onGroupLost);
  }

  createQueryCompiler() {
    return new SqliteQueryCompiler();
  }

  createAdapter() {
    return new TransactionalDdlSqliteAdapter();
  }

  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  createIntrospector(db: Kysely<any>) {
    return new SqliteIntrospector(db);
  }
}
