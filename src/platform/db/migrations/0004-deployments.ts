// Environments, services, deployments and their logs.
import { sql } from 'kysely';
import type { MigrationStep } from './types.js';

export const deployments: MigrationStep = {
  name: '0004-deployments',
  async up(db, t) {
    await db.schema.createTable('environments')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('org_id', 'text', (c) => c.notNull().references('organizations.id'))
      .addColumn('name', 'text', (c) => c.notNull())
      .addColumn('description', 'text', (c) => c.notNull().defaultTo(''))
      .addColumn('protected', 'integer', (c) => c.notNull().defaultTo(0))
      .addColumn('created_at', t.timestamp, (c) => c.notNull())
      .addColumn('updated_at', t.timestamp, (c) => c.notNull())
      .addUniqueConstraint('environments_org_name', ['org_id', 'name'])
      .execute();

    await db.schema.createTable('services')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('org_id', 'text', (c) => c.notNull().references('organizations.id'))
      .addColumn('name', 'text', (c) => c.notNull())
      .addColumn('description', 'text', (c) => c.notNull().defaultTo(''))
      .addColumn('spec', 'text', (c) => c.notNull())
      .addColumn('version', 'integer', (c) => c.notNull())
      .addColumn('created_at', t.timestamp, (c) => c.notNull())
      .addColumn('updated_at', t.timestamp, (c) => c.notNull())
      .addUniqueConstraint('services_org_name', ['org_id', 'name'])
      .execute();

    await db.schema.createTable('deployments')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('org_id', 'text', (c) => c.notNull().references('organizations.id'))
      .addColumn('service_id', 'text', (c) => c.notNull().references('services.id'))
      .addColumn('environment_id', 'text', (c) => c.notNull().references('environments.id'))
      .addColumn('state', 'text', (c) => c.notNull())
      .addColumn('attempt', 'integer', (c) => c.notNull())
      .addColumn('revision', 'text')
      .addColumn('description', 'text', (c) => c.notNull().defaultTo(''))
      // The resolved spec and the secret versions it uses (never values), fixed at creation.
      .addColumn('snapshot', 'text', (c) => c.notNull())
      .addColumn('rollback_of', 'text')
      .addColumn('reason', 'text')
      .addColumn('lease_token', 'text')
      .addColumn('lease_expires_at', t.timestamp)
      .addColumn('claimed_by', 'text')
      // The sequence number of the last log line: appending bumps it under the row's lock.
      .addColumn('log_seq', 'integer', (c) => c.notNull().defaultTo(0))
      .addColumn('created_by', 'text')
      .addColumn('created_at', t.timestamp, (c) => c.notNull())
      .addColumn('updated_at', t.timestamp, (c) => c.notNull())
      .addColumn('started_at', t.timestamp)
      .addColumn('finished_at', t.timestamp)
      .execute();
    await db.schema.createIndex('deployments_org_id').on('deployments').columns(['org_id', 'id']).execute();
    await db.schema.createIndex('deployments_org_state').on('deployments').columns(['org_id', 'state', 'id']).execute();
    await db.schema.createIndex('deployments_pair').on('deployments').columns(['service_id', 'environment_id', 'state']).execute();
    await db.schema.createIndex('deployments_environment').on('deployments').columns(['environment_id', 'id']).execute();
    // A runner claims in its environments, oldest first: a backlog elsewhere in the organization is not scanned.
    await db.schema.createIndex('deployments_environment_state').on('deployments').columns(['environment_id', 'state', 'id']).execute();
    // Partial: only leases in force are indexed, so creating a (queued) deployment writes one index fewer.
    await db.schema.createIndex('deployments_lease').on('deployments').column('lease_expires_at').where(sql.ref('state'), '=', 'in_progress').execute();
    // The database itself refuses a second in-progress deployment of one service into one environment.
    await db.schema.createIndex('deployments_one_in_progress').on('deployments').columns(['service_id', 'environment_id'])
      .unique().where(sql.ref('state'), '=', 'in_progress').execute();

    await db.schema.createTable('deployment_logs')
      .addColumn('deployment_id', 'text', (c) => c.notNull().references('deployments.id'))
      .addColumn('seq', 'integer', (c) => c.notNull())
      .addColumn('attempt', 'integer', (c) => c.notNull())
      .addColumn('stream', 'text', (c) => c.notNull())
      .addColumn('line', 'text', (c) => c.notNull())
      .addColumn('at', t.timestamp, (c) => c.notNull())
      .addPrimaryKeyConstraint('deployment_logs_pk', ['deployment_id', 'seq'])
      .execute();
  },
};
