// Slipway's deployments: creating them, and how soon a runner that is already waiting gets one.

import type { Deployment } from '../../src/modules/deployments/deployments.schemas.js';
import { runnerUrl } from '../../src/modules/runner/runner.protocol.js';
import { randomTag } from '../lib/bodies.js';
import type { Probe } from '../lib/harness.js';
import { expectJson, preflight, throughputJob } from '../lib/probes.js';
import type { SlipwayApi } from '../lib/slipway-api.js';
import { slipwayApi } from '../lib/slipway-api.js';

/**
 * A service to deploy and an environment to deploy it into. The service takes one secret, as
 * most do, so that every deployment pins a secret version and every claim decrypts one.
 */
export const DEPLOY_SECRET_VALUES = { DATABASE_URL: 'postgres://bench:pw@db.internal/bench' };

async function deployTarget(api: SlipwayApi, tag: string): Promise<{ service: string; environment: string }> {
  const secret = `db-${tag}`;
  await api.createSecrets([{ name: secret, values: DEPLOY_SECRET_VALUES }]);
  const environment = await api.createEnvironment(`env-${tag}`);
  const service = await api.createService(`svc-${tag}`, { command: ['node', '-e', '0'], secrets: [{ secret }] });
  return { service: service.name, environment: environment.name };
}

/**
 * Nobody claims these deployments, so the queue of this service and environment grows by every
 * request of the row: tens of thousands of queued deployments stay in the bootstrap organization.
 */
export const slipwayCreateDeployment: Probe = {
  id: 'slipway-deployments',
  label: 'Slipway: POST /v1/orgs/{orgId}/deployments',
  server: 'slipway',
  async run(ctx) {
    const server = await ctx.server('slipway');
    const token = await server.token();
    const api = slipwayApi(server, token);
    const request = {
      url: `${server.baseUrl}${api.orgPath}/deployments`,
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify(await deployTarget(api, randomTag())),
    };
    await preflight(
      request,
      expectJson(201, (j) => {
        const d = j as Deployment;
        return d.state === 'queued' && d.spec.secrets.length === 1 ? undefined : 'expected a queued deployment with one pinned secret';
      }),
    );
    return ctx.load(server, throughputJob(ctx, request));
  },
};

/**
 * How long the runner's claim waits on its own before the deployment is created: long enough
 * for the claim to have looked, found nothing and gone to sleep on the server.
 */
const CLAIM_SETTLE_MS = 25;

/**
 * Runs in an organization of its own. A claim looks through its organization's queued
 * deployments, so in the bootstrap one it would wade through the deployments row's backlog
 * (which the previous row's speed sizes) and the two rows would measure each other.
 */
export const slipwayClaimLatency: Probe = {
  id: 'slipway-claim-latency',
  label: 'Slipway: create deployment → waiting runner claim answered',
  server: 'slipway',
  async run(ctx) {
    const server = await ctx.server('slipway');
    const ownerToken = await server.token();
    const tag = randomTag();
    const api = await slipwayApi(server, ownerToken).createOrg(`claims-${tag}`);
    const target = await deployTarget(api, tag);
    const runnerToken = await api.createRunner(`bench-runner-${tag}`);
    const { orgId } = api;

    // The runner's token works, and nothing is waiting to be claimed in its environment.
    await preflight(
      {
        url: server.baseUrl + runnerUrl('claim', orgId),
        method: 'POST',
        headers: { authorization: `Bearer ${runnerToken}`, 'content-type': 'application/json' },
        body: JSON.stringify({ environments: [target.environment], waitSeconds: 0 }),
      },
      (status) => (status === 204 ? undefined : 'expected 204: nothing to claim yet'),
    );
    return ctx.load(server, {
      kind: 'claimLatency',
      baseUrl: server.baseUrl,
      orgId,
      ownerToken,
      runnerToken,
      ...target,
      warmupRounds: ctx.config.claimWarmup,
      rounds: ctx.config.claimRounds,
      settleMs: CLAIM_SETTLE_MS,
    });
  },
};
