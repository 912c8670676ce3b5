// Secrets lifecycle: the purge looks for deletions past their retention window. A partial index
// holds only deleted secrets, so live writes (bulk creates of thousands) pay nothing for it.
import { sql } from 'kysely';
import type { MigrationStep } from './types.js';

export const secretsLifecycle: MigrationStep = {
  name: '0002-secrets-lifecycle',
  async up(db) {
    await db.schema.createIndex('secrets_deleted_at').on('secrets').column('deleted_at').where(sql.ref('deleted_at'), 'is not', null).execute();
  },
};
