// The API's side of access tokens: every defect a token can have is refused with a 401 RFC 9457
// problem and an RFC 6750 `WWW-Authenticate: Bearer` challenge, while a token forged correctly
// with the same key is accepted (so each refusal is for the one defect it names). Then what can
// change while a token lives - revocation (RFC 7009, and DELETE /v1/token by the token's holder), a
// disabled or deleted service user - and introspection (RFC 7662), including after the token's
// verification has been cached.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { decodeJwt, type JWTPayload } from 'jose';
import { ROLES } from '../../src/modules/auth/roles.js';
import { orgClaim } from '../../src/modules/auth/token.service.js';
import { eventsSettled } from '../support/deployments.js';
import { startServer, type Actor, type HttpResult, type TestServer } from '../support/harness.js';
import { assertProblem } from '../support/problems.js';
import {
  basic, claimsFor, hs256WithPublicKey, oauthPost, requestToken, signWithForeignKey, signWithServerKey, tamper, unsecured,
} from '../support/tokens.js';

// The exact scope is checked once below; the table is built before the server (and its project id) exists.
const AUDIENCE_HINT = /request a token with the scope `urn:slipway:iam:org:project:id:\d+:aud`/;

function assertBearer401(res: HttpResult, error: 'invalid_token' | null, detail: RegExp): void {
  assert.equal(res.status, 401, res.text);
  assert.match(res.headers.get('content-type') ?? '', /^application\/problem\+json/);
  const challenge = res.headers.get('www-authenticate') ?? '';
  assert.match(challenge, /^Bearer realm="slipway"/);
  // RFC 6750 §3.1: no error code when the request carried no credentials at all.
  if (error === null) assert.equal(challenge, 'Bearer realm="slipway"');
  else assert.ok(challenge.includes(`error="${error}"`), challenge);
  assert.deepEqual(
    Object.keys(res.body).filter((k) => ['type', 'title', 'status', 'detail', 'instance', 'code', 'requestId'].includes(k)).sort(),
    ['code', 'detail', 'instance', 'requestId', 'status', 'title', 'type'],
  );
  assert.equal(res.body.status, 401);
  assert.equal(res.body.code, error ?? 'unauthenticated');
  assert.equal(res.body.requestId, res.headers.get('x-request-id'));
  assert.match(res.body.detail, detail);
}

describe('API token checks', () => {
  let server: TestServer;
  let audience: string;
  let otherOrgId: string;
  const minutes = (n: number) => Math.floor(Date.now() / 1000) + n * 60;

  before(async () => {
    server = await startServer();
    audience = server.bootstrap.scope.split(' ').at(-1)!;
    otherOrgId = (await server.createOrg()).id;
  });
  after(async () => {
    assert.deepEqual(server.undeclared, []);
    await server.close();
  });

  const get = (authorization?: string) => server.http().get('/v1/orgs', authorization === undefined ? {} : { headers: { authorization } });
  const bearer = (token: string) => get(`Bearer ${token}`);
  const claims = (change: Partial<JWTPayload> = {}): JWTPayload => ({ ...claimsFor(server, server.bootstrap), ...change });

  it('accepts a token forged correctly with the server key (the control for every refusal below)', async () => {
    assert.equal((await bearer(await signWithServerKey(server, claims()))).status, 200);
  });

  const refusals: Array<[string, () => Promise<string | undefined>, 'invalid_token' | null, RegExp]> = [
    ['no Authorization header', async () => undefined, null, /Authorization: Bearer/],
    ['"Bearer" and nothing else', async () => 'Bearer', 'invalid_token', /must be "Bearer <access token>"/],
    ['"Bearer" with garbage', async () => 'Bearer garbage', 'invalid_token', /malformed/],
    ['"Bearer" with characters no token has', async () => 'Bearer {"alg":"none"}', 'invalid_token', /must be "Bearer <access token>"/],
    ['three dots of nothing', async () => 'Bearer a.b.c', 'invalid_token', /malformed/],
    // RFC 6750 §3.1: credentials of another scheme are no attempt at a bearer token, so no error code.
    ['Basic credentials on the API', async () => basic(server.bootstrap.clientId, server.bootstrap.clientSecret), null, /another scheme/],
    ['an expired token', async () => `Bearer ${await signWithServerKey(server, claims({ iat: minutes(-120), nbf: minutes(-120), exp: minutes(-60) }))}`, 'invalid_token', /expired/],
    ['a token not valid yet', async () => `Bearer ${await signWithServerKey(server, claims({ nbf: minutes(60), exp: minutes(120) }))}`, 'invalid_token', /not valid yet/],
    ['another issuer', async () => `Bearer ${await signWithServerKey(server, claims({ iss: 'https://evil.example' }))}`, 'invalid_token', /another issuer/],
    ['another audience', async () => `Bearer ${await signWithServerKey(server, claims({ aud: ['123456'] }))}`, 'invalid_token', AUDIENCE_HINT],
    ['no audience', async () => `Bearer ${await signWithServerKey(server, claims({ aud: undefined }))}`, 'invalid_token', AUDIENCE_HINT],
    ['alg: none', async () => `Bearer ${unsecured(claims())}`, 'invalid_token', /must be signed with ES256/],
    ['HS256 keyed with the public key', async () => `Bearer ${await hs256WithPublicKey(server, claims())}`, 'invalid_token', /must be signed with ES256/],
    ['a tampered payload (organization claim flipped)', async () => {
      const token = await signWithServerKey(server, claims());
      return `Bearer ${tamper(token, (p) => { p[orgClaim('slipway')] = otherOrgId; })}`;
    }, 'invalid_token', /signature is invalid/],
    ['a tampered payload under the signature of a token already accepted', async () => {
      const token = await signWithServerKey(server, claims());
      assert.equal((await get(`Bearer ${token}`)).status, 200);
      return `Bearer ${tamper(token, (p) => { p[orgClaim('slipway')] = otherOrgId; })}`;
    }, 'invalid_token', /signature is invalid/],
    ['a signature by another key under our kid, that key in the header', async () => `Bearer ${await signWithForeignKey(server, claims())}`, 'invalid_token', /signature is invalid/],
    ['an unknown kid', async () => `Bearer ${await signWithForeignKey(server, claims(), { kid: 'not-a-key-of-ours' })}`, 'invalid_token', /unknown key/],
    ['typ JWT instead of at+jwt', async () => `Bearer ${await signWithServerKey(server, claims(), { typ: 'JWT' })}`, 'invalid_token', /wrong type/],
    ['no jti', async () => `Bearer ${await signWithServerKey(server, claims({ jti: undefined }))}`, 'invalid_token', /jti/],
    ['no organization claim', async () => `Bearer ${await signWithServerKey(server, claims({ [orgClaim('slipway')]: undefined }))}`, 'invalid_token', /organization/],
    ['a subject that never existed', async () => `Bearer ${await signWithServerKey(server, claims({ sub: 'su_00000000000000000000000000' }))}`, 'invalid_token', /no longer exists/],
    ['a subject moved to another organization', async () => `Bearer ${await signWithServerKey(server, claims({ [orgClaim('slipway')]: otherOrgId }))}`, 'invalid_token', /no longer exists/],
  ];
  for (const [name, authorization, error, detail] of refusals) {
    it(`refuses ${name}`, async () => assertBearer401(await get(await authorization()), error, detail));
  }

  it('names the audience scope in the challenge of a wrong-audience refusal', async () => {
    const res = await bearer(await signWithServerKey(server, claims({ aud: ['123456'] })));
    assert.ok((res.headers.get('www-authenticate') ?? '').includes(`scope="${audience}"`));
    assert.equal(res.body.requiredScope, audience);
  });

  describe('what changes while a token lives', () => {
    let user: Actor;
    before(async () => {
      user = await server.actor(server.bootstrap.orgId, 'viewer');
    });
    const usedOnce = async (token: string) => assert.equal((await bearer(token)).status, 200, 'used once, so its verification is cached');
    const revoke = (creds: { clientId: string; clientSecret: string }, token: string, extra: Record<string, string> = {}) =>
      oauthPost(server, 'revoke', { authorization: basic(creds.clientId, creds.clientSecret), form: { token, ...extra } });
    const introspect = (creds: { clientId: string; clientSecret: string }, token: string) =>
      oauthPost(server, 'introspect', { authorization: basic(creds.clientId, creds.clientSecret), form: { token } });

    it('refuses a revoked token, even one already verified, and introspection calls it inactive', async () => {
      const token = (await requestToken(server, user)).body.access_token;
      await usedOnce(token);
      assert.equal((await introspect(user, token)).body.active, true);
      const res = await revoke(user, token);
      assert.equal(res.status, 200);
      assertBearer401(await bearer(token), 'invalid_token', /revoked/);
      assert.deepEqual((await introspect(user, token)).body, { active: false });
      // An event, with the client as its actor, once: revoking it again changes nothing.
      assert.equal((await revoke(user, token)).status, 200);
      const events = await server.core.db.selectFrom('events').selectAll().where('type', '=', 'service_user.token_revoked').where('subject_id', '=', user.id).execute();
      assert.equal(events.length, 1);
      assert.equal(events[0]!.actor_id, user.id);
      assert.equal(JSON.parse(events[0]!.data).tokenId, decodeJwt(token).jti);
      assert.ok(!events[0]!.data.includes(token), 'the token itself is not in the event');
      assert.equal((await revoke(user, token)).status, 200, 'revoking twice is not an error');
      // The service user's other tokens are unaffected.
      assert.equal((await bearer((await requestToken(server, user)).body.access_token)).status, 200);
    });

    it('revokes whatever token_type_hint says (RFC 7009 §2.1: the hint only guides the search)', async () => {
      const token = (await requestToken(server, user)).body.access_token;
      assert.equal((await revoke(user, token, { token_type_hint: 'refresh_token' })).status, 200);
      assertBearer401(await bearer(token), 'invalid_token', /revoked/);
    });

    it('revokes a token that lacks the audience scope', async () => {
      const token = (await requestToken(server, user, 'openid')).body.access_token;
      const active = (await introspect(user, token)).body;
      assert.equal(active.active, true);
      assert.ok(!active.aud.includes(server.core.identity.projectId));
      assert.equal((await revoke(user, token)).status, 200);
      assert.deepEqual((await introspect(user, token)).body, { active: false });
    });

    it('refuses to let a client revoke another client\'s token, which keeps working (RFC 7009 §2.1)', async () => {
      const token = (await requestToken(server, user)).body.access_token;
      const stranger = await server.actor(otherOrgId, 'owner');
      for (const caller of [server.bootstrap, stranger]) {
        const res = await revoke(caller, token);
        assert.equal(res.status, 400, res.text);
        assert.equal(res.body.error, 'unauthorized_client');
        assert.match(res.body.error_description, /issued to another client/);
      }
      assert.equal((await bearer(token)).status, 200);
    });

    it('answers 200 for a token that is not ours, and requires client authentication and the token', async () => {
      assert.equal((await revoke(user, 'not-a-token')).status, 200);
      assert.equal((await revoke(user, await signWithForeignKey(server, claimsFor(server, user)))).status, 200);
      const anonymous = await oauthPost(server, 'revoke', { form: { token: user.token } });
      assert.equal(anonymous.status, 401);
      assert.equal(anonymous.body.error, 'invalid_client');
      const missing = await oauthPost(server, 'revoke', { authorization: basic(user.clientId, user.clientSecret), form: {} });
      assert.equal(missing.status, 400);
      assert.equal(missing.body.error, 'invalid_request');
    });

    it('refuses at once the token of a service user disabled through the API, even one already verified', async () => {
      const victim = await server.actor(server.bootstrap.orgId, 'developer');
      await usedOnce(victim.token);
      const res = await server.owner.http.patch(`/v1/orgs/default/service-users/${victim.id}`, { disabled: true });
      assert.equal(res.status, 200);
      assertBearer401(await bearer(victim.token), 'invalid_token', /disabled/);
      assert.deepEqual((await introspect(server.bootstrap, victim.token)).body, { active: false });
    });

    it('keeps refusing the tokens that disabling ended once the user is enabled again; new tokens work', async () => {
      const victim = await server.actor(server.bootstrap.orgId, 'developer');
      await usedOnce(victim.token);
      const user = `/v1/orgs/default/service-users/${victim.id}`;
      assert.equal((await server.owner.http.patch(user, { disabled: true })).status, 200);
      assert.equal((await server.owner.http.patch(user, { disabled: false })).status, 200);
      assertBearer401(await bearer(victim.token), 'invalid_token', /issued before its service user was disabled/);
      assert.deepEqual((await introspect(server.bootstrap, victim.token)).body, { active: false });
      const fresh = (await requestToken(server, victim)).body.access_token;
      assert.equal((await bearer(fresh)).status, 200);
    });

    it('refuses at once the token of a deleted service user', async () => {
      const victim = await server.actor(server.bootstrap.orgId, 'developer');
      await usedOnce(victim.token);
      assert.equal((await server.owner.http.delete(`/v1/orgs/default/service-users/${victim.id}`)).status, 204);
      assertBearer401(await bearer(victim.token), 'invalid_token', /no longer exists/);
    });
  });

  describe('introspection (RFC 7662)', () => {
    const introspect = (creds: { clientId: string; clientSecret: string } | null, form: Record<string, string>) =>
      oauthPost(server, 'introspect', { ...(creds ? { authorization: basic(creds.clientId, creds.clientSecret) } : {}), form });

    it('describes a live token of the caller\'s organization', async () => {
      const user = await server.actor(server.bootstrap.orgId, 'viewer');
      const res = await introspect(server.bootstrap, { token: user.token });
      assert.equal(res.status, 200);
      assert.equal(res.headers.get('cache-control'), 'no-store');
      assert.equal(res.body.active, true);
      assert.equal(res.body.sub, user.clientId);
      assert.equal(res.body.client_id, user.clientId);
      assert.equal(res.body.scope, server.bootstrap.scope);
      assert.equal(res.body.iss, server.url);
      assert.equal(res.body.token_type, 'Bearer');
      assert.equal(res.body[orgClaim('slipway')], server.bootstrap.orgId);
      assert.ok(res.body.exp > Date.now() / 1000);
    });

    it('says only {active:false} for another organization\'s token, garbage, or a forged one', async () => {
      const stranger = await server.actor(otherOrgId, 'viewer');
      for (const token of [stranger.token, 'garbage', unsecured(claimsFor(server, server.bootstrap))]) {
        const res = await introspect(server.bootstrap, { token });
        assert.equal(res.status, 200);
        assert.deepEqual(res.body, { active: false });
      }
    });

    it('requires client authentication and the token parameter', async () => {
      const anonymous = await introspect(null, { token: server.owner.token });
      assert.equal(anonymous.status, 401);
      assert.equal(anonymous.body.error, 'invalid_client');
      assert.match(anonymous.headers.get('www-authenticate') ?? '', /^Basic /);
      const missing = await introspect(server.bootstrap, {});
      assert.equal(missing.status, 400);
      assert.equal(missing.body.error, 'invalid_request');
    });
  });
});

describe('GET /v1/token: who the token acts as, and with what role now', () => {
  let server: TestServer;
  before(async () => { server = await startServer(); });
  after(async () => {
    assert.deepEqual(server.undeclared, []);
    await server.close();
  });

  it('describes its own token to every role, no-store, never the token itself', async () => {
    for (const role of ROLES) {
      const actor = await server.actor(server.bootstrap.orgId, role, `who-${role}`);
      const res = await actor.http.get('/v1/token');
      assert.equal(res.status, 200, res.text);
      assert.equal(res.headers.get('cache-control'), 'no-store');
      const claims = decodeJwt(actor.token);
      assert.deepEqual(res.body, {
        subject: actor.id, clientId: actor.clientId, name: `who-${role}`, orgId: server.bootstrap.orgId, role, instanceAdmin: false,
        issuer: claims.iss, scopes: String(claims.scope).split(' '), expiresAt: new Date(claims.exp! * 1000).toISOString(),
      });
      assert.ok(!res.text.includes(actor.token.split('.')[2]!));
    }
    const owner = await server.owner.http.get('/v1/token');
    assert.deepEqual([owner.body.role, owner.body.instanceAdmin], ['owner', true]);
  });

  it('shows a role changed after the token was issued, and refuses a revoked token or none', async () => {
    const actor = await server.actor(server.bootstrap.orgId, 'developer');
    assert.equal((await actor.http.get('/v1/token')).body.role, 'developer');
    const changed = await server.owner.http.patch(`/v1/orgs/${server.bootstrap.orgId}/service-users/${actor.id}`, { role: 'viewer' });
    assert.equal(changed.status, 200, changed.text);
    assert.equal((await actor.http.get('/v1/token')).body.role, 'viewer');
    assert.equal((await actor.http.delete('/v1/token')).status, 204);
    assertBearer401(await actor.http.get('/v1/token'), 'invalid_token', /revoked/);
    assertBearer401(await server.http().get('/v1/token'), null, /Authorization: Bearer/);
  });
});

describe('DELETE /v1/token: the caller revokes the token it sends', () => {
  let server: TestServer;
  // A small hourly budget, so that the test below can spend it; every other test revokes as a client of its own.
  before(async () => { server = await startServer({ env: { SLIPWAY_RATE_LIMIT_REVOKE_PER_HOUR: '3' } }); });
  after(async () => {
    assert.deepEqual(server.undeclared, []);
    await server.close();
  });

  const signOut = (token: string, options = {}) => server.http(token).delete('/v1/token', options);
  const orgs = (token: string) => server.http(token).get('/v1/orgs');

  it('answers 204 no-store, then refuses that token everywhere; the service user\'s other tokens work, and the log records it', async () => {
    const user = await server.actor(server.bootstrap.orgId, 'developer');
    const other = (await requestToken(server, user)).body.access_token as string;
    assert.equal((await orgs(user.token)).status, 200, 'used once, so its verification is cached');
    const res = await signOut(user.token);
    assert.equal(res.status, 204, res.text);
    assert.equal(res.text, '');
    assert.equal(res.headers.get('cache-control'), 'no-store');
    assert.match(res.headers.get('ratelimit-policy') ?? '', /"token-revocations";q=3;w=3600/);
    // The very next request with it, on any route.
    assertBearer401(await orgs(user.token), 'invalid_token', /revoked/);
    assertBearer401(await user.http.get(`/v1/orgs/${server.bootstrap.orgId}/environments`), 'invalid_token', /revoked/);
    assertBearer401(await signOut(user.token), 'invalid_token', /revoked/);
    assert.equal((await orgs(other)).status, 200, 'another token of the same service user still works');
    // An event, with the service user as its actor and the request's id, naming the token by its id only.
    await eventsSettled(server);
    const events = await server.owner.http.get(`/v1/orgs/${server.bootstrap.orgId}/events?type=service_user.token_revoked&subject=${user.id}`);
    assert.equal(events.status, 200, events.text);
    assert.equal(events.body.events.length, 1);
    const [event] = events.body.events;
    assert.equal(event.actor, user.id);
    assert.equal(event.requestId, res.headers.get('x-request-id'));
    assert.deepEqual(event.subject, { type: 'service_user', id: user.id });
    assert.equal(event.data.tokenId, decodeJwt(user.token).jti);
    assert.ok(!JSON.stringify(event).includes(user.token), 'the token itself is not in the event');
  });

  it('refuses a request without a token, or with a malformed one, with a 401 problem', async () => {
    assertBearer401(await server.http().delete('/v1/token'), null, /Authorization: Bearer/);
    assertBearer401(await signOut('not-a-token'), 'invalid_token', /malformed/);
  });

  it('refuses a body, as every DELETE that takes none does, and leaves the token valid', async () => {
    const user = await server.actor(server.bootstrap.orgId, 'viewer');
    const res = await signOut(user.token, { body: { token: user.token } });
    const problem = assertProblem(res, 400, 'invalid_request');
    assert.match(String(problem.detail), /takes no request body/);
    assert.deepEqual(problem.errors, [{ pointer: '/token', message: 'is not a known field' }]);
    assert.equal((await orgs(user.token)).status, 200);
  });

  it('lets every role end its own token, a runner\'s included', async () => {
    for (const role of ROLES) {
      const actor = await server.actor(server.bootstrap.orgId, role);
      assert.equal((await signOut(actor.token)).status, 204, role);
      assertBearer401(await orgs(actor.token), 'invalid_token', /revoked/);
    }
  });

  it('spends the client\'s hourly revocation budget, shared with /oauth/v2/revoke: past it, a 429 problem, and the token stays valid', async () => {
    const user = await server.actor(server.bootstrap.orgId, 'viewer');
    const started = Date.now();
    // One of the three through RFC 7009's endpoint (a token that is not ours counts as well).
    assert.equal((await oauthPost(server, 'revoke', { authorization: basic(user.clientId, user.clientSecret), form: { token: 'not-a-token' } })).status, 200);
    const answers: HttpResult[] = [];
    let token: string;
    do {
      token = (await requestToken(server, user)).body.access_token as string;
      answers.push(await signOut(token));
    } while (answers.at(-1)!.status === 204 && answers.length < 8);
    const limited = answers.at(-1)!;
    assertProblem(limited, 429, 'rate_limited');
    assert.ok(Number(limited.headers.get('retry-after')) >= 1 && Number(limited.headers.get('retry-after')) <= 3600, limited.headers.get('retry-after') ?? '');
    assert.match(limited.headers.get('ratelimit') ?? '', /"token-revocations";r=0;/);
    // Unless the hour turned meanwhile (the windows are fixed hours), two were left for DELETE.
    if (Math.floor(Date.now() / 3_600_000) === Math.floor(started / 3_600_000)) assert.equal(answers.length, 3, answers.map((a) => a.status).join(', '));
    assert.equal((await orgs(token)).status, 200, 'the token refused revocation still works');
    // The other way round: the OAuth endpoint finds the budget spent too.
    const oauth = await oauthPost(server, 'revoke', { authorization: basic(user.clientId, user.clientSecret), form: { token } });
    assert.equal(oauth.status, 429);
    assert.equal(oauth.body.error, 'slow_down');
    // Another client keeps its own budget.
    const other = await server.actor(server.bootstrap.orgId, 'viewer');
    assert.equal((await signOut(other.token)).status, 204);
  });
});
