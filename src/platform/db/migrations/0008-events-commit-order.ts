// Events are paged in the order their transactions committed, not in the order their ids were
// taken: an id is taken before its transaction commits, so a reader paging by id could pass an
// event that was still being committed and never see it.
//
// - SQLite: one writer at a time, so a row number given at insert follows commit order. The table
//   gets an INTEGER PRIMARY KEY (`seq`, SQLite's row id, which VACUUM keeps), existing events
//   numbered in id order. Events are deleted only with their organization; a number given again
//   after that (SQLite may reuse the highest) is past every place kept in the log, so it is read as new.
// - PostgreSQL: transactions overlap. Each event records its transaction id (`tx_id`, xid8, PostgreSQL
//   13 and later); readers order by (tx_id, id) and see only transactions older than every
//   transaction still running, so nothing can later appear behind a page already read.
import { sql } from 'kysely';
import type { MigrationStep } from './types.js';

export const eventsCommitOrder: MigrationStep = {
  name: '0008-events-commit-order',
  async up(db, t) {
    if (t.dialect === 'postgres') {
      // Events written before this step all get the migration's own transaction id: they keep their id order.
      await db.schema.alterTable('events').addColumn('tx_id', sql`xid8`, (c) => c.notNull().defaultTo(sql`pg_current_xact_id()`)).execute();
      await db.schema.dropIndex('events_org_id').execute();
      await db.schema.createIndex('events_org_tx').on('events').columns(['org_id', 'tx_id', 'id']).execute();
      return;
    }
    // One savepoint (inside the transaction every pending migration runs in; written when they ran
    // without one): a crash, a kill or a full disk halfway leaves the old table as it was, and the
    // next start does it all again.
    await sql`savepoint events_rebuild`.execute(db);
    try {
      await db.schema.createTable('events_ordered')
        .addColumn('seq', 'integer', (c) => c.primaryKey())
        .addColumn('id', 'text', (c) => c.notNull().unique())
        .addColumn('org_id', 'text', (c) => c.notNull().references('organizations.id'))
        .addColumn('type', 'text', (c) => c.notNull())
        .addColumn('actor_id', 'text')
        .addColumn('request_id', 'text')
        .addColumn('subject_type', 'text', (c) => c.notNull())
        .addColumn('subject_id', 'text', (c) => c.notNull())
        .addColumn('data', 'text', (c) => c.notNull())
        .addColumn('created_at', t.timestamp, (c) => c.notNull())
        .execute();
      await sql`insert into events_ordered (id, org_id, type, actor_id, request_id, subject_type, subject_id, data, created_at)
        select id, org_id, type, actor_id, request_id, subject_type, subject_id, data, created_at from events order by id`.execute(db);
      await db.schema.dropTable('events').execute();
      await db.schema.alterTable('events_ordered').renameTo('events').execute();
      await db.schema.createIndex('events_org_seq').on('events').columns(['org_id', 'seq']).execute();
    } catch (error) {
      // SQLite may have rolled the whole transaction back itself (a full disk, an I/O error): the
      // savepoint is gone then, and the cause is still the first error.
      await sql`rollback to events_rebuild`.execute(db).then(() => sql`release events_rebuild`.execute(db)).catch(() => undefined);
      throw error;
    }
    await sql`release events_rebuild`.execute(db);
  },
};
