// The one ordered list of migrations, shared by SQLite and PostgreSQL.
import { Migrator, sql, type Migration } from 'kysely';
import type { Database } from '../database.js';
import { core } from './0001-core.js';
import { secretsLifecycle } from './0002-secrets-lifecycle.js';
import { idempotency } from './0003-idempotency.js';
import { deployments } from './0004-deployments.js';
import { serviceUserTokenGeneration } from './0005-service-user-token-generation.js';
import { revokedTokensExpiryIndex } from './0006-revoked-tokens-expiry-index.js';
import { orgExternalId } from './0007-org-external-id.js';
import { eventsCommitOrder } from './0008-events-commit-order.js';
import { deploymentHosts } from './0009-deployment-hosts.js';
import { idempotencyCommit } from './0010-idempotency-commit.js';
import { deploymentProcess } from './0011-deployment-process.js';
import { processReportedAt } from './0012-process-reported-at.js';
import { signingKeyRevocation } from './0013-signing-key-revocation.js';
import { processAddress } from './0014-process-address.js';
import { retiredOrgSlugs } from './0015-retired-org-slugs.js';
import { webhooks } from './0016-webhooks.js';
import { environmentConfiguration } from './0017-environment-configuration.js';
import { organizationDeletion } from './0018-organization-deletion.js';
import { runners } from './0019-runners.js';
import { runnerEnvironments } from './0020-runner-environments.js';
import { deploymentPromotions } from './0021-deployment-promotions.js';
import { environmentLocks } from './0022-environment-locks.js';
import { deploymentsPairById } from './0023-deployments-pair-by-id.js';
import { deploymentLogRetention } from './0024-deployment-log-retention.js';
import { runnerStopped } from './0025-runner-stopped.js';
import { environmentVersions } from './0026-environment-versions.js';
import { eventsTimeIndex } from './0027-events-time-index.js';
import { eventsSubjectIndex } from './0028-events-subject-index.js';
import { deploymentsServiceIndex } from './0029-deployments-service-index.js';
import { signingKeyTokenTtl } from './0030-signing-key-token-ttl.js';
import { columnTypes, type MigrationStep } from './types.js';

export const MIGRATIONS: MigrationStep[] = [core, secretsLifecycle, idempotency, deployments, serviceUserTokenGeneration, revokedTokensExpiryIndex, orgExternalId, eventsCommitOrder, deploymentHosts, idempotencyCommit, deploymentProcess, processReportedAt, signingKeyRevocation, processAddress, retiredOrgSlugs, webhooks, environmentConfiguration, organizationDeletion, runners, runnerEnvironments, deploymentPromotions, environmentLocks, deploymentsPairById, deploymentLogRetention, runnerStopped, environmentVersions, eventsTimeIndex, eventsSubjectIndex, deploymentsServiceIndex, signingKeyTokenTtl];

export interface MigrationOutcome {
  applied: string[];
}

function migratorOf(database: Pick<Database, 'db' | 'dialect'>): Migrator {
  const types = columnTypes(database.dialect);
  const migrations: Record<string, Migration> = {};
  for (const step of MIGRATIONS) migrations[step.name] = { up: (db) => step.up(db, types) };
  return new Migrator({ db: database.db, provider: { getMigrations: async () => migrations } });
}

/** Where a database's schema stands against this build's migrations; reading it writes nothing. */
export type SchemaState = { kind: 'current' } | { kind: 'absent' } | { kind: 'behind'; at: string; pending: string[] } | { kind: 'ahead'; unknown: string[] };

export async function schemaState(database: Pick<Database, 'db' | 'dialect'>): Promise<SchemaState> {
  const migrations = await migratorOf(database).getMigrations();
  const done = migrations.filter((m) => m.executedAt !== undefined);
  if (done.length === 0) return { kind: 'absent' };
  // Migrations a newer Slipway applied: this one does not know their schema.
  const known = new Set(MIGRATIONS.map((m) => m.name));
  const executed = await sql<{ name: string }>`select name from kysely_migration`.execute(database.db);
  const unknown = executed.rows.map((r) => r.name).filter((name) => !known.has(name)).sort();
  if (unknown.length > 0) return { kind: 'ahead', unknown };
  const pending = migrations.filter((m) => m.executedAt === undefined).map((m) => m.name);
  return pending.length === 0 ? { kind: 'current' } : { kind: 'behind', at: done[done.length - 1]!.name, pending };
}

export async function migrateToLatest(database: Database): Promise<MigrationOutcome> {
  const { error, results } = await migratorOf(database).migrateToLatest();
  if (error) {
    const failed = results?.find((r) => r.status === 'Error');
    const reason = error instanceof Error ? error.message : String(error);
    // No migration ran when the database could not be reached at all: say that, not which one failed.
    // The database's own code stays on the error (a busy SQLite file, say, is told apart by it).
    throw Object.assign(new Error(failed ? `migration ${failed.migrationName} failed: ${reason}` : `cannot migrate the database: ${reason}`, { cause: error }),
      { code: (error as { code?: unknown }).code });
  }
  return { applied: (results ?? []).filter((r) => r.status === 'Success').map((r) => r.migrationName) };
}
