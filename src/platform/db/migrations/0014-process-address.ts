// Where a serving deployment's process answers, as its runner reported it: the machine's host name
// and the port the runner gave it. The reference runner picks the port, so it was only in its logs.
import type { MigrationStep } from './types.js';

export const processAddress: MigrationStep = {
  name: '0014-process-address',
  async up(db) {
    await db.schema.alterTable('deployments').addColumn('process_hostname', 'text').execute();
    await db.schema.alterTable('deployments').addColumn('process_port', 'integer').execute();
  },
};
