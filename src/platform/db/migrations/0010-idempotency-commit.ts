// Whether the request holding an idempotency key has committed its change. The mark is written in
// the change's own transaction, so a request that committed and then died before its response was
// recorded is not run a second time when its lock times out.
import type { MigrationStep } from './types.js';

export const idempotencyCommit: MigrationStep = {
  name: '0010-idempotency-commit',
  async up(db, t) {
    await db.schema.alterTable('idempotency_keys').addColumn('request_id', 'text').execute();
    await db.schema.alterTable('idempotency_keys').addColumn('committed_at', t.timestamp).execute();
  },
};
