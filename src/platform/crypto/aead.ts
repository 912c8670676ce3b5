// AES-256-GCM with a fresh 96-bit nonce per message and associated data that binds a ciphertext
// to where it belongs (moving it to another row makes it fail to open).
import { createCipheriv, createDecipheriv } from 'node:crypto';
import { randomBytesPooled } from './random.js';

const VERSION = 1;
const NONCE_BYTES = 12;
const TAG_BYTES = 16;

/** `[version | nonce | tag | ciphertext]` */
export function seal(key: Buffer, plaintext: Buffer, associatedData: string): Buffer {
  const nonce = randomBytesPooled(NONCE_BYTES);
  const cipher = createCipheriv('aes-256-gcm', key, nonce);
  cipher.setAAD(Buffer.from(associatedData, 'utf8'));
  const body = Buffer.concat([cipher.update(plaintext), cipher.final()]);
  return Buffer.concat([Buffer.of(VERSION), nonce, cipher.getAuthTag(), body]);
}

export function open(key: Buffer, sealed: Buffer, associatedData: string): Buffer {
  if (sealed.length < 1 + NONCE_BYTES + TAG_BYTES || sealed[0] !== VERSION) {
    throw new Error('sealed data has an unknown format');
  }
  const nonce = sealed.subarray(1, 1 + NONCE_BYTES);
  const tag = sealed.subarray(1 + NONCE_BYTES, 1 + NONCE_BYTES + TAG_BYTES);
  const decipher = createDecipheriv('aes-256-gcm', key, nonce);
  decipher.setAAD(Buffer.from(associatedData, 'utf8'));
  decipher.setAuthTag(tag);
  return Buffer.concat([decipher.update(sealed.subarray(1 + NONCE_BYTES + TAG_BYTES)), decipher.final()]);
}
