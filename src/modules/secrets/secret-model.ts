// The rules of a secret's values that need no database: key lists, equality, patches, key
// diffs for events and retention arithmetic.
import { errors, type FieldError } from '../../platform/errors.js';
import type { SecretRow } from './secrets.repo.js';
import type { SecretMetadataT } from './secrets.schemas.js';

export type Values = Record<string, string>;

export interface SecretInput {
  name: string;
  values: Values;
}

/**
 * The key names, sorted. A secret has a few keys, and a bulk write sorts thousands of such lists:
 * a short one is sorted in place, without the work array that Array#sort allocates for any length
 * (the same order: both compare UTF-16 code units).
 */
export function keysOf(values: Values): string[] {
  const keys = Object.keys(values);
  if (keys.length > 16) return keys.sort();
  for (let i = 1; i < keys.length; i++) {
    const key = keys[i]!;
    let j = i - 1;
    for (; j >= 0 && keys[j]! > key; j--) keys[j + 1] = keys[j]!;
    keys[j + 1] = key;
  }
  return keys;
}

/** Same keys with the same values, whatever the order they were sent in. */
export function sameValues(a: Values, b: Values): boolean {
  const keys = Object.keys(a);
  if (keys.length !== Object.keys(b).length) return false;
  return keys.every((k) => Object.hasOwn(b, k) && b[k] === a[k]);
}

/** Key names only, for events: which keys a change added, removed or gave another value. */
export type KeyDiff = { added: string[]; removed: string[]; changed: string[] };

export function keyDiff(before: Values, after: Values, afterKeys = keysOf(after)): KeyDiff {
  return {
    added: afterKeys.filter((k) => !Object.hasOwn(before, k)),
    removed: keysOf(before).filter((k) => !Object.hasOwn(after, k)),
    changed: afterKeys.filter((k) => Object.hasOwn(before, k) && before[k] !== after[k]),
  };
}

/**
 * A patch's result: `set` keys take their new values, `unset` keys go (one not there is simply
 * not there, so a retried patch does the same). The result must keep at least one key and stay
 * within the keys-per-secret limit.
 */
export function applyPatch(current: Values, patch: { set?: Values | undefined; unset?: string[] | undefined }, limits: SecretLimits): Values {
  const set = patch.set ?? {};
  const unset = patch.unset ?? [];
  if (Object.keys(set).length === 0 && unset.length === 0) {
    throw errors.invalidRequest('Nothing to change: give `set` (keys to set) and/or `unset` (keys to remove).', [{ pointer: '', message: 'needs a non-empty `set` or `unset`' }]);
  }
  const both = unset.flatMap((key, i) => (Object.hasOwn(set, key) ? [{ pointer: `/unset/${i}`, message: `"${key}" is also in \`set\`; a key can be set or unset, not both` }] : []));
  if (both.length > 0) throw errors.invalidRequest(both[0]!.message, both);
  const next: Values = { ...current, ...set };
  for (const key of unset) delete next[key];
  const count = Object.keys(next).length;
  if (count === 0) {
    throw errors.invalidRequest('The patch would leave the secret without keys; a secret keeps at least one. Delete the secret instead.', [{ pointer: '/unset', message: 'removes every key' }]);
  }
  checkWithinLimits(next, current, limits, { what: 'The patch', pointer: '/set' });
  return next;
}

export interface SecretLimits {
  keysPerSecret: number;
  valueChars: number;
}

/**
 * Refuses a new version past the limits: more keys than SLIPWAY_MAX_KEYS_PER_SECRET, or a value
 * longer than SLIPWAY_MAX_VALUE_CHARS (in code points, as the schemas count). What the current
 * version has already is let be: a secret made under higher limits can still lose keys, change
 * others, and come back under the limits a step at a time.
 */
export function checkWithinLimits(next: Values, current: Values, limits: SecretLimits, at: { what: string; pointer: string }): void {
  const count = Object.keys(next).length;
  if (count > limits.keysPerSecret && count > Object.keys(current).length) {
    throw errors.limitExceeded(`${at.what} would leave the secret with ${count} keys; the limit is ${limits.keysPerSecret} (SLIPWAY_MAX_KEYS_PER_SECRET).`,
      { name: 'SLIPWAY_MAX_KEYS_PER_SECRET', value: limits.keysPerSecret }, [{ pointer: at.pointer, message: `the result has ${count} keys, more than ${limits.keysPerSecret}` }]);
  }
  for (const [key, value] of Object.entries(next)) {
    if (current[key] === value) continue;
    const chars = [...value].length;
    if (chars > limits.valueChars) {
      throw errors.limitExceeded(`${at.what} would give ${key} a value of ${chars} characters; the limit is ${limits.valueChars} (SLIPWAY_MAX_VALUE_CHARS).`,
        { name: 'SLIPWAY_MAX_VALUE_CHARS', value: limits.valueChars }, [{ pointer: at.pointer, message: `${key}'s value has ${chars} characters, more than ${limits.valueChars}` }]);
    }
  }
}

/** Every item whose name occurs more than once in the request, each pointed at. */
export function duplicateNamePointers(items: SecretInput[]): FieldError[] {
  const counts = new Map<string, number>();
  for (const item of items) counts.set(item.name, (counts.get(item.name) ?? 0) + 1);
  return items.flatMap((item, i) => ((counts.get(item.name) ?? 0) > 1 ? [{ pointer: `/secrets/${i}/name`, message: `"${item.name}" appears more than once in this request` }] : []));
}

const DAY_MS = 86_400_000;

/** Retention of deleted secrets: a deletion at or after the cutoff can still be restored. */
export function retention(days: number) {
  return {
    cutoff: (now: string): string => new Date(Date.parse(now) - days * DAY_MS).toISOString(),
    until: (deletedAt: string): string => new Date(Date.parse(deletedAt) + days * DAY_MS).toISOString(),
  };
}
type Retention = ReturnType<typeof retention>;

/** `keys`: the row's key names when the caller has them as a list already (its `keys` column is their JSON). */
export function toMetadata(row: SecretRow, keep?: Retention, keys = JSON.parse(row.keys) as string[]): SecretMetadataT {
  const meta: SecretMetadataT = { name: row.name, version: row.version, keys, createdAt: row.created_at, updatedAt: row.updated_at };
  if (row.deleted_at !== null && keep) {
    meta.deletedAt = row.deleted_at;
    meta.restorableUntil = keep.until(row.deleted_at);
  }
  return meta;
}

/**
 * A live secret's metadata with what a write did to it, built as one literal: a spread copy of
 * toMetadata's object serializes several times slower, which a thousand-item answer feels.
 */
/** `keyChanges`: what an `updated` version changed, by key name. */
export function toChange<R extends string>(row: SecretRow, result: R, keys = JSON.parse(row.keys) as string[], keyChanges?: KeyDiff): SecretMetadataT & { result: R; keyChanges?: KeyDiff } {
  return { name: row.name, version: row.version, keys, createdAt: row.created_at, updatedAt: row.updated_at, result, ...(keyChanges !== undefined ? { keyChanges } : {}) };
}

