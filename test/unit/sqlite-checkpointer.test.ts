// A server's SQLite log is copied back into the database file by a worker thread, not inside
// the COMMITs of the event loop.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { sql, type Kysely } from 'kysely';
import { openDatabase } from '../../src/platform/db/database.js';
import { roundReporter } from '../../src/platform/db/checkpointer.js';

describe('SQLite background checkpoints', () => {
  it('copies committed pages into the database file without a checkpoint on the writer', async () => {
    const errors: Array<string | null> = [];
    const database = openDatabase({ databaseUrl: null, dataDir: fs.mkdtempSync(path.join(os.tmpdir(), 'slipway-ckpt-')), onBackgroundCheckpointError: (m) => errors.push(m) });
    try {
      const db = database.db as unknown as Kysely<any>; // eslint-disable-line @typescript-eslint/no-explicit-any
      await sql`create table blobs (id integer primary key, body blob not null)`.execute(db);
      // The writer checkpoints by itself only past a backstop far above what this test writes.
      const [setting] = (await sql<{ wal_autocheckpoint: number }>`pragma wal_autocheckpoint`.execute(db)).rows;
      assert.equal(setting!.wal_autocheckpoint, 10_000);
      const before = fs.statSync(database.file!).size;
      // ~8 MiB in ~2,000 pages: well past SQLite's default automatic checkpoint (1,000 pages) and
      // under the writer's backstop, so only the worker can have copied them.
      await db.transaction().execute(async (trx) => {
        for (let i = 0; i < 2000; i++) await trx.insertInto('blobs').values({ id: i, body: Buffer.alloc(4000, i % 251) }).execute();
      });
      const walAfterCommit = fs.statSync(`${database.file!}-wal`).size;
      assert.ok(walAfterCommit > 8_000_000, `the commit went to the log (${walAfterCommit} bytes)`);
      const deadline = Date.now() + 10_000;
      while (fs.statSync(database.file!).size - before < 8_000_000) {
        assert.ok(Date.now() < deadline, 'the worker copied the log back within 10 s');
        await sleep(50);
      }
      assert.deepEqual(errors, []);
      const [row] = (await sql<{ n: number }>`select count(*) as n from blobs`.execute(db)).rows;
      assert.equal(row!.n, 2000);
    } finally {
      await database.close();
    }
  });

  it('says a failure once while rounds keep failing the same way, and says when one works again', () => {
    const said: Array<string | null> = [];
    const round = roundReporter((error) => said.push(error));
    for (const outcome of [null, null, 'database or disk is full', 'database or disk is full', 'database or disk is full', null, null, 'disk I/O error', 'database or disk is full', 'database or disk is full', null]) round(outcome);
    assert.deepEqual(said, ['database or disk is full', null, 'disk I/O error', 'database or disk is full', null]);
  });
});
