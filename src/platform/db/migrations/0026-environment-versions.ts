// An environment has a version, as a service has: each change of it (its configuration, its
// protection, its name, a lock or an unlock) makes it go up by one, and its ETag says which, so
// that a change made meanwhile by someone else is a 412 for a writer that sends If-Match.
import { sql } from 'kysely';
import type { MigrationStep } from './types.js';

export const environmentVersions: MigrationStep = {
  name: '0026-environment-versions',
  async up(db) {
    await db.schema.alterTable('environments').addColumn('version', 'integer', (c) => c.notNull().defaultTo(sql`1`)).execute();
  },
};
