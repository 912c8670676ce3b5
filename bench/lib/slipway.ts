// Start Slipway the way an operator would (`slipway serve`, from the build beside this bench) on a fresh
// data directory, wait for /readyz, read the bootstrap credentials and get
// tokens. Reused by every Slipway row.

import fs from 'node:fs';
import path from 'node:path';
import { BENCH_DIST_DIR, freePort, REPO_ROOT, startProcess, tail, waitForHttpOk } from './proc.js';
import type { RunningServer, ServerStartOptions } from './running-server.js';

export interface SlipwayBootstrap {
  orgId: string;
  clientId: string;
  clientSecret: string;
  tokenUrl: string;
  scope: string;
}

export interface SlipwayServer extends RunningServer {
  dataDir: string;
  bootstrap: SlipwayBootstrap;
  /** A fresh access token for the bootstrap owner service user. */
  token(): Promise<string>;
}

/** Rate limits high enough never to trigger during a run. */
const UNLIMITED = '100000000';

/** RFC 6749 §2.3.1: client_id and client_secret are form-urlencoded before Basic. */
export function basicAuthorization(clientId: string, clientSecret: string): string {
  const encode = (s: string): string => encodeURIComponent(s).replace(/%20/g, '+');
  return `Basic ${Buffer.from(`${encode(clientId)}:${encode(clientSecret)}`).toString('base64')}`;
}

export function clientCredentialsBody(scope: string): string {
  return new URLSearchParams({ grant_type: 'client_credentials', scope }).toString();
}

/** POST a client-credentials grant; returns the parsed JSON or throws with the answer. */
export async function requestToken(
  tokenUrl: string,
  clientId: string,
  clientSecret: string,
  scope: string,
): Promise<{ access_token: string; token_type: string; expires_in: number; scope?: string }> {
  const res = await fetch(tokenUrl, {
    method: 'POST',
    headers: {
      authorization: basicAuthorization(clientId, clientSecret),
      'content-type': 'application/x-www-form-urlencoded',
    },
    body: clientCredentialsBody(scope),
  });
  const text = await res.text();
  if (res.status !== 200) throw new Error(`token request → HTTP ${res.status} ${text.slice(0, 300)}`);
  const json = JSON.parse(text) as { access_token?: unknown; token_type?: unknown; expires_in?: number; scope?: string };
  if (typeof json.access_token !== 'string') throw new Error(`token response has no access_token: ${text.slice(0, 300)}`);
  return json as { access_token: string; token_type: string; expires_in: number; scope?: string };
}

/** Environment for the child: ours, minus any SLIPWAY_* of the caller's shell; BENCH_SLIPWAY_X passes through as SLIPWAY_X. */
function slipwayEnv(overrides: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (k.startsWith('SLIPWAY_')) continue;
    env[k] = v;
    if (k.startsWith('BENCH_SLIPWAY_')) env[k.slice('BENCH_'.length)] = v;
  }
  return { ...env, ...overrides };
}

async function waitForFile(file: string, timeoutMs: number): Promise<string> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return fs.readFileSync(file, 'utf8');
    } catch (err) {
      if (Date.now() > deadline) throw new Error(`${file} not written within ${timeoutMs / 1000} s: ${(err as Error).message}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

function parseBootstrap(text: string, file: string): SlipwayBootstrap {
  const json = JSON.parse(text) as Record<string, unknown>;
  for (const field of ['orgId', 'clientId', 'clientSecret', 'tokenUrl', 'scope'] as const) {
    if (typeof json[field] !== 'string' || json[field] === '') throw new Error(`${file}: field "${field}" missing or not a string`);
  }
  return json as unknown as SlipwayBootstrap;
}

function profileArgs(): string[] {
  const dir = process.env.BENCH_PROFILE;
  return dir ? ['--cpu-prof', '--cpu-prof-dir', path.resolve(dir)] : [];
}

export async function startSlipway(opts: ServerStartOptions): Promise<SlipwayServer> {
  // The Slipway built beside this bench (dist/ normally; another build directory when run from there).
  const entry = path.join(BENCH_DIST_DIR, '..', 'src', 'cli', 'run.js');
  if (!fs.existsSync(entry)) throw new Error(`Slipway is not built: ${path.relative(REPO_ROOT, entry)} is missing`);

  const dataDir = path.join(opts.runDir, 'slipway-data');
  fs.mkdirSync(dataDir, { recursive: true });
  const port = await freePort();
  const baseUrl = `http://127.0.0.1:${port}`;
  const proc = startProcess({
    name: 'Slipway',
    // BENCH_PROFILE=DIR writes a V8 CPU profile of the server there when it stops. The entry is
    // what bin/slipway loads.
    args: [...profileArgs(), entry, 'serve'],
    cwd: REPO_ROOT,
    env: slipwayEnv({
      SLIPWAY_DATA_DIR: dataDir,
      SLIPWAY_PORT: String(port),
      SLIPWAY_HOST: '127.0.0.1',
      SLIPWAY_LOG_LEVEL: 'info',
      SLIPWAY_RATE_LIMIT_TOKEN_PER_MINUTE: UNLIMITED,
      SLIPWAY_RATE_LIMIT_API_PER_MINUTE: UNLIMITED,
    }),
    logFile: path.join(opts.runDir, 'slipway.log'),
    ...(opts.cpu !== undefined ? { cpu: opts.cpu } : {}),
  });

  try {
    await waitForHttpOk(`${baseUrl}/readyz`, proc, 60_000);
    const bootstrapFile = path.join(dataDir, 'bootstrap.json');
    const bootstrap = parseBootstrap(await waitForFile(bootstrapFile, 10_000), bootstrapFile);
    const tokenUrl = new URL(bootstrap.tokenUrl, baseUrl).toString();
    const server: SlipwayServer = {
      id: 'slipway',
      label: 'Slipway',
      baseUrl,
      process: proc,
      dataDir,
      bootstrap: { ...bootstrap, tokenUrl },
      async token() {
        const t = await requestToken(tokenUrl, bootstrap.clientId, bootstrap.clientSecret, bootstrap.scope);
        return t.access_token;
      },
    };
    await server.token(); // fail here, once, if the credentials do not work
    return server;
  } catch (err) {
    await proc.stop();
    const why = err instanceof Error ? err.message : String(err);
    const log = tail(proc.logFile);
    throw new Error(log ? `${why}\n  last lines of slipway.log:\n    ${log.split('\n').join('\n    ')}` : why);
  }
}
