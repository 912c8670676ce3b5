// A runner that stops cleanly says so: from then on it is listed offline at once, rather than
// online until it has not been heard from for the host timeout.
import type { MigrationStep } from './types.js';

export const runnerStopped: MigrationStep = {
  name: '0025-runner-stopped',
  async up(db) {
    await db.schema.alterTable('runners').addColumn('stopped_at', 'text').execute();
  },
};
