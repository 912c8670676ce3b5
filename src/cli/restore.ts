// `slipway restore --from FILE`: a backup (what `slipway backup` wrote) in place of a SQLite
// database. The copy is checked whole before anything is touched, the database is replaced only
// while no process has it open, in one rename, and the one replaced is kept beside it.
// PostgreSQL has pg_restore.
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { parse, Refusal, UsageError } from './args.js';
import { printFields, printJson } from './output.js';
import { RESTORE_USAGE, wantsHelp } from './usage.js';
import { ConfigError, type Config } from '../platform/config.js';
import type { Executor } from '../platform/db/database.js';
import { isDatabaseBusy, sqliteFile } from '../platform/db/facts.js';
import type { Schema } from '../platform/db/schema.js';
import type { SQLite as SQLiteTypes } from '../platform/db/sqlite-library.js';
import { copyToNewOwnerOnly, fsyncDir } from '../platform/owner-only-file.js';
import { runCopyJob } from './copy-job.js';
import { undoOnStop } from './stop-signals.js';

type SQLiteClass = typeof import('../platform/db/sqlite-library.js').SQLite;

/** What SQLite keeps beside a database: a log or journal there is taken for that database's own. */
const BESIDE = ['-wal', '-shm', '-journal'];

export async function restoreCommand(argv: string[], env: Record<string, string | undefined>): Promise<number> {
  if (wantsHelp(argv, RESTORE_USAGE)) return 0;
  const p = parse(argv, { from: { type: 'string' } }, env);
  const from = p.values.from;
  if (typeof from !== 'string' || from === '') throw new UsageError('--from FILE is required: the backup to restore (a file slipway backup wrote)');
  const config = p.config();
  const file = sqliteFile(config.databaseUrl, config.dataDir);
  if (file === null) throw new UsageError('restore replaces a SQLite database; restore PostgreSQL with its own tools (pg_restore, or your provider\'s snapshots)');
  const source = path.resolve(from);
  const given = fs.statSync(source, { throwIfNoEntry: false });
  if (given === undefined) throw new UsageError(`--from ${source}: no such file; give the file slipway backup wrote (nothing was written)`);
  if (!given.isFile()) throw new UsageError(`--from ${source} is not a file; give the file slipway backup wrote (nothing was written)`);
  const dir = path.dirname(file);
  if (!fs.existsSync(dir)) throw new UsageError(`the database's directory ${dir} does not exist: check --data-dir (SLIPWAY_DATA_DIR) and --database-url (SLIPWAY_DATABASE_URL), or make it first (nothing was written)`);
  const current = fs.statSync(file, { throwIfNoEntry: false });
  if (current !== undefined && current.dev === given.dev && current.ino === given.ino) throw new UsageError('--from is the database itself; give a backup of it (nothing was written)');
  // A link would be replaced, not what it names: the database would stay as it is, and a new one
  // would take the link's place in the data directory.
  if (fs.lstatSync(file, { throwIfNoEntry: false })?.isSymbolicLink() === true) {
    throw new Refusal('database_is_link', `${file} is a symbolic link (to ${fs.realpathSync(file)}): give that path as the database (--database-url, SLIPWAY_DATABASE_URL), or put the backup in place by hand; nothing was written`);
  }
  // Only the file is copied: changes still in a log beside it would be lost without a word.
  if ((fs.statSync(`${source}-wal`, { throwIfNoEntry: false })?.size ?? 0) > 0) {
    throw new Refusal('log_beside', `--from ${source} has a write-ahead log beside it (${source}-wal) holding changes the file itself lacks: take the copy with slipway backup, or fold the log in first (sqlite3 ${source} 'PRAGMA wal_checkpoint(TRUNCATE)'); nothing was written`);
  }

  const { SQLite } = await import('../platform/db/sqlite-library.js');
  // The copy is made beside the database, owner-only from its first byte, and checked there: what
  // is renamed into place is what was checked, and the backup itself is only read.
  const temp = `${file}.restore-${process.pid}-${randomUUID()}.tmp`;
  const removeTemp = () => { for (const f of [temp, ...BESIDE.map((s) => temp + s)]) fs.rmSync(f, { force: true }); };
  const release = undoOnStop(p.values.json === true, () => {
    removeTemp();
    return `the database is as it was (the part copied, ${temp}, is removed)`;
  });
  let checked: Checked;
  let kept: string | null;
  try {
    await runCopyJob({ kind: 'copy', source, target: temp });
    // Run as root (sudo) for a server that runs as its own user: the database stays that user's, or
    // the server could not open the restored one.
    if (process.getuid?.() === 0) {
      const owner = current ?? fs.statSync(dir);
      fs.chownSync(temp, owner.uid, owner.gid);
    }
    checked = await checkCopy(SQLite, temp, source, config);
    // On disk before it is named the database (SQLite rewrote its header when leaving WAL mode).
    const fd = fs.openSync(temp, 'r+');
    try {
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
    // One synchronous step, which no signal interrupts: the database is the old one or the new.
    kept = putInPlace(SQLite, temp, file);
  } catch (error) {
    removeTemp();
    throw error;
  } finally {
    release();
  }

  const result = { database: file, from: source, keptAside: kept, bytes: fs.statSync(file).size, check: checked.check, pendingMigrations: checked.pending };
  if (p.values.json) printJson(result);
  else {
    printFields({
      database: file,
      from: source,
      'kept aside': kept ?? '(there was no database)',
      bytes: result.bytes,
      check: checked.check,
      schema: checked.pending.length === 0 ? 'current' : `${checked.pending.length} migration(s) behind this version (${checked.pending.join(', ')})`,
    });
    if (checked.pending.length > 0) process.stdout.write('note: the copy was taken by an older Slipway and is restored as it is: the next slipway serve (or slipway migrate) brings its schema up to date\n');
    process.stdout.write('note: the instance is back at the copy\'s moment: deployments made since are gone, and runners follow the restored database (they stop what it does not have serving; see Backups in the README)\n');
    if (kept !== null) process.stdout.write(`note: the database replaced is kept in ${kept} (owner-only); remove it once the restored one serves as it should\n`);
  }
  return 0;
}

interface Checked {
  check: string;
  /** Migrations this version has that the copy lacks: the next serve or migrate applies them. */
  pending: string[];
}

/**
 * Refuses a copy that SQLite does not open whole, that is not Slipway's, that a newer Slipway
 * migrated (this one must not run on it), or whose rows are under a master key this configuration
 * lacks (no server would start on it): the checks serve makes, made before the database is touched.
 */
async function checkCopy(SQLite: SQLiteClass, temp: string, source: string, config: Config): Promise<Checked> {
  const { Kysely, SqliteDialect } = await import('kysely');
  const { schemaState } = await import('../platform/db/migrations/index.js');
  const sqlite = new SQLite(temp, { fileMustExist: true });
  const db = new Kysely<Schema>({ dialect: new SqliteDialect({ database: sqlite }) });
  try {
    let check: string;
    try {
      // A copy made with cp has a header asking for a write-ahead log; in rollback mode nothing
      // beside the file is taken for part of it once it is the database.
      sqlite.pragma('journal_mode = DELETE');
      check = String(sqlite.pragma('integrity_check', { simple: true }));
    } catch (error) {
      throw unreadable(source, error);
    }
    if (check !== 'ok') throw new Refusal('backup_corrupt', `--from ${source} fails SQLite's integrity check (${check.replace(/\s+/g, ' ')}): it is damaged; restore another backup (nothing was written)`);
    const state = await schemaState({ db, dialect: 'sqlite' });
    if (state.kind === 'absent') throw new Refusal('not_slipway', `--from ${source} holds no Slipway schema: give the file slipway backup wrote (nothing was written)`);
    if (state.kind === 'ahead') {
      throw new Refusal('schema_newer', `--from ${source} was migrated by a newer Slipway (it has ${state.unknown.length} migration(s) this version does not know: ${state.unknown.join(', ')}): restore it with that version or a later one, and serve with that; nothing was written`);
    }
    await refuseUnopenable(db, source, config);
    return { check, pending: state.kind === 'behind' ? state.pending : [] };
  } finally {
    await db.destroy();
    // Kysely closes only a connection it has used: not so when the checks stopped before it did.
    if (sqlite.open) sqlite.close();
  }
}

/** The copy's rows are wrapped under master keys this configuration does not hold (serve's refusal, as a refusal here). */
async function refuseUnopenable(db: Executor, source: string, config: Config): Promise<void> {
  const { keysRepo } = await import('../modules/keys/keys.repo.js');
  const { refuseUnheldMasterKeys } = await import('../modules/keys/held-keys.js');
  const { MissingKeyFileError, openKeyring } = await import('../platform/crypto/master-key.js');
  const needed = [...new Set((await keysRepo.usage(db)).map((u) => u.masterKeyId))];
  // Nothing wrapped: any key opens it. And no key file is made here, as openKeyring would without one.
  if (needed.length === 0) return;
  try {
    const ring = openKeyring({ envKey: config.masterKey, envPrevious: config.masterKeyPrevious, dataDir: config.dataDir, wrappedKeyIds: needed });
    await refuseUnheldMasterKeys(db, ring, source);
  } catch (error) {
    if (error instanceof MissingKeyFileError || error instanceof ConfigError) throw new Refusal('master_key_missing', error.message);
    throw error;
  }
}

function unreadable(source: string, error: unknown): unknown {
  const code = String((error as { code?: unknown }).code ?? '');
  if (code === 'SQLITE_NOTADB') return new Refusal('not_sqlite', `--from ${source} is not a SQLite database: give the file slipway backup wrote (nothing was written)`);
  if (code.startsWith('SQLITE_CORRUPT')) return new Refusal('backup_corrupt', `--from ${source} is damaged (SQLite: ${(error as Error).message}); restore another backup (nothing was written)`);
  return error;
}

/**
 * Renames `temp` over `file` while no other process has the database open, and returns where the
 * database it replaces is kept (null: there was none). The name `file` always holds a whole
 * database, the old one or the new: a server starting meanwhile never finds it missing (it would
 * make a new, empty instance there).
 */
function putInPlace(SQLite: SQLiteClass, temp: string, file: string): string | null {
  const dir = path.dirname(file);
  if (!fs.existsSync(file)) {
    refuseStale(file);
    try {
      // Never over a database that a server or `slipway migrate` started meanwhile.
      fs.linkSync(temp, file);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      throw new Refusal('database_in_use', `a database appeared at ${file} meanwhile (a server, or slipway migrate, started?): stop it, then run slipway restore again; nothing was written`);
    }
    fs.rmSync(temp);
    fsyncDir(dir);
    return null;
  }
  const held = holdAlone(SQLite, file);
  try {
    refuseStale(file);
    const kept = keepAside(file);
    fs.renameSync(temp, file);
    fsyncDir(dir);
    return kept;
  } finally {
    held.close();
  }
}

/**
 * Opens the database so that no other connection has it open, or refuses. Every Slipway process
 * opens it in WAL mode, where a connection keeps a shared lock on the file for as long as it is
 * open: leaving WAL mode needs every other one closed, and fails at once while a server, or another
 * command, has it open. Leaving it also folds the -wal into the file and removes the -wal and -shm.
 * The exclusive transaction then keeps a server that opens it meanwhile from reading it until the
 * swap is done; once renamed away, SQLite lets that server write nothing to it (it fails to start).
 */
function holdAlone(SQLite: SQLiteClass, file: string): SQLiteTypes.Database {
  const inUse = () => new Refusal('database_in_use', `the database ${file} is open in another process (a server, or another slipway command): stop every server on it, let the commands end, then run slipway restore again; nothing was written`);
  const db = new SQLite(file, { fileMustExist: true });
  try {
    db.pragma('busy_timeout = 0');
    if (String(db.pragma('journal_mode = DELETE', { simple: true })) !== 'delete') throw inUse();
    db.exec('BEGIN EXCLUSIVE');
    // Another process that opened it between the two may have put it back into WAL mode.
    if (String(db.pragma('journal_mode', { simple: true })) !== 'delete') throw inUse();
    return db;
  } catch (error) {
    db.close();
    if (isDatabaseBusy(error)) throw inUse();
    const code = String((error as { code?: unknown }).code ?? '');
    if (code === 'SQLITE_NOTADB' || code.startsWith('SQLITE_CORRUPT')) {
      throw new Refusal('database_unreadable', `SQLite cannot open the database ${file} (${(error as Error).message}), so whether a server has it open cannot be told: stop every server on it, move it aside yourself (with its -wal and -shm, if there), then run slipway restore again; nothing was written`);
    }
    throw error;
  }
}

/** A log or journal left beside the database's name would be taken for the restored database's. */
function refuseStale(file: string): void {
  const stale = BESIDE.map((s) => file + s).filter((f) => fs.existsSync(f));
  if (stale.length === 0) return;
  throw new Refusal('stale_files', `${stale.join(' and ')} ${stale.length === 1 ? 'is' : 'are'} beside ${file} with no process using ${stale.length === 1 ? 'it' : 'them'}: SQLite would take ${stale.length === 1 ? 'it' : 'them'} for the restored database's; move ${stale.length === 1 ? 'it' : 'them'} away, then run slipway restore again; nothing was written`);
}

/**
 * A second name for the database about to be replaced, saying when (a hard link: no copy of a large
 * file, and the name `file` never goes missing), owner-only. Never a name already taken.
 */
function keepAside(file: string): string {
  const stamp = new Date().toISOString().replace(/[-:]|\.\d+/g, '');
  for (let n = 1; ; n++) {
    const aside = `${file}.before-restore-${stamp}${n === 1 ? '' : `-${n}`}`;
    try {
      fs.linkSync(file, aside);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'EEXIST') continue;
      // A file system without hard links: a copy, which no process writes meanwhile (holdAlone).
      try {
        copyToNewOwnerOnly(file, aside);
      } catch (copyError) {
        if ((copyError as NodeJS.ErrnoException).code === 'EEXIST') continue;
        throw copyError;
      }
    }
    fs.chmodSync(aside, 0o600);
    return aside;
  }
}
