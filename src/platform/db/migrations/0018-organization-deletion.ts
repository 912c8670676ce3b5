// A deleted organization keeps its row, without anything it held, so that its slugs stay reserved
// (retired_org_slugs) and nothing can ever be found under its id again.
import type { MigrationStep } from './types.js';

export const organizationDeletion: MigrationStep = {
  name: '0018-organization-deletion',
  async up(db, t) {
    await db.schema.alterTable('organizations').addColumn('deleted_at', t.timestamp).execute();
  },
};
