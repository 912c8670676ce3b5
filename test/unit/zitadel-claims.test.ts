// What the API reads of a verified ZITADEL token: the user's organization, and the highest of our
// roles granted in that organization by the project-numbered roles claim, nothing else.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import type { JWTPayload } from 'jose';
import { ROLES } from '../../src/modules/auth/roles.js';
import { grantedRole, zitadelAudienceScope, zitadelClaims, zitadelRolesClaim, ZITADEL_ORG_CLAIM } from '../../src/modules/auth/zitadel-claims.js';
import { isAppError } from '../../src/platform/errors.js';

const PROJECT = '263952365928112131';
const ORG = '270000000000000001';
const OTHER = '270000000000000002';

function payload(change: Record<string, unknown> = {}): JWTPayload {
  return {
    iss: 'https://acme.zitadel.example', sub: '280000000000000001', aud: [PROJECT, '270000000000000777'], iat: 1_700_000_000, exp: 1_700_000_600,
    jti: '290000000000000001', client_id: 'deploy-bot', scope: 'openid urn:zitadel:iam:user:resourceowner',
    [ZITADEL_ORG_CLAIM]: ORG, [zitadelRolesClaim(PROJECT)]: { developer: { [ORG]: 'acme.example' } },
    ...change,
  };
}

/** The 401 detail zitadelClaims refuses `p` with. */
function refusal(p: JWTPayload): string {
  try {
    zitadelClaims(p, PROJECT);
  } catch (error) {
    assert.ok(isAppError(error) && error.status === 401, String(error));
    return error.detail;
  }
  assert.fail('accepted');
}

describe('ZITADEL claims', () => {
  it('names ZITADEL\'s own claims and scopes', () => {
    assert.equal(ZITADEL_ORG_CLAIM, 'urn:zitadel:iam:user:resourceowner:id');
    assert.equal(zitadelRolesClaim(PROJECT), `urn:zitadel:iam:org:project:${PROJECT}:roles`);
    assert.equal(zitadelAudienceScope(PROJECT), `urn:zitadel:iam:org:project:id:${PROJECT}:aud`);
  });

  it('maps a token to its subject, client, organization, role and audience', () => {
    assert.deepEqual(zitadelClaims(payload(), PROJECT), {
      subject: '280000000000000001', clientId: 'deploy-bot', tokenId: '290000000000000001', scopes: ['openid', 'urn:zitadel:iam:user:resourceowner'],
      expiresAt: 1_700_000_600_000, forThisApi: true, externalOrgId: ORG, role: 'developer',
    });
    const azp = zitadelClaims(payload({ client_id: undefined, azp: '270000000000000777', aud: '1', scope: undefined }), PROJECT);
    assert.deepEqual([azp.clientId, azp.forThisApi, azp.scopes], ['270000000000000777', false, []]);
  });

  it('takes the highest of our roles granted in the token\'s organization, a human role before runner', () => {
    const grants = (roles: string[], org = ORG) => Object.fromEntries(roles.map((r) => [r, { [org]: 'acme.example' }]));
    assert.equal(grantedRole(grants(['viewer', 'admin', 'developer']), ORG), 'admin');
    assert.equal(grantedRole(grants(['runner', 'viewer']), ORG), 'viewer');
    assert.equal(grantedRole(grants(['runner']), ORG), 'runner');
    assert.equal(grantedRole({ ...grants(['owner'], OTHER), ...grants(['viewer']) }, ORG), 'viewer');
    assert.equal(grantedRole(grants(['PROJECT_OWNER', 'Owner', 'toString']), ORG), null);
    for (const odd of [undefined, null, 'owner', ['owner'], { owner: 'yes' }, { owner: null }, { owner: [ORG] }]) assert.equal(grantedRole(odd, ORG), null, JSON.stringify(odd));
  });

  it('never grants a role not given for that organization (property)', () => {
    const grant = fc.dictionary(fc.constantFrom(...ROLES, 'admin ', 'PROJECT_OWNER'), fc.dictionary(fc.constantFrom(ORG, OTHER, '1'), fc.string()));
    fc.assert(fc.property(grant, (claim) => {
      const role = grantedRole(claim, ORG);
      const given = ROLES.filter((r) => Object.hasOwn(claim, r) && Object.hasOwn(claim[r]!, ORG));
      assert.equal(role, given[0] ?? null);
    }));
  });

  it('reads only the claim numbered with our project, never the client project\'s unnumbered one', () => {
    const unnumbered = payload({ [zitadelRolesClaim(PROJECT)]: undefined, 'urn:zitadel:iam:org:project:roles': { owner: { [ORG]: 'a' } } });
    assert.equal(zitadelClaims(unnumbered, PROJECT).role, null);
    assert.equal(zitadelClaims(payload({ [zitadelRolesClaim('1')]: { owner: { [ORG]: 'a' } } }), PROJECT).role, 'developer');
  });

  it('refuses what it cannot map, saying what is missing', () => {
    assert.match(refusal(payload({ [ZITADEL_ORG_CLAIM]: undefined })), /scope `urn:zitadel:iam:user:resourceowner`/);
    assert.match(refusal(payload({ [ZITADEL_ORG_CLAIM]: 42 })), /organization claim/);
    assert.match(refusal(payload({ client_id: undefined })), /client_id or azp/);
    for (const sub of ['su_01jd6xq0m3b8c2v4w5x6y7z8a9', 'org_x', 'cli', 'system']) assert.match(refusal(payload({ sub })), /form of a Slipway id/, sub);
  });
});
