// A retired signing key stays published as long as the tokens it signed may live. That was reckoned
// with the token lifetime of whichever process looked (SLIPWAY_TOKEN_TTL), so a node given a shorter
// one than the node that signed (a lowered setting, a rolling change) dropped the key, and refused
// its tokens, hours before they expired. Each node that signs with a key now records its lifetime on
// the key first, and the longest recorded counts.
import type { MigrationStep } from './types.js';

export const signingKeyTokenTtl: MigrationStep = {
  name: '0030-signing-key-token-ttl',
  async up(db) {
    await db.schema.alterTable('signing_keys').addColumn('token_ttl_seconds', 'integer').execute();
  },
};
