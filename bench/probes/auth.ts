// Slipway's authorization path: an authorized read, and the token endpoint that issues the
// tokens every other row uses.

import type { Probe } from '../lib/harness.js';
import { expectJson, expectJwtTokenResponse, preflight, throughputJob } from '../lib/probes.js';
import { basicAuthorization, clientCredentialsBody } from '../lib/slipway.js';

export const slipwayListOrgs: Probe = {
  id: 'slipway-orgs',
  label: 'Slipway: GET /v1/orgs (Bearer)',
  server: 'slipway',
  async run(ctx) {
    const server = await ctx.server('slipway');
    const request = {
      url: `${server.baseUrl}/v1/orgs`,
      method: 'GET',
      headers: { authorization: `Bearer ${await server.token()}` },
    };
    await preflight(request, expectJson(200, (j) => (Array.isArray((j as { orgs?: unknown }).orgs) ? undefined : 'no "orgs" array')));
    return ctx.load(server, throughputJob(ctx, request));
  },
};

export const slipwayToken: Probe = {
  id: 'slipway-token',
  label: 'Slipway: POST /oauth/v2/token (client_credentials)',
  server: 'slipway',
  async run(ctx) {
    const server = await ctx.server('slipway');
    const { clientId, clientSecret, scope, tokenUrl } = server.bootstrap;
    const request = {
      url: tokenUrl,
      method: 'POST',
      headers: {
        authorization: basicAuthorization(clientId, clientSecret),
        'content-type': 'application/x-www-form-urlencoded',
      },
      body: clientCredentialsBody(scope),
    };
    await preflight(request, expectJson(200, expectJwtTokenResponse));
    return ctx.load(server, throughputJob(ctx, request));
  },
};
