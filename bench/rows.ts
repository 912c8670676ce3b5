// The rows of the table. A row = the Slipway probe, the reference probe it is
// compared with (measured in the same run), and the target from the issue.
//
// To add a row: write a Probe (below, or a reference in references.ts), then
// append { id, title, subject, reference, target } to ROWS. Targets come from
// lib/harness.ts: throughputAtLeast(f, name), p50AtMost(f, name), p99AtMostMs(ms).
// A probe that needs a new server adds it to lib/servers.ts; one that needs a
// new client (e.g. a long-polling runner) adds a job kind to lib/load-protocol.ts
// and bench/load.ts.

import { makeBody, randomTag } from './lib/bodies.js';
import { p50AtMost, type Probe, type Row, throughputAtLeast } from './lib/harness.js';
import {
  bulkSecretsJob,
  expectJson,
  expectJwtTokenResponse,
  preflight,
  throughputJob,
} from './lib/probes.js';
import { basicAuthorization, clientCredentialsBody } from './lib/slipway.js';
import { ceiling, floorBulkCreate, oidcToken } from './references.js';

const slipwayListOrgs: Probe = {
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

const slipwayToken: Probe = {
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

const slipwayBulkCreate: Probe = {
  id: 'slipway-bulk-create',
  label: 'Slipway: POST /v1/orgs/{orgId}/secrets (bulk create)',
  server: 'slipway',
  async run(ctx) {
    const server = await ctx.server('slipway');
    const url = `${server.baseUrl}/v1/orgs/${encodeURIComponent(server.bootstrap.orgId)}/secrets`;
    const headers = { authorization: `Bearer ${await server.token()}` };
    const job = bulkSecretsJob(ctx, { url, method: 'POST', headers, prefix: `bench-${randomTag()}` });
    await preflight(
      { url, method: 'POST', headers: job.headers, body: makeBody({ ...job.body, params: { ...job.body.params, prefix: `pre-${randomTag()}` } }, 0) },
      expectJson(201),
    );
    return ctx.load(server, job);
  },
};

export const ROWS: Row[] = [
  {
    id: 'orgs',
    title: 'GET /v1/orgs, authorized',
    subject: slipwayListOrgs,
    reference: ceiling,
    target: throughputAtLeast(0.5, 'ceiling'),
  },
  {
    id: 'token',
    title: 'token endpoint, client_credentials',
    subject: slipwayToken,
    reference: oidcToken,
    target: throughputAtLeast(2, 'oidc-provider'),
  },
  {
    id: 'bulk-create',
    title: 'bulk create 1,000 secrets',
    subject: slipwayBulkCreate,
    reference: floorBulkCreate,
    target: p50AtMost(2, 'floor'),
  },
  // Planned (same shape):
  //   { id: 'patch-key', subject: PATCH …/secrets/{name} {set:{K1}} probe, reference: ceiling,
  //     target: throughputAtLeast(0.2, 'ceiling') }
  //   { id: 'bulk-upsert', subject: PUT …/secrets, half the names pre-created, reference: a floor
  //     upsert probe (floor.ts + INSERT … ON CONFLICT DO UPDATE), target: p50AtMost(2, 'floor') }
  //   { id: 'deployments', subject: POST …/deployments probe, reference: ceiling,
  //     target: throughputAtLeast(0.2, 'ceiling') }
  //   { id: 'claim-latency', subject: create→claim with a waiting runner (new load job kind),
  //     no reference, target: p99AtMostMs(50) }
];
