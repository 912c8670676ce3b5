// An organization can be linked to an organization of an external issuer (a ZITADEL organization's
// id, its resource owner claim), so that issuer's tokens act in it. At most one Slipway organization
// per external one; unlinked organizations hold null, which either database lets repeat.
import type { MigrationStep } from './types.js';

export const orgExternalId: MigrationStep = {
  name: '0007-org-external-id',
  async up(db) {
    await db.schema.alterTable('organizations').addColumn('external_id', 'text').execute();
    await db.schema.createIndex('organizations_external_id').on('organizations').column('external_id').unique().execute();
  },
};
