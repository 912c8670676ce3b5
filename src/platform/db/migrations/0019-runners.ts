// The runners an organization has: each runner process that names itself (`host`, protocol step 5)
// and when it was last heard from, so that people can see whether a runner takes an environment's
// deployments before they wonder why one waits. A row per runner process: a runner started again
// is a new one. Rows not heard from for a week are pruned.
import type { MigrationStep } from './types.js';

export const runners: MigrationStep = {
  name: '0019-runners',
  async up(db, t) {
    await db.schema.createTable('runners')
      .addColumn('org_id', 'text', (c) => c.notNull().references('organizations.id'))
      .addColumn('host', 'text', (c) => c.notNull())
      // The runner service user it authenticates as; gone with it.
      .addColumn('service_user_id', 'text', (c) => c.notNull().references('service_users.id').onDelete('cascade'))
      // JSON array of the environment ids it takes deployments from; null: all of the organization's.
      .addColumn('environment_ids', 'text')
      // What it says of itself (the machine's host name, its version), and where it called from.
      .addColumn('hostname', 'text')
      .addColumn('version', 'text')
      .addColumn('address', 'text')
      .addColumn('first_seen_at', t.timestamp, (c) => c.notNull())
      .addColumn('last_seen_at', t.timestamp, (c) => c.notNull())
      .addPrimaryKeyConstraint('runners_pk', ['org_id', 'host'])
      .execute();
    await db.schema.createIndex('runners_last_seen').on('runners').column('last_seen_at').execute();
  },
};
