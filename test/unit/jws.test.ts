// ES256 JWS signatures: the DER signature Node produces, rewritten as JWS's r||s, verifies as such
// (with node:crypto and with jose) for any payload, including r or s with leading zero bytes.
import assert from 'node:assert/strict';
import { generateKeyPairSync, sign, verify } from 'node:crypto';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { compactVerify } from 'jose';
import { derToJoseSignature, es256Signer } from '../../src/modules/auth/jws.js';

const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });

describe('ES256 signatures', () => {
  it('rewrites every DER signature as the r||s that verifies', () => {
    fc.assert(fc.property(fc.uint8Array({ minLength: 0, maxLength: 300 }), (bytes) => {
      const data = Buffer.from(bytes);
      const raw = derToJoseSignature(sign('sha256', data, privateKey));
      assert.equal(raw.length, 64);
      assert.ok(verify('sha256', data, { key: publicKey, dsaEncoding: 'ieee-p1363' }, raw));
    }), { numRuns: 300 });
  });

  it('pads short parts and drops the sign byte of long ones', () => {
    // r = 0x00..01 (one byte), s = 0x80.. (33 bytes with its leading zero).
    const s = Buffer.alloc(32, 0x11); s[0] = 0x80;
    const der = Buffer.concat([Buffer.from([0x30, 3 + 35, 0x02, 0x01, 0x01, 0x02, 0x21, 0x00]), s]);
    const raw = derToJoseSignature(der);
    assert.deepEqual(raw.subarray(0, 32), Buffer.concat([Buffer.alloc(31), Buffer.from([1])]));
    assert.deepEqual(raw.subarray(32), s);
    assert.throws(() => derToJoseSignature(Buffer.from([0x31, 0x00])), /not a DER-encoded/);
  });

  it('signs tokens that jose verifies', async () => {
    const signToken = es256Signer({ typ: 'at+jwt', kid: 'k1' }, privateKey);
    for (let i = 0; i < 50; i++) {
      const token = signToken(JSON.stringify({ sub: `su_${i}`, n: i }));
      const { payload, protectedHeader } = await compactVerify(token, publicKey);
      assert.deepEqual(protectedHeader, { typ: 'at+jwt', kid: 'k1', alg: 'ES256' });
      assert.deepEqual(JSON.parse(new TextDecoder().decode(payload)), { sub: `su_${i}`, n: i });
    }
  });
});
