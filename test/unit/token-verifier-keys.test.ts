// The token verifier and its key set: a key that leaves the set (revoked) verifies nothing more,
// not even a token whose check was under way when the new set was read, and nothing it verified
// stays remembered. Real ES256 tokens; the key source is a stand-in whose sets the test changes.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { exportJWK, generateKeyPair, SignJWT, type JWK } from 'jose';
import type { KeySet, SigningKeys } from '../../src/modules/auth/signing-keys.js';
import { orgClaim } from '../../src/modules/auth/scopes.js';
import { createTokenVerifier } from '../../src/modules/auth/token-verifier.js';

const ISSUER = 'https://slipway.example';
const PROJECT = '1234';

async function signingKey(kid: string) {
  const { privateKey, publicKey } = await generateKeyPair('ES256', { extractable: true });
  return { kid, privateKey, jwk: { ...(await exportJWK(publicKey)), kid, alg: 'ES256', use: 'sig' } as JWK };
}

function tokenOf(key: Awaited<ReturnType<typeof signingKey>>, jti: string): Promise<string> {
  return new SignJWT({ client_id: 'su_1', scope: 'openid', aud: [PROJECT, 'su_1'], [orgClaim('slipway')]: 'org_1' })
    .setProtectedHeader({ alg: 'ES256', typ: 'at+jwt', kid: key.kid })
    .setIssuer(ISSUER).setSubject('su_1').setJti(jti).setIssuedAt().setExpirationTime('3650d')
    .sign(key.privateKey);
}

/** A key source whose set the test replaces, telling its listeners as a real read would. */
function keySource(publicJwks: JWK[]) {
  let set = { publicJwks } as KeySet;
  const listeners: Array<(s: KeySet) => void> = [];
  const keys = {
    current: async () => set,
    reload: async () => set,
    refreshIfStale: () => undefined,
    onKeySet: (listener: (s: KeySet) => void) => { listeners.push(listener); },
  } as unknown as SigningKeys;
  return { keys, read(next: JWK[]) { set = { publicJwks: next } as KeySet; for (const listener of listeners) listener(set); } };
}

function verifierOf(keys: SigningKeys) {
  const state = { orgId: 'org_1', disabled: false, tokenGeneration: 0, role: 'owner' as const, instanceAdmin: false };
  return createTokenVerifier({
    keys, issuer: ISSUER, idpName: 'slipway', projectId: PROJECT,
    principals: { get: async () => state, known: () => state } as never,
    revocations: { isRevoked: async () => false, revokedNow: () => false } as never,
  });
}

describe('token verifier: keys that leave the set', () => {
  it('refuses a token whose key was revoked while its signature was being checked, and does not remember it', async () => {
    const [leaked, kept] = await Promise.all([signingKey('leaked'), signingKey('kept')]);
    const source = keySource([leaked.jwk, kept.jwk]);
    const verifier = verifierOf(source.keys);
    const token = await tokenOf(leaked, 'in-flight');
    const checking = verifier.verify(token).then(() => 'accepted', (error: { detail?: string }) => error.detail);
    // The revocation is read while the check is under way.
    await Promise.resolve();
    source.read([kept.jwk]);
    assert.equal(await checking, 'The access token was signed with an unknown key.');
    assert.equal(verifier.known(token), undefined);
    await assert.rejects(verifier.verify(token), { status: 401 });
  });

  it('forgets what a key verified once it leaves the set', async () => {
    const [leaked, kept] = await Promise.all([signingKey('leaked'), signingKey('kept')]);
    const source = keySource([leaked.jwk, kept.jwk]);
    const verifier = verifierOf(source.keys);
    const [before, other] = await Promise.all([tokenOf(leaked, 'before'), tokenOf(kept, 'other')]);
    assert.equal((await verifier.verify(before)).subject, 'su_1');
    assert.equal((await verifier.verify(other)).subject, 'su_1');
    assert.notEqual(verifier.known(before), undefined);
    source.read([kept.jwk]);
    assert.equal(verifier.known(before), undefined);
    await assert.rejects(verifier.verify(before), { status: 401 });
    assert.equal((await verifier.verify(other)).subject, 'su_1');
  });
});
