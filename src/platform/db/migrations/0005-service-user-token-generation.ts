// Disabling a service user ends its live tokens for good: enabling it again must not bring back a
// token issued before the disable (one that leaked, say). Each disable starts a new generation of
// the user's tokens; a token carries the generation it was issued in, and only the current one is
// accepted. A counter, not a time: the clocks of the node that issued a token and of the node that
// disabled its user need not agree.
import { sql } from 'kysely';
import type { MigrationStep } from './types.js';

export const serviceUserTokenGeneration: MigrationStep = {
  name: '0005-service-user-token-generation',
  async up(db) {
    await db.schema.alterTable('service_users').addColumn('token_generation', 'integer', (c) => c.notNull().defaultTo(0)).execute();
    // Users disabled before this migration: their earlier tokens (generation 0) stay refused when enabled.
    await sql`update service_users set token_generation = 1 where disabled_at is not null`.execute(db);
  },
};
