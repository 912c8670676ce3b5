// Webhooks: an organization's subscriptions to its own event log, each delivered in commit order
// from where it stands (`position`), with what each delivery attempt got back.
import type { MigrationStep } from './types.js';

export const webhooks: MigrationStep = {
  name: '0016-webhooks',
  async up(db, t) {
    await db.schema.createTable('webhooks')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('org_id', 'text', (c) => c.notNull().references('organizations.id'))
      .addColumn('url', 'text', (c) => c.notNull())
      .addColumn('description', 'text', (c) => c.notNull())
      // A JSON array of event types and families (`deployment.*`); empty: every event.
      .addColumn('event_types', 'text', (c) => c.notNull())
      .addColumn('active', 'integer', (c) => c.notNull())
      .addColumn('disabled_reason', 'text')
      // The signing secret, sealed with the organization's data key; the one before a rotation
      // still signs (beside it) until previous_secret_expires_at.
      .addColumn('data_key_id', 'text', (c) => c.notNull().references('org_data_keys.id'))
      .addColumn('secret_sealed', t.bytes, (c) => c.notNull())
      .addColumn('secret_generation', 'integer', (c) => c.notNull())
      .addColumn('previous_secret_sealed', t.bytes)
      .addColumn('previous_secret_expires_at', t.timestamp)
      // The last event delivered or passed over (null before the first): its sequence number on
      // SQLite, its transaction id and id on PostgreSQL (as the events' own columns order them).
      .addColumn('position_seq', 'integer')
      .addColumn('position_tx', 'text')
      .addColumn('position_event_id', 'text')
      .addColumn('failures', 'integer', (c) => c.notNull())
      .addColumn('failing_since', t.timestamp)
      .addColumn('next_attempt_at', t.timestamp)
      .addColumn('last_attempt_at', t.timestamp)
      .addColumn('last_status', 'integer')
      .addColumn('last_error', 'text')
      // The node delivering it now, and until when that holds (a node that dies lets it go by then);
      // when a node last took it (those that waited longest go first).
      .addColumn('lease_owner', 'text')
      .addColumn('lease_until', t.timestamp)
      .addColumn('turn_at', t.timestamp)
      .addColumn('created_at', t.timestamp, (c) => c.notNull())
      .addColumn('updated_at', t.timestamp, (c) => c.notNull())
      .execute();
    await db.schema.createIndex('webhooks_org').on('webhooks').columns(['org_id', 'id']).execute();

    await db.schema.createTable('webhook_deliveries')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('webhook_id', 'text', (c) => c.notNull().references('webhooks.id').onDelete('cascade'))
      .addColumn('event_id', 'text', (c) => c.notNull())
      .addColumn('event_type', 'text', (c) => c.notNull())
      .addColumn('attempt', 'integer', (c) => c.notNull())
      .addColumn('status', 'integer')
      .addColumn('error', 'text')
      .addColumn('duration_ms', 'integer', (c) => c.notNull())
      .addColumn('created_at', t.timestamp, (c) => c.notNull())
      .execute();
    await db.schema.createIndex('webhook_deliveries_webhook').on('webhook_deliveries').columns(['webhook_id', 'id']).execute();
  },
};
