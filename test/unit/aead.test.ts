// AES-256-GCM sealing: what is sealed opens with the same key and associated data, and nothing else
// opens: not a changed byte, another key, or the associated data of another place.
import assert from 'node:assert/strict';
import { createDecipheriv, randomBytes } from 'node:crypto';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { open, seal } from '../../src/platform/crypto/aead.js';

const key = randomBytes(32);

describe('aead', () => {
  it('opens what it sealed (property)', () => {
    fc.assert(fc.property(fc.uint8Array({ maxLength: 2048 }), fc.string(), (plain, ad) => {
      assert.deepEqual(open(key, seal(key, Buffer.from(plain), ad), ad), Buffer.from(plain));
    }));
  });

  it('uses a fresh nonce: the same plaintext seals differently each time', () => {
    const a = seal(key, Buffer.from('same'), 'ad');
    const b = seal(key, Buffer.from('same'), 'ad');
    assert.notDeepEqual(a, b);
    assert.notDeepEqual(a.subarray(1, 13), b.subarray(1, 13));
  });

  it('refuses any changed byte (property)', () => {
    const sealed = seal(key, Buffer.from('DATABASE_URL=postgres://app:pw@db/app'), 'org_1/sec_1/1');
    fc.assert(fc.property(fc.nat({ max: sealed.length - 1 }), fc.integer({ min: 1, max: 255 }), (index, flip) => {
      const tampered = Buffer.from(sealed);
      tampered[index] = tampered[index]! ^ flip;
      assert.throws(() => open(key, tampered, 'org_1/sec_1/1'));
    }));
  });

  it('keeps the stored layout: version 1, nonce, tag, ciphertext', () => {
    // Sealed by an earlier implementation: what is stored must keep opening.
    const fixedKey = Buffer.alloc(32, 7);
    const stored = Buffer.from('Aadh9nPDxnZd4/Hkx9DA6yyU6i6GwaEgLBmEawjGCoWCf5NYpXANWqIMwNoiAZTA/Kgk8BM=', 'base64');
    assert.equal(open(fixedKey, stored, 'slipway/secret/org_1/sec_1/1').toString('utf8'), '{"DB_PASSWORD":"s3cret"}');

    const plain = Buffer.from('{"K1":"v","K2":"v"}');
    const sealed = seal(key, plain, 'org_1/sec_1/1');
    assert.equal(sealed.length, 1 + 12 + 16 + plain.length);
    assert.equal(sealed[0], 1);
    const decipher = createDecipheriv('aes-256-gcm', key, sealed.subarray(1, 13));
    decipher.setAAD(Buffer.from('org_1/sec_1/1'));
    decipher.setAuthTag(sealed.subarray(13, 29));
    assert.deepEqual(Buffer.concat([decipher.update(sealed.subarray(29)), decipher.final()]), plain);
  });

  it('gives each sealed value bytes of its own', () => {
    const sealed = Array.from({ length: 300 }, (_, i) => seal(key, Buffer.from(`value-${i}`), `ad-${i}`));
    const copies = sealed.map((s) => Buffer.from(s));
    for (let i = 0; i < 300; i++) seal(key, Buffer.from('x'.repeat(i)), 'more');
    sealed.forEach((s, i) => {
      assert.deepEqual(s, copies[i]);
      assert.equal(open(key, s, `ad-${i}`).toString(), `value-${i}`);
    });
  });

  it('refuses other associated data, another key, and truncated or unknown formats', () => {
    const sealed = seal(key, Buffer.from('value'), 'org_1/sec_1/1');
    assert.throws(() => open(key, sealed, 'org_2/sec_1/1'));
    assert.throws(() => open(key, sealed, 'org_1/sec_1/2'));
    assert.throws(() => open(randomBytes(32), sealed, 'org_1/sec_1/1'));
    assert.throws(() => open(key, sealed.subarray(0, 20), 'org_1/sec_1/1'), /unknown format/);
    assert.throws(() => open(key, Buffer.concat([Buffer.of(9), sealed.subarray(1)]), 'org_1/sec_1/1'), /unknown format/);
  });
});
