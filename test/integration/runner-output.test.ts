// The reference runner's output on its way to the deployment's log, end to end: a real server,
// `slipway runner` as a real child process, and services that write what the server cannot take
// as it is (a NUL character, a line over its body limit).
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createEnvironment, createService, deploy, startDeployFixture, type DeployFixture } from '../support/deployments.js';
import { deploymentLog, SERVICE_SCRIPT, serviceSpec, settled, startRunner, type RunnerProcess } from '../support/runner-agent.js';

describe('slipway runner output', () => {
  let f: DeployFixture;
  let runner: RunnerProcess;

  before(async () => {
    // Over a line that the runner cut to its 16 KiB, under any other request.
    f = await startDeployFixture({ env: { SLIPWAY_BODY_LIMIT_BYTES: '16384' } });
    runner = await startRunner(f.server, f.orgId);
  });
  after(async () => {
    await runner.stop();
    await f.close();
  });

  /** The log of a deployment, which succeeded, of a service that runs `script` before it serves. */
  async function logOf(script: string): Promise<{ stdout: string[]; runner: string[] }> {
    const env = await createEnvironment(f.admin.http, f.orgId);
    const svc = await createService(f.developer.http, f.orgId, { spec: serviceSpec({ command: [process.execPath, '-e', `${script}; ${SERVICE_SCRIPT}`] }) });
    const d = await deploy(f.developer.http, f.orgId, { service: svc.id, environment: env.id });
    assert.equal((await settled(f.developer.http, f.orgId, d.id)).state, 'succeeded');
    const log = await deploymentLog(f.developer.http, f.orgId, d.id);
    const of = (stream: string) => log.filter((l) => l.stream === stream).map((l) => l.line);
    return { stdout: of('stdout'), runner: of('runner') };
  }

  it('keeps a line of output with a NUL character, shown as U+FFFD, and the lines around it', async () => {
    const log = await logOf(`console.log('before'); console.log('binary\\u0000junk'); console.log('after')`);
    assert.deepEqual(log.stdout.slice(0, 3), ['before', 'binary\ufffdjunk', 'after'], JSON.stringify(log));
    assert.match(log.stdout[3] ?? '', /^serving pid=/);
    assert.deepEqual(log.runner.map((l) => l.split(' ')[0]), ['claimed', 'starting', 'healthy:']);
  });

  it('keeps the lines around one that the server refuses', async () => {
    const log = await logOf(`console.log('before'); console.log('x'.repeat(20000)); console.log('after')`);
    assert.deepEqual(log.stdout.slice(0, 2), ['before', 'after'], JSON.stringify(log).slice(0, 2000));
    assert.match(log.stdout[2] ?? '', /^serving pid=/);
    assert.deepEqual(log.runner.map((l) => l.split(' ')[0]), ['claimed', 'starting', 'healthy:']);
    const dropped = runner.proc.logs().filter((l) => String(l.msg).startsWith('log lines dropped'));
    assert.deepEqual(dropped.map((l) => [l.status, l.lines]), [[413, 1]]);
  });
});
