// AES-256-GCM with a fresh 96-bit nonce per message and associated data that binds a ciphertext
// to where it belongs (moving it to another row makes it fail to open).
import { createCipheriv, createDecipheriv } from 'node:crypto';
import { randomBytesPooled } from './random.js';

const VERSION = 1;
const NONCE_BYTES = 12;
const TAG_BYTES = 16;
const HEADER_BYTES = 1 + NONCE_BYTES + TAG_BYTES;

/**
 * `[version | nonce | tag | ciphertext]`, written into one buffer: a bulk write seals thousands of
 * values per request, and each concatenation would copy every one of them again.
 */
export function seal(key: Buffer, plaintext: Buffer, associatedData: string): Buffer {
  const sealed = Buffer.allocUnsafe(HEADER_BYTES + plaintext.length);
  sealed[0] = VERSION;
  const nonce = sealed.subarray(1, 1 + NONCE_BYTES);
  randomBytesPooled(NONCE_BYTES).copy(nonce);
  const cipher = createCipheriv('aes-256-gcm', key, nonce);
  cipher.setAAD(Buffer.from(associatedData, 'utf8'));
  const body = cipher.update(plaintext);
  // GCM is a stream mode: update gives back as many bytes as it takes and final none. Checked all
  // the same, since a shorter body would leave uninitialized memory in what is stored.
  if (body.length !== plaintext.length || cipher.final().length !== 0) throw new Error('AES-GCM gave a ciphertext of another length than its plaintext');
  body.copy(sealed, HEADER_BYTES);
  cipher.getAuthTag().copy(sealed, 1 + NONCE_BYTES);
  return sealed;
}

export function open(key: Buffer, sealed: Buffer, associatedData: string): Buffer {
  if (sealed.length < HEADER_BYTES || sealed[0] !== VERSION) {
    throw new Error('sealed data has an unknown format');
  }
  const nonce = sealed.subarray(1, 1 + NONCE_BYTES);
  const tag = sealed.subarray(1 + NONCE_BYTES, 1 + NONCE_BYTES + TAG_BYTES);
  const decipher = createDecipheriv('aes-256-gcm', key, nonce);
  decipher.setAAD(Buffer.from(associatedData, 'utf8'));
  decipher.setAuthTag(tag);
  return Buffer.concat([decipher.update(sealed.subarray(HEADER_BYTES)), decipher.final()]);
}
