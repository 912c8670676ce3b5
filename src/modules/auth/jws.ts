// Signing an access token is the token endpoint's main cost. jose signs through WebCrypto, whose
// every call is a hop to the thread pool; node:crypto signs the same ES256 (RFC 7518 §3.4: the
// raw r||s signature) synchronously in a fifth of the time. Verification stays with jose.
import { sign, type KeyObject } from 'node:crypto';

const encode = (value: object) => Buffer.from(JSON.stringify(value), 'utf8').toString('base64url');

/**
 * Signs compact JWSs (RFC 7515 §7.1), ES256 with `key`, under one protected header: the header is
 * the same for every token a key signs, so it is encoded once, not once per token.
 */
export function es256Signer(header: Record<string, unknown>, key: KeyObject): (payload: Record<string, unknown>) => string {
  const encodedHeader = encode({ ...header, alg: 'ES256' });
  return (payload) => {
    const input = `${encodedHeader}.${encode(payload)}`;
    const signature = sign('sha256', Buffer.from(input, 'latin1'), { key, dsaEncoding: 'ieee-p1363' });
    return `${input}.${signature.toString('base64url')}`;
  };
}
