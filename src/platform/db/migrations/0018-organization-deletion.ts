// A deleted organization keeps its row, without anything it held, so that its slugs stay reserved
// (retired_org_slugs) and nothing can ever be found under its id again.
//
// Nothing is written into it either: every change appends an event in its own transaction, and an
// event for a deleted organization is refused by the database itself (`organization_deleted`), so
// the whole change rolls back. That holds for a node whose caches still knew the organization (for
// up to 5 s) and for a request under way when it was deleted, at the cost of one lookup by primary
// key inside the insert rather than a query of its own on every write. PostgreSQL reads the row FOR
// KEY SHARE, as the foreign key does: it waits for a deletion under way (which changes the row's
// slug first) and then sees it.
import { sql } from 'kysely';
import type { MigrationStep } from './types.js';

/** The message both databases refuse such an event with (see facts.ts). */
export const ORGANIZATION_DELETED = 'organization_deleted';

export const organizationDeletion: MigrationStep = {
  name: '0018-organization-deletion',
  async up(db, t) {
    await db.schema.alterTable('organizations').addColumn('deleted_at', t.timestamp).execute();
    if (t.dialect === 'postgres') {
      await sql.raw(`create function events_into_live_organization() returns trigger language plpgsql as $$
        begin
          perform 1 from organizations where id = new.org_id and deleted_at is null for key share;
          if not found then raise exception '${ORGANIZATION_DELETED}'; end if;
          return new;
        end $$`).execute(db);
      await sql`create trigger events_into_live_organization before insert on events for each row execute function events_into_live_organization()`.execute(db);
      return;
    }
    await sql.raw(`create trigger events_into_live_organization before insert on events
      when (select deleted_at from organizations where id = new.org_id) is not null
      begin select raise(abort, '${ORGANIZATION_DELETED}'); end`).execute(db);
  },
};
