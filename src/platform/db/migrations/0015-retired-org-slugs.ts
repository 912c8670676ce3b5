// Slugs an organization gave up stay its own: another organization taking one would receive what
// scripts and instance administrators still send to the old slug (secrets, deployments).
import type { MigrationStep } from './types.js';

export const retiredOrgSlugs: MigrationStep = {
  name: '0015-retired-org-slugs',
  async up(db, t) {
    await db.schema.createTable('retired_org_slugs')
      .addColumn('slug', 'text', (c) => c.primaryKey())
      .addColumn('org_id', 'text', (c) => c.notNull().references('organizations.id'))
      .addColumn('retired_at', t.timestamp, (c) => c.notNull())
      .execute();
  },
};
