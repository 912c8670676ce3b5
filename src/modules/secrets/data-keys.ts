// Envelope encryption: each organization has a random data key, wrapped by the master key. A
// secret version's values are sealed with the data key and bound (associated data) to the
// organization, the secret and the version, so a ciphertext moved elsewhere will not open.
import { randomBytes } from 'node:crypto';
import { open, seal } from '../../platform/crypto/aead.js';
import { unwrapKey, wrapKey, type MasterKeyring } from '../../platform/crypto/master-key.js';
import type { Executor } from '../../platform/db/database.js';
import { newId } from '../../platform/ids.js';
import { nowIso } from '../../platform/clock.js';

export interface DataKey {
  id: string;
  key: Buffer;
}

/** What a data key's wrapping is bound to (master-key rotation re-wraps with the same binding). */
export const dataKeyBinding = (orgId: string, dataKeyId: string) => `org-data-key/${orgId}/${dataKeyId}`;
const valuesBinding = (orgId: string, secretId: string, version: number) => `slipway/secret/${orgId}/${secretId}/${version}`;

export function createDataKeys(deps: { ring: MasterKeyring }) {
  const unwrapped = new Map<string, Buffer>();
  const currentByOrg = new Map<string, string>();

  async function byId(db: Executor, id: string): Promise<Buffer> {
    const hit = unwrapped.get(id);
    if (hit) return hit;
    const row = await db.selectFrom('org_data_keys').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
    const key = unwrapKey(deps.ring, row.wrapped, row.master_key_id, dataKeyBinding(row.org_id, row.id));
    unwrapped.set(id, key);
    return key;
  }

  function openWith(key: Buffer, orgId: string, secretId: string, version: number, sealed: Buffer): Record<string, string> {
    return JSON.parse(open(key, sealed, valuesBinding(orgId, secretId, version)).toString('utf8')) as Record<string, string>;
  }

  return {
    /** The organization's current data key, made on first use inside the caller's transaction. */
    async current(db: Executor, orgId: string): Promise<DataKey> {
      const known = currentByOrg.get(orgId);
      if (known) return { id: known, key: await byId(db, known) };
      const row = await db.selectFrom('org_data_keys').select('id').where('org_id', '=', orgId).orderBy('id', 'desc').limit(1).executeTakeFirst();
      if (row) {
        currentByOrg.set(orgId, row.id);
        return { id: row.id, key: await byId(db, row.id) };
      }
      const id = newId('dataKey');
      const key = randomBytes(32);
      const wrapped = wrapKey(deps.ring, key, dataKeyBinding(orgId, id));
      await db.insertInto('org_data_keys').values({ id, org_id: orgId, wrapped: wrapped.sealed, master_key_id: wrapped.masterKeyId, created_at: nowIso() }).execute();
      // Unwrapped by id only: a key whose transaction rolls back is never asked for again.
      unwrapped.set(id, key);
      return { id, key };
    },

    byId,

    /**
     * Forgets which key is each organization's: on SQLite a transaction can find a data key another
     * one of its group commit has just made, and the group's COMMIT can still fail (a full disk).
     * Remembered, that key's id would be written into every later version, which its foreign key
     * refuses, until the process restarted.
     */
    forgetCurrent(): void {
      currentByOrg.clear();
    },

    /** Forgets a deleted organization's keys, unwrapped ones included: nothing of it stays in memory. */
    forgetOrganization(orgId: string, dataKeyIds: readonly string[]): void {
      currentByOrg.delete(orgId);
      for (const id of dataKeyIds) unwrapped.delete(id);
    },

    sealValues(dataKey: DataKey, orgId: string, secretId: string, version: number, values: Record<string, string>): Buffer {
      return seal(dataKey.key, Buffer.from(JSON.stringify(values), 'utf8'), valuesBinding(orgId, secretId, version));
    },

    async openValues(db: Executor, dataKeyId: string, orgId: string, secretId: string, version: number, sealed: Buffer): Promise<Record<string, string>> {
      return openWith(await byId(db, dataKeyId), orgId, secretId, version, sealed);
    },

    /**
     * Seals something other than a secret's values (a webhook's signing secret) under the data
     * key, bound to `binding`, which must name what it belongs to and never be a secret's.
     */
    sealBound(dataKey: DataKey, binding: string, plaintext: Buffer): Buffer {
      return seal(dataKey.key, plaintext, `slipway/${binding}`);
    },

    async openBound(db: Executor, dataKeyId: string, binding: string, sealed: Buffer): Promise<Buffer> {
      return open(await byId(db, dataKeyId), sealed, `slipway/${binding}`);
    },

    /** openValues with the data key in hand (byId of the version's data_key_id), for many versions at once. */
    openWith,
  };
}

export type DataKeys = ReturnType<typeof createDataKeys>;
