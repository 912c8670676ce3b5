// What clients we did not write see: the discovery document and JWKS, a third-party OAuth library
// (openid-client, on oauth4webapi) doing discovery, the client-credentials grant with HTTP Basic
// and the spec's scopes, introspection and revocation, and plain curl exactly as the README
// shows it. Each ends with the API accepting (or refusing) the token.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import * as client from 'openid-client';
import { freePort, startServer, tempDir, testDatabase, type TestServer } from '../support/harness.js';
import { plantClientSecret } from '../support/tokens.js';

const run = promisify(execFile);

describe('OAuth clients', () => {
  let server: TestServer;
  let audience: string;
  before(async () => {
    server = await startServer();
    audience = server.bootstrap.scope.split(' ').at(-1)!;
  });
  after(async () => {
    assert.deepEqual(server.undeclared, []);
    await server.close();
  });

  const discover = (clientId: string, clientSecret: string) =>
    client.discovery(new URL(server.url), clientId, clientSecret, client.ClientSecretBasic(clientSecret), { execute: [client.allowInsecureRequests] });

  it('publishes discovery metadata whose scopes_supported lists the audience scope', async () => {
    const res = await server.http().get('/.well-known/openid-configuration');
    assert.equal(res.status, 200);
    const doc = res.body;
    assert.equal(doc.issuer, server.url);
    assert.equal(doc.token_endpoint, server.bootstrap.tokenUrl);
    assert.equal(doc.jwks_uri, `${server.url}/oauth/v2/keys`);
    assert.equal(doc.introspection_endpoint, `${server.url}/oauth/v2/introspect`);
    assert.equal(doc.revocation_endpoint, `${server.url}/oauth/v2/revoke`);
    assert.deepEqual(doc.grant_types_supported, ['client_credentials']);
    assert.deepEqual(doc.token_endpoint_auth_methods_supported, ['client_secret_basic', 'client_secret_post']);
    assert.deepEqual(doc.scopes_supported, server.bootstrap.scope.split(' '));
    assert.ok(doc.scopes_supported.includes(`urn:slipway:iam:org:project:id:${server.core.identity.projectId}:aud`));
    assert.deepEqual(doc.access_token_signing_alg_values_supported, ['ES256']);
  });

  it('advertises no flow it does not have: no authorization endpoint, no response type, no ID tokens', async () => {
    const doc = (await server.http().get('/.well-known/openid-configuration')).body;
    // RFC 8414 §2 requires the field; the client credentials grant uses no response type (RFC 7591 §2.1).
    assert.deepEqual(doc.response_types_supported, []);
    assert.deepEqual(doc.subject_types_supported, ['public']);
    assert.deepEqual(Object.keys(doc).sort(), [
      'access_token_signing_alg_values_supported', 'claims_supported', 'grant_types_supported', 'introspection_endpoint',
      'introspection_endpoint_auth_methods_supported', 'issuer', 'jwks_uri', 'response_types_supported', 'revocation_endpoint',
      'revocation_endpoint_auth_methods_supported', 'scopes_supported', 'service_documentation', 'subject_types_supported',
      'token_endpoint', 'token_endpoint_auth_methods_supported',
    ]);
  });

  it('publishes the same document as RFC 8414 authorization server metadata, which a client discovers with algorithm oauth2', async () => {
    const oidc = await server.http().get('/.well-known/openid-configuration');
    const res = await server.http().get('/.well-known/oauth-authorization-server');
    assert.equal(res.status, 200);
    assert.deepEqual(res.body, oidc.body);
    const config = await client.discovery(new URL(server.url), server.bootstrap.clientId, server.bootstrap.clientSecret, client.ClientSecretBasic(server.bootstrap.clientSecret), { execute: [client.allowInsecureRequests], algorithm: 'oauth2' });
    const token = await client.clientCredentialsGrant(config, { scope: server.bootstrap.scope });
    assert.equal((await server.http().get('/v1/orgs', { headers: { authorization: `Bearer ${token.access_token}` } })).status, 200);
  });

  it('with an issuer on a path, puts the RFC 8414 segment before the path and the OpenID one after it', async () => {
    const port = await freePort();
    const issuer = `http://127.0.0.1:${port}/auth`;
    const pathed = await startServer({ reuse: { dataDir: tempDir(), database: await testDatabase(), port }, env: { SLIPWAY_AUTH_URL: issuer } });
    try {
      const rfc8414 = await pathed.http().get('/.well-known/oauth-authorization-server/auth');
      assert.equal(rfc8414.status, 200, rfc8414.text);
      assert.equal(rfc8414.body.issuer, issuer);
      assert.equal(rfc8414.body.token_endpoint, `${issuer}/oauth/v2/token`);
      assert.deepEqual((await pathed.http().get('/auth/.well-known/openid-configuration')).body, rfc8414.body);
      assert.equal((await pathed.http().get('/.well-known/oauth-authorization-server')).status, 404);
      const config = await client.discovery(new URL(issuer), pathed.bootstrap.clientId, pathed.bootstrap.clientSecret, client.ClientSecretBasic(pathed.bootstrap.clientSecret), { execute: [client.allowInsecureRequests], algorithm: 'oauth2' });
      assert.equal(config.serverMetadata().issuer, issuer);
      assert.deepEqual(pathed.undeclared, []);
    } finally {
      await pathed.close();
    }
  });

  it('publishes only public signing keys, each with its kid', async () => {
    const res = await server.http().get('/oauth/v2/keys');
    assert.equal(res.status, 200);
    assert.ok(res.body.keys.length >= 1);
    for (const key of res.body.keys) {
      assert.deepEqual({ kty: key.kty, crv: key.crv, alg: key.alg, use: key.use }, { kty: 'EC', crv: 'P-256', alg: 'ES256', use: 'sig' });
      assert.equal(typeof key.kid, 'string');
      assert.equal(key.d, undefined, 'no private part');
    }
  });

  it('openid-client discovers the issuer, gets a token with Basic and the spec scopes, and the API accepts it', async () => {
    const config = await discover(server.bootstrap.clientId, server.bootstrap.clientSecret);
    assert.equal(config.serverMetadata().issuer, server.url);
    const tokens = await client.clientCredentialsGrant(config, { scope: server.bootstrap.scope });
    assert.equal(tokens.token_type, 'bearer'); // the library normalises the case
    assert.equal(tokens.expires_in, 43200);
    assert.equal(tokens.scope, server.bootstrap.scope);
    assert.equal(tokens.refresh_token, undefined);
    const res = await client.fetchProtectedResource(config, tokens.access_token, new URL(`${server.url}/v1/orgs`), 'GET');
    assert.equal(res.status, 200);
    const body = (await res.json()) as { orgs: Array<{ slug: string }> };
    assert.ok(body.orgs.some((o) => o.slug === 'default'));

    const described = await client.tokenIntrospection(config, tokens.access_token);
    assert.equal(described.active, true);
    assert.equal(described.client_id, server.bootstrap.clientId);
    await client.tokenRevocation(config, tokens.access_token);
    assert.equal((await client.tokenIntrospection(config, tokens.access_token)).active, false);
    await assert.rejects(
      client.fetchProtectedResource(config, tokens.access_token, new URL(`${server.url}/v1/orgs`), 'GET'),
      (error: client.WWWAuthenticateChallengeError) => {
        assert.equal(error.status, 401);
        assert.equal(error.cause[0]!.scheme, 'bearer');
        assert.equal(error.cause[0]!.parameters.error, 'invalid_token');
        return true;
      },
    );
  });

  it('openid-client form-encodes a secret with + / : % and a space, and the server decodes it', async () => {
    const user = await server.actor(server.bootstrap.orgId, 'viewer');
    const secret = 'a+b/c:d%e f';
    await plantClientSecret(server, user.clientId, secret);
    const tokens = await client.clientCredentialsGrant(await discover(user.clientId, secret), { scope: server.bootstrap.scope });
    assert.equal((await server.http(tokens.access_token).get('/v1/orgs')).status, 200);
  });

  it('openid-client sees the RFC 6749 errors and the audience challenge', async () => {
    const wrong = await discover(server.bootstrap.clientId, 'sws_wrong');
    await assert.rejects(client.clientCredentialsGrant(wrong, { scope: server.bootstrap.scope }), (error: client.WWWAuthenticateChallengeError) => {
      assert.equal(error.status, 401);
      assert.equal(error.cause[0]!.scheme, 'basic');
      assert.equal(error.cause[0]!.parameters.error, 'invalid_client');
      return true;
    });
    const config = await discover(server.bootstrap.clientId, server.bootstrap.clientSecret);
    await assert.rejects(client.clientCredentialsGrant(config, { scope: 'openid admin' }), (error: client.ResponseBodyError) => {
      assert.equal(error.status, 400);
      assert.equal(error.error, 'invalid_scope');
      return true;
    });
    const noAudience = await client.clientCredentialsGrant(config, { scope: 'openid email profile offline_access' });
    await assert.rejects(
      client.fetchProtectedResource(config, noAudience.access_token, new URL(`${server.url}/v1/orgs`), 'GET'),
      (error: client.WWWAuthenticateChallengeError) => {
        assert.equal(error.status, 401);
        assert.equal(error.cause[0]!.parameters.error, 'invalid_token');
        assert.equal(error.cause[0]!.parameters.scope, audience);
        return true;
      },
    );
  });

  describe('curl, as the README shows it', () => {
    it('gets a token and makes a call with the two curl commands', async () => {
      const { clientId, clientSecret, scope, tokenUrl } = server.bootstrap;
      // curl -s -u "$CLIENT_ID:$CLIENT_SECRET" -d grant_type=client_credentials --data-urlencode "scope=$SCOPE" "$TOKEN_URL"
      const token = await run('curl', ['-s', '-u', `${clientId}:${clientSecret}`, '-d', 'grant_type=client_credentials', '--data-urlencode', `scope=${scope}`, tokenUrl]);
      const body = JSON.parse(token.stdout) as { access_token: string; token_type: string; expires_in: number; scope: string };
      assert.equal(body.token_type, 'Bearer');
      assert.equal(body.expires_in, 43200);
      assert.equal(body.scope, scope);
      // curl -s -H "Authorization: Bearer $TOKEN" "$BASE_URL/v1/orgs"
      const orgs = await run('curl', ['-s', '-H', `Authorization: Bearer ${body.access_token}`, `${server.url}/v1/orgs`]);
      assert.ok((JSON.parse(orgs.stdout) as { orgs: Array<{ id: string }> }).orgs.some((o) => o.id === server.bootstrap.orgId));
    });

    it('runs the README block in a shell, reading bootstrap.json as it does', async () => {
      // The README's block, read from the README, word for word but where bootstrap.json and the server are.
      const readme = fs.readFileSync(fileURLToPath(new URL('../../../README.md', import.meta.url)), 'utf8');
      const block = /```sh\n(B=\.slipway\/bootstrap\.json\n[\s\S]*?)```/.exec(readme)?.[1];
      assert.ok(block !== undefined, 'the README has the block');
      const script = block.replace(/^B=\.slipway\/bootstrap\.json$/m, `B=${path.basename(server.dataDir)}/bootstrap.json`);
      assert.ok(script.includes(`B=${path.basename(server.dataDir)}/`) && script.includes('curl -s -u'), script);
      const { stdout } = await run('sh', ['-c', script], { cwd: path.dirname(server.dataDir), env: { PATH: process.env.PATH ?? '' } });
      const body = JSON.parse(stdout) as { orgs: Array<{ slug: string }> };
      assert.ok(body.orgs.some((o) => o.slug === 'default'));
    });
  });
});
