// How a serving deployment's process is doing, as its runner last reported it: running, or down
// and being started again after exiting on its own, how often, and how it last exited. Null until
// a runner that reports processes has reported on it.
import type { MigrationStep } from './types.js';

export const deploymentProcess: MigrationStep = {
  name: '0011-deployment-process',
  async up(db) {
    await db.schema.alterTable('deployments').addColumn('process_state', 'text').execute();
    await db.schema.alterTable('deployments').addColumn('process_exits', 'integer').execute();
    await db.schema.alterTable('deployments').addColumn('process_last_exit', 'text').execute();
  },
};
