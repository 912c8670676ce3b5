// A finished deployment's log is removed SLIPWAY_DEPLOYMENT_LOG_RETENTION_DAYS after it ended
// (failed, cancelled or superseded); what serves keeps its log, and so does what ended since. The
// deployment stays, as exact as before (a rollback to it still works), and says when its log went.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { sql } from 'kysely';
import { LOGS_KEPT_AND_ENDED } from '../../src/modules/deployments/deployments.repo.js';
import { TEST_DB } from '../support/harness.js';
import { createEnvironment, createService, deploy, holding, lockWaiters, useDeployFixture } from '../support/deployments.js';
import { runCli } from '../support/processes.js';

describe('deployment log retention', () => {
  const f = useDeployFixture();
  const DAY = 86_400_000;

  /** A deployment shipped with one log line, ending as `outcome`. */
  async function withLog(svc: { name: string }, env: { name: string }, outcome: 'succeeded' | 'failed', line: string) {
    const created = await deploy(f.developer.http, f.orgId, { service: svc.name, environment: env.name });
    const claim = await f.runner.take({ environments: [env.name], waitSeconds: 0 });
    assert.equal(claim.deployment.id, created.id);
    assert.equal((await f.runner.logs(created.id, { leaseToken: claim.lease.token, lines: [{ stream: 'stdout', line }] })).status, 200);
    assert.equal((await f.runner.complete(created.id, claim.lease.token, outcome, outcome === 'failed' ? 'it failed' : undefined)).status, 200);
    return created.id as string;
  }
  const logOf = async (id: string) => (await f.viewer.http.get(`/v1/orgs/${f.orgId}/deployments/${id}/logs`)).body;
  const setEnded = (ids: string[], at: Date) => sql`update deployments set updated_at = ${at.toISOString()} where id in (${sql.join(ids)})`.execute(f.server.core.db);

  it('removes the logs of deployments that ended before the retention, keeps those serving and those that ended since', async () => {
    const svc = await createService(f.developer.http, f.orgId);
    const env = await createEnvironment(f.admin.http, f.orgId);
    const failed = await withLog(svc, env, 'failed', 'failed line');
    const superseded = await withLog(svc, env, 'succeeded', 'first line');
    const serving = await withLog(svc, env, 'succeeded', 'serving line');
    const cancelled = (await deploy(f.developer.http, f.orgId, { service: svc.name, environment: env.name })).id as string;
    assert.equal((await f.developer.http.post(`/v1/orgs/${f.orgId}/deployments/${cancelled}/cancel`, {})).status, 200);
    const recent = await withLog(svc, env, 'failed', 'recent line');

    const now = new Date();
    await setEnded([failed, superseded, serving, cancelled], new Date(now.getTime() - 3 * DAY));
    assert.equal(await f.server.core.deployments.removeExpiredLogs(2, now), 3);
    assert.equal(await f.server.core.deployments.removeExpiredLogs(2, now), 0, 'each only once');

    for (const id of [failed, superseded]) {
      const log = await logOf(id);
      assert.deepEqual([log.lines, log.hasMore, log.removedAt], [[], false, now.toISOString()]);
      const deployment = (await f.viewer.http.get(`/v1/orgs/${f.orgId}/deployments/${id}`)).body;
      assert.equal(deployment.logsRemovedAt, now.toISOString());
    }
    assert.equal((await f.viewer.http.get(`/v1/orgs/${f.orgId}/deployments/${cancelled}`)).body.logsRemovedAt, now.toISOString());
    for (const [id, line] of [[serving, 'serving line'], [recent, 'recent line']] as const) {
      const log = await logOf(id);
      assert.deepEqual([log.lines.map((l: { line: string }) => l.line), log.removedAt], [[line], undefined]);
      assert.equal((await f.viewer.http.get(`/v1/orgs/${f.orgId}/deployments/${id}`)).body.logsRemovedAt, undefined);
    }
    const rows = await f.server.core.db.selectFrom('deployment_logs').select('deployment_id').where('deployment_id', 'in', [failed, superseded, cancelled]).execute();
    assert.deepEqual(rows, []);

    // The deployment is as exact as before: a rollback to it goes through.
    const rollback = await f.developer.http.post(`/v1/orgs/${f.orgId}/deployments/${superseded}/rollback`, {});
    assert.equal(rollback.status, 201, rollback.text);
    assert.equal((await f.developer.http.post(`/v1/orgs/${f.orgId}/deployments/${rollback.body.id}/cancel`, {})).status, 200);

    // slipway deployment logs says where the log went.
    const cli = await runCli(['deployment', 'logs', '--id', failed], {
      SLIPWAY_URL: f.server.url, SLIPWAY_ORG: f.orgId, SLIPWAY_CLIENT_ID: f.viewer.clientId, SLIPWAY_CLIENT_SECRET: f.viewer.clientSecret, SLIPWAY_SCOPE: f.viewer.scope,
    });
    assert.equal(cli.code, 0, cli.stderr);
    assert.equal(cli.stdout, '');
    assert.match(cli.stderr, new RegExp(`^slipway: the log of deployment ${failed} was removed at ${now.toISOString()}, its retention over \\(SLIPWAY_DEPLOYMENT_LOG_RETENTION_DAYS\\)\\n$`));
  });

  it('lets an environment\'s deletion go on while removing logs waits, without a deadlock', { skip: TEST_DB !== 'postgres' && 'SQLite runs one writer at a time', timeout: 60_000 }, async () => {
    const svc = await createService(f.developer.http, f.orgId);
    const kept = await createEnvironment(f.admin.http, f.orgId);
    const doomed = await createEnvironment(f.admin.http, f.orgId);
    // By id: one in an environment that stays, then one in the environment to delete.
    const first = await withLog(svc, kept, 'failed', 'kept line');
    const second = await withLog(svc, doomed, 'failed', 'doomed line');
    const now = new Date();
    await setEnded([first, second], new Date(now.getTime() - 3 * DAY));
    // The removal waits at the first (held): it must not hold the second's log meanwhile, which the
    // deletion, having locked the second, needs.
    const commit = await holding(f.server, (trx) => sql`select 1 from deployments where id = ${first} for share`.execute(trx));
    const removing = f.server.core.deployments.removeExpiredLogs(2, now);
    await lockWaiters(f.server, 1);
    const deleted = await f.admin.http.delete(`/v1/orgs/${f.orgId}/environments/${doomed.id}?force=true`);
    assert.equal(deleted.status, 204, deleted.text);
    await commit();
    assert.equal(await removing, 1);
    assert.equal((await logOf(first)).removedAt, now.toISOString());
  });

  it('finds what to remove through the partial index, not by reading every deployment', async () => {
    const cutoff = new Date().toISOString();
    if (TEST_DB === 'sqlite') {
      const plan = await sql<{ detail: string }>`explain query plan select id from deployments where ${LOGS_KEPT_AND_ENDED} and updated_at < ${cutoff} order by updated_at limit 50`.execute(f.server.core.db);
      assert.match(plan.rows.map((r) => r.detail).join('\n'), /USING INDEX deployments_logs_kept/);
      return;
    }
    // PostgreSQL, on a table this small, would read it whole: told not to, it shows the index serves.
    const plan = await f.server.core.db.transaction().execute(async (trx) => {
      await sql`set local enable_seqscan = off`.execute(trx);
      return sql<{ 'QUERY PLAN': string }>`explain select id from deployments where ${LOGS_KEPT_AND_ENDED} and updated_at < ${cutoff} order by updated_at limit 50`.execute(trx);
    });
    assert.match(plan.rows.map((r) => r['QUERY PLAN']).join('\n'), /deployments_logs_kept/);
  });

  it('is off by default, and its setting is checked', async () => {
    assert.equal(f.server.config.deploymentLogRetentionDays, 0);
    const refused = await runCli(['org', 'list'], { SLIPWAY_DATA_DIR: f.server.dataDir, SLIPWAY_DEPLOYMENT_LOG_RETENTION_DAYS: '-1' });
    assert.equal(refused.code, 2);
    assert.match(refused.stderr, /SLIPWAY_DEPLOYMENT_LOG_RETENTION_DAYS/);
  });
});
