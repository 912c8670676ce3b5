// Revocations are read and pruned by their expiry (every live one on each refresh, the expired ones
// when pruning), no longer by when they were made: the index follows.
import type { MigrationStep } from './types.js';

export const revokedTokensExpiryIndex: MigrationStep = {
  name: '0006-revoked-tokens-expiry-index',
  async up(db) {
    await db.schema.dropIndex('revoked_tokens_revoked_at').execute();
    await db.schema.createIndex('revoked_tokens_expires_at').on('revoked_tokens').column('expires_at').execute();
  },
};
