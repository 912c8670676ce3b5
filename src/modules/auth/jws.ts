// Signing an access token is the token endpoint's main cost. jose signs through WebCrypto, whose
// every call is a hop to the thread pool; node:crypto signs the same ES256 (RFC 7518 §3.4: the
// raw r||s signature) synchronously in a fifth of the time. Verification stays with jose.
import { sign, type KeyObject } from 'node:crypto';

const encode = (value: object) => Buffer.from(JSON.stringify(value), 'utf8').toString('base64url');

/** A compact JWS (RFC 7515 §7.1) over `payload`, ES256 with `key`. */
export function signEs256Compact(header: Record<string, unknown>, payload: Record<string, unknown>, key: KeyObject): string {
  const input = `${encode({ ...header, alg: 'ES256' })}.${encode(payload)}`;
  const signature = sign('sha256', Buffer.from(input, 'ascii'), { key, dsaEncoding: 'ieee-p1363' });
  return `${input}.${signature.toString('base64url')}`;
}
