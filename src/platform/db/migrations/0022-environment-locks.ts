// An environment may be locked (a deploy freeze): while it is, no deployment into it is created,
// rolled back to or promoted into. Why, by whom and since when; all null while it is not.
import type { MigrationStep } from './types.js';

export const environmentLocks: MigrationStep = {
  name: '0022-environment-locks',
  async up(db) {
    await db.schema.alterTable('environments').addColumn('lock_reason', 'text').execute();
    await db.schema.alterTable('environments').addColumn('locked_by', 'text').execute();
    await db.schema.alterTable('environments').addColumn('locked_at', 'text').execute();
  },
};
