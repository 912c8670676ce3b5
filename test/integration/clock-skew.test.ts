// Two nodes on one PostgreSQL database, the second on a machine whose clock is 30 s behind: it keeps
// the database's time, so what it makes is ordered after what the first made before, and the leases
// it grants last as long as the first's; it says its clock is off, in its log and its metrics.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { routePrefix } from '../../src/platform/config.js';
import { createEnvironment, createService, deploy, runnerClient, startDeployFixture, type DeployFixture } from '../support/deployments.js';
import { freePort, httpClient, tempDir, TEST_DB, type Actor } from '../support/harness.js';
import { cliEnv, spawnServe, type ServeProcess } from '../support/processes.js';

const SKEW_MS = 30_000;

describe('a node whose clock is off', { skip: TEST_DB !== 'postgres' && 'SQLite is on one machine, whose clock every process shares' }, () => {
  let f: DeployFixture;
  let skewed: ServeProcess;
  let skewedUrl: string;
  const dir = tempDir('slipway-skew-');

  before(async () => {
    f = await startDeployFixture();
    // Loaded before Slipway: this process's clock reads 30 s behind everyone else's.
    const preload = path.join(dir, 'behind.cjs');
    fs.writeFileSync(preload, `const real = Date.now; Date.now = () => real() - ${SKEW_MS};\n`);
    const port = await freePort();
    skewed = spawnServe(['--port', String(port)], cliEnv(f.server, {
      NODE_OPTIONS: `--require ${preload}`, SLIPWAY_LOG_LEVEL: 'info',
      // Behind one load balancer: a token either node issued, the other accepts.
      SLIPWAY_BASE_URL: f.server.config.baseUrl, SLIPWAY_AUTH_URL: f.server.config.authUrl,
    }));
    await skewed.waitForLog((l) => l.msg === 'slipway listening', 'that it listens');
    skewedUrl = `http://127.0.0.1:${port}${routePrefix(f.server.config.baseUrl)}`;
  });
  after(async () => {
    skewed?.child.kill('SIGTERM');
    await skewed?.exited;
    await f.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  /** `who`, speaking to the skewed node. */
  const viaSkewed = (who: Actor): Actor => ({ ...who, http: httpClient(skewedUrl, who.token) });

  it('says its clock is behind the database\'s, by how much', () => {
    const warning = skewed.logs().find((l) => l.level === 'warn' && typeof l.msg === 'string' && l.msg.includes('clock'));
    assert.ok(warning, skewed.output.join('\n'));
    assert.match(String(warning.msg), /this machine's clock is 30\.\d s behind the database's/);
    assert.ok(Math.abs(Number(warning.offsetMs) - SKEW_MS) < 2_000, JSON.stringify(warning));
  });

  it('orders what it makes after what the other node made before: ids, times, and the claim order', async () => {
    const env = await createEnvironment(f.admin.http, f.orgId);
    const svc = await createService(f.developer.http, f.orgId);
    const first = await deploy(f.developer.http, f.orgId, { service: svc.id, environment: env.id, revision: 'first' });
    const second = await deploy(viaSkewed(f.developer).http, f.orgId, { service: svc.id, environment: env.id, revision: 'second' });
    assert.ok(second.id > first.id, `${second.id} (skewed node) should sort after ${first.id}`);
    assert.ok(Date.parse(second.createdAt) >= Date.parse(first.createdAt), `${second.createdAt} before ${first.createdAt}`);
    // The oldest is claimed first, through either node.
    const runner = runnerClient(viaSkewed(f.runner.actor), f.orgId);
    const claim = await runner.take({ environments: [env.name], waitSeconds: 0 });
    assert.equal(claim.deployment.id, first.id);
    // A lease the skewed node grants runs as long as the other's would (30 s by default), not 30 s short.
    const left = Date.parse(claim.lease.expiresAt) - Date.now();
    assert.ok(left > 20_000, `the lease ends in ${left} ms`);
    assert.equal((await runner.complete(first.id, claim.lease.token, 'failed', 'test')).status, 200);
    const next = await runner.take({ environments: [env.name], waitSeconds: 0 });
    assert.equal(next.deployment.id, second.id);
    assert.equal((await runner.complete(second.id, next.lease.token, 'failed', 'test')).status, 200);
  });
});
