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
import { DEPLOY_SECRET_VALUES } from './probes/deployments.js';
import { PATCH_BODY_TEMPLATE, PATCH_INITIAL, PATCH_POOL } from './probes/secrets.js';

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

async function setUpWriteFloor(baseUrl: string, body: unknown): Promise<void> {
  await preflight({ url: `${baseUrl}/setup`, method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) }, expectJson(201));
}

/**
 * The least work a PATCH of one secret key can do (bench/servers/write-floor.ts): open the
 * current version, seal the new one, insert it, bump the secret, append an event, with group
 * commit. The same pool of secrets, values and bodies as Slipway's PATCH row.
 */
export const floorPatchKey: Probe = {
  id: 'floor-patch',
  label: 'floor: Fastify+AES-GCM+SQLite PATCH of one key (a version and an event)',
  server: 'writeFloor',
  async run(ctx) {
    const server = await ctx.server('writeFloor');
    const prefix = `patch-${randomTag()}`;
    await setUpWriteFloor(server.baseUrl, { secrets: Array.from({ length: PATCH_POOL }, (_, i) => ({ name: `${prefix}-${i}`, values: PATCH_INITIAL })) });
    const path = `/secrets/${prefix}-{{slot}}`;
    const url = `${server.baseUrl}/secrets/${prefix}-0`;
    const headers = { 'content-type': 'application/json' };
    await preflight({ url, method: 'PATCH', headers, body: JSON.stringify({ set: { K1: 'preflight' } }) },
      expectJson(200, (j) => ((j as { version?: number }).version === 2 ? undefined : 'expected version 2')));
    return ctx.load(server, throughputJob(ctx, { url, method: 'PATCH', headers, template: { path, body: PATCH_BODY_TEMPLATE, slots: PATCH_POOL } }));
  },
};

/**
 * The least work creating a deployment can do (bench/servers/write-floor.ts): find the service
 * and environment, pin the current version of the service's one secret, insert the queued
 * deployment and an event, with group commit. The same shape as Slipway's deployments row.
 */
export const floorCreateDeployment: Probe = {
  id: 'floor-deployments',
  label: 'floor: Fastify+SQLite deployment creation (a pinned secret and an event)',
  server: 'writeFloor',
  async run(ctx) {
    const server = await ctx.server('writeFloor');
    const tag = randomTag();
    const target = { service: `svc-${tag}`, environment: `env-${tag}` };
    await setUpWriteFloor(server.baseUrl, {
      secrets: [{ name: `db-${tag}`, values: DEPLOY_SECRET_VALUES }],
      environment: target.environment,
      service: { name: target.service, secrets: [{ secret: `db-${tag}` }] },
    });
    const request = { url: `${server.baseUrl}/deployments`, method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(target) };
    await preflight(request, expectJson(201, (j) => ((j as { state?: string }).state === 'queued' ? undefined : 'expected a queued deployment')));
    return ctx.load(server, throughputJob(ctx, request));
  },
};
