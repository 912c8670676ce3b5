// A runner service user may be kept to some environments: it is handed only their deployments (and
// their secret values), whatever environments it asks for. JSON array of environment ids; null:
// all of the organization's (every other role has null).
import type { MigrationStep } from './types.js';

export const runnerEnvironments: MigrationStep = {
  name: '0020-runner-environments',
  async up(db) {
    await db.schema.alterTable('service_users').addColumn('runner_environments', 'text').execute();
  },
};
