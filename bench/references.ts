// Reference probes: what Slipway's rows are compared with. A throughput reference
// takes turns with each row that uses it (see bench/run.ts); the floor is measured
// once, right before the first row that needs it.

import { makeBody, randomTag } from './lib/bodies.js';
import type { Probe } from './lib/harness.js';
import {
  bulkSecretsJob,
  expectJson,
  expectJwtTokenResponse,
  preflight,
  throughputJob,
} from './lib/probes.js';
import { basicAuthorization, clientCredentialsBody } from './lib/slipway.js';

/** The fastest a Fastify route answers on this machine: no auth, no database, no logging. */
export const ceiling: Probe = {
  id: 'ceiling',
  label: 'ceiling: Fastify hello-world GET /',
  server: 'ceiling',
  async run(ctx) {
    const server = await ctx.server('ceiling');
    const url = `${server.baseUrl}/`;
    await preflight({ url }, expectJson(200, (j) => ((j as { hello?: string }).hello === 'world' ? undefined : 'not {hello:"world"}')));
    return ctx.load(server, throughputJob(ctx, { url, method: 'GET' }));
  },
};

/** A mature OpenID provider issuing ES256 JWT access tokens for client_credentials. */
export const oidcToken: Probe = {
  id: 'oidc',
  label: 'oidc-provider: POST /oauth/v2/token (client_credentials, JWT ES256)',
  server: 'oidc',
  async run(ctx) {
    const server = await ctx.server('oidc');
    const request = {
      url: server.tokenUrl,
      method: 'POST',
      headers: {
        authorization: basicAuthorization(server.clientId, server.clientSecret),
        'content-type': 'application/x-www-form-urlencoded',
      },
      body: clientCredentialsBody(server.scope),
    };
    await preflight(request, expectJson(200, expectJwtTokenResponse));
    return ctx.load(server, throughputJob(ctx, request));
  },
};

/** The least work a bulk create can do: parse, seal with AES-256-GCM, one SQLite transaction. */
export const floorBulkCreate: Probe = {
  id: 'floor',
  label: 'floor: Fastify+AES-GCM+SQLite bulk create',
  server: 'floor',
  async run(ctx) {
    const server = await ctx.server('floor');
    const url = `${server.baseUrl}/secrets`;
    const job = bulkSecretsJob(ctx, { url, method: 'POST', prefix: `bench-${randomTag()}` });
    await preflight(
      { url, method: 'POST', headers: job.headers, body: makeBody({ ...job.body, params: { ...job.body.params, prefix: `pre-${randomTag()}` } }, 0) },
      expectJson(201),
    );
    return ctx.load(server, job);
  },
};
