// Client secrets are 256 random bits. Stored as HMAC-SHA-256 under a server pepper: a slow
// password hash buys nothing for secrets this strong and would cap the token endpoint.
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

const PREFIX = 'sws_';

export function generateClientSecret(): string {
  // base64url: nothing a client has to escape, in Basic credentials or a form body.
  return PREFIX + randomBytes(32).toString('base64url');
}

export function hashClientSecret(pepper: Buffer, secret: string): Buffer {
  return createHmac('sha256', pepper).update(secret, 'utf8').digest();
}

export function secretMatches(pepper: Buffer, secret: string, stored: Buffer): boolean {
  const candidate = hashClientSecret(pepper, secret);
  return candidate.length === stored.length && timingSafeEqual(candidate, stored);
}

/** Enough of the secret to tell two live ones apart, not enough to matter. */
export function secretHint(secret: string): string {
  return secret.slice(0, PREFIX.length + 4);
}
