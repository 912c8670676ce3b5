// What every secrets operation shares: its dependencies, how a live secret is found and locked,
// how a version is sealed and opened, and how expired deletions are purged.
import type { Limits } from '../../platform/config.js';
import { SYSTEM_ACTOR_ID, type RequestContext } from '../../platform/context.js';
import type { Db, Dialect, Executor } from '../../platform/db/database.js';
import { scrubDeleted } from '../../platform/db/scrub.js';
import { errors } from '../../platform/errors.js';
import { newId } from '../../platform/ids.js';
import { appendEvents } from '../events/event-log.js';
import type { DataKey, DataKeys } from './data-keys.js';
import { keysOf, retention, type Values } from './secret-model.js';
import { secretsRepo, type SecretRow, type SecretVersionRow, type WithCurrent } from './secrets.repo.js';

export interface SecretsDeps {
  db: Db;
  dataKeys: DataKeys;
  /** PostgreSQL takes row locks before a change; SQLite's write transactions are serialized already. */
  dialect: Dialect;
  limits: Limits;
  /** Days a deleted secret can be restored before it is purged. */
  retentionDays: number;
}

/** Purges happen by rule, not by anyone's hand: their events name the system, and the request that triggered them if any. */
function systemContext(requestId: string | null = null): RequestContext {
  return { requestId, actor: { id: SYSTEM_ACTOR_ID, kind: 'cli', orgId: null, role: null, instanceAdmin: true } };
}

export function createSecretStore(deps: SecretsDeps) {
  const { dataKeys } = deps;
  const lock = { lock: deps.dialect === 'postgres' };
  const keep = retention(deps.retentionDays);

  const isExpired = (row: SecretRow, now: string) => row.deleted_at !== null && row.deleted_at < keep.cutoff(now);
  /** Whether a purge has destroyed secrets since the last scrub (see scrub.ts). */
  let unscrubbed = false;

  function assertLive(row: SecretRow | undefined, name: string, now: string): void {
    if (row === undefined || isExpired(row, now)) throw errors.secretNotFound(name);
    if (row.deleted_at !== null) throw errors.secretDeleted(name, keep.until(row.deleted_at));
  }

  /** `keys`: the values' key names, when the caller has them already. */
  function sealVersion(dataKey: DataKey, orgId: string, secretId: string, version: number, values: Values, now: string, ctx: RequestContext, keys = keysOf(values)): SecretVersionRow {
    return {
      secret_id: secretId, version, keys: JSON.stringify(keys), data_key_id: dataKey.id,
      ciphertext: dataKeys.sealValues(dataKey, orgId, secretId, version, values), created_at: now, created_by: ctx.actor.id,
    };
  }

  return {
    deps,
    lock,
    /**
     * Leaves no copy of the secrets destroyed so far in the database's live files (see scrub.ts).
     * It never fails what was destroyed (that has committed): one it could not finish is done again
     * by the next purge sweep.
     */
    async scrub(): Promise<void> {
      unscrubbed = false;
      if (!(await scrubDeleted(deps.db, ['secret_versions', 'secrets']).catch(() => false))) unscrubbed = true;
    },
    purgedSinceScrub: (): boolean => unscrubbed,
    keep,
    isExpired,

    /** The secret as a caller may see and change it: a deleted one is a 404 that says how to restore it. */
    async live(db: Executor, orgId: string, name: string, now: string, opts = lock): Promise<SecretRow> {
      const row = await secretsRepo.findByName(db, orgId, name, opts);
      assertLive(row, name, now);
      return row!;
    },

    /** A live secret and its current version, locked for a change. */
    async liveWithCurrent(db: Executor, orgId: string, name: string, now: string): Promise<{ secret: SecretRow; current: SecretVersionRow }> {
      const found = await secretsRepo.findWithCurrent(db, orgId, name, lock);
      assertLive(found?.secret, name, now);
      return found!;
    },

    /** One version's row, or the 404 that names it. */
    async version(db: Executor, row: SecretRow, version: number): Promise<SecretVersionRow> {
      const found = await secretsRepo.findVersion(db, row.id, version);
      if (found === undefined) throw errors.notFound('secret version', `${row.name}@${version}`);
      return found;
    },

    async open(db: Executor, orgId: string, v: SecretVersionRow): Promise<Values> {
      return dataKeys.openValues(db, v.data_key_id, orgId, v.secret_id, v.version, v.ciphertext);
    },

    /** Each secret's current values, by secret id; each data key is looked up once, not once per secret. */
    async openCurrent(db: Executor, orgId: string, pairs: WithCurrent[]): Promise<Map<string, Values>> {
      const keys = new Map<string, Buffer>();
      for (const { current: v } of pairs) if (!keys.has(v.data_key_id)) keys.set(v.data_key_id, await dataKeys.byId(db, v.data_key_id));
      return new Map(pairs.map(({ secret, current: v }) => [secret.id, dataKeys.openWith(keys.get(v.data_key_id)!, orgId, v.secret_id, v.version, v.ciphertext)]));
    },

    sealVersion,

    /** A new secret at version 1: its row, its first version, and its key names as a list. */
    newSecret(dataKey: DataKey, orgId: string, name: string, values: Values, now: string, ctx: RequestContext): NewSecret {
      const id = newId('secret');
      const keys = keysOf(values);
      const version = sealVersion(dataKey, orgId, id, 1, values, now, ctx, keys);
      return {
        secret: { id, org_id: orgId, name, version: 1, keys: version.keys, created_at: now, updated_at: now, created_by: ctx.actor.id, updated_by: ctx.actor.id, deleted_at: null },
        version,
        keys,
      };
    },

    /** Destroys these (locked) secrets and every version's ciphertext, with one event each. */
    async purge(trx: Executor, rows: SecretRow[], requestId: string | null, now: string): Promise<void> {
      if (rows.length === 0) return;
      unscrubbed = true;
      await secretsRepo.destroy(trx, rows.map((r) => r.id));
      await appendEvents(trx, systemContext(requestId), rows.map((r) => ({
        orgId: r.org_id, type: 'secret.purged', subject: { type: 'secret', id: r.id },
        data: { name: r.name, version: r.version, deletedAt: r.deleted_at, reason: 'retention ended' },
      })), now);
    },
  };
}

export type SecretStore = ReturnType<typeof createSecretStore>;

export interface NewSecret {
  secret: SecretRow;
  version: SecretVersionRow;
  keys: string[];
}
