// Exercises local-process.ts with real child processes (node -e scripts).

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { get as httpGet } from 'node:http';
import { after, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';

import {
  freePort,
  launch,
  LaunchError,
  ProcessTable,
  type OutputSink,
  type RunningProcess,
} from '../../src/runner-agent/local-process.js';

// Serves /healthz with HEALTH_STATUS (default 200) and echoes its env on any other path.
const SERVER = `
const http = require('node:http');
const status = Number(process.env.HEALTH_STATUS || 200);
console.log('pid=' + process.pid);
http.createServer((req, res) => {
  if (req.url === '/healthz') { res.statusCode = status; res.end('health'); return; }
  res.setHeader('content-type', 'application/json');
  res.end(JSON.stringify({
    greeting: process.env.GREETING ?? null,
    port: process.env.PORT ?? null,
    leaked: process.env.SLIPWAY_TEST_LEAK ?? null,
    name: process.env.NAME ?? null,
  }));
}).listen(Number(process.env.PORT), '127.0.0.1');
`;

const node = (script: string): string[] => [process.execPath, '-e', script];

// Anything a test forgets to stop is stopped here, so a failing assertion leaves no process behind.
const launched: RunningProcess[] = [];
after(async () => {
  await Promise.all(launched.map((proc) => proc.stop(200)));
});

async function start(...args: Parameters<typeof launch>): Promise<RunningProcess> {
  const proc = await launch(...args);
  launched.push(proc);
  return proc;
}

function collector(): { sink: OutputSink; lines: Record<'stdout' | 'stderr', string[]> } {
  const lines = { stdout: [] as string[], stderr: [] as string[] };
  return { sink: (stream, line) => lines[stream].push(line), lines };
}

function pidFrom(lines: string[], label = 'pid'): number {
  const line = lines.find((l) => l.startsWith(`${label}=`));
  assert.ok(line, `no ${label}= line in ${JSON.stringify(lines)}`);
  return Number(line.slice(label.length + 1));
}

// A zombie still answers kill(pid, 0); count it as gone since it runs nothing and holds no port.
function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return true;
  }
}

async function waitUntilGone(pid: number, timeoutMs = 2000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (isAlive(pid)) {
    assert.ok(Date.now() < deadline, `process ${pid} is still alive`);
    await sleep(20);
  }
}

function assertGone(pid: number): void {
  assert.throws(() => process.kill(pid, 0), { code: 'ESRCH' });
}

function getText(port: number, path: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    httpGet({ host: '127.0.0.1', port, path, agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    }).on('error', reject);
  });
}

async function rejectsWithReason(promise: Promise<unknown>, reason: string | RegExp): Promise<void> {
  await assert.rejects(promise, (err: unknown) => {
    assert.ok(err instanceof LaunchError, `expected LaunchError, got ${String(err)}`);
    if (typeof reason === 'string') assert.equal(err.reason, reason);
    else assert.match(err.reason, reason);
    return true;
  });
}

describe('launch', { timeout: 20_000 }, () => {
  test('starts a healthy server with its env and PORT, and stop() ends it', async () => {
    const port = await freePort();
    process.env.SLIPWAY_TEST_LEAK = 'must not reach the child';
    const { sink, lines } = collector();
    const proc = await start(
      { command: node(SERVER), env: { GREETING: 'hello from env' }, port, healthCheck: { path: '/healthz', timeoutSeconds: 5 } },
      sink,
    );
    delete process.env.SLIPWAY_TEST_LEAK;
    assert.equal(proc.port, port);
    assert.equal(pidFrom(lines.stdout), proc.pid);

    const res = await getText(port, '/env');
    assert.equal(res.status, 200);
    assert.deepEqual(JSON.parse(res.body), { greeting: 'hello from env', port: String(port), leaked: null, name: null });

    await proc.stop();
    assert.deepEqual(await proc.exited, { code: null, signal: 'SIGTERM' });
    assertGone(proc.pid);
    await proc.stop(); // idempotent
  });

  test('a health check that never passes fails the launch and kills the process', async () => {
    const port = await freePort();
    const { sink, lines } = collector();
    await rejectsWithReason(
      launch(
        // Time for a child node to start and answer once, on a slow machine.
        { command: node(SERVER), env: { HEALTH_STATUS: '500' }, port, healthCheck: { path: '/healthz', timeoutSeconds: 3 } },
        sink,
      ),
      `health check GET /healthz on port ${port} did not answer 2xx within 3 s (last: HTTP 500)`,
    );
    assertGone(pidFrom(lines.stdout));
  });

  test('a runner that crashes sends its services SIGTERM first, and the watchdog SIGKILL after the grace', { timeout: 30_000 }, async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'slipway-crash-'));
    try {
      const marks = path.join(dir, 'marks');
      const service = `const fs = require('node:fs'); fs.writeFileSync(${JSON.stringify(marks)}, 'UP'); process.on('SIGTERM', () => { fs.appendFileSync(${JSON.stringify(marks)}, ' TERM'); process.exit(0); }); setInterval(() => {}, 1 << 30);`;
      // A runner's process that starts a service, then dies of an uncaught exception.
      const runner = `import { launch } from ${JSON.stringify(new URL('../../src/runner-agent/local-process.js', import.meta.url).href)};
await launch({ command: [process.execPath, '-e', ${JSON.stringify(service)}], env: {}, port: ${await freePort()} }, () => {});
while (!require('node:fs').existsSync(${JSON.stringify(marks)})) await new Promise((r) => setTimeout(r, 20));
throw new Error('crashed');`.replace("require('node:fs')", '(await import(\'node:fs\'))');
      const crashed = spawn(process.execPath, ['--input-type=module', '-e', runner], { stdio: ['ignore', 'ignore', 'pipe'] });
      const [code] = await once(crashed, 'exit');
      assert.equal(code, 1);
      for (let i = 0; i < 200 && !readFileSync(marks, 'utf8').includes('TERM'); i++) await sleep(25);
      assert.equal(readFileSync(marks, 'utf8'), 'UP TERM');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('an environment larger than the system takes says so, not that a NUL was in it', { skip: process.platform !== 'linux' && 'Linux\'s limit on one variable' }, async () => {
    const port = await freePort();
    // Linux takes at most 128 KiB in one variable (MAX_ARG_STRLEN).
    await rejectsWithReason(
      launch({ command: node('0'), env: { BIG: 'x'.repeat(200_000) }, port }, () => {}),
      /^could not start .*: its command and environment \(\d+ bytes, or a single variable over the system's limit for one\) are larger than the system allows \(E2BIG\); give the service fewer or smaller variables and secrets$/,
    );
  });

  test('a process that never listens is reported as connection refused', async () => {
    const port = await freePort();
    await rejectsWithReason(
      launch(
        { command: node('setInterval(() => {}, 1000)'), env: {}, port, healthCheck: { path: 'healthz', timeoutSeconds: 0.5 } },
        () => {},
      ),
      `health check GET /healthz on port ${port} did not answer 2xx within 0.5 s (last: connection refused)`,
    );
  });

  test('a process that listens and never answers is reported as such, also after a probe found its port closed', async () => {
    const port = await freePort();
    // It listens only some time after it started, so that the first probe is refused.
    const script = `setTimeout(() => require('node:net').createServer(() => {}).listen(Number(process.env.PORT), '127.0.0.1'), 300)`;
    await rejectsWithReason(
      launch({ command: node(script), env: {}, port, healthCheck: { path: '/healthz', timeoutSeconds: 3 } }, () => {}),
      new RegExp(`^health check GET /healthz on port ${port} did not answer 2xx within 3 s \\(last: no response within \\d+ ms\\)$`),
    );
  });

  test('bounds a whole probe: an endpoint that trickles its answer, or switches protocols, fails within the timeout', async () => {
    for (const [what, handler, last] of [
      ['trickles', `(req, res) => { res.socket.write('HTTP/1.1 200 OK\\r\\n'); setInterval(() => res.socket.write('X'), 200); }`, /no response within \d+ ms/],
      ['answers 101', `(req, res) => { res.socket.write('HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: x\\r\\nConnection: Upgrade\\r\\n\\r\\n'); }`, /HTTP 101 \(a protocol switch, not an answer\)/],
    ] as const) {
      const port = await freePort();
      const script = `require('node:http').createServer(${handler}).listen(Number(process.env.PORT), '127.0.0.1')`;
      const started = Date.now();
      await rejectsWithReason(launch({ command: node(script), env: {}, port, healthCheck: { path: '/healthz', timeoutSeconds: 1.5 } }, () => {}), last);
      assert.ok(Date.now() - started < 6_000, `${what}: ended ${Date.now() - started} ms after it began`);
    }
  });

  test('a process exiting with code 1 fails the launch, with or without health check', async () => {
    const port = await freePort();
    const started = Date.now();
    await rejectsWithReason(
      launch({ command: node('process.exit(1)'), env: {}, port, healthCheck: { path: '/healthz', timeoutSeconds: 5 } }, () => {}),
      'process exited with code 1 before becoming healthy',
    );
    assert.ok(Date.now() - started < 4500, 'does not wait for the 5 s health check timeout');
    await rejectsWithReason(
      launch({ command: node('process.exit(1)'), env: {}, port }, () => {}),
      'process exited with code 1 before becoming healthy',
    );
  });

  test('a missing command or working directory is reported as such', async () => {
    const port = await freePort();
    await rejectsWithReason(
      launch({ command: ['slipway-no-such-command-xyz', '--flag'], env: {}, port }, () => {}),
      'command not found: slipway-no-such-command-xyz',
    );
    await rejectsWithReason(
      launch({ command: node(''), env: {}, port, cwd: '/nonexistent/slipway-dir' }, () => {}),
      'working directory does not exist: /nonexistent/slipway-dir',
    );
  });

  test('aborting the signal stops the process and rejects', async () => {
    const port = await freePort();
    const controller = new AbortController();
    const { lines } = collector();
    // Aborted once the process has started (it says its pid), while its health checks fail: a
    // launch that did not heed the signal would wait out a health check timeout longer than the
    // test's own.
    const sink: OutputSink = (stream, line) => {
      lines[stream].push(line);
      if (line.startsWith('pid=')) controller.abort();
    };
    await rejectsWithReason(
      launch(
        { command: node(SERVER), env: { HEALTH_STATUS: '503' }, port, healthCheck: { path: '/healthz', timeoutSeconds: 3600 } },
        sink,
        controller.signal,
      ),
      'launch was aborted',
    );
    assertGone(pidFrom(lines.stdout));
  });

  test('output reaches the sink line by line, in order, including a final partial line', async () => {
    const script = `
      process.stdout.write('one\\ntw');
      setTimeout(() => {
        process.stdout.write('o\\r\\nthree\\n\\n');
        process.stderr.write('err1\\nerr2\\n');
        process.stdout.write(Buffer.from([0x68, 0xc3]));
      }, 50);
      setTimeout(() => {
        process.stdout.write(Buffer.concat([Buffer.from([0xa9]), Buffer.from('llo\\n')]));
        process.stdout.write('x'.repeat(20000) + '\\nafter-long\\n');
      }, 100);
      setTimeout(() => { process.stdout.write('tail without newline'); process.exit(3); }, 1300);
    `;
    const { sink, lines } = collector();
    const proc = await start({ command: node(script), env: {}, port: await freePort() }, sink);

    // Exiting after becoming healthy is observable, and all output is in by then.
    assert.deepEqual(await proc.exited, { code: 3, signal: null });
    const [one, two, three, blank, hello, long, afterLong, tail, ...rest] = lines.stdout;
    assert.deepEqual([one, two, three, blank, hello], ['one', 'two', 'three', '', 'héllo']);
    assert.ok(long !== undefined && long.startsWith('xxxx') && long.endsWith('[truncated]'));
    assert.ok(Buffer.byteLength(long) <= 16 * 1024, `long line is ${Buffer.byteLength(long)} bytes`);
    assert.deepEqual([afterLong, tail, rest], ['after-long', 'tail without newline', []]);
    assert.deepEqual(lines.stderr, ['err1', 'err2']);
    await proc.stop();
  });
});

describe('stop', { timeout: 10_000 }, () => {
  test('SIGKILLs a child ignoring SIGTERM after the grace period, grandchildren included', async () => {
    const script = `
      const { spawn } = require('node:child_process');
      process.on('SIGTERM', () => console.log('ignoring SIGTERM'));
      const grandchild = spawn(process.execPath, ['-e', "process.on('SIGTERM', () => {}); setInterval(() => {}, 1000)"], { stdio: 'ignore' });
      console.log('grandchild=' + grandchild.pid);
      setInterval(() => {}, 1000);
    `;
    const { sink, lines } = collector();
    const proc = await start({ command: node(script), env: {}, port: await freePort() }, sink);
    const grandchild = pidFrom(lines.stdout, 'grandchild');
    assert.ok(isAlive(grandchild));

    const started = Date.now();
    const stopping = proc.stop(300);
    assert.equal(proc.stop(300), stopping, 'stop() is idempotent');
    await stopping;
    const elapsed = Date.now() - started;

    assert.ok(elapsed >= 280, `stopped after ${elapsed} ms, before the grace period`);
    assert.deepEqual(await proc.exited, { code: null, signal: 'SIGKILL' });
    assert.ok(lines.stdout.includes('ignoring SIGTERM'), 'SIGTERM was sent first');
    assertGone(proc.pid);
    await waitUntilGone(grandchild);
  });

  // What the README says of the runner: a process that leaves the service's group is not tracked.
  test('does not reach a process that the service moved into a session of its own, and does not wait for it', async () => {
    const script = `
      const { spawn } = require('node:child_process');
      // detached: setsid(), a new session and process group; it keeps the service's stdout open.
      // It writes on: closing the pipe it inherited would kill it (EPIPE, SIGPIPE) at its next write.
      const escaped = spawn(process.execPath, ['-e', 'setInterval(() => process.stdout.write(".\\\\n"), 100)'], { detached: true, stdio: ['ignore', 'inherit', 'ignore'] });
      console.log('escaped=' + escaped.pid);
      setInterval(() => {}, 1000);
    `;
    const { sink, lines } = collector();
    const proc = await start({ command: node(script), env: {}, port: await freePort() }, sink);
    const escaped = pidFrom(lines.stdout, 'escaped');
    try {
      await proc.stop();
      assert.deepEqual(await proc.exited, { code: null, signal: 'SIGTERM' });
      assertGone(proc.pid);
      await sleep(500);
      assert.ok(isAlive(escaped), 'the process in its own session was stopped after all, which the README says it is not');
    } finally {
      process.kill(escaped, 'SIGKILL');
    }
  });
});

describe('a slow health check', { timeout: 30_000 }, () => {
  // Slower than 5 s, what one probe was once given, and well inside the check on a slow machine.
  test('gets one probe as long as the timeout leaves it: an endpoint that answers in 6 s passes a check of 10 s', async () => {
    const script = `require('node:http').createServer((req, res) => setTimeout(() => res.end('ok'), 6000)).listen(Number(process.env.PORT), '127.0.0.1')`;
    await start({ command: node(script), env: {}, port: await freePort(), healthCheck: { path: '/healthz', timeoutSeconds: 10 } }, () => {});
  });
});

describe('stop, in a process with nothing else to do', { timeout: 30_000 }, () => {
  // Run in a Node process of its own, whose event loop really empties: what keeps it alive (or
  // not) until stop() is done is what keeps a runner alive until it has let its deployments go.
  const moduleUrl = new URL('../../src/runner-agent/local-process.js', import.meta.url).href;
  async function runAlone(service: string): Promise<{ code: number | null; out: string; ms: number }> {
    const script = `
      const { launch, freePort } = await import(${JSON.stringify(moduleUrl)});
      const proc = await launch({ command: [process.execPath, '-e', ${JSON.stringify(service)}], env: {}, port: await freePort() }, (s, line) => console.log(line));
      await new Promise((r) => setTimeout(r, 500));
      await proc.stop(3000);
      console.log('stopped');
    `;
    const started = Date.now();
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (c: Buffer) => { out += c.toString(); });
    const [code] = await once(child, 'exit') as [number | null];
    return { code, out, ms: Date.now() - started };
  }

  test('waits for the whole group after its leader exits, and only then goes on', async () => {
    // As \`npm start\` runs a server: a parent, and a child in its group that takes a second to stop.
    const service = `
      const child = require('node:child_process').spawn(process.execPath, ['-e', "process.on('SIGTERM', () => setTimeout(() => process.exit(0), 1000)); setInterval(() => {}, 1000)"], { stdio: 'inherit' });
      process.on('SIGTERM', () => process.exit(0));
      setInterval(() => {}, 1000);
    `;
    const { code, out } = await runAlone(service);
    assert.equal(code, 0);
    assert.match(out, /stopped/, 'the process that stopped it went on past stop()');
  });

  test('is not held up by a process that escaped the group with the service\'s output', async () => {
    const service = `
      const escaped = require('node:child_process').spawn(process.execPath, ['-e', 'setTimeout(() => {}, 20000)'], { detached: true, stdio: ['ignore', 'inherit', 'inherit'] });
      console.log('escaped=' + escaped.pid);
      setInterval(() => {}, 1000);
    `;
    const { code, out, ms } = await runAlone(service);
    const escaped = Number(/escaped=(\d+)/.exec(out)?.[1]);
    try {
      assert.equal(code, 0);
      assert.match(out, /stopped/);
      assert.ok(ms < 15_000, `it ended ${ms} ms after it began, held by the escaped process's pipes`);
    } finally {
      if (escaped > 0) try { process.kill(escaped, 'SIGKILL'); } catch { /* gone */ }
    }
  });
});

describe('ProcessTable', { timeout: 10_000 }, () => {
  test('replace stops the previous process only when called; the new one keeps answering', async () => {
    const table = new ProcessTable();
    const key = 'svc-1/production';
    const healthCheck = { path: '/healthz', timeoutSeconds: 5 };
    const portA = await freePort();
    const a = await start({ command: node(SERVER), env: { NAME: 'a' }, port: portA, healthCheck }, () => {});
    assert.equal(await table.replace(key, a), undefined);
    assert.equal(table.current(key), a);

    const portB = await freePort();
    const b = await start({ command: node(SERVER), env: { NAME: 'b' }, port: portB, healthCheck }, () => {});
    // Launching the successor alone does not touch the current process.
    assert.equal(JSON.parse((await getText(portA, '/')).body).name, 'a');
    assert.equal(table.current(key), a);

    assert.equal(await table.replace(key, b), a);
    assert.equal(table.current(key), b);
    assert.deepEqual(await a.exited, { code: null, signal: 'SIGTERM' });
    assertGone(a.pid);
    await assert.rejects(getText(portA, '/'), { code: 'ECONNREFUSED' });
    assert.equal(JSON.parse((await getText(portB, '/')).body).name, 'b');

    await table.stopAll();
    assert.equal(table.current(key), undefined);
    assert.deepEqual(await b.exited, { code: null, signal: 'SIGTERM' });
    assertGone(b.pid);
  });

  test('counts exits on its own per tag: a restart of the same tag carries them on, another tag starts at none', async () => {
    const table = new ProcessTable();
    const key = 'svc-2/production';
    // Stand-ins for processes: the table only keeps and stops them.
    const proc = (pid: number): RunningProcess => ({ pid, port: 1, exited: new Promise(() => {}), stop: async () => {} });
    const [a, b, c, d] = [proc(1), proc(2), proc(3), proc(4)];
    const health = () => table.entries().find((e) => e.key === key)!.health;
    await table.replace(key, a, 'dep_1');
    assert.deepEqual(health(), { state: 'running', exits: 0, lastExit: null });
    const at = new Date('2026-01-02T03:04:05.000Z');
    assert.equal(table.exitedOnItsOwn(key, a, { code: 3, signal: null }, at), true);
    assert.deepEqual(health(), { state: 'restarting', exits: 1, lastExit: { code: 3, signal: null, at: at.toISOString() } });
    assert.equal(table.exitedOnItsOwn(key, b, { code: 1, signal: null }), false, 'not the process in place');
    await table.replace(key, b, 'dep_1');
    assert.deepEqual(health(), { state: 'running', exits: 1, lastExit: { code: 3, signal: null, at: at.toISOString() } });
    table.exitedOnItsOwn(key, b, { code: null, signal: 'SIGKILL' }, at);
    await table.replace(key, c, 'dep_1');
    assert.equal(health().exits, 2);
    await table.replace(key, d, 'dep_2');
    assert.deepEqual(health(), { state: 'running', exits: 0, lastExit: null });
  });
});

// The reaper (reaper.ts) stops the services of a runner that is killed; one that is itself killed
// is started again, and told of every group still running.
describe('reaper', { timeout: 20_000, skip: !existsSync('/proc/self/stat') && 'reads /proc' }, () => {
  const isGone = (pid: number) => {
    try {
      process.kill(pid, 0);
    } catch {
      return true;
    }
    // Where init reaps nothing, a process that ended stays a zombie.
    return readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]![0] === 'Z';
  };

  test('stops what a killed process started, also after its reaper was killed and started again', async () => {
    const module = new URL('../../src/runner-agent/local-process.js', import.meta.url).href;
    const script = `
      import { readdirSync, readFileSync } from 'node:fs';
      import { launch, freePort } from ${JSON.stringify(module)};
      const service = { command: [process.execPath, '-e', 'setInterval(() => {}, 1000)'], env: {} };
      const reapers = () => readdirSync('/proc').filter((d) => /^\\d+$/.test(d)).filter((d) => {
        try {
          return readFileSync('/proc/' + d + '/stat', 'utf8').split(') ')[1].split(' ')[1] === String(process.pid)
            && readFileSync('/proc/' + d + '/cmdline', 'utf8').includes('reaper-main');
        } catch { return false; }
      }).map(Number);
      const first = await launch({ ...service, port: await freePort() }, () => {});
      const [reaper] = reapers();
      process.kill(reaper, 'SIGKILL');
      const running = (pid) => { try { return readFileSync('/proc/' + pid + '/stat', 'utf8').split(') ')[1][0] !== 'Z'; } catch { return false; } };
      while (running(reaper)) await new Promise((r) => setTimeout(r, 20));
      await new Promise((r) => setTimeout(r, 100));
      const second = await launch({ ...service, port: await freePort() }, () => {});
      console.log(JSON.stringify({ pids: [first.pid, second.pid], reapers: reapers().filter((p) => p !== reaper).length }));
      process.kill(process.pid, 'SIGKILL');
    `;
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => { out += chunk.toString('utf8'); });
    await new Promise((resolve) => child.once('exit', resolve));
    const { pids, reapers } = JSON.parse(out) as { pids: number[]; reapers: number };
    assert.equal(reapers, 1, 'a new reaper took over');
    for (let i = 0; i < 200 && !pids.every(isGone); i++) await sleep(50);
    assert.deepEqual(pids.map(isGone), [true, true], `still running: ${pids.filter((p) => !isGone(p)).join(', ')}`);
  });
});
