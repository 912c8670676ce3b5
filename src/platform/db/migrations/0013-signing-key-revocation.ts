// A signing key can be revoked: out of the JWKS at once, so that the tokens it signed stop being
// accepted (a key that leaked), rather than published until they expire as a retired key is.
import type { MigrationStep } from './types.js';

export const signingKeyRevocation: MigrationStep = {
  name: '0013-signing-key-revocation',
  async up(db, t) {
    await db.schema.alterTable('signing_keys').addColumn('revoked_at', t.timestamp).execute();
  },
};
