// The key-encryption key. It wraps per-organization data keys, the signing keys' private parts and
// the client-secret pepper; it never encrypts secret values itself. The source is an interface so
// that a KMS can stand in for the environment variable or the key file later.
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { open, seal } from './aead.js';

export interface MasterKey {
  /** A fingerprint, stored beside everything the key wraps. */
  readonly id: string;
  readonly key: Buffer;
}

export interface MasterKeyring {
  /** The key that wraps everything new. */
  current(): MasterKey;
  /** Any key still accepted for unwrapping (the current one and those being rotated away). */
  get(id: string): MasterKey | undefined;
  /** Re-reads the source, e.g. after another process rotated the key. */
  reload(): void;
  readonly source: string;
}

export function masterKeyId(key: Buffer): string {
  return 'mk_' + createHash('sha256').update('slipway master key id\0').update(key).digest('hex').slice(0, 16);
}

function toMasterKey(key: Buffer): MasterKey {
  return { id: masterKeyId(key), key };
}

export const KEY_FILE = 'master.key';

/** The key file holds one base64 key per line; the first is current, the rest are still accepted. */
export function readKeyFile(file: string): Buffer[] {
  const keys = fs.readFileSync(file, 'utf8').split('\n').map((l) => l.trim()).filter((l) => l && !l.startsWith('#'));
  const decoded = keys.map((k) => Buffer.from(k, 'base64'));
  if (decoded.length === 0 || decoded.some((k) => k.length !== 32)) {
    throw new Error(`${file} must hold base64-encoded 32-byte keys, one per line`);
  }
  return decoded;
}

export function writeKeyFile(file: string, keys: Buffer[]): void {
  const tmp = `${file}.${process.pid}.tmp`;
  fs.writeFileSync(tmp, keys.map((k) => k.toString('base64')).join('\n') + '\n', { mode: 0o600 });
  fs.renameSync(tmp, file);
}

export interface KeyringOptions {
  /** SLIPWAY_MASTER_KEY, when set. */
  envKey: string | null;
  /** Extra keys still accepted while a rotation away from them runs (SLIPWAY_MASTER_KEY_PREVIOUS). */
  envPrevious?: string[];
  dataDir: string;
  /** Called once when a key file is generated, to warn that it should be backed up or replaced. */
  onGenerated?: (file: string) => void;
}

export function openKeyring(options: KeyringOptions): MasterKeyring {
  const file = path.join(options.dataDir, KEY_FILE);
  let keys: MasterKey[] = [];
  const load = () => {
    if (options.envKey !== null) {
      keys = [options.envKey, ...(options.envPrevious ?? [])].map((k) => toMasterKey(Buffer.from(k, 'base64')));
      // A key file left by an earlier rotation still helps unwrap what is not re-wrapped yet.
      if (fs.existsSync(file)) keys.push(...readKeyFile(file).map(toMasterKey));
      return;
    }
    if (!fs.existsSync(file)) {
      fs.mkdirSync(options.dataDir, { recursive: true, mode: 0o700 });
      try {
        fs.writeFileSync(file, randomBytes(32).toString('base64') + '\n', { mode: 0o600, flag: 'wx' });
        options.onGenerated?.(file);
      } catch (error) {
        // Another process created it first; use theirs.
        if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      }
    }
    keys = readKeyFile(file).map(toMasterKey);
  };
  load();
  return {
    current: () => keys[0]!,
    get: (id) => keys.find((k) => k.id === id),
    reload: load,
    source: options.envKey !== null ? 'SLIPWAY_MASTER_KEY' : file,
  };
}

/** Wraps a key (or any small secret) under the current master key, bound to its purpose and owner. */
export function wrapKey(ring: MasterKeyring, plaintext: Buffer, binding: string): { sealed: Buffer; masterKeyId: string } {
  const master = ring.current();
  return { sealed: seal(master.key, plaintext, `slipway/wrap/${binding}`), masterKeyId: master.id };
}

export function unwrapKey(ring: MasterKeyring, sealed: Buffer, masterKeyId: string, binding: string): Buffer {
  let master = ring.get(masterKeyId);
  if (master === undefined) {
    ring.reload();
    master = ring.get(masterKeyId);
  }
  if (master === undefined) {
    throw new Error(`data wrapped by master key ${masterKeyId}, which is not configured (${ring.source})`);
  }
  return open(master.key, sealed, `slipway/wrap/${binding}`);
}
