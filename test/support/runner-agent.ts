// The reference runner as the suites meet it: `slipway runner` as a real child process signed in as
// a runner service user, the tiny HTTP service it deploys, and ways to see what it did (the
// deployment's log, the process's answers, whether a pid still runs).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { get as httpGet } from 'node:http';
import path from 'node:path';
import { after } from 'node:test';
import { tempDir, type Actor, type HttpClient, type HttpResult, type TestServer } from './harness.js';
import { eventsSettled, eventually, getDeployment } from './deployments.js';
import { spawnSlipway, type SlipwayProcess } from './processes.js';

/**
 * The deployed service: prints its pid, port and API_KEY (which the runner must mask in the log),
 * answers GET / with its variables and GET /healthz with 200 — or 503 while HEALTH is `fail` or
 * while the file HEALTH_GATE names does not exist yet. GET /exit makes it exit with code 3; with
 * EXIT_AFTER_MS it exits with code 4 that long after its first healthy answer.
 */
export const SERVICE_SCRIPT = `
const http = require('node:http');
const fs = require('node:fs');
console.log('serving pid=' + process.pid + ' port=' + process.env.PORT + ' key=' + process.env.API_KEY);
let exiting = null;
http.createServer((req, res) => {
  if (req.url === '/exit') {
    res.end(() => process.exit(3));
    return;
  }
  if (req.url === '/healthz') {
    const gate = process.env.HEALTH_GATE;
    res.statusCode = process.env.HEALTH !== 'fail' && (!gate || fs.existsSync(gate)) ? 200 : 503;
    res.end();
    if (res.statusCode === 200 && process.env.EXIT_AFTER_MS && !exiting) exiting = setTimeout(() => process.exit(4), Number(process.env.EXIT_AFTER_MS));
    return;
  }
  res.setHeader('content-type', 'application/json');
  res.end(JSON.stringify({ pid: process.pid, greeting: process.env.GREETING ?? null, apiKey: process.env.API_KEY ?? null, revision: process.env.REVISION ?? null }));
}).listen(Number(process.env.PORT), '127.0.0.1');
`;

/** A service spec that runs SERVICE_SCRIPT with this node binary. */
export function serviceSpec(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { command: [process.execPath, '-e', SERVICE_SCRIPT], healthCheck: { path: '/healthz', timeoutSeconds: 30 }, ...extra };
}

export interface RunnerProcess {
  proc: SlipwayProcess;
  actor: Actor;
  /** SIGTERM, and the exit code (0 when it stopped cleanly). */
  stop(): Promise<number | null>;
}

const started: RunnerProcess[] = [];
const dirs: string[] = [];
// Whatever a test leaves running (after a failed assertion, say) is stopped, and with it its services.
after(async () => {
  await Promise.all(started.map(async (r) => {
    if (r.proc.child.exitCode !== null || r.proc.child.signalCode !== null) return;
    r.proc.child.kill('SIGCONT');
    await r.stop();
  }));
  for (const dir of dirs) fs.rmSync(dir, { recursive: true, force: true });
});

function scratchDir(): string {
  const dir = tempDir('slipway-runner-');
  dirs.push(dir);
  return dir;
}

/** A path for HEALTH_GATE: the service is unhealthy until a test creates the file. */
export function gateFile(): string {
  return path.join(scratchDir(), 'gate');
}

/**
 * `slipway runner` as a child process for a new runner service user of `orgId`: its credentials in
 * a file (`--credentials`), or in SLIPWAY_* variables with `via: 'env'`. With `url` (a proxy in
 * front of the server, file only), it reaches the API and the token endpoint there.
 */
export async function startRunner(server: TestServer, orgId: string, options: { environments?: string[]; concurrency?: number; via?: 'file' | 'env'; env?: Record<string, string>; url?: string } = {}): Promise<RunnerProcess> {
  const actor = await server.actor(orgId, 'runner');
  const tokenUrl = options.url === undefined ? actor.tokenUrl : options.url + new URL(actor.tokenUrl).pathname;
  const credentials = { orgId: actor.orgId, clientId: actor.clientId, clientSecret: actor.clientSecret, tokenUrl, scope: actor.scope };
  const args = ['runner', ...(options.environments ?? []).flatMap((e) => ['--environment', e]), '--concurrency', String(options.concurrency ?? 4)];
  let env: Record<string, string> = { SLIPWAY_LOG_LEVEL: 'debug', ...options.env };
  if (options.via === 'env') {
    env = { ...env, SLIPWAY_URL: server.url, SLIPWAY_ORG: orgId, SLIPWAY_CLIENT_ID: actor.clientId, SLIPWAY_CLIENT_SECRET: actor.clientSecret, SLIPWAY_SCOPE: actor.scope };
  } else {
    const file = path.join(scratchDir(), 'credentials.json');
    fs.writeFileSync(file, JSON.stringify(credentials), { mode: 0o600 });
    args.push('--credentials', file);
  }
  const proc = spawnSlipway(args, env);
  await proc.waitForLog((l) => l.msg === 'runner started', 'that it started');
  const runner: RunnerProcess = {
    proc,
    actor,
    async stop() {
      proc.child.kill('SIGTERM');
      return (await proc.exited).code;
    },
  };
  started.push(runner);
  return runner;
}

/** Every log line of a deployment, in order. */
export async function deploymentLog(http: HttpClient, orgId: string, id: string): Promise<Array<{ seq: number; attempt: number; stream: string; line: string }>> {
  const lines = [];
  for (let after = 0; ;) {
    const page = await http.get(`/v1/orgs/${orgId}/deployments/${id}/logs?after=${after}&limit=1000`);
    assert.equal(page.status, 200, page.text);
    lines.push(...page.body.lines);
    after = page.body.nextAfter;
    if (!page.body.hasMore) return lines;
  }
}

/** Waits (bounded) until the deployment is in a final state, and returns it. */
export function settled(http: HttpClient, orgId: string, id: string, timeoutMs?: number): Promise<any> {
  return eventually(`deployment ${id} to finish`, async () => {
    const d = await getDeployment(http, orgId, id);
    return ['succeeded', 'failed', 'cancelled', 'superseded'].includes(d.state) ? d : undefined;
  }, timeoutMs);
}

/** The process a succeeded deployment put in place, from the runner's line in its log. */
export async function servedBy(http: HttpClient, orgId: string, id: string): Promise<{ pid: number; port: number; line: string }> {
  const lines = await deploymentLog(http, orgId, id);
  const healthy = lines.find((l) => l.stream === 'runner' && l.line.startsWith('healthy: '));
  assert.ok(healthy, `no "healthy" line in ${JSON.stringify(lines)}`);
  const [, pid, port] = /pid (\d+) on port (\d+)/.exec(healthy.line)!;
  return { pid: Number(pid), port: Number(port), line: healthy.line };
}

/** The pids the service printed on start-up, in the log of `id` (attempt given: of that attempt only). */
export async function startedPids(http: HttpClient, orgId: string, id: string, attempt?: number): Promise<number[]> {
  const lines = await deploymentLog(http, orgId, id);
  return lines.filter((l) => l.stream === 'stdout' && (attempt === undefined || l.attempt === attempt))
    .flatMap((l) => /^serving pid=(\d+)/.exec(l.line)?.[1] ?? []).map(Number);
}

/** GET / of the service on `port`: its answer, or the connection error's code. */
export function ask(port: number): Promise<{ pid: number; greeting: string | null; apiKey: string | null; revision: string | null } | { error: string }> {
  return new Promise((resolve) => {
    httpGet({ host: '127.0.0.1', port, path: '/', agent: false }, (res) => {
      let text = '';
      res.on('data', (chunk: Buffer) => { text += chunk.toString('utf8'); });
      res.on('end', () => resolve(JSON.parse(text)));
    }).on('error', (error: NodeJS.ErrnoException) => resolve({ error: error.code ?? error.message }));
  });
}

/**
 * Whether `answer` (of `ask`) shows that no process holding `apiKey` answers on its port any more:
 * the connection refused, or reset, or answered by a process of another test that was given the
 * freed port since (tests run side by side, and ports are reused).
 */
export function noLongerServing(answer: Awaited<ReturnType<typeof ask>>, apiKey: string): boolean {
  return 'error' in answer || answer.apiKey !== apiKey;
}

/**
 * True while a process with this pid exists and has not exited. The runner reaps what it stops; a
 * process left without its parent is reaped by init, or, where init reaps nothing (some
 * containers), stays a zombie, which counts as gone.
 */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    return fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]![0] !== 'Z';
  } catch {
    return true;
  }
}

/** Every event of a type in an organization, oldest first, across pages. */
export async function allEvents(server: TestServer, orgId: string, type: string): Promise<any[]> {
  await eventsSettled(server);
  const events = [];
  let cursor: string | null = null;
  do {
    const res: HttpResult = await server.owner.http.get(`/v1/orgs/${orgId}/events?type=${type}&limit=200${cursor ? `&cursor=${cursor}` : ''}`);
    assert.equal(res.status, 200, res.text);
    events.push(...res.body.events);
    cursor = res.body.nextCursor;
  } while (cursor !== null);
  return events;
}
