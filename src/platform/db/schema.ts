// Table shapes as Kysely sees them. Timestamps travel as ISO 8601 strings on both databases
// (SQLite stores the text, PostgreSQL a timestamptz parsed back to the same string); flags are
// integers 0/1; JSON documents are text; ciphertext is bytes.
import type { Generated } from 'kysely';

export interface InstanceSettingsTable {
  key: string;
  value: string;
}

/** Secrets of the instance itself (the client-secret pepper), sealed under the master key. */
export interface InstanceKeysTable {
  name: string;
  sealed: Buffer;
  master_key_id: string;
  created_at: string;
}

export interface SigningKeysTable {
  kid: string;
  alg: string;
  public_jwk: string;
  private_sealed: Buffer;
  master_key_id: string;
  created_at: string;
  /** When it started signing; null while staged. */
  activated_at: string | null;
  /** When it stopped signing; its tokens stay valid until retired_at + token TTL (see token_ttl_seconds). */
  retired_at: string | null;
  /** When it was revoked: out of the JWKS from then on, its tokens no longer valid. */
  revoked_at: string | null;
  /**
   * The longest token lifetime (SLIPWAY_TOKEN_TTL) of the nodes that signed with it, recorded by
   * each before its first token; null until one does (or for a key a Slipway before this signed with).
   */
  token_ttl_seconds: number | null;
}

export interface OrganizationsTable {
  id: string;
  slug: string;
  name: string;
  /** The organization of the external issuer linked to this one (its resource owner id), if any. */
  external_id: string | null;
  created_at: string;
  updated_at: string;
  /** When it was deleted: the row stays, its slug its id and holding nothing, so that no other takes its slugs or id. */
  deleted_at?: string | null;
}

/** A slug an organization gave up: reserved to it, so that no other organization answers to it. */
export interface RetiredOrgSlugsTable {
  slug: string;
  org_id: string;
  retired_at: string;
}

export interface OrgDataKeysTable {
  id: string;
  org_id: string;
  wrapped: Buffer;
  master_key_id: string;
  created_at: string;
}

export interface ServiceUsersTable {
  id: string;
  org_id: string;
  name: string;
  description: string;
  role: string;
  instance_admin: number;
  disabled_at: string | null;
  /** Only tokens of this generation are accepted; each disable starts a new one. */
  token_generation: number;
  /** A runner's: JSON array of the ids of the environments whose deployments it may take; null: all. */
  runner_environments: string | null;
  created_at: string;
  updated_at: string;
}

export interface ClientSecretsTable {
  id: string;
  service_user_id: string;
  hash: Buffer;
  /** The secret's first characters, to tell two live secrets apart. */
  hint: string;
  created_at: string;
  last_used_at: string | null;
}

export interface RevokedTokensTable {
  jti: string;
  service_user_id: string;
  expires_at: string;
  revoked_at: string;
}

export interface EventsTable {
  /** SQLite: the row's place in commit order (see migration 0008). */
  seq?: Generated<number>;
  /** PostgreSQL: the id of the transaction that wrote it, as text (xid8; see migration 0008). */
  tx_id?: Generated<string>;
  id: string;
  org_id: string;
  type: string;
  actor_id: string | null;
  request_id: string | null;
  subject_type: string;
  subject_id: string;
  data: string;
  created_at: string;
}

export interface SecretsTable {
  id: string;
  org_id: string;
  name: string;
  version: number;
  keys: string;
  created_at: string;
  updated_at: string;
  created_by: string | null;
  updated_by: string | null;
  deleted_at: string | null;
}

export interface SecretVersionsTable {
  secret_id: string;
  version: number;
  keys: string;
  data_key_id: string;
  ciphertext: Buffer;
  created_at: string;
  created_by: string | null;
}

/** One row per (caller, Idempotency-Key): the lock while the first attempt runs, then its response. */
export interface IdempotencyKeysTable {
  subject: string;
  idempotency_key: string;
  method: string;
  path: string;
  /** HMAC-SHA-256 (hex, under the instance's idempotency key) of method, path and body: a retry must match it. */
  fingerprint: string;
  state: 'in_progress' | 'completed';
  /** Whoever holds the row; changes when an abandoned or expired row is taken over. */
  lock_token: string;
  locked_at: string;
  status: number | null;
  /** JSON object of the replayed response headers. */
  headers: string | null;
  /** The response body sealed under the instance key (it may carry a client secret). */
  body_sealed: Buffer | null;
  created_at: string;
  completed_at: string | null;
  /** The request id of the holder (null in rows older than the column). */
  request_id: string | null;
  /** Set in the holder's own transaction when it commits a change: from then on it must never run again. */
  committed_at: string | null;
}

export interface EnvironmentsTable {
  id: string;
  org_id: string;
  name: string;
  description: string;
  protected: number;
  /** JSON: name → value, laid over a service's plain variables. */
  variables: string;
  /** JSON: secret references, added to a service's. */
  secrets: string;
  /** Why it is locked (no deployment into it is created), by whom and since when; null while it is not. */
  lock_reason: string | null;
  locked_by: string | null;
  locked_at: string | null;
  /** Up by one with each change, a lock and an unlock included; from 1. */
  version: number;
  created_at: string;
  updated_at: string;
}

export interface ServicesTable {
  id: string;
  org_id: string;
  name: string;
  description: string;
  /** JSON: the service spec (command, port, health check, variables, secret references). */
  spec: string;
  /** Bumped by every change, so a deployment can say which version of the service it took. */
  version: number;
  created_at: string;
  updated_at: string;
}

export interface DeploymentsTable {
  id: string;
  org_id: string;
  service_id: string;
  environment_id: string;
  state: string;
  attempt: number;
  revision: string | null;
  description: string;
  /** JSON: the resolved spec and the secret versions it uses, fixed at creation (no values). */
  snapshot: string;
  rollback_of: string | null;
  /** The deployment (in another environment) this one was promoted from. */
  promoted_from: string | null;
  reason: string | null;
  /** The fencing token of the current lease; null unless in progress. */
  lease_token: string | null;
  lease_expires_at: string | null;
  claimed_by: string | null;
  /** Sequence number of the last log line. */
  log_seq: number;
  /** When its log was removed, its retention over (SLIPWAY_DEPLOYMENT_LOG_RETENTION_DAYS); null while it is kept. */
  logs_removed_at: string | null;
  created_by: string | null;
  created_at: string;
  updated_at: string;
  started_at: string | null;
  finished_at: string | null;
  /**
   * The runner (its `host` id, one per runner process) that runs or last ran the deployment's
   * process; for a deployment re-queued after a lost lease, the runner that lost it.
   */
  host_id: string | null;
  /** When that runner last said it runs it (null once it let it go), or when it lost the lease. */
  host_seen_at: string | null;
  /** What that runner last reported of the serving process: `running` or `restarting` (null: nothing yet). */
  process_state: string | null;
  /** How often the process exited on its own since that runner started it. */
  process_exits: number | null;
  /** JSON `{code, signal, at}` of its last exit on its own. */
  process_last_exit: string | null;
  /** When its runner last reported the process (null in rows reported before the column: `host_seen_at` stands in). */
  process_reported_at: string | null;
  /** Where the process answers, as its runner reported it (null: not reported, or by a runner that does not say). */
  process_hostname: string | null;
  process_port: number | null;
}

export interface DeploymentLogsTable {
  deployment_id: string;
  seq: number;
  attempt: number;
  stream: string;
  line: string;
  at: string;
}

export interface WebhooksTable {
  id: string;
  org_id: string;
  url: string;
  description: string;
  /** JSON array of event types and families; empty: every event. */
  event_types: string;
  active: number;
  disabled_reason: string | null;
  data_key_id: string;
  secret_sealed: Buffer;
  secret_generation: number;
  previous_secret_sealed: Buffer | null;
  previous_secret_expires_at: string | null;
  /** The last event delivered or passed over (null before the first): SQLite's seq, or PostgreSQL's tx_id and id. */
  position_seq: number | null;
  position_tx: string | null;
  position_event_id: string | null;
  failures: number;
  failing_since: string | null;
  next_attempt_at: string | null;
  last_attempt_at: string | null;
  last_status: number | null;
  last_error: string | null;
  lease_owner: string | null;
  lease_until: string | null;
  /** When a node last took it to deliver. */
  turn_at: string | null;
  created_at: string;
  updated_at: string;
}

export interface WebhookDeliveriesTable {
  id: string;
  webhook_id: string;
  event_id: string;
  event_type: string;
  attempt: number;
  status: number | null;
  error: string | null;
  duration_ms: number;
  created_at: string;
}

export interface RunnersTable {
  org_id: string;
  /** The runner process's own id (`host` in its claims and reports). */
  host: string;
  service_user_id: string;
  /** JSON array of environment ids it takes deployments from; null: all of the organization's. */
  environment_ids: string | null;
  hostname: string | null;
  version: string | null;
  /** The address its last recorded call came from. */
  address: string | null;
  first_seen_at: string;
  last_seen_at: string;
  /** When it said it stopped (it is offline from then on, its host never coming back); null: it did not. */
  stopped_at: string | null;
}

export interface Schema {
  instance_settings: InstanceSettingsTable;
  instance_keys: InstanceKeysTable;
  signing_keys: SigningKeysTable;
  organizations: OrganizationsTable;
  retired_org_slugs: RetiredOrgSlugsTable;
  org_data_keys: OrgDataKeysTable;
  service_users: ServiceUsersTable;
  client_secrets: ClientSecretsTable;
  revoked_tokens: RevokedTokensTable;
  events: EventsTable;
  secrets: SecretsTable;
  secret_versions: SecretVersionsTable;
  idempotency_keys: IdempotencyKeysTable;
  environments: EnvironmentsTable;
  services: ServicesTable;
  deployments: DeploymentsTable;
  deployment_logs: DeploymentLogsTable;
  webhooks: WebhooksTable;
  webhook_deliveries: WebhookDeliveriesTable;
  runners: RunnersTable;
  /** Kept by Kysely's migrator. */
  kysely_migration: { name: string; timestamp: Generated<string> };
}
