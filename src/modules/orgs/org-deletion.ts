// What deleting an organization removes, in the order foreign keys need, in the caller's transaction:
// its deployments and their logs, services, environments, webhooks and their deliveries, secrets and
// every version's ciphertext, its data keys, service users with their client secrets, revoked token
// ids and idempotency records, and its event log. This is the one place that knows every table an
// organization's data lives in; a table added with an org_id must be added here (a test checks).
import type { Executor } from '../../platform/db/database.js';
import { errors } from '../../platform/errors.js';
import { UNFINISHED_STATES } from '../deployments/deployment-states.js';
import { runnersRepo } from '../runner/runners.repo.js';

/** Rows removed, by what they were. */
export interface PurgeCounts {
  deployments: number;
  services: number;
  environments: number;
  webhooks: number;
  secrets: number;
  secretVersions: number;
  serviceUsers: number;
  events: number;
}

/** At most this many are named in a refusal. */
const LISTED = 20;

/**
 * Refuses (409) while the organization holds an instance administrator, which deleting it would
 * delete (the caller itself, perhaps), while a deployment of it is queued, in progress or serving,
 * or while one of its runners is online (heard from since `onlineSince`, and not stopped): its
 * runners, whose credentials go with it, could no longer be told to stop what they run. A runner
 * learns that a deployment deleted with its service no longer serves only at its next report, and
 * with its credentials refused it keeps its services running, so it is stopped first.
 */
export async function assertDeletable(trx: Executor, org: { id: string; slug: string }, onlineSince: string): Promise<void> {
  const admins = await trx.selectFrom('service_users').select(['id', 'name']).where('org_id', '=', org.id).where('instance_admin', '=', 1).orderBy('id').limit(LISTED).execute();
  if (admins.length > 0) {
    throw errors.conflict('organization_has_instance_admins', `The organization "${org.slug}" holds instance administrators (${admins.map((a) => `${a.id} "${a.name}"`).join(', ')}), which deleting it would delete; make one in another organization and delete these first (one that is the organization's last enabled owner needs another owner beside it before it can be deleted).`,
      { conflicts: admins.map((a) => ({ serviceUser: a.id, name: a.name })) });
  }
  const blocking = await trx.selectFrom('deployments').select(['id', 'state']).where('org_id', '=', org.id)
    .where('state', 'in', [...UNFINISHED_STATES, 'succeeded']).orderBy('id').limit(LISTED).execute();
  if (blocking.length > 0) {
    throw errors.conflict('organization_in_use', `The organization "${org.slug}" has deployments that are queued, in progress or serving (${blocking.map((d) => `${d.id} ${d.state}`).join(', ')}${blocking.length === LISTED ? ', …' : ''}): cancel those that are unfinished, and delete its services (or environments) with ?force=true so that its runners stop what they run, then delete the organization.`,
      { conflicts: blocking.map((d) => ({ deployment: d.id, state: d.state })) });
  }
  const online = await runnersRepo.online(trx, org.id, onlineSince, LISTED);
  if (online.length > 0) {
    throw errors.conflict('organization_in_use', `The organization "${org.slug}" has runners online (${online.map((r) => `${r.host}${r.hostname !== null ? ` on ${r.hostname}` : ''}`).join(', ')}${online.length === LISTED ? ', …' : ''}), which deleting it would leave running what they run with nothing to tell them to stop: stop them first (SIGTERM or Ctrl-C; they stop their services), then delete the organization. One killed rather than stopped counts as online until it has not been heard from for the host timeout.`,
      { conflicts: online.map((r) => ({ runner: r.host, hostname: r.hostname, lastSeenAt: r.last_seen_at })) });
  }
}

/** What a node that remembers the organization is to forget once its deletion has committed. */
export interface Forgotten {
  serviceUserIds: string[];
  dataKeyIds: string[];
}

/** Removes everything the organization holds but its own row (see the top of this file); returns the ids of its service users and data keys, and what went. */
export async function purgeOrganization(trx: Executor, orgId: string): Promise<Forgotten & { counts: PurgeCounts }> {
  const count = (result: { numDeletedRows: bigint }) => Number(result.numDeletedRows);
  const users = (await trx.selectFrom('service_users').select('id').where('org_id', '=', orgId).execute()).map((r) => r.id);
  const dataKeyIds = (await trx.selectFrom('org_data_keys').select('id').where('org_id', '=', orgId).execute()).map((r) => r.id);

  await trx.deleteFrom('deployment_logs').where('deployment_id', 'in', (eb) => eb.selectFrom('deployments').select('id').where('org_id', '=', orgId)).execute();
  const deployments = count(await trx.deleteFrom('deployments').where('org_id', '=', orgId).executeTakeFirstOrThrow());
  const services = count(await trx.deleteFrom('services').where('org_id', '=', orgId).executeTakeFirstOrThrow());
  const environments = count(await trx.deleteFrom('environments').where('org_id', '=', orgId).executeTakeFirstOrThrow());
  await trx.deleteFrom('webhook_deliveries').where('webhook_id', 'in', (eb) => eb.selectFrom('webhooks').select('id').where('org_id', '=', orgId)).execute();
  const webhooks = count(await trx.deleteFrom('webhooks').where('org_id', '=', orgId).executeTakeFirstOrThrow());
  const secretVersions = count(await trx.deleteFrom('secret_versions').where('secret_id', 'in', (eb) => eb.selectFrom('secrets').select('id').where('org_id', '=', orgId)).executeTakeFirstOrThrow());
  const secrets = count(await trx.deleteFrom('secrets').where('org_id', '=', orgId).executeTakeFirstOrThrow());
  await trx.deleteFrom('org_data_keys').where('org_id', '=', orgId).execute();
  await trx.deleteFrom('runners').where('org_id', '=', orgId).execute();
  await trx.deleteFrom('client_secrets').where('service_user_id', 'in', (eb) => eb.selectFrom('service_users').select('id').where('org_id', '=', orgId)).execute();
  await trx.deleteFrom('revoked_tokens').where('service_user_id', 'in', (eb) => eb.selectFrom('service_users').select('id').where('org_id', '=', orgId)).execute();
  // A token's subject is its service user's id: the idempotency records of its requests go too.
  await trx.deleteFrom('idempotency_keys').where('subject', 'in', (eb) => eb.selectFrom('service_users').select('id').where('org_id', '=', orgId)).execute();
  const serviceUsers = count(await trx.deleteFrom('service_users').where('org_id', '=', orgId).executeTakeFirstOrThrow());
  const events = count(await trx.deleteFrom('events').where('org_id', '=', orgId).executeTakeFirstOrThrow());
  return { serviceUserIds: users, dataKeyIds, counts: { deployments, services, environments, webhooks, secrets, secretVersions, serviceUsers, events } };
}
