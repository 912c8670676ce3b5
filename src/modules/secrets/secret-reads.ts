// Reading secrets: metadata (lists, one secret, its versions), the audited reveal of values, and
// the two functions deployments use to pin versions and to resolve them for a runner.
import type { RequestContext } from '../../platform/context.js';
import { nowIso, type Executor } from '../../platform/db/database.js';
import { errors } from '../../platform/errors.js';
import { cursorList, pageRequest, toPage, type Page } from '../../platform/pagination.js';
import { appendEvents } from '../events/event-log.js';
import { checkExpected, type Expected } from './secret-changes.js';
import { toMetadata, type Values } from './secret-model.js';
import { pinnedVersionKey } from '../services/service-spec.js';
import type { SecretStore } from './secret-store.js';
import { secretsRepo, type SecretVersionRow } from './secrets.repo.js';
import type { RevealedSecretT, SecretMetadataT, SecretVersionT } from './secrets.schemas.js';

function toVersion(row: SecretVersionRow): SecretVersionT {
  return { version: row.version, keys: JSON.parse(row.keys) as string[], createdAt: row.created_at, createdBy: row.created_by };
}

/** A pinned secret version: the secret's id and version are what count; the name is for messages. */
export interface SecretRef {
  secretId: string;
  name: string;
  version: number;
}

/**
 * The version rows of pinned (secret id, version) pairs that still exist, by `secretId@version`:
 * of this organization's secrets only, found by id, never by name, which a new secret may have
 * taken since.
 */
async function pinnedRows(executor: Executor, orgId: string, refs: SecretRef[], hold = false): Promise<Map<string, SecretVersionRow>> {
  if (refs.length === 0) return new Map();
  const ids = [...new Set(refs.map((r) => r.secretId).filter((id): id is string => typeof id === 'string'))];
  const owned = new Set((await secretsRepo.findByIds(executor, orgId, ids, hold)).map((r) => r.id));
  const pinned = refs.filter((ref) => owned.has(ref.secretId)).map((ref) => ({ secretId: ref.secretId, version: ref.version }));
  return new Map((pinned.length > 0 ? await secretsRepo.findVersions(executor, pinned) : []).map((v) => [pinnedVersionKey({ secretId: v.secret_id, version: v.version }), v]));
}

const missingOf = (refs: SecretRef[], rows: ReadonlyMap<string, SecretVersionRow>): string[] =>
  refs.filter((ref) => !rows.has(pinnedVersionKey(ref))).map((ref) => `${ref.name}@${ref.version}`);

export function createSecretReads(store: SecretStore) {
  const { db } = store.deps;
  const unlocked = { lock: false };

  return {
    async list(orgId: string, query: { limit?: number; cursor?: string; prefix?: string; deleted?: boolean }): Promise<Page<SecretMetadataT>> {
      // An empty prefix filters nothing, as no prefix.
      const list = cursorList('secrets', { org: orgId, prefix: query.prefix || undefined, deleted: query.deleted === true });
      const page = pageRequest(list, query);
      const rows = await secretsRepo.list(db, orgId, { ...page, prefix: query.prefix, deleted: query.deleted === true, restorableAfter: store.keep.cutoff(nowIso()) });
      const result = toPage(list, rows, page.limit, (r) => r.name);
      return { items: result.items.map((r) => toMetadata(r, store.keep)), nextCursor: result.nextCursor };
    },

    async get(orgId: string, name: string): Promise<SecretMetadataT> {
      return toMetadata(await store.live(db, orgId, name, nowIso(), unlocked));
    },

    /** Newest first; the cursor is the last version number returned. */
    async listVersions(orgId: string, name: string, query: { limit?: number; cursor?: string }): Promise<Page<SecretVersionT>> {
      const row = await store.live(db, orgId, name, nowIso(), unlocked);
      // The secret's id, not its name: one deleted and created again under the name is another.
      const list = cursorList('secret-versions', { org: orgId, secret: row.id });
      const page = pageRequest(list, query);
      const before = page.after === null ? null : Number(page.after);
      // A cursor is ours only if it decodes, but its number is checked as a request's would be:
      // PostgreSQL refuses a comparison with one past 32 bits (a 500, were it let through).
      if (before !== null && !(Number.isInteger(before) && before >= 1 && before <= 2_147_483_647)) throw errors.invalidCursor();
      const rows = await secretsRepo.listVersions(db, row.id, { before, limit: page.limit });
      const result = toPage(list, rows, page.limit, (r) => String(r.version));
      return { items: result.items.map(toVersion), nextCursor: result.nextCursor };
    },

    async getVersion(orgId: string, name: string, version: number): Promise<SecretVersionT> {
      const row = await store.live(db, orgId, name, nowIso(), unlocked);
      return toVersion(await store.version(db, row, version));
    },

    /**
     * The values of the current or a given version, and the secret's id; the `secret.revealed`
     * event commits with the read.
     */
    /** `expected`: the If-Match of a caller that reveals only the version it has seen. */
    async reveal(ctx: RequestContext, orgId: string, name: string, version?: number, expected?: Expected): Promise<{ revealed: RevealedSecretT; secretId: string }> {
      const now = nowIso();
      return db.transaction().execute(async (trx) => {
        const row = await store.live(trx, orgId, name, now, unlocked);
        checkExpected(row, expected);
        const v = await store.version(trx, row, version ?? row.version);
        const values = await store.open(trx, orgId, v);
        await appendEvents(trx, ctx, [{
          orgId, type: 'secret.revealed', subject: { type: 'secret', id: row.id },
          data: { name, version: v.version, current: v.version === row.version, keys: JSON.parse(v.keys) as string[] },
        }], now);
        return { revealed: { name, version: v.version, values }, secretId: row.id };
      });
    },

    /**
     * A reveal's replay (same caller, same Idempotency-Key): the values of the version the first
     * reveal returned, read again; its `secret.revealed` event was the first one's. A secret deleted
     * since, or deleted permanently and created again under its name, is not found.
     */
    async revealAgain(orgId: string, name: string, secretId: string, version: number): Promise<RevealedSecretT> {
      const row = await store.live(db, orgId, name, nowIso(), unlocked);
      if (row.id !== secretId) throw errors.secretNotFound(name);
      const v = await store.version(db, row, version);
      return { name, version: v.version, values: await store.open(db, orgId, v) };
    },

    /**
     * The id, current version and keys of each named secret, for a service to check or a deployment
     * to pin. A name that does not exist or is deleted is left out: the caller refuses it, together
     * with whatever else is wrong with the references (service-spec.ts). `hold` (PostgreSQL) keeps
     * them as read until the transaction ends: a deletion or a new version being made is waited for.
     */
    async currentVersions(executor: Executor, orgId: string, names: string[], hold = false): Promise<Map<string, { secretId: string; version: number; keys: string[] }>> {
      const rows = await secretsRepo.findByNames(executor, orgId, [...new Set(names)], { lock: false, share: hold && store.deps.dialect === 'postgres' });
      return new Map(rows.filter((r) => r.deleted_at === null).map((r) => [r.name, { secretId: r.id, version: r.version, keys: JSON.parse(r.keys) as string[] }]));
    },

    /**
     * `name@version` of each pinned version that is gone, for a rollback to refuse up front what
     * resolveValues would fail at the claim; nothing is decrypted.
     */
    async missingVersions(executor: Executor, orgId: string, refs: SecretRef[]): Promise<string[]> {
      // Held (PostgreSQL): a rollback made of them is not made after their permanent deletion answered.
      return missingOf(refs, await pinnedRows(executor, orgId, refs, store.deps.dialect === 'postgres'));
    },

    /**
     * The keys each pinned version holds, by secret name, for a promotion to check what the
     * versions it carries over export against its environment's configuration; and, as
     * missingVersions does, `name@version` of each that is gone. Nothing is decrypted.
     */
    async pinnedKeys(executor: Executor, orgId: string, refs: SecretRef[]): Promise<{ versions: Map<string, { secretId: string; version: number; keys: string[] }>; missing: string[] }> {
      const rows = await pinnedRows(executor, orgId, refs, store.deps.dialect === 'postgres');
      const versions = new Map<string, { secretId: string; version: number; keys: string[] }>();
      for (const ref of refs) {
        const row = rows.get(pinnedVersionKey(ref));
        if (row !== undefined) versions.set(ref.name, { secretId: ref.secretId, version: ref.version, keys: JSON.parse(row.keys) as string[] });
      }
      return { versions, missing: missingOf(refs, rows) };
    },

    /**
     * The values of pinned (secret id, version) pairs, for a runner's claim, keyed by
     * pinnedVersionKey: two versions of one secret (a promotion's) are two entries.
     * A pinned version stays resolvable while its secret exists, deleted or not (a soft delete
     * frees nothing by surprise, so a queued deployment or a rollback still gets what it pinned);
     * after a permanent delete or a purge it is gone, even if a new secret has taken the name
     * since, and the call fails with a 422 naming every `name@version` missing.
     */
    async resolveValues(executor: Executor, orgId: string, refs: SecretRef[]): Promise<Map<string, Values>> {
      const rows = await pinnedRows(executor, orgId, refs);
      const missing = missingOf(refs, rows);
      if (missing.length > 0) throw errors.secretVersionsGone(missing);
      const out = new Map<string, Values>();
      for (const ref of refs) {
        const key = pinnedVersionKey(ref);
        if (!out.has(key)) out.set(key, await store.open(executor, orgId, rows.get(key)!));
      }
      return out;
    },
  };
}
