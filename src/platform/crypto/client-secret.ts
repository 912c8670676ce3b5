// Client secrets are 256 random bits. Stored as HMAC-SHA-256 under a server pepper: a slow
// password hash buys nothing for secrets this strong and would cap the token endpoint.
import { createHmac, createSecretKey, hash, randomBytes, timingSafeEqual, type KeyObject } from 'node:crypto';

const PREFIX = 'sws_';

export function generateClientSecret(): string {
  // base64url: nothing a client has to escape, in Basic credentials or a form body.
  return PREFIX + randomBytes(32).toString('base64url');
}

/** The pepper as a key made once: an HMAC under a KeyObject does not import the key bytes again on every call. */
export function pepperKey(pepper: Buffer): KeyObject {
  return createSecretKey(pepper);
}

export function hashClientSecret(pepper: Buffer | KeyObject, secret: string): Buffer {
  return createHmac('sha256', pepper).update(secret, 'utf8').digest();
}

/**
 * A plain SHA-256 of a presented secret, by which a process recognizes a secret it has already
 * matched against its keyed hash: one call, a fraction of an HMAC's cost. Kept in memory only;
 * the database holds the keyed hash alone.
 */
export function secretDigest(secret: string): Buffer {
  return hash('sha256', secret, 'buffer');
}

/** Whether two hashes or digests of secrets are the same, in constant time. */
export function sameSecretHash(candidate: Buffer, stored: Buffer): boolean {
  return candidate.length === stored.length && timingSafeEqual(candidate, stored);
}

/** Enough of the secret to tell two live ones apart, not enough to matter. */
export function secretHint(secret: string): string {
  return secret.slice(0, PREFIX.length + 4);
}
