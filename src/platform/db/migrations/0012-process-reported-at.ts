// When a runner last reported how a serving deployment's process is doing. Until now that was taken
// to be when it last reported the deployment at all, which a report without the processes (from a
// server node older than its runner, during an upgrade) also moves.
import type { MigrationStep } from './types.js';

export const processReportedAt: MigrationStep = {
  name: '0012-process-reported-at',
  async up(db, t) {
    await db.schema.alterTable('deployments').addColumn('process_reported_at', t.timestamp).execute();
  },
};
