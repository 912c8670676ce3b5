// Instance key management: which master key wraps what, rotating the master key (re-wrapping
// every wrapped row while servers keep serving) and rotating the token signing key. These are
// instance operations, not organization changes, so they are logged rather than recorded as events;
// logs carry key ids (fingerprints), never key material.
import fs from 'node:fs';
import path from 'node:path';
import type { Config } from '../../platform/config.js';
import { generateMasterKey, KEY_FILE, keyringOf, masterKeyId, readKeyFile, retiredChain, writeKeyFile, type MasterKeyring } from '../../platform/crypto/master-key.js';
import type { Database } from '../../platform/db/database.js';
import { errors } from '../../platform/errors.js';
import type { Logger } from '../../platform/logging.js';
import type { SigningKeyInfo, SigningKeys } from '../auth/signing-keys.js';
import { keysRepo, WRAPPED_TABLES, type WrappedTable } from './keys.repo.js';
import { assertEveryKeyAvailable, rewrapUntilClean, type RewrapProgress } from './master-key-rotation.js';
import { acquireRotationLock } from './rotation-lock.js';

export interface MasterKeyUsage {
  masterKeyId: string;
  current: boolean;
  /** Whether this process can unwrap with it (false: rows nobody here can open). */
  configured: boolean;
  rows: Record<WrappedTable, number>;
  total: number;
}

export interface KeysStatus {
  masterKey: {
    source: 'key-file' | 'environment';
    keyFile: string | null;
    currentId: string;
    acceptedIds: string[];
    /** Rows still under another key than the current one, or old keys still in the key file. */
    rotationPending: boolean;
    usage: MasterKeyUsage[];
  };
  signingKeys: SigningKeyInfo[];
}

export interface RotateMasterOptions {
  /** The operator's new key; without it the key-file source generates one. */
  newKey?: Buffer;
  batchSize: number;
  pauseMs: number;
  onProgress?: (progress: RewrapProgress) => void;
}

export interface MasterKeyRotation {
  source: KeysStatus['masterKey']['source'];
  masterKeyId: string;
  /** Keys no row is wrapped under any more. */
  previousKeyIds: string[];
  /** This run finished what an earlier, interrupted one started. */
  resumed: boolean;
  rewrapped: number;
  /** What the operator still has to do (the environment source cannot edit the environment). */
  nextSteps: string[];
}

export interface KeysServiceDeps {
  config: Pick<Config, 'masterKey' | 'dataDir'>;
  database: Database;
  /** The process's own keyring (as a server opens it). */
  ring: MasterKeyring;
  signingKeys: SigningKeys;
  logger: Logger;
}

/**
 * Backups are copies of the rows as they were: one taken before a rotation opens only with the keys
 * the rotation retired, which Slipway no longer keeps once it is done.
 */
function earlierBackupsStep(retiredIds: string[], source: MasterKeyRotation['source']): string[] {
  if (retiredIds.length === 0) return [];
  const it = retiredIds.length === 1 ? 'it' : 'them';
  // SLIPWAY_MASTER_KEY_PREVIOUS alone is refused (it needs SLIPWAY_MASTER_KEY): a key file's previous keys are its own lines.
  const restore = source === 'key-file'
    ? `Restoring one needs ${it} as a line at the end of the key file (after the current key, which wraps), or SLIPWAY_MASTER_KEY set to the current key and SLIPWAY_MASTER_KEY_PREVIOUS to ${it}.`
    : `Restoring one needs ${it} in SLIPWAY_MASTER_KEY_PREVIOUS.`;
  const gone = source === 'key-file' ? `the key file no longer holds ${it}` : `no node holds ${it} once SLIPWAY_MASTER_KEY_PREVIOUS is removed`;
  return [`Backups taken before this rotation open only with the retired key${retiredIds.length === 1 ? '' : 's'} ${retiredIds.join(', ')}, and ${gone}: keep a copy of ${it}${source === 'key-file' ? ' (the key file as backed up before this rotation)' : ''} with those backups for as long as they are kept. ${restore}`];
}

export function createKeysService(deps: KeysServiceDeps) {
  const { database, logger } = deps;
  const fromEnv = deps.config.masterKey !== null;
  const keyFile = path.join(deps.config.dataDir, KEY_FILE);

  function rewrap(ring: MasterKeyring, options: RotateMasterOptions, retireOldKeys: () => void) {
    return rewrapUntilClean({ database, ring, logger, batchSize: options.batchSize, pauseMs: options.pauseMs, retireOldKeys, ...(options.onProgress ? { onProgress: options.onProgress } : {}) });
  }

  /** Generates (or takes) the new key, puts it first in the key file, re-wraps, then drops the old keys. */
  async function rotateKeyFile(options: RotateMasterOptions): Promise<MasterKeyRotation> {
    const lock = acquireRotationLock(`${keyFile}.lock`);
    try {
      if (lock.tookOverFrom !== null) logger.warn({ holderPid: lock.tookOverFrom }, 'an earlier master key rotation stopped before finishing; continuing it');
      let keys = readKeyFile(keyFile);
      // A rotation that started and has not finished: its new key is first in the file, and its
      // process left its lock behind, or rows are under that key and under another, or it is the
      // key --new-key-file names again. More keys with every row under the first are old keys added
      // to open a restored backup (see Backups): this rotation makes a new key, as one not begun does.
      const usage = await keysRepo.usage(database.db);
      const first = masterKeyId(keys[0]!);
      const resumed = keys.length > 1 && (lock.tookOverFrom !== null || options.newKey?.equals(keys[0]!) === true
        || (usage.some((u) => u.masterKeyId === first) && usage.some((u) => u.masterKeyId !== first)));
      if (resumed && options.newKey && !options.newKey.equals(keys[0]!)) {
        throw errors.conflict('rotation_unfinished', `An earlier rotation to master key ${masterKeyId(keys[0]!)} has not finished; run slipway keys rotate-master without --new-key-file to finish it first.`);
      }
      if (!resumed) {
        const next = options.newKey ?? generateMasterKey();
        if (keys.some((k) => k.equals(next))) throw errors.conflict('master_key_in_use', 'The new master key is the one already in use; give another key.');
        keys = [next, ...keys];
      }
      const ring = keyringOf(keys, keyFile);
      await assertEveryKeyAvailable(database, ring);
      // The ids earlier rotations retired stay named, so that a server that saw none of them follows.
      if (!resumed) writeKeyFile(keyFile, keys, retiredChain(keyFile));
      const previousKeyIds = ring.all().slice(1).map((k) => k.id);
      logger.info({ masterKeyId: ring.current().id, previous: previousKeyIds, resumed, source: 'key-file' }, 'master key rotation started');
      const { rewrapped } = await rewrap(ring, options, () => writeKeyFile(keyFile, [keys[0]!], retiredChain(keyFile, previousKeyIds)));
      deps.ring.reload();
      const nextSteps = [`Back up ${keyFile}: it now holds only the new key.`, ...earlierBackupsStep(previousKeyIds, 'key-file')];
      return { source: 'key-file', masterKeyId: ring.current().id, previousKeyIds, resumed, rewrapped, nextSteps };
    } finally {
      lock.release();
    }
  }

  /** The operator has configured the new key (and the old ones as previous); re-wraps everything under it. */
  async function rotateEnvironment(options: RotateMasterOptions): Promise<MasterKeyRotation> {
    const accepted = deps.ring.all();
    const next = options.newKey ?? accepted[0]!.key;
    const ring = keyringOf([next, ...accepted.map((k) => k.key).filter((k) => !k.equals(next))], deps.ring.source);
    const target = ring.current().id;
    const before = await keysRepo.usage(database.db);
    const resumed = before.some((u) => u.masterKeyId === target) && before.some((u) => u.masterKeyId !== target);
    const previousKeyIds = ring.all().slice(1).map((k) => k.id);
    await assertEveryKeyAvailable(database, ring);
    logger.info({ masterKeyId: target, previous: previousKeyIds, resumed, source: 'environment' }, 'master key rotation started');
    const { rewrapped } = await rewrap(ring, options, () => {});
    const nextSteps = [
      ...(target !== accepted[0]!.id ? [`Set SLIPWAY_MASTER_KEY to the new key (${target}) on every node.`] : []),
      `Only once slipway keys status shows no row under the old key${previousKeyIds.length === 1 ? '' : 's'} (${previousKeyIds.join(', ') || 'none'}): remove SLIPWAY_MASTER_KEY_PREVIOUS from every node, restart them one at a time, then destroy the old key${previousKeyIds.length === 1 ? '' : 's'} but for the copy kept with earlier backups. Until then a node still on an old key wraps new rows under it: switch it, and run slipway keys rotate-master again.`,
      ...earlierBackupsStep(previousKeyIds, 'environment'),
      ...(fs.existsSync(keyFile) ? [`Delete ${keyFile}: no row needs its keys any more (earlier backups may: see above).`] : []),
    ];
    return { source: 'environment', masterKeyId: target, previousKeyIds, resumed, rewrapped, nextSteps };
  }

  return {
    async status(): Promise<KeysStatus> {
      const current = deps.ring.current().id;
      const accepted = deps.ring.all().map((k) => k.id);
      const usage = new Map<string, MasterKeyUsage>();
      const entry = (id: string) => {
        let u = usage.get(id);
        if (u === undefined) {
          u = { masterKeyId: id, current: id === current, configured: accepted.includes(id), rows: Object.fromEntries(WRAPPED_TABLES.map((t) => [t, 0])) as Record<WrappedTable, number>, total: 0 };
          usage.set(id, u);
        }
        return u;
      };
      for (const id of accepted) entry(id);
      for (const u of await keysRepo.usage(database.db)) {
        const e = entry(u.masterKeyId);
        e.rows[u.table] += u.rows;
        e.total += u.rows;
      }
      const all = [...usage.values()];
      return {
        masterKey: {
          source: fromEnv ? 'environment' : 'key-file',
          keyFile: fromEnv ? null : keyFile,
          currentId: current,
          acceptedIds: accepted,
          rotationPending: all.some((u) => !u.current && u.total > 0) || (!fromEnv && accepted.length > 1),
          usage: all,
        },
        signingKeys: await deps.signingKeys.list(),
      };
    },

    async rotateMaster(options: RotateMasterOptions): Promise<MasterKeyRotation> {
      const result = fromEnv ? await rotateEnvironment(options) : await rotateKeyFile(options);
      logger.info({ masterKeyId: result.masterKeyId, previous: result.previousKeyIds, rewrapped: result.rewrapped, source: result.source }, 'master key rotation finished');
      return result;
    },

    /**
     * The next signing key, published ahead, signs, and a new next one is staged; the old one
     * stays in the JWKS until every token it signed has expired, or with `revokePrevious` every
     * other key is revoked at once and a new key signs.
     */
    async rotateSigning(opts: { revokePrevious?: boolean } = {}): Promise<{ active: SigningKeyInfo; next: SigningKeyInfo; retired: SigningKeyInfo[]; revoked: SigningKeyInfo[] }> {
      // The new key is wrapped under this command's master key. One no row is under (a key retired
      // since, or one the servers were not given yet) may be one the servers cannot open, and then
      // no server could issue a token.
      const current = deps.ring.current().id;
      const usage = await keysRepo.usage(database.db);
      if (usage.length > 0 && !usage.some((u) => u.masterKeyId === current)) {
        const inUse = [...new Set(usage.map((u) => u.masterKeyId))].join(', ');
        throw errors.conflict('master_key_not_in_use', `This command's master key ${current} wraps nothing here (the data is under ${inUse}), so a signing key wrapped under it may be one the servers cannot open. `
          + 'Run it with the master key the servers use, or finish moving to this one first (slipway keys rotate-master); nothing was changed.');
      }
      const rotated = await deps.signingKeys.rotate(opts);
      const keys = await deps.signingKeys.list();
      const active = keys.find((k) => k.kid === rotated.kid)!;
      const next = keys.find((k) => k.kid === rotated.next)!;
      const retired = keys.filter((k) => rotated.retired.includes(k.kid));
      const revoked = keys.filter((k) => rotated.revoked.includes(k.kid));
      logger.info({ kid: active.kid, next: next.kid, retired: rotated.retired, revoked: rotated.revoked }, 'signing key rotated');
      return { active, next, retired, revoked };
    },

    /** Revokes a signing key that no longer signs: out of the JWKS, its tokens refused. */
    async revokeSigning(kid: string): Promise<{ key: SigningKeyInfo; result: 'revoked' | 'already revoked' }> {
      const result = await deps.signingKeys.revoke(kid);
      const key = (await deps.signingKeys.list()).find((k) => k.kid === kid)!;
      if (result === 'revoked') logger.info({ kid }, 'signing key revoked');
      return { key, result };
    },
  };
}

export type KeysService = ReturnType<typeof createKeysService>;
