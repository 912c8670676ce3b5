// A finished deployment's log may be removed once SLIPWAY_DEPLOYMENT_LOG_RETENTION_DAYS have passed
// since it ended: when it was, and an index of those whose log is still kept. The index is partial:
// a deployment enters it when it fails, is cancelled or is superseded, and leaves it when its log
// is removed, so creating one (queued) writes no entry to it.
import { sql } from 'kysely';
import type { MigrationStep } from './types.js';

export const deploymentLogRetention: MigrationStep = {
  name: '0024-deployment-log-retention',
  async up(db) {
    await db.schema.alterTable('deployments').addColumn('logs_removed_at', 'text').execute();
    // Three comparisons, not an IN list: SQLite evaluates the predicate at every insert, and an IN
    // list there builds a table each time (about a microsecond per deployment created).
    await sql`create index deployments_logs_kept on deployments (updated_at)
      where logs_removed_at is null and (state = 'failed' or state = 'cancelled' or state = 'superseded')`.execute(db);
  },
};
