// Signing an access token is the token endpoint's main cost. jose signs through WebCrypto, whose
// every call is a hop to the thread pool; node:crypto signs the same ES256 (RFC 7518 §3.4: the
// raw r||s signature) synchronously in a fifth of the time. Verification stays with jose.
import { sign, type KeyObject } from 'node:crypto';

const base64url = (text: string) => Buffer.from(text, 'utf8').toString('base64url');

/** Bytes of each of r and s for P-256. */
const P256_PART = 32;

/**
 * An ECDSA signature in DER (a SEQUENCE of the INTEGERs r and s) as JWS writes it: r and s, each
 * unsigned, big-endian and left-padded to the curve's size. Node can produce this itself
 * (`dsaEncoding: 'ieee-p1363'`), but since Node 24 that costs as much again as the signature.
 */
export function derToJoseSignature(der: Buffer, part = P256_PART): Buffer {
  // The SEQUENCE's length takes one byte below 128 (always so for P-256), else 0x81 and one more.
  let offset = der[0] === 0x30 ? (der[1]! === 0x81 ? 3 : 2) : -1;
  const out = Buffer.alloc(part * 2);
  for (let i = 0; i < 2; i++) {
    if (offset < 0 || der[offset] !== 0x02) throw new Error('not a DER-encoded ECDSA signature');
    const length = der[offset + 1]!;
    let start = offset + 2;
    let size = length;
    // A leading zero keeps a high bit from reading as a sign; it is not part of the number.
    while (size > part && der[start] === 0) { start++; size--; }
    if (size > part) throw new Error('ECDSA signature part too long for the curve');
    der.copy(out, i * part + (part - size), start, start + size);
    offset += 2 + length;
  }
  return out;
}

/**
 * Signs compact JWSs (RFC 7515 §7.1), ES256 with `key`, under one protected header: the header is
 * the same for every token a key signs, so it is encoded once, not once per token. The payload is
 * given as its JSON text, which the caller can write from a template faster than JSON.stringify
 * walks an object whose claim names are only known at run time.
 */
export function es256Signer(header: Record<string, unknown>, key: KeyObject): (payloadJson: string) => string {
  const encodedHeader = base64url(JSON.stringify({ ...header, alg: 'ES256' }));
  return (payloadJson) => {
    const input = `${encodedHeader}.${base64url(payloadJson)}`;
    const signature = derToJoseSignature(sign('sha256', Buffer.from(input, 'latin1'), key));
    return `${input}.${signature.toString('base64url')}`;
  };
}
