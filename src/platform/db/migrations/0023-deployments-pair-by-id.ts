// The index of a service's deployments in an environment by state ends in their id: what
// succeeded last before a deployment (the one it replaced) is one seek per state, not a sort of
// every superseded deployment of the pair. It replaces the index it extends, whose queries use it
// as they used that one, so deployments carry no more indexes than before.
import type { MigrationStep } from './types.js';

export const deploymentsPairById: MigrationStep = {
  name: '0023-deployments-pair-by-id',
  async up(db) {
    await db.schema.dropIndex('deployments_pair').execute();
    await db.schema.createIndex('deployments_pair').on('deployments').columns(['service_id', 'environment_id', 'state', 'id']).execute();
  },
};
