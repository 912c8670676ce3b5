// Reference for the token endpoint: node-oidc-provider (a certified OpenID
// provider) issuing JWT access tokens for the client credentials grant with a
// client_secret_basic client, signed ES256. Resource indicators give the grant
// a default resource whose access-token format is 'jwt', so every token is
// signed, like Slipway's. Storage is oidc-provider's default in-memory adapter.

import { generateKeyPairSync } from 'node:crypto';
import http from 'node:http';
import Provider from 'oidc-provider';
import { announceListening, requireEnv } from './child.js';

const clientId = requireEnv('BENCH_OIDC_CLIENT_ID');
const clientSecret = requireEnv('BENCH_OIDC_CLIENT_SECRET');
const scope = requireEnv('BENCH_OIDC_SCOPE');
const resource = 'urn:slipway-bench:api';
const tokenTtlSeconds = 43200;

const server = http.createServer();
await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
const address = server.address();
const port = typeof address === 'object' && address ? address.port : 0;

const { privateKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
const signingKey = { ...privateKey.export({ format: 'jwk' }), kid: 'bench-es256', use: 'sig', alg: 'ES256' };

const provider = new Provider(`http://127.0.0.1:${port}`, {
  clients: [
    {
      client_id: clientId,
      client_secret: clientSecret,
      grant_types: ['client_credentials'],
      response_types: [],
      redirect_uris: [],
      token_endpoint_auth_method: 'client_secret_basic',
      id_token_signed_response_alg: 'ES256',
      scope,
    },
  ],
  jwks: { keys: [signingKey] },
  scopes: scope.split(' '),
  routes: { token: '/oauth/v2/token' },
  ttl: { ClientCredentials: tokenTtlSeconds },
  features: {
    devInteractions: { enabled: false },
    clientCredentials: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => resource,
      useGrantedResource: () => true,
      getResourceServerInfo: () => ({
        scope,
        audience: resource,
        accessTokenTTL: tokenTtlSeconds,
        accessTokenFormat: 'jwt',
        jwt: { sign: { alg: 'ES256' } },
      }),
    },
  },
});
provider.on('server_error', (_ctx, err) => console.error('server_error', err));
server.on('request', provider.callback());

announceListening(port, () => new Promise<void>((resolve) => server.close(() => resolve())));
