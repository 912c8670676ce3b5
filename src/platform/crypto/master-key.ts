// The key-encryption key. It wraps per-organization data keys, the signing keys' private parts and
// the client-secret pepper; it never encrypts secret values itself. The source is an interface so
// that a KMS can stand in for the environment variable or the key file later.
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { createOwnerOnly, looseMode, replaceOwnerOnly } from '../owner-only-file.js';
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
  /** Every accepted key, the current one first. */
  all(): MasterKey[];
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

/**
 * A warning for a key file that users other than its owner may read or write, or null. Only a
 * warning: PostgreSQL and ssh refuse such key files, but containers often mount secrets so.
 */
export function looseKeyFileWarning(file: string): string | null {
  const mode = looseMode(file);
  return mode === null ? null : `the key file ${file} has mode ${mode}, which lets other users read or write it: chmod 600 ${file}`;
}

/** The key file holds one base64 key per line; the first is current, the rest are still accepted. */
export function readKeyFile(file: string): Buffer[] {
  const keys = fs.readFileSync(file, 'utf8').split('\n').map((l) => l.trim()).filter((l) => l && !l.startsWith('#'));
  const decoded = keys.map((k) => Buffer.from(k, 'base64'));
  if (decoded.length === 0 || decoded.some((k) => k.length !== 32)) {
    throw new Error(`${file} must hold base64-encoded 32-byte keys, one per line`);
  }
  return decoded;
}

export function generateMasterKey(): Buffer {
  return randomBytes(32);
}

/** The ids a key file says it replaced (`# retired mk_…` lines, which readKeyFile skips as comments). */
export function readRetiredIds(file: string): string[] {
  return [...fs.readFileSync(file, 'utf8').matchAll(/^#\s*retired\s+(mk_[0-9a-f]+)\s*$/gm)].map((m) => m[1]!);
}

/**
 * What a rotation's files record as retired: every id the file retired already, then the ids this
 * rotation retires, once each. A server that saw none of a series of rotations (it wrapped nothing
 * meanwhile) then still finds the key it holds among them, and follows.
 */
export function retiredChain(file: string, retiring: string[] = []): string[] {
  let before: string[] = [];
  try {
    before = readRetiredIds(file);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
  return [...new Set([...before, ...retiring])];
}

/** Kept apart so that a test can make the rename fail, as it does on a bind-mounted file (EBUSY). */
export const keyFileOps = { rename: (from: string, to: string) => fs.renameSync(from, to) };

/**
 * Replaces the key file atomically (write, fsync, rename, fsync the directory): a crash leaves
 * either the old file or the new one, and never a rename that the disk forgot while rows
 * re-wrapped under the new key were already committed.
 *
 * A symbolic link is written through: the new file replaces the link's target, beside it, and the
 * link stays. `retired`: ids of keys this write removes, and of those earlier writes removed (the
 * whole chain: see retiredChain), recorded so that a server that did not see the files in between
 * still knows that the new key replaces the one it holds.
 */
export function writeKeyFile(file: string, keys: Buffer[], retired: string[] = []): void {
  let target = file;
  try {
    target = fs.realpathSync(file);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
  const content = [...retired.map((id) => `# retired ${id}`), ...keys.map((k) => k.toString('base64'))].join('\n') + '\n';
  replaceOwnerOnly(target, content, (from, to) => {
    try {
      keyFileOps.rename(from, to);
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      throw new Error(`cannot replace ${target} in place (${code}): rename over it failed, as it does for a file bind-mounted on its own; mount its directory instead, or give the key in SLIPWAY_MASTER_KEY. ${target} is unchanged`);
    }
  });
}

/** A ring over exactly these keys (the first current): for a rotation's own use, and to check what a key alone can open. */
export function keyringOf(keys: Buffer[], source = 'explicit keys'): MasterKeyring {
  const ring = keys.map(toMasterKey);
  if (ring.length === 0) throw new Error('a keyring needs at least one key');
  return {
    current: () => ring[0]!,
    get: (id) => ring.find((k) => k.id === id),
    all: () => [...ring],
    reload: () => {},
    source,
  };
}

export interface KeyringOptions {
  /** SLIPWAY_MASTER_KEY, when set. */
  envKey: string | null;
  /** Extra keys still accepted while a rotation away from them runs (SLIPWAY_MASTER_KEY_PREVIOUS). */
  envPrevious?: string[];
  dataDir: string;
  /**
   * The master key ids the database holds data wrapped under. A key file is generated only when
   * there are none: a missing file beside data that needs a key is refused rather than replaced.
   */
  wrappedKeyIds?: string[];
  /** Called once when a key file is generated, to warn that it should be backed up or replaced. */
  onGenerated?: (file: string) => void;
  /** Called when the key file holds none of the keys in use, and is ignored (ids only). */
  onRefused?: (refusal: { file: string; held: string[]; inFile: string[] }) => void;
  /** Called when a reload changed the accepted keys (ids only: fit for a log line). */
  onChanged?: (change: { current: string; accepted: string[] }) => void;
  /** Called at open with looseKeyFileWarning's line when other users may read or write the key file. */
  onLooseMode?: (warning: string, file: string) => void;
}

/** What identifies one version of the key file: a rotation renames a new file over it. */
function fileStamp(file: string): string | null {
  try {
    const s = fs.statSync(file, { bigint: true });
    return `${s.ino}:${s.size}:${s.mtimeNs}`;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw error;
  }
}

/** The key file is gone while the database holds data wrapped under the keys it held. */
export class MissingKeyFileError extends Error {
  constructor(readonly file: string, readonly neededIds: string[]) {
    super(`the master key file ${file} is missing, and the database holds data wrapped under master key ${neededIds.join(', ')}: restore the file from a backup, or set SLIPWAY_MASTER_KEY (and SLIPWAY_MASTER_KEY_PREVIOUS) to the key(s); nothing was written`);
  }
}

/** The key file holds none of the keys this process holds, nor retires them: nothing new is wrapped (see openKeyring). */
export class KeyFileRefusedError extends Error {
  constructor(readonly file: string, readonly heldIds: string[]) {
    super(`the master key file ${file} holds none of the keys this server uses (${heldIds.join(', ')}) and does not name them as retired by a rotation: nothing new is wrapped under a key the file no longer holds; restore the file that holds ${heldIds[0]}, or add that key to it as a line at its end (the first key is the one that wraps)`);
  }
}

export function openKeyring(options: KeyringOptions): MasterKeyring {
  const file = path.join(options.dataDir, KEY_FILE);
  const fromEnv = options.envKey !== null;
  let keys: MasterKey[] = [];
  let stamp: string | null = null;

  const read = (): MasterKey[] => {
    stamp = fileStamp(file);
    const fileKeys = stamp === null ? [] : readKeyFile(file).map(toMasterKey);
    if (!fromEnv) return fileKeys;
    // A key file left by an earlier rotation still helps unwrap what is not re-wrapped yet.
    const envKeys = [options.envKey!, ...(options.envPrevious ?? [])].map((k) => toMasterKey(Buffer.from(k, 'base64')));
    return [...envKeys, ...fileKeys.filter((k) => !envKeys.some((e) => e.id === k.id))];
  };

  if (!fromEnv && !fs.existsSync(file)) {
    const needed = options.wrappedKeyIds ?? [];
    if (needed.length > 0) throw new MissingKeyFileError(file, needed);
    fs.mkdirSync(options.dataDir, { recursive: true, mode: 0o700 });
    let created = true;
    try {
      // On disk before anything is wrapped under it: a crash must not keep the rows and lose the key.
      createOwnerOnly(file, generateMasterKey().toString('base64') + '\n');
    } catch (error) {
      // Another process created it first; use theirs.
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      created = false;
    }
    if (created) options.onGenerated?.(file);
  }
  keys = read();
  const loose = stamp === null ? null : looseKeyFileWarning(file);
  if (loose !== null) options.onLooseMode?.(loose, file);

  // Never generates: a key file that disappeared while running keeps the keys already in memory
  // rather than replacing them with a fresh key that opens nothing.
  // Nor does it give up the keys it holds for a file that holds none of them and retired none of
  // them (a copy from another instance, a stray file): it keeps unwrapping with its own and says so,
  // once per version of the file. But it wraps nothing new until the file holds one of its keys
  // again: what it wrapped under a key the file no longer holds would be lost at its next start.
  let refusedStamp: string | null = null;
  let refusing = false;
  const reload = () => {
    if (!fromEnv && fileStamp(file) === null) return;
    const before = keys.map((k) => k.id).join(',');
    const held = keys;
    const heldStamp = stamp;
    const next = read();
    if (!fromEnv && held.length > 0 && !next.some((k) => held.some((h) => h.id === k.id))) {
      const retired = readRetiredIds(file);
      if (!held.some((h) => retired.includes(h.id))) {
        if (refusedStamp !== stamp) options.onRefused?.({ file, held: held.map((k) => k.id), inFile: next.map((k) => k.id) });
        refusedStamp = stamp;
        refusing = true;
        keys = held;
        // The file as it was accepted last; while refusing, any other version of it is read again,
        // the one accepted last included (the right file moved back into place).
        stamp = heldStamp;
        return;
      }
    }
    refusing = false;
    keys = next;
    const after = keys.map((k) => k.id);
    if (after.join(',') !== before) options.onChanged?.({ current: after[0]!, accepted: after });
  };

  return {
    // With the key file as the source, a rotation (another process) puts a new key first: a stat
    // per wrap (rare: a new data key or signing key) is enough for this process to follow at once.
    current: () => {
      if (!fromEnv) {
        const now = fileStamp(file);
        if (refusing ? now !== refusedStamp : now !== stamp) reload();
        if (refusing) throw new KeyFileRefusedError(file, keys.map((k) => k.id));
      }
      return keys[0]!;
    },
    get: (id) => keys.find((k) => k.id === id),
    all: () => [...keys],
    reload,
    source: fromEnv ? 'SLIPWAY_MASTER_KEY' : file,
  };
}

/** Wraps a key (or any small secret) under the current master key, bound to its purpose and owner. */
export function wrapKey(ring: MasterKeyring, plaintext: Buffer, binding: string): { sealed: Buffer; masterKeyId: string } {
  const master = ring.current();
  return { sealed: seal(master.key, plaintext, `slipway/wrap/${binding}`), masterKeyId: master.id };
}

/** What an operator does to give a process keys it lacks (`source`: its keyring's, where its keys come from). */
export function addKeyAdvice(source: string, count = 1): string {
  const keys = count === 1 ? 'that key' : 'those keys';
  return source === 'SLIPWAY_MASTER_KEY'
    ? `add ${keys} to SLIPWAY_MASTER_KEY_PREVIOUS`
    : `add ${keys} as ${count === 1 ? 'a line' : 'lines'} of ${source} (at its end: the first key is the one that wraps), or set SLIPWAY_MASTER_KEY to the current key and SLIPWAY_MASTER_KEY_PREVIOUS to ${count === 1 ? 'that one' : 'those'}`;
}

/** A row is wrapped under a master key this process does not hold: only an operator can give it the key. */
export class MasterKeyNotHeldError extends Error {
  constructor(readonly masterKeyId: string, readonly source: string) {
    super(`data wrapped by master key ${masterKeyId}, which is not configured (${source}); ${addKeyAdvice(source)}`);
    this.name = 'MasterKeyNotHeldError';
  }
}

export function unwrapKey(ring: MasterKeyring, sealed: Buffer, masterKeyId: string, binding: string): Buffer {
  let master = ring.get(masterKeyId);
  if (master === undefined) {
    ring.reload();
    master = ring.get(masterKeyId);
  }
  if (master === undefined) throw new MasterKeyNotHeldError(masterKeyId, ring.source);
  return open(master.key, sealed, `slipway/wrap/${binding}`);
}
