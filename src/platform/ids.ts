// Prefixed, time-sortable ids (`org_01J…`): a 48-bit millisecond timestamp and 80 random bits in
// Crockford base32, monotonic within one process. Time-ordered keys keep B-tree inserts at the
// right edge of the index, so large tables insert as fast as small ones.
import { randomBytesPooled } from './crypto/random.js';

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
} as const;

export type IdKind = keyof typeof ID_PREFIXES;

let lastTime = 0;
let lastRandom: Buffer = Buffer.alloc(10);

/** The time and random part of the next id, ordered after every id this process made before. */
function next(now: number): { time: number; random: Buffer } {
  if (now > lastTime) {
    lastTime = now;
    lastRandom = randomBytesPooled(10);
    return { time: now, random: lastRandom };
  }
  // Same (or earlier, after a clock step back) millisecond: keep the last time and increment the
  // random part, so order still holds.
  const random = Buffer.from(lastRandom);
  for (let i = random.length - 1; i >= 0; i--) {
    const byte = random[i]!;
    if (byte < 0xff) {
      random[i] = byte + 1;
      break;
    }
    random[i] = 0;
  }
  lastRandom = random;
  return { time: lastTime, random };
}

function encode(time: number, random: Buffer): string {
  let out = '';
  let t = time;
  for (let i = 0; i < 10; i++) {
    out = ALPHABET[t % 32]! + out;
    t = Math.floor(t / 32);
  }
  // 80 random bits = 16 base32 characters, 5 bits at a time.
  let bits = 0;
  let value = 0;
  for (const byte of random) {
    value = (value << 8) | byte;
    bits += 8;
    while (bits >= 5) {
      out += ALPHABET[(value >>> (bits - 5)) & 31]!;
      bits -= 5;
    }
    value &= (1 << bits) - 1;
  }
  return out;
}

export function newId(kind: IdKind, now = Date.now()): string {
  const { time, random } = next(now);
  return `${ID_PREFIXES[kind]}_${encode(time, random)}`;
}

/** True when `value` has the shape of an id of this kind (used to tell ids from slugs in paths). */
export function isId(kind: IdKind, value: string): boolean {
  return value.length === ID_PREFIXES[kind].length + 27 && value.startsWith(`${ID_PREFIXES[kind]}_`)
    && /^[0-9a-hjkmnp-tv-z]{26}$/.test(value.slice(ID_PREFIXES[kind].length + 1));
}
