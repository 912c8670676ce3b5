// A deployment may be a promotion: another environment's deployment of the same service, its
// spec and secret versions carried over with this environment's configuration laid over them.
// The id of the deployment it was promoted from; null for every other deployment.
import type { MigrationStep } from './types.js';

export const deploymentPromotions: MigrationStep = {
  name: '0021-deployment-promotions',
  async up(db) {
    await db.schema.alterTable('deployments').addColumn('promoted_from', 'text').execute();
  },
};
