// AES-256-GCM sealing: what is sealed opens with the same key and associated data, and nothing else
// opens: not a changed byte, another key, or the associated data of another place.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
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

  it('refuses other associated data, another key, and truncated or unknown formats', () => {
    const sealed = seal(key, Buffer.from('value'), 'org_1/sec_1/1');
    assert.throws(() => open(key, sealed, 'org_2/sec_1/1'));
    assert.throws(() => open(key, sealed, 'org_1/sec_1/2'));
    assert.throws(() => open(randomBytes(32), sealed, 'org_1/sec_1/1'));
    assert.throws(() => open(key, sealed.subarray(0, 20), 'org_1/sec_1/1'), /unknown format/);
    assert.throws(() => open(key, Buffer.concat([Buffer.of(9), sealed.subarray(1)]), 'org_1/sec_1/1'), /unknown format/);
  });
});
