// POST {auth_url}/oauth/v2/token exactly as the spec's Authentication section and RFC 6749 fix it:
// the success response and its token, client authentication (Basic, form-url-decoded, or
// client_secret_post, never both), every §5.2 error with its status and code, and the rate limits
// (per client, and failed authentications per address, behind a trusted proxy too).
import assert from 'node:assert/strict';
import { gzipSync } from 'node:zlib';
import { after, before, describe, it } from 'node:test';
import { createLocalJWKSet, decodeJwt, decodeProtectedHeader, jwtVerify } from 'jose';
import { orgClaim } from '../../src/modules/auth/token.service.js';
import { cliContext } from '../../src/platform/context.js';
import { httpClient, startServer, type HttpResult, type TestServer } from '../support/harness.js';
import { basic, encodeEvery, FORM, oauthPost, plantClientSecret, requestToken, type OAuthRequest } from '../support/tokens.js';

/** RFC 6749 §5.2: JSON `{ error, error_description }`, never cached; invalid_client challenges Basic. */
function assertOAuthError(res: HttpResult, status: number, error: string): void {
  assert.equal(res.status, status, res.text);
  assert.match(res.headers.get('content-type') ?? '', /^application\/json/);
  assert.equal(res.headers.get('cache-control'), 'no-store');
  assert.equal(res.headers.get('pragma'), 'no-cache');
  assert.deepEqual(Object.keys(res.body).sort(), ['error', 'error_description']);
  assert.equal(res.body.error, error);
  assert.ok(res.body.error_description.length > 10);
  // RFC 6749 §5.2: error_description holds only %x20-21 / %x23-5B / %x5D-7E.
  assert.match(res.body.error_description, /^[\x20\x21\x23-\x5b\x5d-\x7e]*$/, res.body.error_description);
  if (status === 401) assert.match(res.headers.get('www-authenticate') ?? '', /^Basic realm="slipway"/);
}

describe('token endpoint', () => {
  let server: TestServer;
  let scope: string;
  let audience: string;
  before(async () => {
    server = await startServer();
    scope = server.bootstrap.scope;
    audience = scope.split(' ').at(-1)!;
  });
  after(async () => {
    assert.deepEqual(server.undeclared, []);
    await server.close();
  });

  it('answers the spec request (Basic, the five scopes) with an RFC 9068 token the API accepts', async () => {
    const res = await requestToken(server, server.bootstrap);
    assert.equal(res.status, 200, res.text);
    assert.equal(res.headers.get('cache-control'), 'no-store');
    assert.equal(res.headers.get('pragma'), 'no-cache');
    assert.deepEqual(Object.keys(res.body).sort(), ['access_token', 'expires_in', 'scope', 'token_type']);
    assert.equal(res.body.token_type, 'Bearer');
    assert.equal(res.body.expires_in, 43200);
    assert.equal(res.body.scope, scope);
    assert.equal(scope, `openid email profile offline_access urn:slipway:iam:org:project:id:${server.core.identity.projectId}:aud`);

    const token: string = res.body.access_token;
    const header = decodeProtectedHeader(token);
    assert.equal(header.alg, 'ES256');
    assert.equal(header.typ, 'at+jwt');
    const jwks = (await server.http().get('/oauth/v2/keys')).body;
    assert.ok(jwks.keys.some((k: { kid: string }) => k.kid === header.kid), 'the kid is published in the JWKS');
    // Checked against the published JWKS alone, as any resource server would.
    const { payload } = await jwtVerify(token, createLocalJWKSet(jwks), {
      issuer: server.url, audience: server.core.identity.projectId, typ: 'at+jwt', algorithms: ['ES256'],
    });
    assert.equal(payload.sub, server.bootstrap.clientId);
    assert.deepEqual(payload.aud, [server.core.identity.projectId, server.bootstrap.clientId]);
    assert.equal(payload.client_id, server.bootstrap.clientId);
    assert.equal(payload.scope, scope);
    assert.equal(payload[orgClaim('slipway')], server.bootstrap.orgId);
    assert.equal(payload.exp! - payload.iat!, 43200);
    assert.match(String(payload.jti), /^tok_/);
    assert.ok(Math.abs(payload.iat! - Date.now() / 1000) < 60);

    const orgs = await server.http(token).get('/v1/orgs');
    assert.equal(orgs.status, 200);
    // The secret never reaches a log line.
    assert.ok(!server.logs.some((l) => l.includes(server.bootstrap.clientSecret)));
  });

  it('accepts client_secret_post the same way', async () => {
    const res = await oauthPost(server, 'token', { form: { grant_type: 'client_credentials', scope, client_id: server.bootstrap.clientId, client_secret: server.bootstrap.clientSecret } });
    assert.equal(res.status, 200, res.text);
    assert.equal((await server.http(res.body.access_token).get('/v1/orgs')).status, 200);
  });

  it('accepts offline_access without issuing a refresh token (RFC 6749 §4.4.3), and grants a repeated scope once', async () => {
    const res = await requestToken(server, server.bootstrap, `offline_access ${audience} offline_access  openid`);
    assert.equal(res.status, 200, res.text);
    assert.equal(res.body.refresh_token, undefined);
    assert.equal(res.body.scope, `offline_access ${audience} openid`);
  });

  it('grants every scope to a request that names none (RFC 6749 §3.3 default), and the API accepts its token', async () => {
    for (const form of [{ grant_type: 'client_credentials' }, { grant_type: 'client_credentials', scope: '' }, { grant_type: 'client_credentials', scope: '  ' }] as Record<string, string>[]) {
      const res = await oauthPost(server, 'token', { authorization: basic(server.bootstrap.clientId, server.bootstrap.clientSecret), form });
      assert.equal(res.status, 200, res.text);
      assert.equal(res.body.scope, scope);
      assert.equal(decodeJwt(res.body.access_token).scope, scope);
      assert.equal((await server.http(res.body.access_token).get('/v1/orgs')).status, 200);
    }
  });

  it('issues a token without the audience scope, which the API refuses with a 401 naming the scope', async () => {
    const res = await requestToken(server, server.bootstrap, 'openid email profile offline_access');
    assert.equal(res.status, 200, res.text);
    assert.equal(res.body.scope, 'openid email profile offline_access');
    const api = await server.http(res.body.access_token).get('/v1/orgs');
    assert.equal(api.status, 401);
    assert.match(api.headers.get('content-type') ?? '', /^application\/problem\+json/);
    const challenge = api.headers.get('www-authenticate') ?? '';
    assert.match(challenge, /^Bearer realm="slipway", error="invalid_token"/);
    assert.ok(challenge.includes(`scope="${audience}"`), challenge);
    assert.ok(api.body.detail.includes(audience), api.body.detail);
    assert.equal(api.body.requiredScope, audience);
  });

  describe('client authentication (RFC 6749 §2.3.1: each Basic part form-url-decoded)', () => {
    it('decodes credentials whose every character is percent-encoded', async () => {
      const res = await oauthPost(server, 'token', {
        authorization: basic(server.bootstrap.clientId, server.bootstrap.clientSecret, encodeEvery),
        form: { grant_type: 'client_credentials', scope },
      });
      assert.equal(res.status, 200, res.text);
    });

    it('works with a secret holding + / : % and a space, form-encoded in Basic or in the body', async () => {
      const user = await server.actor(server.bootstrap.orgId, 'viewer');
      const secret = 'p+q/r:s%t u~é';
      await plantClientSecret(server, user.clientId, secret);
      const form = { grant_type: 'client_credentials', scope };
      assert.equal((await oauthPost(server, 'token', { authorization: basic(user.clientId, secret), form })).status, 200);
      assert.equal((await oauthPost(server, 'token', { form: { ...form, client_id: user.clientId, client_secret: secret } })).status, 200);
      // "+" decodes to a space and "%2B" to a plus: swapping them in the encoding must fail.
      const swapped = encodeURIComponent(secret).replace(/%2B/g, '+').replace(/%20/g, '%2B');
      const swappedHeader = `Basic ${Buffer.from(`${user.clientId}:${swapped}`).toString('base64')}`;
      assertOAuthError(await oauthPost(server, 'token', { authorization: swappedHeader, form }), 401, 'invalid_client');
      // Sent raw, the "%t" is a malformed escape: a clean invalid_client, not a 500.
      const raw = await oauthPost(server, 'token', { authorization: basic(user.clientId, secret, (s) => s), form });
      assertOAuthError(raw, 401, 'invalid_client');
      assert.match(raw.body.error_description, /form-url-encoded/);
    });

    it('takes, beside HTTP Basic, a client_id naming the same client (RFC 6749 §3.2.1), and an empty one as none (§3.2)', async () => {
      const form = { grant_type: 'client_credentials', scope };
      for (const clientId of [server.bootstrap.clientId, '']) {
        const res = await oauthPost(server, 'token', { authorization: basic(server.bootstrap.clientId, server.bootstrap.clientSecret), form: { ...form, client_id: clientId } });
        assert.equal(res.status, 200, `client_id="${clientId}": ${res.text}`);
        assert.equal(decodeJwt(res.body.access_token).client_id, server.bootstrap.clientId);
      }
      // Named by an encoding of its own, the client id is still the one Basic decodes to.
      const encoded = await oauthPost(server, 'token', { authorization: basic(server.bootstrap.clientId, server.bootstrap.clientSecret, encodeEvery), form: { ...form, client_id: server.bootstrap.clientId } });
      assert.equal(encoded.status, 200, encoded.text);
      const other = await server.actor(server.bootstrap.orgId, 'viewer');
      const mixed = await oauthPost(server, 'token', { authorization: basic(server.bootstrap.clientId, server.bootstrap.clientSecret), form: { ...form, client_id: other.clientId } });
      assertOAuthError(mixed, 400, 'invalid_request');
      assert.match(mixed.body.error_description, /client_id .* another client/);
    });

    it('logs each refused client with its id, why and its address, never what it sent as a secret', async () => {
      const form = { grant_type: 'client_credentials', scope };
      const disabled = await server.actor(server.bootstrap.orgId, 'developer');
      assert.equal((await server.owner.http.patch(`/v1/orgs/default/service-users/${disabled.id}`, { disabled: true })).status, 200);
      const guess = `guessed-${process.pid}-secret`;
      const unknownId = 'su_00000000000000000000000000';
      for (const [id, secret] of [[server.bootstrap.clientId, guess], [unknownId, guess], [disabled.clientId, disabled.clientSecret], [guess, guess]] as const) {
        assertOAuthError(await oauthPost(server, 'token', { authorization: basic(id, secret), form }), 401, 'invalid_client');
      }
      const refused = server.logs.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.msg === 'client authentication failed').slice(-4);
      assert.deepEqual(refused.map((l) => [l.clientId, l.reason, l.level]), [
        [server.bootstrap.clientId, 'wrong secret', 'warn'], [unknownId, 'unknown client', 'warn'], [disabled.clientId, 'disabled service user', 'warn'], [undefined, 'not a client id', 'warn'],
      ]);
      for (const line of refused) assert.equal(line.ip, '127.0.0.1');
      assert.deepEqual(server.logs.filter((l) => l.includes(guess) || l.includes(disabled.clientSecret)), []);
      // The access line names the address too.
      const access = server.logs.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.msg === 'request' && l.route === '/oauth/v2/token').at(-1);
      assert.equal(access?.ip, '127.0.0.1');
    });

    it('refuses a generated secret with one character replaced by %2B', async () => {
      const bad = server.bootstrap.clientSecret.slice(0, -1);
      const res = await oauthPost(server, 'token', {
        authorization: basic(server.bootstrap.clientId, `${bad}%2B`, (s) => s),
        form: { grant_type: 'client_credentials', scope },
      });
      assertOAuthError(res, 401, 'invalid_client');
    });
  });

  describe('errors (RFC 6749 §5.2)', () => {
    const grant = () => ({ grant_type: 'client_credentials', scope });
    const owner = () => basic(server.bootstrap.clientId, server.bootstrap.clientSecret);
    const cases: Array<[string, () => Promise<OAuthRequest>, number, string]> = [
      ['unknown client id', async () => ({ authorization: basic('su_00000000000000000000000000', server.bootstrap.clientSecret), form: grant() }), 401, 'invalid_client'],
      ['client id of no known form', async () => ({ authorization: basic('admin', 'admin'), form: grant() }), 401, 'invalid_client'],
      // PostgreSQL refuses a NUL in text: it must not reach the database (it was a 500 there).
      ['a client id holding a NUL, in Basic', async () => ({ authorization: basic('su_\0', server.bootstrap.clientSecret), form: grant() }), 401, 'invalid_client'],
      ['a client id holding a NUL, in the body', async () => ({ form: { ...grant(), client_id: `${server.bootstrap.clientId}\0`, client_secret: server.bootstrap.clientSecret } }), 401, 'invalid_client'],
      ['wrong secret', async () => ({ authorization: basic(server.bootstrap.clientId, `${server.bootstrap.clientSecret}x`), form: grant() }), 401, 'invalid_client'],
      ['disabled service user', async () => {
        const user = await server.actor(server.bootstrap.orgId, 'developer');
        assert.equal((await server.owner.http.patch(`/v1/orgs/default/service-users/${user.id}`, { disabled: true })).status, 200);
        return { authorization: basic(user.clientId, user.clientSecret), form: grant() };
      }, 401, 'invalid_client'],
      ['no client authentication', async () => ({ form: grant() }), 401, 'invalid_client'],
      ['client_secret_post without the secret', async () => ({ form: { ...grant(), client_id: server.bootstrap.clientId } }), 401, 'invalid_client'],
      ['Basic credentials without a colon', async () => ({ authorization: `Basic ${Buffer.from(server.bootstrap.clientId).toString('base64')}`, form: grant() }), 401, 'invalid_client'],
      ['a Bearer header instead of client credentials', async () => ({ authorization: `Bearer ${server.owner.token}`, form: grant() }), 401, 'invalid_client'],
      ['Basic and client_secret_post at once', async () => ({ authorization: owner(), form: { ...grant(), client_id: server.bootstrap.clientId, client_secret: server.bootstrap.clientSecret } }), 400, 'invalid_request'],
      ['Basic and a client_secret in the body', async () => ({ authorization: owner(), form: { ...grant(), client_secret: server.bootstrap.clientSecret } }), 400, 'invalid_request'],
      ['Basic and the client_id of another client', async () => ({ authorization: owner(), form: { ...grant(), client_id: 'su_00000000000000000000000000' } }), 400, 'invalid_request'],
      ['client_secret_post with an empty secret', async () => ({ form: { ...grant(), client_id: server.bootstrap.clientId, client_secret: '' } }), 401, 'invalid_client'],
      ['grant_type=password', async () => ({ authorization: owner(), form: { ...grant(), grant_type: 'password' } }), 400, 'unsupported_grant_type'],
      ['grant_type=refresh_token', async () => ({ authorization: owner(), form: { grant_type: 'refresh_token', refresh_token: 'x' } }), 400, 'unsupported_grant_type'],
      // Echoed in error_description, which may not carry a quote, a backslash or anything but printable ASCII.
      ['a grant_type with a quote, a backslash and non-ASCII', async () => ({ authorization: owner(), form: { ...grant(), grant_type: 'pa"ss\\wörd→' } }), 400, 'unsupported_grant_type'],
      ['a scope with a quote and non-ASCII', async () => ({ authorization: owner(), form: { ...grant(), scope: 'openid "admin" überall' } }), 400, 'invalid_scope'],
      ['no grant_type', async () => ({ authorization: owner(), form: { scope } }), 400, 'invalid_request'],
      ['an empty grant_type', async () => ({ authorization: owner(), form: { ...grant(), grant_type: '' } }), 400, 'invalid_request'],
      ['an unknown scope', async () => ({ authorization: owner(), form: { ...grant(), scope: `${scope} admin` } }), 400, 'invalid_scope'],
      ['the audience scope of another project', async () => ({ authorization: owner(), form: { ...grant(), scope: 'openid urn:slipway:iam:org:project:id:1:aud' } }), 400, 'invalid_scope'],
      ['a JSON body', async () => ({ authorization: owner(), raw: JSON.stringify(grant()), contentType: 'application/json' }), 400, 'invalid_request'],
      ['a text/plain body', async () => ({ authorization: owner(), raw: new URLSearchParams(grant()).toString(), contentType: 'text/plain' }), 400, 'invalid_request'],
      ['no body', async () => ({ authorization: owner() }), 400, 'invalid_request'],
      ['grant_type twice', async () => ({ authorization: owner(), raw: `grant_type=client_credentials&grant_type=client_credentials&scope=openid`, contentType: FORM }), 400, 'invalid_request'],
      ['scope twice', async () => ({ authorization: owner(), raw: `grant_type=client_credentials&scope=openid&scope=email`, contentType: FORM }), 400, 'invalid_request'],
      ['wrong secret and an unknown scope: the client is refused first', async () => ({ authorization: basic(server.bootstrap.clientId, 'wrong'), form: { ...grant(), scope: 'admin' } }), 401, 'invalid_client'],
    ];
    for (const [name, build, status, error] of cases) {
      it(`${name} → ${status} ${error}`, async () => {
        const res = await oauthPost(server, 'token', await build());
        assertOAuthError(res, status, error);
        assert.ok(!res.text.includes(server.bootstrap.clientSecret));
      });
    }

    it('ignores a parameter it does not read however often it comes (RFC 6749 §3.2; RFC 8707 repeats resource), and refuses one it reads sent twice', async () => {
      const resources = '&resource=https%3A%2F%2Fa.example&resource=https%3A%2F%2Fb.example&x%22y=1&x%22y=2';
      const token = await oauthPost(server, 'token', { authorization: owner(), raw: `grant_type=client_credentials&scope=${encodeURIComponent(scope)}${resources}`, contentType: FORM });
      assert.equal(token.status, 200, token.text);
      assert.equal((await server.http(token.body.access_token).get('/v1/orgs/default')).status, 200);
      const introspect = await oauthPost(server, 'introspect', { authorization: owner(), raw: `token=${token.body.access_token}${resources}`, contentType: FORM });
      assert.equal(introspect.status, 200, introspect.text);
      assert.equal(introspect.body.active, true);
      for (const [endpoint, raw] of [
        ['token', `grant_type=client_credentials&scope=openid&resource=https%3A%2F%2Fa.example&scope=email`],
        ['introspect', `token=${token.body.access_token}&token_type_hint=access_token&token_type_hint=access_token`],
        ['revoke', `token=${token.body.access_token}&token=${token.body.access_token}`],
      ] as const) {
        const refused = await oauthPost(server, endpoint, { authorization: owner(), raw, contentType: FORM });
        assertOAuthError(refused, 400, 'invalid_request');
        assert.match(refused.body.error_description, /appears more than once/);
      }
      // The refused revocation revoked nothing.
      assert.equal((await server.http(token.body.access_token).get('/v1/orgs/default')).status, 200);
    });

    it('treats a parameter sent without a value as omitted (RFC 6749 §3.2)', async () => {
      const empty = await oauthPost(server, 'token', { authorization: owner(), raw: `grant_type=&scope=${encodeURIComponent(scope)}`, contentType: FORM });
      assertOAuthError(empty, 400, 'invalid_request');
      assert.match(empty.body.error_description, /grant_type parameter is required/);
      // Not a second grant_type either: the empty one was never sent.
      const twice = await oauthPost(server, 'token', { authorization: owner(), raw: 'grant_type=&grant_type=client_credentials&client_id=&scope=', contentType: FORM });
      assert.equal(twice.status, 200, twice.text);
      assert.equal(twice.body.scope, scope);
      const introspect = await oauthPost(server, 'introspect', { authorization: owner(), form: { token: '' } });
      assertOAuthError(introspect, 400, 'invalid_request');
      assert.match(introspect.body.error_description, /token parameter is required/);
    });

    it('takes the form whatever the case of its media type, and with a charset parameter', async () => {
      const raw = new URLSearchParams(grant()).toString();
      for (const contentType of [`${FORM}; charset=UTF-8`, 'Application/X-WWW-Form-Urlencoded', `${FORM.toUpperCase()};charset=utf-8`, FORM]) {
        const res = await oauthPost(server, 'token', { authorization: owner(), raw, contentType });
        assert.equal(res.status, 200, contentType);
        assert.equal(res.body.token_type, 'Bearer');
      }
    });

    it('refuses a form it would misread: compressed, or in a charset other than UTF-8, saying which; and a body past the limit with 413', async () => {
      const raw = new URLSearchParams(grant()).toString();
      for (const [body, headers, said] of [
        [gzipSync(raw), { 'content-encoding': 'gzip' }, /does not decode Content-Encoding gzip/],
        [raw, { 'content-encoding': 'gzip' }, /does not decode Content-Encoding gzip/],
        [raw, { 'content-type': `${FORM}; charset=latin1` }, /in UTF-8, not in latin1/],
      ] as const) {
        const res = await fetch(`${server.url}/oauth/v2/token`, { method: 'POST', body, headers: { authorization: owner(), 'content-type': FORM, ...headers } });
        const answer = await res.json() as { error: string; error_description: string };
        assert.deepEqual([res.status, answer.error], [400, 'invalid_request'], JSON.stringify(headers));
        assert.match(answer.error_description, said);
      }
      const identity = await fetch(`${server.url}/oauth/v2/token`, { method: 'POST', body: raw, headers: { authorization: owner(), 'content-type': FORM, 'content-encoding': 'identity' } });
      assert.equal(identity.status, 200);
      for (const endpoint of ['token', 'introspect', 'revoke'] as const) {
        const big = await oauthPost(server, endpoint, { authorization: owner(), raw: `${raw}&pad=${'x'.repeat(5 * 1024 * 1024)}` });
        assertOAuthError(big, 413, 'invalid_request');
      }
    });

    it('names what to fix: the unknown scope, the grant type, the content type', async () => {
      const scopeRes = await oauthPost(server, 'token', { authorization: owner(), form: { ...grant(), scope: 'openid admin' } });
      assert.match(scopeRes.body.error_description, /'admin'/);
      assert.ok(scopeRes.body.error_description.includes(audience));
      const grantRes = await oauthPost(server, 'token', { authorization: owner(), form: { ...grant(), grant_type: 'password' } });
      assert.match(grantRes.body.error_description, /'password'.*client_credentials/);
      const typeRes = await oauthPost(server, 'token', { authorization: owner(), raw: '{}', contentType: 'application/json' });
      assert.match(typeRes.body.error_description, /application\/x-www-form-urlencoded, not application\/json/);
    });
  });
});

describe('token endpoint rate limit', () => {
  let server: TestServer;
  before(async () => { server = await startServer({ env: { SLIPWAY_RATE_LIMIT_TOKEN_PER_MINUTE: '3' } }); });
  after(async () => { await server.close(); });

  it('answers a client\'s 4th token request of a window with 429, Retry-After and RateLimit fields, in RFC 6749 form; another client at the same address is not held back', async () => {
    // Counted per fixed window: walk until the first 429 and check it came right after the window's
    // last allowed request, whichever window the requests fell into.
    const user = await server.core.serviceUsers.create(cliContext(), server.bootstrap.orgId, { name: 'limited', role: 'viewer' });
    const seen = await untilLimited(() => requestToken(server, user));
    const limited = seen.at(-1)!;
    assertOAuthError(limited, 429, 'slow_down');
    assert.match(limited.body.error_description, /retry after \d+ s/);
    assert.match(limited.headers.get('retry-after') ?? '', /^\d+$/);
    assert.ok(Number(limited.headers.get('retry-after')) <= 60);
    assert.match(limited.headers.get('ratelimit-policy') ?? '', /"token-client";q=3;w=60/);
    assert.equal(remaining(limited, 'token-client'), 0);
    const before = seen.at(-2)!;
    assert.equal(before.status, 200);
    assert.equal(remaining(before, 'token-client'), 0);
    // Successful requests spend their client's budget, not their address's.
    assert.equal(remaining(before, 'token-failures'), null);
    const other = await server.core.serviceUsers.create(cliContext(), server.bootstrap.orgId, { name: 'neighbour', role: 'viewer' });
    assert.equal((await requestToken(server, other)).status, 200);
  });

  it('counts a client\'s introspections and revocations against the same budget', async () => {
    const user = await server.core.serviceUsers.create(cliContext(), server.bootstrap.orgId, { name: 'introspecting', role: 'viewer' });
    const introspect = () => oauthPost(server, 'introspect', { authorization: basic(user.clientId, user.clientSecret), form: { token: 'not-a-token' } });
    const seen = await untilLimited(introspect);
    assert.equal(seen.at(-2)!.status, 200);
    assert.match(seen.at(-1)!.headers.get('ratelimit-policy') ?? '', /"token-client";q=3;w=60/);
  });

  it('refuses an address that failed to authenticate 3 times in a window, whatever it sends next, and says when to retry', async () => {
    const user = await server.core.serviceUsers.create(cliContext(), server.bootstrap.orgId, { name: 'guessed', role: 'viewer' });
    const seen = await untilLimited(() => requestToken(server, { clientId: user.clientId, clientSecret: 'a-wrong-guess' }));
    const limited = seen.at(-1)!;
    assertOAuthError(limited, 429, 'slow_down');
    assert.match(limited.headers.get('ratelimit-policy') ?? '', /^"token-failures";q=3;w=60$/);
    assert.equal(remaining(limited, 'token-failures'), 0);
    const failed = seen.at(-2)!;
    assertOAuthError(failed, 401, 'invalid_client');
    assert.equal(remaining(failed, 'token-failures'), 0);
    // Refused before its credentials are looked at: the right secret fares no better, and neither
    // does an X-Forwarded-For that no trusted proxy vouches for. (Unless the window has just ended.)
    if (Number(limited.headers.get('retry-after')) > 1) {
      assertOAuthError(await requestToken(server, user), 429, 'slow_down');
      assertOAuthError(await requestToken(server, user, undefined, { 'x-forwarded-for': '198.51.100.8' }), 429, 'slow_down');
    }
  });
});

describe('token revocation budget (SLIPWAY_RATE_LIMIT_REVOKE_PER_HOUR)', () => {
  let server: TestServer;
  before(async () => { server = await startServer({ env: { SLIPWAY_RATE_LIMIT_REVOKE_PER_HOUR: '2' } }); });
  after(async () => { await server.close(); });

  it('answers a client\'s revocations past its hour\'s budget with 429, and the token stays valid until it expires', async () => {
    const user = await server.core.serviceUsers.create(cliContext(), server.bootstrap.orgId, { name: 'revoking', role: 'viewer' });
    const revoke = (token: string) => oauthPost(server, 'revoke', { authorization: basic(user.clientId, user.clientSecret), form: { token } });
    const seen = await untilLimited(() => revoke('not-a-token'));
    const limited = seen.at(-1)!;
    assertOAuthError(limited, 429, 'slow_down');
    assert.match(limited.headers.get('ratelimit-policy') ?? '', /"token-revocations";q=2;w=3600/);
    assert.ok(Number(limited.headers.get('retry-after')) <= 3600);
    // Its own live token: not revoked, and it still works.
    const token = (await requestToken(server, user)).body.access_token as string;
    assertOAuthError(await revoke(token), 429, 'slow_down');
    assert.equal((await httpClient(server.url, token).get(`/v1/orgs/${server.bootstrap.orgId}/environments`)).status, 200);
    // Other clients keep their own budget.
    const other = await server.core.serviceUsers.create(cliContext(), server.bootstrap.orgId, { name: 'revoking-too', role: 'viewer' });
    const revoked = await oauthPost(server, 'revoke', { authorization: basic(other.clientId, other.clientSecret), form: { token: 'not-a-token' } });
    assert.equal(revoked.status, 200);
    assert.equal(revoked.headers.get('cache-control'), 'no-store', 'as every answer of the token endpoints');
  });
});

describe('token endpoint behind a trusted proxy (SLIPWAY_TRUST_PROXY)', () => {
  let server: TestServer;
  before(async () => { server = await startServer({ env: { SLIPWAY_RATE_LIMIT_TOKEN_PER_MINUTE: '3', SLIPWAY_TRUST_PROXY: 'loopback' } }); });
  after(async () => { await server.close(); });

  it('counts failures against the client address the proxy names, so one client\'s guessing does not lock out the others', async () => {
    const user = await server.core.serviceUsers.create(cliContext(), server.bootstrap.orgId, { name: 'behind-proxy', role: 'viewer' });
    const guesser = { 'x-forwarded-for': '198.51.100.7' };
    const seen = await untilLimited(() => requestToken(server, { clientId: user.clientId, clientSecret: 'a-wrong-guess' }, undefined, guesser));
    const limited = seen.at(-1)!;
    assertOAuthError(limited, 429, 'slow_down');
    if (Number(limited.headers.get('retry-after')) > 1) assertOAuthError(await requestToken(server, user, undefined, guesser), 429, 'slow_down');
    const res = await requestToken(server, user, undefined, { 'x-forwarded-for': '198.51.100.8' });
    assert.equal(res.status, 200, res.text);
  });

  it('counts guesses sent together before it checks any of them, so no more than the budget get an answer', async () => {
    const user = await server.core.serviceUsers.create(cliContext(), server.bootstrap.orgId, { name: 'burst', role: 'viewer' });
    const started = Date.now();
    const answers = await Promise.all(Array.from({ length: 12 }, () => requestToken(server, { clientId: user.clientId, clientSecret: 'a-wrong-guess' }, undefined, { 'x-forwarded-for': '198.51.100.9' })));
    // Within one fixed window, 3; a burst that crosses into the next may have up to 3 more.
    const windows = Math.floor(Date.now() / 60_000) - Math.floor(started / 60_000) + 1;
    const statuses = answers.map((a) => a.status);
    assert.ok(statuses.filter((s) => s === 401).length <= 3 * windows, statuses.join(', '));
    assert.deepEqual([...new Set(statuses)].sort(), [401, 429]);
  });
});

/** `"token-client";r=2;t=41, …` → the remaining count of the named limit. */
function remaining(res: HttpResult, name: string): number | null {
  const item = (res.headers.get('ratelimit') ?? '').split(',').map((s) => s.trim()).find((s) => s.startsWith(`"${name}"`));
  return item ? Number(/;r=(\d+)/.exec(item)![1]) : null;
}

/** Sends until the first 429 (a limit of 3 is reached within two fixed windows): every answer, in order. */
async function untilLimited(send: () => Promise<HttpResult>): Promise<HttpResult[]> {
  const seen: HttpResult[] = [];
  for (let i = 0; i < 8 && seen.at(-1)?.status !== 429; i++) seen.push(await send());
  assert.equal(seen.at(-1)?.status, 429, `no 429 after ${seen.length} requests: ${seen.map((r) => r.status).join(', ')}`);
  return seen;
}
