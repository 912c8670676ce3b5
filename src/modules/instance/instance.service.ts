// Instance-wide facts fixed on first start and shared by every node through the database: the
// numeric project id of the audience scope and the pepper that keys client-secret hashes.
import { randomBytes, randomInt } from 'node:crypto';
import type { Db } from '../../platform/db/database.js';
import { unwrapKey, wrapKey, type MasterKeyring } from '../../platform/crypto/master-key.js';
import { instanceRepo } from './instance.repo.js';
import { nowIso } from '../../platform/clock.js';

/** What an instance key's wrapping is bound to (master-key rotation re-wraps with the same binding). */
export const instanceKeyBinding = (name: string) => `instance/${name}`;

export const PEPPER_KEY = 'client-secret-pepper';

export interface InstanceIdentity {
  projectId: string;
  pepper: Buffer;
}

/** 18 digits, like the numeric ids of the identity providers the spec's scope comes from. */
function newProjectId(): string {
  return String(randomInt(1, 10)) + Array.from({ length: 17 }, () => randomInt(0, 10)).join('');
}

/**
 * `adopt`: a configured project id that differs from the stored one replaces it (`serve` and
 * `migrate`); otherwise the stored one is used and `onIgnored` hears of the difference.
 */
export async function loadInstanceIdentity(
  db: Db, ring: MasterKeyring, configuredProjectId: string | null,
  options: { adopt?: boolean; onIgnored?: (stored: string, configured: string) => void } = {},
): Promise<InstanceIdentity> {
  const stored = await instanceRepo.setSettingOnce(db, 'project_id', configuredProjectId ?? newProjectId());
  let projectId = stored;
  if (configuredProjectId !== null && stored !== configuredProjectId) {
    if (options.adopt) {
      // The configured id wins; tokens issued for the old audience stop working, which is what changing it means.
      await db.updateTable('instance_settings').set({ value: configuredProjectId }).where('key', '=', 'project_id').execute();
      projectId = configuredProjectId;
    } else {
      options.onIgnored?.(stored, configuredProjectId);
    }
  }
  return { projectId, pepper: await loadInstanceKey(db, ring, PEPPER_KEY) };
}

/**
 * A 256-bit key of the instance, made by whichever node asks first and kept wrapped under the
 * master key, so every node (and every restart) uses the same one.
 */
export async function loadInstanceKey(db: Db, ring: MasterKeyring, name: string): Promise<Buffer> {
  const wrapped = wrapKey(ring, randomBytes(32), instanceKeyBinding(name));
  await instanceRepo.insertKeyOnce(db, { name, sealed: wrapped.sealed, master_key_id: wrapped.masterKeyId, created_at: nowIso() });
  const row = (await instanceRepo.getKey(db, name))!;
  return unwrapKey(ring, row.sealed, row.master_key_id, instanceKeyBinding(name));
}
