// CLI commands other than serve and migrate work only on a database that slipway migrate set up:
// they refuse, writing nothing, one that is not Slipway's (a mistyped URL) or whose schema an older
// Slipway left behind.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import { sql } from 'kysely';
import { openDatabase, type Database } from '../../src/platform/db/database.js';
import { MIGRATIONS, migrateToLatest } from '../../src/platform/db/migrations/index.js';
import { freePort, tempDir, testDatabase } from '../support/harness.js';
import { runCli } from '../support/processes.js';

describe('slipway CLI: the database it works on', () => {
  it('works only on a database that slipway migrate set up, and writes nothing to any other', async () => {
    const tables = async (database: Database) => (database.dialect === 'sqlite'
      ? await sql<{ name: string }>`select name from sqlite_master where type = 'table' order by name`.execute(database.db)
      : await sql<{ name: string }>`select table_name as name from information_schema.tables where table_schema = 'public' order by 1`.execute(database.db)).rows.map((r) => r.name);
    const run = async (env: Record<string, string>, message: RegExp) => {
      for (const args of [['org', 'list'], ['service-user', 'list', '--org', 'default'], ['keys', 'status']]) {
        const result = await runCli(args, env);
        assert.equal(result.code, 2, `${args.join(' ')}: ${result.stderr}`);
        assert.equal(result.stdout, '');
        assert.match(result.stderr, message);
        assert.equal(result.stderr.trim().split('\n').length, 1, result.stderr);
      }
    };

    // A database that exists but is not Slipway's: a mistyped URL, another program's file.
    for (const setUp of ['none', 'behind', 'ahead'] as const) {
      const dir = tempDir('slipway-cli-schema-');
      const db = await testDatabase();
      const own = { SLIPWAY_DATA_DIR: dir, ...(db.url ? { SLIPWAY_DATABASE_URL: db.url } : {}) };
      const database = openDatabase({ databaseUrl: db.url, dataDir: dir });
      try {
        if (setUp === 'none') {
          await sql`create table unrelated (id integer)`.execute(database.db);
          await run(own, /^slipway: the database .+ holds no Slipway schema: check --database-url .* slipway migrate .*; nothing was written\n$/);
          assert.deepEqual(await tables(database), ['unrelated']);
          assert.equal(fs.existsSync(path.join(dir, 'master.key')), false, 'a key file was generated');
        } else if (setUp === 'ahead') {
          // Migrated by a newer Slipway (going back to an older release): neither serve nor migrate
          // nor any other command runs on it; the message says so, not that migrations are corrupted.
          assert.equal((await runCli(['migrate'], own)).code, 0);
          await database.db.insertInto('kysely_migration').values({ name: '9999-from-the-future', timestamp: new Date().toISOString() } as never).execute();
          const newer = /^slipway: the database .+ was migrated by a newer Slipway \(it has 1 migration\(s\) this version does not know: 9999-from-the-future\): run that version .*; nothing was written\n$/;
          await run(own, newer);
          for (const args of [['migrate'], ['serve', '--port', String(await freePort())]]) {
            const result = await runCli(args, own);
            assert.equal(result.code, 2, `${args.join(' ')}: ${result.stderr}`);
            assert.match(result.stderr, /was migrated by a newer Slipway/);
          }
        } else {
          // Set up by an older Slipway: the newest migration not run yet.
          assert.equal((await runCli(['migrate'], own)).code, 0);
          const [last, before] = [MIGRATIONS.at(-1)!.name, MIGRATIONS.at(-2)!.name];
          await database.db.deleteFrom('kysely_migration').where('name', '=', last).execute();
          await run(own, new RegExp(`^slipway: the database .+ has Slipway's schema up to ${before}, and this version needs 1 more migration\\(s\\) \\(${last}\\): run slipway migrate .*; nothing was written\n$`));
          assert.equal((await database.db.selectFrom('kysely_migration').select('name').execute()).length, MIGRATIONS.length - 1);
        }
      } finally {
        await database.close();
        await db.drop();
        fs.rmSync(dir, { recursive: true, force: true });
      }
    }
  });

  it('migrates all or nothing: a migration that fails halfway leaves the schema as it was, for the next start to migrate', async () => {
    const dir = tempDir('slipway-cli-schema-');
    const db = await testDatabase();
    const database = openDatabase({ databaseUrl: db.url, dataDir: dir });
    try {
      // The first migration makes instance_settings first and secret_versions last: with the last
      // one there already, it fails after the others were made (as a start killed halfway would).
      await sql`create table secret_versions (id integer)`.execute(database.db);
      await assert.rejects(migrateToLatest(database), /migration 0001-core failed/);
      const tables = database.dialect === 'sqlite'
        ? await sql<{ name: string }>`select name from sqlite_master where type = 'table' order by name`.execute(database.db)
        : await sql<{ name: string }>`select table_name as name from information_schema.tables where table_schema = 'public' order by 1`.execute(database.db);
      assert.deepEqual(tables.rows.map((r) => r.name).filter((n) => !n.startsWith('kysely_')), ['secret_versions'], 'nothing of the failed migration is left');
      await sql`drop table secret_versions`.execute(database.db);
      const { applied } = await migrateToLatest(database);
      assert.deepEqual(applied, MIGRATIONS.map((m) => m.name));
    } finally {
      await database.close();
      await db.drop();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('stops with one line and exit 2 when the SQLite file cannot be made where the data directory says', { skip: (process.env.SLIPWAY_TEST_DB ?? 'sqlite') !== 'sqlite' && 'a SQLite file' }, async () => {
    const dir = tempDir('slipway-cli-schema-');
    try {
      // A file where the data directory should be (a mistyped path, a mount not there).
      const notADir = path.join(dir, 'data');
      fs.writeFileSync(notADir, '');
      for (const args of [['serve', '--port', String(await freePort())], ['migrate']]) {
        const result = await runCli(args, { SLIPWAY_DATA_DIR: notADir });
        assert.equal(result.code, 2, `${args[0]}: ${result.stderr}`);
        assert.match(result.stderr, /^slipway: cannot open the SQLite database .+slipway\.db for writing \((EEXIST|ENOTDIR)\): .+ is not a directory; check --data-dir \(SLIPWAY_DATA_DIR\)/);
        assert.equal(result.stderr.trim().split('\n').length, 1, result.stderr);
      }
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
