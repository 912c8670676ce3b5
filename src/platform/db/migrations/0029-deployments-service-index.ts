// A service's deployments, newest first (`GET …/deployments?service=`, the console's page of a
// service), were read through the organization's deployments by id until a page of the service's
// was found: a fifth of a second once an organization has a million, and more for a service
// deployed seldom. They get an index by service and id, as an environment's have (deployments_environment).
import type { MigrationStep } from './types.js';

export const deploymentsServiceIndex: MigrationStep = {
  name: '0029-deployments-service-index',
  async up(db) {
    await db.schema.createIndex('deployments_service').on('deployments').columns(['service_id', 'id']).execute();
  },
};
