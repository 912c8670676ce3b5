// A port the runner picked can be taken by another process before the service binds it (two
// runners on one host probe ports at the same moment): the service is started again on another
// port. A service that fails for its own reasons is not started again.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer, type AddressInfo } from 'node:net';
import { describe, it } from 'node:test';
import { launchOnFreePort } from '../../src/runner-agent/deployment-run.js';
import { LaunchError, PortPool, type LaunchSpec } from '../../src/runner-agent/local-process.js';

const SERVER = "require('node:http').createServer((q, s) => s.end('up')).listen(Number(process.env.PORT), '127.0.0.1')";

/** A pool whose first pick is `first`, as a probe that lost the race to another process would be. */
class FirstPick extends PortPool {
  #first: number | undefined;
  constructor(first: number) {
    super();
    this.#first = first;
  }
  override async reserve(): Promise<number> {
    const first = this.#first;
    this.#first = undefined;
    return first ?? super.reserve();
  }
}

const spec = (script: string) => (port: number): LaunchSpec => ({ command: [process.execPath, '-e', script], env: {}, port, healthCheck: { path: '/', timeoutSeconds: 10 } });
const never = new AbortController().signal;

describe('starting a service on a port another process took', () => {
  it('starts it again on another port, and says which port was taken', async () => {
    const squatter = createServer().listen(0, '127.0.0.1');
    await once(squatter, 'listening');
    const taken = (squatter.address() as AddressInfo).port;
    try {
      const clashes: number[] = [];
      const { proc, port } = await launchOnFreePort(new FirstPick(taken), spec(SERVER), () => {}, never, (at) => clashes.push(at));
      try {
        assert.deepEqual(clashes, [taken]);
        assert.notEqual(port, taken);
        assert.equal(await (await fetch(`http://127.0.0.1:${port}/`)).text(), 'up');
      } finally {
        await proc.stop();
      }
    } finally {
      squatter.close();
    }
  });

  it('does not start again a service that exits on its own while its port is free', async () => {
    const clashes: number[] = [];
    await assert.rejects(launchOnFreePort(new PortPool(), spec('process.exit(1)'), () => {}, never, (at) => clashes.push(at)),
      (error: unknown) => error instanceof LaunchError && error.exit !== undefined);
    assert.deepEqual(clashes, []);
  });
});
