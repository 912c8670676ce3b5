// Prefixed, time-sortable ids (`org_01J…`): a 48-bit millisecond timestamp and 80 random bits in
// Crockford base32, monotonic within one process. Time-ordered keys keep B-tree inserts at the
// right edge of the index, so large tables insert as fast as small ones.
import { randomBytesPooled } from './crypto/random.js';
import { nowMs } from './clock.js';

const ALPHABET = '0123456789abcdefghjkmnpqrstvwxyz';

export const ID_PREFIXES = {
  org: 'org',
  serviceUser: 'su',
  clientSecret: 'cs',
  secret: 'sec',
  event: 'evt',
  dataKey: 'dk',
  environment: 'env',
  service: 'svc',
  deployment: 'dep',
  token: 'tok',
  webhook: 'whk',
  webhookDelivery: 'whd',
} as const;

export type IdKind = keyof typeof ID_PREFIXES;

const CHARS = Buffer.from(ALPHABET, 'latin1');

let lastTime = 0;
/** The random part of the last id: drawn anew each millisecond, incremented within one. */
const random = Buffer.alloc(10);
/** An id's characters, written here and read out once as a flat string (bulk writes make thousands per request). */
const chars = Buffer.alloc(64);

/** The time of the next id; `random` then holds its random part, ordered after every id this process made before. */
function advance(now: number): number {
  if (now > lastTime) {
    lastTime = now;
    randomBytesPooled(10).copy(random);
    return now;
  }
  // Same (or earlier, after a clock step back) millisecond: keep the last time and increment the
  // random part, so order still holds.
  for (let i = random.length - 1; i >= 0; i--) {
    const byte = random[i]!;
    if (byte < 0xff) {
      random[i] = byte + 1;
      break;
    }
    random[i] = 0;
  }
  return lastTime;
}

export function newId(kind: IdKind, now = nowMs()): string {
  const time = advance(now);
  let n = chars.write(ID_PREFIXES[kind], 0, 'latin1');
  chars[n++] = 0x5f; // _
  // 48-bit milliseconds: 10 characters, most significant first.
  let t = time;
  for (let i = n + 9; i >= n; i--) {
    chars[i] = CHARS[t % 32]!;
    t = Math.floor(t / 32);
  }
  n += 10;
  // 80 random bits: 16 characters, from four groups of 20 bits.
  for (let b = 0; b < 10; b += 5) {
    n = put20((random[b]! << 12) | (random[b + 1]! << 4) | (random[b + 2]! >> 4), n);
    n = put20(((random[b + 2]! & 0x0f) << 16) | (random[b + 3]! << 8) | random[b + 4]!, n);
  }
  return chars.toString('latin1', 0, n);
}

/** The lowest id of this kind that `newId` can make at `time` (ms): ids at or after that time sort at or after it. */
export function idFloor(kind: IdKind, time: number): string {
  let t = Math.max(0, Math.floor(time));
  let stamp = '';
  for (let i = 0; i < 10; i++) {
    stamp = ALPHABET[t % 32]! + stamp;
    t = Math.floor(t / 32);
  }
  return `${ID_PREFIXES[kind]}_${stamp}${'0'.repeat(16)}`;
}

/** Writes 20 bits as four characters at `at`; returns the position after them. */
function put20(bits: number, at: number): number {
  chars[at] = CHARS[bits >> 15]!;
  chars[at + 1] = CHARS[(bits >> 10) & 31]!;
  chars[at + 2] = CHARS[(bits >> 5) & 31]!;
  chars[at + 3] = CHARS[bits & 31]!;
  return at + 4;
}

/** True when `value` has the shape of an id of this kind (used to tell ids from slugs in paths). */
export function isId(kind: IdKind, value: string): boolean {
  return value.length === ID_PREFIXES[kind].length + 27 && value.startsWith(`${ID_PREFIXES[kind]}_`)
    && /^[0-9a-hjkmnp-tv-z]{26}$/.test(value.slice(ID_PREFIXES[kind].length + 1));
}
