// Slipway's secret writes: bulk create, a PATCH that changes one key, and a bulk upsert where
// half of the names exist already.

import type { SecretChangeT, UpsertItemT } from '../../src/modules/secrets/secrets.schemas.js';
import { type BulkUpsertParams, fillTemplate, makeBody, randomTag, upsertSetupBody } from '../lib/bodies.js';
import { type Probe, ProbeError } from '../lib/harness.js';
import { bulkSecretsJob, bulkUpsertJob, expectJson, preflight, throughputJob } from '../lib/probes.js';
import { slipwayApi } from '../lib/slipway-api.js';

export const slipwayBulkCreate: Probe = {
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

/**
 * The PATCHes take turns over this many secrets rather than hammering one. On PostgreSQL, ten
 * connections patching one row would queue on that row's lock and measure the queue, not the
 * PATCH; several secrets changing at once is the common case (a pipeline rotating credentials).
 * On SQLite every write takes the database's one write lock either way.
 */
export const PATCH_POOL = 16;

/** What each of the pool's secrets holds before the first PATCH (K1 changes, K2 stays). */
export const PATCH_INITIAL = { K1: 'initial', K2: 'kept' };

/** Each PATCH sets K1 to a new value, so that every one makes a version. */
export const PATCH_BODY_TEMPLATE = '{"set":{"K1":"value-{{n}}"}}';

export const slipwayPatchKey: Probe = {
  id: 'slipway-patch-key',
  label: 'Slipway: PATCH /v1/orgs/{orgId}/secrets/{name} (set K1, a new value each time)',
  server: 'slipway',
  async run(ctx) {
    const server = await ctx.server('slipway');
    const token = await server.token();
    const api = slipwayApi(server, token);
    const prefix = `patch-${randomTag()}`;
    await api.createSecrets(Array.from({ length: PATCH_POOL }, (_, i) => ({ name: `${prefix}-${i}`, values: PATCH_INITIAL })));

    const headers = { authorization: `Bearer ${token}`, 'content-type': 'application/json' };
    const path = `${api.orgPath}/secrets/${prefix}-{{slot}}`;
    const url = server.baseUrl + fillTemplate(path, 0, PATCH_POOL);
    await preflight(
      { url, method: 'PATCH', headers, body: JSON.stringify({ set: { K1: 'preflight' } }) },
      expectJson(200, (j) => {
        const change = j as SecretChangeT;
        return change.result === 'updated' && change.version === 2 ? undefined : `expected "updated" at version 2, got "${change.result}" at ${change.version}`;
      }),
    );

    const template = { path, body: PATCH_BODY_TEMPLATE, slots: PATCH_POOL };
    const m = await ctx.load(server, throughputJob(ctx, { url, method: 'PATCH', headers, template }));

    // autocannon never reads the answers: count the versions to prove that every PATCH answered
    // 2xx made one, i.e. that none was an unchanged no-op. Warm-up and preflight made some too.
    const made = (await api.versionsUnder(`${prefix}-`)) - PATCH_POOL;
    const succeeded = m.requests - m.errors - m.non2xx;
    if (made < succeeded) {
      throw new ProbeError(`${succeeded} PATCHes answered 2xx in the measured window, but only ${made} new versions exist: some changed nothing`);
    }
    ctx.log(`${made} new versions over ${PATCH_POOL} secrets (warm-up and preflight included) for ${succeeded} measured PATCHes`);
    return m;
  },
};

function expectUpsertResults(p: BulkUpsertParams) {
  const created = p.count - p.existing;
  return (json: unknown): string | undefined => {
    const items = (json as { secrets?: UpsertItemT[] }).secrets ?? [];
    const count = (result: UpsertItemT['result']): number => items.filter((i) => i.result === result).length;
    return count('updated') === p.existing && count('created') === created
      ? undefined
      : `expected ${p.existing} updated and ${created} created, got ${count('updated')} updated, ${count('created')} created, ${count('unchanged')} unchanged`;
  };
}

export const slipwayBulkUpsert: Probe = {
  id: 'slipway-bulk-upsert',
  label: 'Slipway: PUT /v1/orgs/{orgId}/secrets (bulk upsert, half new, half updated)',
  server: 'slipway',
  async run(ctx) {
    const server = await ctx.server('slipway');
    const token = await server.token();
    const api = slipwayApi(server, token);
    const secretsPath = `${api.orgPath}/secrets`;
    const url = server.baseUrl + secretsPath;
    const job = bulkUpsertJob(ctx, { url, headers: { authorization: `Bearer ${token}` }, prefix: `upsert-${randomTag()}` });
    const { params } = job.body;
    const setUp = (p: BulkUpsertParams, seq: number): Promise<unknown> =>
      p.existing > 0 ? api.post(secretsPath, upsertSetupBody(p, seq), 201) : Promise.resolve();

    const pre = { ...params, prefix: `pre-${randomTag()}` };
    await setUp(pre, 0);
    await preflight({ url, method: 'PUT', headers: job.headers, body: makeBody({ generator: 'bulkUpsert', params: pre }, 0) }, expectJson(200, expectUpsertResults(pre)));

    // Every request's existing half is made now, before the load starts, not between requests.
    const requests = job.warmupRequests + job.requests;
    ctx.log(`creating the names that must exist: ${requests} × ${params.existing} secrets`);
    for (let seq = 0; seq < requests; seq++) await setUp(params, seq);
    return ctx.load(server, job);
  },
};
