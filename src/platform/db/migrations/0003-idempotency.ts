// Idempotency keys: one row per (caller, key), shared by every node so a retry that lands on
// another node, or after a restart, still finds the first attempt.
import type { MigrationStep } from './types.js';

export const idempotency: MigrationStep = {
  name: '0003-idempotency',
  async up(db, t) {
    await db.schema.createTable('idempotency_keys')
      .addColumn('subject', 'text', (c) => c.notNull())
      .addColumn('idempotency_key', 'text', (c) => c.notNull())
      .addColumn('method', 'text', (c) => c.notNull())
      .addColumn('path', 'text', (c) => c.notNull())
      .addColumn('fingerprint', 'text', (c) => c.notNull())
      .addColumn('state', 'text', (c) => c.notNull())
      .addColumn('lock_token', 'text', (c) => c.notNull())
      .addColumn('locked_at', t.timestamp, (c) => c.notNull())
      .addColumn('status', 'integer')
      .addColumn('headers', 'text')
      .addColumn('body_sealed', t.bytes)
      .addColumn('created_at', t.timestamp, (c) => c.notNull())
      .addColumn('completed_at', t.timestamp)
      // The insert is the lock: the second attempt with the same key cannot insert.
      .addPrimaryKeyConstraint('idempotency_keys_pk', ['subject', 'idempotency_key'])
      .execute();
    await db.schema.createIndex('idempotency_keys_created_at').on('idempotency_keys').column('created_at').execute();
  },
};
