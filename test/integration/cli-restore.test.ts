// `slipway restore --from FILE` with `slipway serve` as real child processes: a backup restored
// takes the instance back to the copy's moment, the database it replaces kept aside and openable;
// a copy an older Slipway took is restored as it is, for the next migrate. Every refusal leaves the
// data directory as it was: a server still running on the database, a file that is not a backup, a
// damaged one, one a newer Slipway migrated, one under a master key not configured.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { Migrator } from 'kysely';
import { masterKeyId, readKeyFile } from '../../src/platform/crypto/master-key.js';
import { openDatabase } from '../../src/platform/db/database.js';
import { MIGRATIONS } from '../../src/platform/db/migrations/index.js';
import { columnTypes } from '../../src/platform/db/migrations/types.js';
import { SQLite } from '../../src/platform/db/sqlite-library.js';
import { clientCredentialsGrant, freePort, httpClient, tempDir, testDatabase, TEST_DB, type Credentials, type HttpClient } from '../support/harness.js';
import { addBulk } from '../support/large-database.js';
import { runCli, spawnServe, type ServeProcess } from '../support/processes.js';

const SQLITE_ONLY = TEST_DB === 'sqlite' ? false : 'SQLite only';

describe('slipway restore', () => {
  const dirs: string[] = [];
  const running: ServeProcess[] = [];
  after(async () => {
    for (const proc of running) if (proc.child.exitCode === null && proc.child.signalCode === null) proc.child.kill('SIGKILL');
    await Promise.all(running.map((p) => p.exited));
    for (const dir of dirs) fs.rmSync(dir, { recursive: true, force: true });
  });
  const newDir = () => { const dir = tempDir('slipway-restore-'); dirs.push(dir); return dir; };

  /** `slipway serve` on `env`, once it listens, with an HTTP client of the bootstrap owner. */
  async function serve(env: Record<string, string>): Promise<{ proc: ServeProcess; http: HttpClient }> {
    const proc = spawnServe([], env);
    running.push(proc);
    await proc.waitForLog((line) => line.msg === 'slipway listening', 'that it listens');
    const boot = JSON.parse(fs.readFileSync(path.join(env.SLIPWAY_DATA_DIR!, 'bootstrap.json'), 'utf8')) as Credentials & { baseUrl: string };
    const res = await clientCredentialsGrant(boot.tokenUrl, boot, boot.scope);
    const body = (await res.json()) as { access_token: string };
    assert.equal(res.status, 200, JSON.stringify(body));
    return { proc, http: httpClient(boot.baseUrl, body.access_token) };
  }
  async function stop(proc: ServeProcess): Promise<void> {
    proc.child.kill('SIGTERM');
    assert.deepEqual(await proc.exited, { code: 0, signal: null }, proc.output.join('\n'));
  }
  /** Every file in `dir` and a hash of its bytes: what "nothing was written" is checked against. */
  const contents = (dir: string) => Object.fromEntries(fs.readdirSync(dir).sort().map((f) => [f, createHash('sha256').update(fs.readFileSync(path.join(dir, f))).digest('hex')]));

  it('refuses PostgreSQL, naming its own tools', { skip: TEST_DB === 'postgres' ? false : 'PostgreSQL only' }, async () => {
    const database = await testDatabase();
    const dir = newDir();
    try {
      const refused = await runCli(['restore', '--from', path.join(dir, 'copy.db')], { SLIPWAY_DATA_DIR: dir, SLIPWAY_DATABASE_URL: database.url! });
      assert.equal(refused.code, 2, refused.stderr);
      assert.equal(refused.stderr, 'slipway: restore replaces a SQLite database; restore PostgreSQL with its own tools (pg_restore, or your provider\'s snapshots)\n');
      assert.deepEqual(fs.readdirSync(dir), []);
    } finally {
      await database.drop();
    }
  });

  it('takes the instance back to the copy, keeping the database it replaces, and refuses while a server runs on it', { skip: SQLITE_ONLY }, async () => {
    const dir = newDir();
    const env = { SLIPWAY_DATA_DIR: dir, SLIPWAY_PORT: String(await freePort()), SLIPWAY_LOG_LEVEL: 'info' };
    const database = path.join(dir, 'slipway.db');
    const first = await serve(env);
    assert.equal((await first.http.post('/v1/orgs/default/secrets', { secrets: [{ name: 'kept', values: { K: 'before-backup' } }] })).status, 201);
    const backup = path.join(newDir(), 'slipway.db');
    const backedUp = await runCli(['backup', '--to', backup], env);
    assert.equal(backedUp.code, 0, backedUp.stderr);
    // What happens after the copy: a new version of one secret, a new secret.
    assert.equal((await first.http.put('/v1/orgs/default/secrets/kept', { values: { K: 'after-backup' } })).status, 200);
    assert.equal((await first.http.post('/v1/orgs/default/secrets', { secrets: [{ name: 'made-after', values: { K: 'x' } }] })).status, 201);

    // A server has the database open: refused, and the server goes on with it as it was.
    const files = fs.readdirSync(dir).sort();
    const busy = await runCli(['restore', '--from', backup], env);
    assert.equal(busy.code, 1, busy.stderr);
    assert.equal(busy.stdout, '');
    assert.equal(busy.stderr, `slipway: the database ${database} is open in another process (a server, or another slipway command): stop every server on it, let the commands end, then run slipway restore again; nothing was written\n`);
    assert.deepEqual(fs.readdirSync(dir).sort(), files);
    assert.deepEqual((await first.http.post('/v1/orgs/default/secrets/kept/reveal', {})).body.values, { K: 'after-backup' });
    assert.equal((await first.http.get('/v1/orgs/default/secrets/made-after')).status, 200);
    const busyJson = await runCli(['restore', '--from', backup, '--json'], env);
    assert.equal(busyJson.code, 1);
    assert.equal(JSON.parse(busyJson.stderr).error.code, 'database_in_use');
    await stop(first.proc);

    const restored = await runCli(['restore', '--from', backup], env);
    assert.equal(restored.code, 0, restored.stderr);
    const kept = /^kept aside +(\S+)$/m.exec(restored.stdout)?.[1];
    assert.ok(kept !== undefined, restored.stdout);
    assert.match(path.basename(kept), /^slipway\.db\.before-restore-\d{8}T\d{6}Z$/);
    assert.match(restored.stdout, new RegExp(`^database +${database}\n`));
    assert.match(restored.stdout, /^check +ok$/m);
    assert.match(restored.stdout, /^schema +current$/m);
    assert.match(restored.stdout, /^note: .*deployments made since are gone, and runners follow the restored database/m);
    assert.match(restored.stdout, new RegExp(`^note: the database replaced is kept in ${kept} `, 'm'));
    // In place alone: no log or index of the database replaced beside it, no temporary file.
    assert.deepEqual(fs.readdirSync(dir).sort(), ['bootstrap.json', 'master.key', 'slipway.db', path.basename(kept)]);
    for (const file of [database, kept]) assert.equal(fs.statSync(file).mode & 0o777, 0o600, file);
    // The database replaced opens whole, with what was written after the copy.
    const aside = new SQLite(kept, { readonly: true, fileMustExist: true });
    try {
      assert.equal(aside.pragma('quick_check', { simple: true }), 'ok');
      assert.ok(aside.prepare('select name from secrets where name = ?').get('made-after'), 'the secret made after the copy is in the database kept aside');
    } finally {
      aside.close();
    }

    // Again, with --json: the database kept aside before is left as it is, under its own name.
    const keptBytes = contents(dir)[path.basename(kept)];
    const again = await runCli(['restore', '--from', backup, '--json'], env);
    assert.equal(again.code, 0, again.stderr);
    const printed = JSON.parse(again.stdout) as { database: string; from: string; keptAside: string; check: string; pendingMigrations: string[] };
    assert.deepEqual([printed.database, printed.from, printed.check, printed.pendingMigrations], [database, backup, 'ok', []]);
    assert.notEqual(printed.keptAside, kept);
    assert.equal(contents(dir)[path.basename(kept)], keptBytes);

    // The server started on it serves what the copy held.
    const second = await serve(env);
    assert.deepEqual((await second.http.post('/v1/orgs/default/secrets/kept/reveal', {})).body.values, { K: 'before-backup' });
    assert.equal((await second.http.get('/v1/orgs/default/secrets/made-after')).status, 404);
    await stop(second.proc);
  });

  it('refuses, writing nothing, a file that is not a backup, a damaged one, one a newer Slipway migrated, and one under a master key not configured', { skip: SQLITE_ONLY }, async () => {
    const dir = newDir();
    const env = { SLIPWAY_DATA_DIR: dir };
    assert.equal((await runCli(['migrate'], env)).code, 0);
    const files = newDir();
    const good = path.join(files, 'good.db');
    assert.equal((await runCli(['backup', '--to', good], env)).code, 0);

    const notSqlite = path.join(files, 'notes.txt');
    fs.writeFileSync(notSqlite, 'not a database\n'.repeat(100));
    const notSlipway = path.join(files, 'other.db');
    const other = new SQLite(notSlipway);
    other.exec('create table notes (body text)');
    other.close();
    // The root page of a table overwritten: SQLite opens the file, and its check fails.
    const damaged = path.join(files, 'damaged.db');
    fs.copyFileSync(good, damaged);
    const copy = new SQLite(damaged, { readonly: true });
    const { rootpage } = copy.prepare('select rootpage from sqlite_master where name = ?').get('secrets') as { rootpage: number };
    const pageSize = copy.pragma('page_size', { simple: true }) as number;
    copy.close();
    const fd = fs.openSync(damaged, 'r+');
    fs.writeSync(fd, Buffer.alloc(16, 0xff), 0, 16, (rootpage - 1) * pageSize);
    fs.closeSync(fd);
    const newer = path.join(files, 'newer.db');
    fs.copyFileSync(good, newer);
    const future = new SQLite(newer);
    future.prepare('insert into kysely_migration (name, timestamp) values (?, ?)').run('9999-from-the-future', new Date().toISOString());
    future.close();
    // Another instance's backup: its rows are under its own master key.
    const otherDir = newDir();
    assert.equal((await runCli(['migrate'], { SLIPWAY_DATA_DIR: otherDir })).code, 0);
    const foreign = path.join(files, 'foreign.db');
    assert.equal((await runCli(['backup', '--to', foreign], { SLIPWAY_DATA_DIR: otherDir })).code, 0);
    const foreignKey = fs.readFileSync(path.join(otherDir, 'master.key'), 'utf8').trim();
    const foreignId = masterKeyId(readKeyFile(path.join(otherDir, 'master.key'))[0]!);
    // A copy whose changes are still in its log, held open here.
    const logged = path.join(files, 'logged.db');
    fs.copyFileSync(good, logged);
    const writer = new SQLite(logged);
    writer.pragma('journal_mode = WAL');
    writer.pragma('wal_autocheckpoint = 0');
    writer.exec('create table written_after (x integer)');

    const keyFile = path.join(dir, 'master.key');
    const cases: Array<[string, number, string, RegExp]> = [
      [path.join(files, 'missing.db'), 2, 'usage', /--from .*missing\.db: no such file; give the file slipway backup wrote \(nothing was written\)$/],
      [files, 2, 'usage', /--from .* is not a file/],
      [path.join(dir, 'slipway.db'), 2, 'usage', /^--from is the database itself/],
      [notSqlite, 1, 'not_sqlite', /^--from .*notes\.txt is not a SQLite database: give the file slipway backup wrote \(nothing was written\)$/],
      [notSlipway, 1, 'not_slipway', /^--from .*other\.db holds no Slipway schema: give the file slipway backup wrote \(nothing was written\)$/],
      [damaged, 1, 'backup_corrupt', /^--from .*damaged\.db (fails SQLite's integrity check|is damaged).*restore another backup \(nothing was written\)$/],
      [newer, 1, 'schema_newer', /^--from .*newer\.db was migrated by a newer Slipway \(it has 1 migration\(s\) this version does not know: 9999-from-the-future\): restore it with that version or a later one/],
      [foreign, 1, 'master_key_missing', new RegExp(`^the copy .*foreign\\.db holds data wrapped under master key ${foreignId}, which ${keyFile} does not hold: add that key as a line of ${keyFile} \\(at its end: the first key is the one that wraps\\), or set SLIPWAY_MASTER_KEY .*; nothing was written$`)],
      [logged, 1, 'log_beside', /^--from .*logged\.db has a write-ahead log beside it/],
    ];
    const before = contents(dir);
    for (const [from, code, errorCode, message] of cases) {
      const source = fs.statSync(from, { throwIfNoEntry: false })?.isFile() === true ? contents(path.dirname(from))[path.basename(from)] : undefined;
      const refused = await runCli(['restore', '--from', from], env);
      assert.equal(refused.code, code, `${from}: ${refused.stderr}`);
      assert.equal(refused.stdout, '');
      assert.equal(refused.stderr.split('\n').length, 2, refused.stderr);
      assert.match(refused.stderr.replace(/^slipway: /, '').trim(), message);
      const json = await runCli(['restore', '--from', from, '--json'], env);
      assert.equal(JSON.parse(json.stderr).error.code, errorCode, json.stderr);
      assert.deepEqual(contents(dir), before, `${from} changed the data directory`);
      if (source !== undefined) assert.equal(contents(path.dirname(from))[path.basename(from)], source, `${from} was written to`);
    }
    writer.close();
    assert.deepEqual(fs.readdirSync(files).sort(), ['damaged.db', 'foreign.db', 'good.db', 'logged.db', 'newer.db', 'notes.txt', 'other.db'], 'files were left beside the copies');

    // The fix the refusal names: the copy's key as a line at the end of the key file.
    fs.appendFileSync(keyFile, `${foreignKey}\n`);
    const restored = await runCli(['restore', '--from', foreign], env);
    assert.equal(restored.code, 0, restored.stderr);
  });

  it('refuses a database that is a symbolic link, naming what it links to, and changes neither', { skip: SQLITE_ONLY }, async () => {
    const real = newDir();
    assert.equal((await runCli(['migrate'], { SLIPWAY_DATA_DIR: real })).code, 0);
    const copy = path.join(newDir(), 'copy.db');
    assert.equal((await runCli(['backup', '--to', copy], { SLIPWAY_DATA_DIR: real })).code, 0);
    const linked = newDir();
    fs.copyFileSync(path.join(real, 'master.key'), path.join(linked, 'master.key'));
    fs.symlinkSync(path.join(real, 'slipway.db'), path.join(linked, 'slipway.db'));
    const before = contents(real);
    const refused = await runCli(['restore', '--from', copy, '--json'], { SLIPWAY_DATA_DIR: linked });
    assert.equal(refused.code, 1, refused.stderr);
    const error = JSON.parse(refused.stderr).error;
    assert.equal(error.code, 'database_is_link');
    assert.match(error.message, /slipway\.db is a symbolic link \(to .*slipway\.db\): give that path as the database/);
    assert.ok(fs.lstatSync(path.join(linked, 'slipway.db')).isSymbolicLink());
    assert.deepEqual(contents(real), before);
  });

  it('restores a copy an older Slipway took as it is, for the next migrate to bring up to date, into a directory without a database', { skip: SQLITE_ONLY }, async () => {
    const files = newDir();
    const older = path.join(files, 'older.db');
    const database = openDatabase({ databaseUrl: `sqlite:${older}`, dataDir: files });
    try {
      const types = columnTypes('sqlite');
      const steps = MIGRATIONS.slice(0, -1);
      const migrator = new Migrator({ db: database.db, provider: { getMigrations: async () => Object.fromEntries(steps.map((s) => [s.name, { up: (db) => s.up(db, types) }])) } });
      assert.equal((await migrator.migrateToLatest()).error, undefined);
    } finally {
      await database.close();
    }
    const dir = newDir();
    const last = MIGRATIONS.at(-1)!.name;
    const restored = await runCli(['restore', '--from', older], { SLIPWAY_DATA_DIR: dir });
    assert.equal(restored.code, 0, restored.stderr);
    assert.match(restored.stdout, /^kept aside +\(there was no database\)$/m);
    assert.match(restored.stdout, new RegExp(`^schema +1 migration\\(s\\) behind this version \\(${last}\\)$`, 'm'));
    assert.match(restored.stdout, /^note: the copy was taken by an older Slipway and is restored as it is: the next slipway serve \(or slipway migrate\) brings its schema up to date$/m);
    // Nothing else: no key file is made for a copy that needs none.
    assert.deepEqual(fs.readdirSync(dir), ['slipway.db']);
    assert.equal(fs.statSync(path.join(dir, 'slipway.db')).mode & 0o777, 0o600);
    const migrated = await runCli(['migrate', '--json'], { SLIPWAY_DATA_DIR: dir });
    assert.equal(migrated.code, 0, migrated.stderr);
    assert.deepEqual(JSON.parse(migrated.stdout).applied, [last]);
  });
  it('stopped by a signal while it copies or checks, leaves the database as it was and nothing of its own', { skip: SQLITE_ONLY }, async () => {
    const dir = newDir();
    const env = { SLIPWAY_DATA_DIR: dir };
    const migrated = await runCli(['migrate'], env);
    assert.equal(migrated.code, 0, migrated.stderr);
    const backup = path.join(newDir(), 'copy.db');
    const backedUp = await runCli(['backup', '--to', backup], env);
    assert.equal(backedUp.code, 0, backedUp.stderr);
    addBulk(backup);
    const before = contents(dir);
    // Once the copy beside the database has begun: copying and checking a large one take seconds.
    const copying = () => fs.readdirSync(dir).some((f) => f.endsWith('.tmp') && fs.statSync(path.join(dir, f)).size > 0);
    const stopped = await runCli(['restore', '--from', backup, '--json'], env, undefined, { when: copying, signal: 'SIGTERM' });
    assert.equal(stopped.signal, 'SIGTERM', `${stopped.code} ${stopped.stderr}`);
    assert.equal(stopped.stdout, '');
    const said = JSON.parse(stopped.stderr) as { error: { code: string; message: string } };
    assert.equal(said.error.code, 'interrupted');
    assert.match(said.error.message, /^interrupted \(SIGTERM\): the database is as it was \(the part copied, .*slipway\.db\.restore-.*\.tmp, is removed\)$/);
    assert.deepEqual(contents(dir), before);
  });
});
