// The runner's supervisor with real processes: a deployed service that exits on its own comes back
// on its port after a pause that grows while restarts fail, and nothing is restarted once the
// process was replaced or the runner stops. And where a serving process's output goes.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { createLogger } from '../../src/platform/logging.js';
import { OUTPUT_LINES_PER_SECOND, serviceOutputLog } from '../../src/runner-agent/deployment-run.js';
import { launch, PortPool, ProcessTable, type LaunchSpec, type RunningProcess } from '../../src/runner-agent/local-process.js';
import { restartDelayMs, RESTART_POLICY, supervise, type RestartPolicy } from '../../src/runner-agent/supervisor.js';

// Answers GET / with its pid, exits with code 2 on GET /exit, and exits at once while the file
// BROKEN names exists (so that restarts fail).
const SERVICE = `
const http = require('node:http');
const fs = require('node:fs');
if (fs.existsSync(process.env.BROKEN)) process.exit(4);
console.log('up ' + process.env.TOKEN);
http.createServer((req, res) => {
  if (req.url === '/exit') return res.end(() => process.exit(2));
  res.end(String(process.pid));
}).listen(Number(process.env.PORT), '127.0.0.1');
`;
const FAST: RestartPolicy = { firstDelayMs: 50, maxDelayMs: 400, stableAfterMs: 60_000 };
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'slipway-supervisor-'));
const table = new ProcessTable();
after(async () => {
  await table.stopAll();
  fs.rmSync(dir, { recursive: true, force: true });
});

async function pidOn(port: number): Promise<number | undefined> {
  try {
    return Number(await (await fetch(`http://127.0.0.1:${port}/`)).text());
  } catch {
    return undefined;
  }
}

async function until<T>(what: string, check: () => Promise<T | undefined> | T | undefined, timeoutMs = 15_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(25);
  }
}

function logged(): { logger: ReturnType<typeof createLogger>; lines: Array<Record<string, any>> } {
  const lines: Array<Record<string, any>> = [];
  return { logger: createLogger('debug', { write: (s: string) => { lines.push(JSON.parse(s)); } }), lines };
}

async function startService(key: string, broken: string, ports: PortPool, tag: string) {
  const port = await ports.reserve();
  const output: string[] = [];
  const spec: LaunchSpec = { command: [process.execPath, '-e', SERVICE], env: { BROKEN: broken, TOKEN: 'tok-5ecret-value' }, port, healthCheck: { path: '/', timeoutSeconds: 10 } };
  const sink = (_stream: string, line: string) => { output.push(line); };
  const first = await launch(spec, sink);
  await table.replace(key, first, tag);
  return { port, spec, sink, first, output };
}

describe('runner supervisor', () => {
  test('doubles the pause between restarts up to its cap', () => {
    assert.deepEqual([0, 1, 2, 5, 6, 7, 100].map((n) => restartDelayMs(n)), [1000, 2000, 4000, 32_000, 60_000, 60_000, 60_000]);
    assert.equal(RESTART_POLICY.stableAfterMs, 60_000);
  });

  test('starts an exited service again on its port; while restarts fail, waits longer each time; stops when the runner does', async () => {
    const ports = new PortPool();
    const broken = path.join(dir, 'broken-1');
    const { port, spec, sink, first, output } = await startService('svc/env-1', broken, ports, 'dep_1');
    const { logger, lines } = logged();
    const stopping = new AbortController();
    const supervised = supervise({ key: 'svc/env-1', spec, sink, mask: (t) => t.replaceAll('tok-5ecret-value', '***'), first, tag: 'dep_1' }, { processes: table, ports, log: logger, stopping: stopping.signal, policy: FAST });

    await fetch(`http://127.0.0.1:${port}/exit`).catch(() => undefined);
    const second = await until('a new process on the port', async () => { const pid = await pidOn(port); return pid !== undefined && pid !== first.pid ? pid : undefined; });
    await until('the new process in the table', () => (table.current('svc/env-1')?.pid === second ? true : undefined));
    assert.equal(output.filter((l) => l === 'up tok-5ecret-value').length, 2, 'the same variables, and output to the same sink');
    const exit = lines.find((l) => l.processPid === first.pid)!;
    assert.equal(exit.code, 2);
    assert.equal(exit.restartInMs, 50);

    // Restarts that fail: the pause doubles up to the cap, and the service comes back once it can.
    fs.writeFileSync(broken, '');
    await fetch(`http://127.0.0.1:${port}/exit`).catch(() => undefined);
    await until('three failed restarts', () => (lines.filter((l) => /did not come back/.test(l.msg)).length >= 3 ? true : undefined));
    fs.rmSync(broken);
    const third = await until('the service back after failures', async () => { const pid = await pidOn(port); return pid !== undefined && pid !== second ? pid : undefined; });
    // Exits within a minute of a start count as in a row: 50 ms, then 100 for the second exit, then
    // 200 and 400 (the cap) after failed restarts.
    const pauses = lines.filter((l) => l.restartInMs !== undefined).map((l) => l.restartInMs as number);
    assert.deepEqual(pauses.slice(0, 5), [50, 100, 200, 400, 400]);
    assert.ok(lines.filter((l) => /did not come back/.test(l.msg)).every((l) => /process exited with code 4/.test(l.msg)));
    // Each restart that died before its health check counts as an exit, with its code.
    await until('the restarted process in the table', () => (table.current('svc/env-1')?.pid === third ? true : undefined));
    const health = table.entries().find((e) => e.key === 'svc/env-1')!.health;
    assert.equal(health.state, 'running');
    assert.equal(health.exits, 2 + lines.filter((l) => /did not come back/.test(l.msg)).length);
    assert.deepEqual({ code: health.lastExit?.code, signal: health.lastExit?.signal }, { code: 4, signal: null });

    stopping.abort();
    await table.stopAll();
    await supervised;
    assert.equal(await pidOn(port), undefined);
    assert.equal(table.current('svc/env-1'), undefined);
    assert.ok(third > 0);
  });

  test('leaves a process that a deployment replaced alone, and frees its port', async () => {
    const ports = new PortPool();
    const { port, spec, sink, first } = await startService('svc/env-2', path.join(dir, 'broken-2'), ports, 'dep_2');
    const { logger, lines } = logged();
    const supervised = supervise({ key: 'svc/env-2', spec, sink, mask: (t) => t, first, tag: 'dep_2' }, { processes: table, ports, log: logger, stopping: new AbortController().signal, policy: FAST });
    const next: RunningProcess = await launch({ ...spec, port: await ports.reserve() }, sink);
    await table.replace('svc/env-2', next);
    await supervised;
    await sleep(200);
    assert.equal(await pidOn(port), undefined, 'nothing started again on the old port');
    assert.deepEqual(lines, []);
    assert.equal(table.current('svc/env-2'), next);
  });
});

describe('service output after its deployment', () => {
  test('goes to the runner log masked, at most OUTPUT_LINES_PER_SECOND lines a second, and says how many it left out', () => {
    const { logger, lines } = logged();
    let now = 10_000;
    const sink = serviceOutputLog(logger, (line) => line.replaceAll('s3cret-value', '***'), () => now);
    for (let i = 0; i < OUTPUT_LINES_PER_SECOND + 25; i++) sink('stdout', `line ${i} s3cret-value`);
    now += 1_000;
    sink('stderr', 'next second');
    const messages = lines.map((l) => [l.stream, l.msg, l.dropped]);
    assert.equal(messages.length, OUTPUT_LINES_PER_SECOND + 2);
    assert.deepEqual(messages[0], ['stdout', 'line 0 ***', undefined]);
    assert.deepEqual(messages[OUTPUT_LINES_PER_SECOND], [undefined, `25 lines of output not logged: more than ${OUTPUT_LINES_PER_SECOND} a second`, 25]);
    assert.deepEqual(messages[OUTPUT_LINES_PER_SECOND + 1], ['stderr', 'next second', undefined]);
    assert.ok(!JSON.stringify(lines).includes('s3cret-value'));
  });

  test('says how many it left out of the last second too, when no line comes after', async () => {
    const { logger, lines } = logged();
    const sink = serviceOutputLog(logger, (line) => line);
    for (let i = 0; i < OUTPUT_LINES_PER_SECOND * 3; i++) sink('stdout', `line ${i}`);
    await new Promise((r) => setTimeout(r, 2100));
    const dropped = lines.reduce((sum, l) => sum + (typeof l.dropped === 'number' ? l.dropped : 0), 0);
    const shown = lines.filter((l) => l.stream === 'stdout').length;
    assert.equal(shown + dropped, OUTPUT_LINES_PER_SECOND * 3, 'every line is logged or counted');
  });
});
