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
  /** When it stopped signing; its tokens stay valid until retired_at + token TTL. */
  retired_at: string | null;
}

export interface OrganizationsTable {
  id: string;
  slug: string;
  name: string;
  created_at: string;
  updated_at: string;
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

export interface Schema {
  instance_settings: InstanceSettingsTable;
  instance_keys: InstanceKeysTable;
  signing_keys: SigningKeysTable;
  organizations: OrganizationsTable;
  org_data_keys: OrgDataKeysTable;
  service_users: ServiceUsersTable;
  client_secrets: ClientSecretsTable;
  revoked_tokens: RevokedTokensTable;
  events: EventsTable;
  secrets: SecretsTable;
  secret_versions: SecretVersionsTable;
  /** Kept by Kysely's migrator. */
  kysely_migration: { name: string; timestamp: Generated<string> };
}
