// An environment has a version, as a service has: each change of it (its configuration, its
// protection, its name, a lock or an unlock) makes it go up by one, and its ETag says which, so
// that a change made meanwhile by someone else is a 412 for a writer that sends If-Match.
//
// The database keeps it so whoever writes: an update that leaves the version as it was (one made
// by a node of an older Slipway, still serving while the others are upgraded, which knows no
// version) has it go up by one all the same, so that no ETag read before that change still holds.
import { sql } from 'kysely';
import type { MigrationStep } from './types.js';

export const environmentVersions: MigrationStep = {
  name: '0026-environment-versions',
  async up(db, t) {
    await db.schema.alterTable('environments').addColumn('version', 'integer', (c) => c.notNull().defaultTo(sql`1`)).execute();
    if (t.dialect === 'postgres') {
      await sql`create function slipway_environment_version() returns trigger language plpgsql as $$
        begin
          if new.version = old.version then new.version := old.version + 1; end if;
          return new;
        end $$`.execute(db);
      await sql`create trigger environments_version before update on environments
        for each row execute function slipway_environment_version()`.execute(db);
      return;
    }
    // SQLite's triggers cannot change the row being written: the version is moved after it.
    await sql`create trigger environments_version after update on environments
      for each row when new.version = old.version
      begin update environments set version = old.version + 1 where id = new.id; end`.execute(db);
  },
};
