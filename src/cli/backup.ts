// `slipway backup --to FILE`: a consistent copy of a SQLite database, taken while servers keep
// serving, with SQLite's VACUUM INTO. Copying slipway.db (and its -wal) with cp while a server
// writes gives a file that may open and yet be corrupt. PostgreSQL has pg_dump.
import fs from 'node:fs';
import path from 'node:path';
import { parse, UsageError } from './args.js';
import { assertDatabaseExists } from './commands.js';
import { runCopyJob } from './copy-job.js';
import { printFields, printJson } from './output.js';
import { undoOnStop } from './stop-signals.js';
import { BACKUP_USAGE, wantsHelp } from './usage.js';
import { sqliteFile } from '../platform/db/facts.js';
import { MIGRATIONS } from '../platform/db/migrations/index.js';
import { createOwnerOnly, fsyncDir } from '../platform/owner-only-file.js';
import { ConfigError } from '../platform/config.js';

/**
 * A file without Slipway's migrations (a mistyped path, another program's database) is refused,
 * as every command but serve and migrate refuses it. One migrated by an older or a newer Slipway is
 * copied: a backup before an upgrade, or before going back, is what it is for.
 */
function assertSlipwaySchema(source: { prepare(sql: string): { all(): unknown[] } }, file: string): void {
  let names: string[] = [];
  try {
    names = (source.prepare('select name from kysely_migration').all() as Array<{ name: string }>).map((r) => r.name);
  } catch {
    // No such table: not Slipway's.
  }
  if (!names.some((name) => MIGRATIONS.some((m) => m.name === name))) {
    throw new ConfigError(`the database ${file} holds no Slipway schema: check --database-url (SLIPWAY_DATABASE_URL) and --data-dir (SLIPWAY_DATA_DIR); nothing was written`);
  }
}

export async function backupCommand(argv: string[], env: Record<string, string | undefined>): Promise<number> {
  if (wantsHelp(argv, BACKUP_USAGE)) return 0;
  const p = parse(argv, { to: { type: 'string' } }, env);
  const to = p.values.to;
  if (typeof to !== 'string' || to === '') throw new UsageError('--to FILE is required: where the copy goes (a new file)');
  const config = p.config();
  const file = sqliteFile(config.databaseUrl, config.dataDir);
  if (file === null) throw new UsageError('backup copies a SQLite database; back PostgreSQL up with its own tools (pg_dump, or your provider\'s snapshots)');
  assertDatabaseExists(config);
  const target = path.resolve(to);
  // lstat: a link, even to nothing, is there already too (the copy is never written through one).
  if (fs.lstatSync(target, { throwIfNoEntry: false }) !== undefined) throw new UsageError(`--to ${target} exists already${fs.existsSync(target) ? '' : ' (a link to nothing)'}; give a new file (nothing was written)`);
  if (target === path.resolve(file)) throw new UsageError('--to must not be the database itself');
  if (!fs.existsSync(path.dirname(target))) throw new UsageError(`--to ${target}: the directory ${path.dirname(target)} does not exist; make it first (nothing was written)`);

  const { SQLite } = await import('../platform/db/sqlite-library.js');
  const source = new SQLite(file, { fileMustExist: true });
  try {
    source.pragma('busy_timeout = 10000');
    assertSlipwaySchema(source, file);
  } finally {
    source.close();
  }
  // Written under another name, and given the one asked for only once whole and checked: a copy
  // stopped halfway (a signal, a full disk, a crash) never passes for a backup. Owner-only from its
  // first byte (SQLite gives its journal the same mode): the copy holds what the database does.
  const partial = `${target}.${process.pid}.partial`;
  const removePartial = () => { for (const f of [partial, `${partial}-journal`]) fs.rmSync(f, { force: true }); };
  const release = undoOnStop(p.values.json === true, () => {
    removePartial();
    return `no backup was written (the part copied, ${partial}, is removed)`;
  });
  let check: string;
  try {
    createOwnerOnly(partial, '');
    check = (await runCopyJob({ kind: 'vacuum', source: file, target: partial }))!;
    if (check !== 'ok') throw new Error(`the copy failed SQLite's check (${check}); nothing was kept: run the backup again`);
    putInPlace(partial, target);
  } finally {
    release();
    removePartial();
  }
  const result = { file: target, bytes: fs.statSync(target).size, check };
  if (p.values.json) printJson(result);
  else {
    printFields(result);
    process.stdout.write('note: the copy is readable only with the master key (master.key in the data directory, or SLIPWAY_MASTER_KEY): keep that too, apart from it\n');
  }
  return 0;
}

/** Gives the checked copy its name, never over a file that appeared there meanwhile. */
function putInPlace(partial: string, target: string): void {
  try {
    fs.linkSync(partial, target);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'EEXIST') throw new UsageError(`--to ${target} appeared while the copy was made; give a new file (nothing was written)`);
    // A file system without hard links: a rename, over nothing as far as can be told.
    if (code !== 'EPERM' && code !== 'ENOTSUP' && code !== 'EXDEV') throw error;
    if (fs.lstatSync(target, { throwIfNoEntry: false }) !== undefined) throw new UsageError(`--to ${target} appeared while the copy was made; give a new file (nothing was written)`);
    fs.renameSync(partial, target);
  }
  fsyncDir(path.dirname(target));
}
