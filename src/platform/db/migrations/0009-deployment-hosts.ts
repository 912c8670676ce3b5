// Which runner runs a serving deployment's process, and when it last said so: a deployment whose
// runner went away (stopped, killed, its machine lost) is adopted by another runner of its
// environment. Null in both for deployments no runner has reported on.
import type { MigrationStep } from './types.js';

export const deploymentHosts: MigrationStep = {
  name: '0009-deployment-hosts',
  async up(db, t) {
    await db.schema.alterTable('deployments').addColumn('host_id', 'text').execute();
    await db.schema.alterTable('deployments').addColumn('host_seen_at', t.timestamp).execute();
  },
};
