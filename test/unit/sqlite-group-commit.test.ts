// SQLite's group commit: transactions that arrive together commit together, each one fails or
// succeeds on its own, and nobody hears "done" before the COMMIT that made it durable.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { sql, type Kysely } from 'kysely';
import { isUniqueViolation, openDatabase, type Database } from '../../src/platform/db/database.js';
import { transaction as dryRunTransaction } from '../../src/platform/db/dry-run.js';
import { SQLite } from '../../src/platform/db/sqlite-library.js';

describe('SQLite group commit', () => {
  let database: Database;
  let db: Kysely<any>; // eslint-disable-line @typescript-eslint/no-explicit-any
  /** A second connection to the same file, as another process would have: it sees only committed rows. */
  let other: SQLite.Database;
  const seenByOther = (): string[] => (other.prepare('select name from items order by name').all() as Array<{ name: string }>).map((r) => r.name);

  before(async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'slipway-group-'));
    // No time limit: which transactions share a group must not depend on how busy the machine is.
    database = openDatabase({ databaseUrl: null, dataDir: dir, groupLimits: { maxTransactions: 64, maxMs: 60_000 } });
    db = database.db as unknown as Kysely<any>; // eslint-disable-line @typescript-eslint/no-explicit-any
    await sql`create table items (name text primary key)`.execute(db);
    other = new SQLite(database.file!, { readonly: true });
  });

  after(async () => {
    other.close();
    await database.close();
  });

  const reset = () => sql`delete from items`.execute(db);
  const insert = (name: string) => db.transaction().execute((trx) => trx.insertInto('items').values({ name }).execute());

  it('commits concurrent transactions together, and only tells them once the rows are durable', async () => {
    await reset();
    const seenAtResolve: string[][] = [];
    await Promise.all(Array.from({ length: 10 }, (_, i) => insert(`a${i}`).then(() => seenAtResolve.push(seenByOther()))));
    // Every transaction heard "committed" only when another connection could already read all ten:
    // they were made durable by one COMMIT, after the last of them had run.
    assert.equal(seenAtResolve.length, 10);
    for (const seen of seenAtResolve) assert.equal(seen.length, 10);
  });

  it('fails one transaction of a group without losing the others', async () => {
    await reset();
    const results = await Promise.allSettled([
      insert('b1'),
      db.transaction().execute(async (trx) => {
        await trx.insertInto('items').values({ name: 'b2' }).execute();
        throw new Error('refused by the caller');
      }),
      insert('b3'),
      insert('b1'), // a unique violation inside the group
      insert('b4'),
    ]);
    assert.deepEqual(results.map((r) => r.status), ['fulfilled', 'rejected', 'fulfilled', 'rejected', 'fulfilled']);
    assert.equal(((results[1] as PromiseRejectedResult).reason as Error).message, 'refused by the caller');
    assert.ok(isUniqueViolation((results[3] as PromiseRejectedResult).reason));
    assert.deepEqual(seenByOther(), ['b1', 'b3', 'b4']);
  });

  it('commits the open group before a statement outside a transaction runs', async () => {
    await reset();
    const writes = [insert('c1'), insert('c2')];
    const read = db.selectFrom('items').select('name').orderBy('name').execute();
    const rows = await read;
    // The read ran after both transactions (it queued behind them) and saw them committed.
    assert.deepEqual(rows.map((r) => r.name), ['c1', 'c2']);
    assert.deepEqual(seenByOther(), ['c1', 'c2']);
    await Promise.all(writes);
  });

  it('commits a full group before starting the next one', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'slipway-group-'));
    const small = openDatabase({ databaseUrl: null, dataDir: dir, groupLimits: { maxTransactions: 3, maxMs: 60_000 } });
    const check = new SQLite(small.file!, { readonly: true, fileMustExist: false });
    try {
      // eslint-disable-next-line @typescript-eslint/no-explicit-any
      const smallDb = small.db as unknown as Kysely<any>;
      await sql`create table items (name text primary key)`.execute(smallDb);
      const seenAtResolve: number[] = [];
      await Promise.all(Array.from({ length: 7 }, (_, i) => smallDb.transaction().execute((trx) => trx.insertInto('items').values({ name: `f${i}` }).execute())
        .then(() => seenAtResolve.push((check.prepare('select count(*) as n from items').get() as { n: number }).n))));
      assert.deepEqual(seenAtResolve, [3, 3, 3, 6, 6, 6, 7]);
    } finally {
      check.close();
      await small.close();
    }
  });

  it('keeps a group open while each turn of the event loop brings in another transaction', async () => {
    await reset();
    const seenAtResolve: number[] = [];
    const started: Array<Promise<unknown>> = [];
    const start = (i: number) => started.push(insert(`g${i}`).then(() => seenAtResolve.push(seenByOther().length)));
    start(0);
    // One more transaction in each of the next five turns, as requests reaching a busy server do.
    await new Promise<void>((resolve) => {
      const next = (i: number) => setImmediate(() => {
        start(i);
        if (i < 5) next(i + 1);
        else resolve();
      });
      next(1);
    });
    await Promise.all(started);
    assert.deepEqual(seenAtResolve, [6, 6, 6, 6, 6, 6]);
  });

  it('commits a lone transaction without waiting for others', async () => {
    await reset();
    await insert('d1');
    assert.deepEqual(seenByOther(), ['d1']);
  });

  it('commits the last group when the database closes', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'slipway-group-'));
    const own = openDatabase({ databaseUrl: null, dataDir: dir });
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    const ownDb = own.db as unknown as Kysely<any>;
    await sql`create table items (name text primary key)`.execute(ownDb);
    const pending = ownDb.transaction().execute((trx) => trx.insertInto('items').values({ name: 'e1' }).execute());
    await own.close();
    await pending;
    const check = new SQLite(own.file!, { readonly: true });
    try {
      assert.deepEqual(check.prepare('select name from items').all(), [{ name: 'e1' }]);
    } finally {
      check.close();
    }
  });

  it('tells its listeners when a COMMIT fails, undoing transactions that had ended well', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'slipway-group-'));
    const own = openDatabase({ databaseUrl: null, dataDir: dir, groupLimits: { maxTransactions: 64, maxMs: 60_000 } });
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    const ownDb = own.db as unknown as Kysely<any>;
    let lost = 0;
    own.onWritesLost(() => { lost++; });
    try {
      // A deferred foreign key is checked at COMMIT: the group's COMMIT fails, as on a full disk.
      await sql`create table parents (id text primary key)`.execute(ownDb);
      await sql`create table children (id text primary key, parent text references parents(id) deferrable initially deferred)`.execute(ownDb);
      const results = await Promise.allSettled([
        ownDb.transaction().execute((trx) => trx.insertInto('parents').values({ id: 'p1' }).execute()),
        ownDb.transaction().execute((trx) => trx.insertInto('children').values({ id: 'c1', parent: 'nobody' }).execute()),
      ]);
      assert.deepEqual(results.map((r) => r.status), ['rejected', 'rejected'], 'the whole group is lost');
      assert.equal(lost, 1);
      assert.deepEqual(await sql`select id from parents`.execute(ownDb).then((r) => r.rows), []);
      await ownDb.transaction().execute((trx) => trx.insertInto('parents').values({ id: 'p2' }).execute());
      assert.equal(lost, 1, 'a group that commits tells nobody');

      // A dry run in a group reads what the others wrote: it answers once that is durable, and
      // fails with them when it is lost, never answering from writes that are gone.
      const withDryRun = await Promise.allSettled([
        ownDb.transaction().execute((trx) => trx.insertInto('parents').values({ id: 'p3' }).execute()),
        ownDb.transaction().execute((trx) => trx.insertInto('children').values({ id: 'c2', parent: 'nobody' }).execute()),
        dryRunTransaction(own.db, true, async (trx) => (await sql<{ id: string }>`select id from parents order by id`.execute(trx)).rows.map((r) => r.id)),
      ]);
      assert.deepEqual(withDryRun.map((r) => r.status), ['rejected', 'rejected', 'rejected']);
      // Alone, it answers what it read, and leaves nothing written.
      assert.deepEqual(await dryRunTransaction(own.db, true, async (trx) => {
        await sql`insert into parents (id) values ('p4')`.execute(trx);
        return (await sql<{ id: string }>`select id from parents order by id`.execute(trx)).rows.map((r) => r.id);
      }), ['p2', 'p4']);
      assert.deepEqual(await sql`select id from parents`.execute(ownDb).then((r) => r.rows), [{ id: 'p2' }]);
    } finally {
      await own.close();
    }
  });
});
