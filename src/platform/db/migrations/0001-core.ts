// Instance, organizations, service users, tokens, events and secrets.
import type { MigrationStep } from './types.js';

export const core: MigrationStep = {
  name: '0001-core',
  async up(db, t) {
    await db.schema.createTable('instance_settings')
      .addColumn('key', 'text', (c) => c.primaryKey())
      .addColumn('value', 'text', (c) => c.notNull())
      .execute();

    await db.schema.createTable('instance_keys')
      .addColumn('name', 'text', (c) => c.primaryKey())
      .addColumn('sealed', t.bytes, (c) => c.notNull())
      .addColumn('master_key_id', 'text', (c) => c.notNull())
      .addColumn('created_at', t.timestamp, (c) => c.notNull())
      .execute();

    await db.schema.createTable('signing_keys')
      .addColumn('kid', 'text', (c) => c.primaryKey())
      .addColumn('alg', 'text', (c) => c.notNull())
      .addColumn('public_jwk', 'text', (c) => c.notNull())
      .addColumn('private_sealed', t.bytes, (c) => c.notNull())
      .addColumn('master_key_id', 'text', (c) => c.notNull())
      .addColumn('created_at', t.timestamp, (c) => c.notNull())
      .addColumn('activated_at', t.timestamp)
      .addColumn('retired_at', t.timestamp)
      .execute();

    await db.schema.createTable('organizations')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('slug', 'text', (c) => c.notNull().unique())
      .addColumn('name', 'text', (c) => c.notNull())
      .addColumn('created_at', t.timestamp, (c) => c.notNull())
      .addColumn('updated_at', t.timestamp, (c) => c.notNull())
      .execute();

    await db.schema.createTable('org_data_keys')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('org_id', 'text', (c) => c.notNull().references('organizations.id'))
      .addColumn('wrapped', t.bytes, (c) => c.notNull())
      .addColumn('master_key_id', 'text', (c) => c.notNull())
      .addColumn('created_at', t.timestamp, (c) => c.notNull())
      .execute();
    await db.schema.createIndex('org_data_keys_org').on('org_data_keys').column('org_id').execute();
    await db.schema.createIndex('org_data_keys_master').on('org_data_keys').column('master_key_id').execute();

    await db.schema.createTable('service_users')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('org_id', 'text', (c) => c.notNull().references('organizations.id'))
      .addColumn('name', 'text', (c) => c.notNull())
      .addColumn('description', 'text', (c) => c.notNull().defaultTo(''))
      .addColumn('role', 'text', (c) => c.notNull())
      .addColumn('instance_admin', 'integer', (c) => c.notNull().defaultTo(0))
      .addColumn('disabled_at', t.timestamp)
      .addColumn('created_at', t.timestamp, (c) => c.notNull())
      .addColumn('updated_at', t.timestamp, (c) => c.notNull())
      .addUniqueConstraint('service_users_org_name', ['org_id', 'name'])
      .execute();

    await db.schema.createTable('client_secrets')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('service_user_id', 'text', (c) => c.notNull().references('service_users.id'))
      .addColumn('hash', t.bytes, (c) => c.notNull())
      .addColumn('hint', 'text', (c) => c.notNull())
      .addColumn('created_at', t.timestamp, (c) => c.notNull())
      .addColumn('last_used_at', t.timestamp)
      .execute();
    await db.schema.createIndex('client_secrets_user').on('client_secrets').column('service_user_id').execute();

    await db.schema.createTable('revoked_tokens')
      .addColumn('jti', 'text', (c) => c.primaryKey())
      .addColumn('service_user_id', 'text', (c) => c.notNull())
      .addColumn('expires_at', t.timestamp, (c) => c.notNull())
      .addColumn('revoked_at', t.timestamp, (c) => c.notNull())
      .execute();
    await db.schema.createIndex('revoked_tokens_revoked_at').on('revoked_tokens').column('revoked_at').execute();

    await db.schema.createTable('events')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('org_id', 'text', (c) => c.notNull().references('organizations.id'))
      .addColumn('type', 'text', (c) => c.notNull())
      .addColumn('actor_id', 'text')
      .addColumn('request_id', 'text')
      .addColumn('subject_type', 'text', (c) => c.notNull())
      .addColumn('subject_id', 'text', (c) => c.notNull())
      .addColumn('data', 'text', (c) => c.notNull())
      .addColumn('created_at', t.timestamp, (c) => c.notNull())
      .execute();
    await db.schema.createIndex('events_org_id').on('events').columns(['org_id', 'id']).execute();

    await db.schema.createTable('secrets')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('org_id', 'text', (c) => c.notNull().references('organizations.id'))
      .addColumn('name', 'text', (c) => c.notNull())
      .addColumn('version', 'integer', (c) => c.notNull())
      .addColumn('keys', 'text', (c) => c.notNull())
      .addColumn('created_at', t.timestamp, (c) => c.notNull())
      .addColumn('updated_at', t.timestamp, (c) => c.notNull())
      .addColumn('created_by', 'text')
      .addColumn('updated_by', 'text')
      .addColumn('deleted_at', t.timestamp)
      // A deleted secret keeps its name until it is purged: deleting frees nothing by surprise.
      .addUniqueConstraint('secrets_org_name', ['org_id', 'name'])
      .execute();

    await db.schema.createTable('secret_versions')
      .addColumn('secret_id', 'text', (c) => c.notNull().references('secrets.id'))
      .addColumn('version', 'integer', (c) => c.notNull())
      .addColumn('keys', 'text', (c) => c.notNull())
      .addColumn('data_key_id', 'text', (c) => c.notNull().references('org_data_keys.id'))
      .addColumn('ciphertext', t.bytes, (c) => c.notNull())
      .addColumn('created_at', t.timestamp, (c) => c.notNull())
      .addColumn('created_by', 'text')
      .addPrimaryKeyConstraint('secret_versions_pk', ['secret_id', 'version'])
      .execute();
  },
};
