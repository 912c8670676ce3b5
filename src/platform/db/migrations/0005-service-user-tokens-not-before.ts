// Disabling a service user ends its live tokens for good: enabling it again must not bring back a
// token issued before the disable (one that leaked, say). Each user keeps the time before which
// its tokens are void.
import type { MigrationStep } from './types.js';

export const serviceUserTokensNotBefore: MigrationStep = {
  name: '0005-service-user-tokens-not-before',
  async up(db, t) {
    await db.schema.alterTable('service_users').addColumn('tokens_not_before', t.timestamp).execute();
  },
};
