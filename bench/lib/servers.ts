// Every server a probe can ask for, and how to start it. Each runs in its own
// process, pinned to the server CPU when pinning is on, logging to a file in
// the run directory.

import { randomBytes } from 'node:crypto';
import path from 'node:path';
import type { ListeningMessage } from '../servers/child.js';
import { BENCH_DIST_DIR, type ManagedProcess, startProcess, tail } from './proc.js';
import type { RunningServer, ServerId, ServerStartOptions } from './running-server.js';
import { type SlipwayServer, startSlipway } from './slipway.js';

export interface OidcServer extends RunningServer {
  tokenUrl: string;
  clientId: string;
  clientSecret: string;
  scope: string;
}

/** Each server a probe can ask for, by its id: what it gives once started. */
export interface ServerTypes extends Record<ServerId, RunningServer> {
  slipway: SlipwayServer;
  ceiling: RunningServer;
  oidc: OidcServer;
  floor: RunningServer;
  writeFloor: RunningServer;
}

export type { RunningServer, ServerId, ServerStartOptions };

export interface ServerSpec<K extends ServerId> {
  label: string;
  start(opts: ServerStartOptions): Promise<ServerTypes[K]>;
}

/**
 * The scope string sent to the oidc-provider reference: the same shape (and
 * about the same length) as the one Slipway's bootstrap.json names.
 */
export const OIDC_SCOPE = 'openid email profile offline_access urn:slipway:iam:org:project:id:318123456789012345:aud';

/** Start one of our own scripts in dist/bench/servers/ and wait for it to announce its port. */
async function startChildServer(
  id: ServerId,
  label: string,
  script: string,
  opts: ServerStartOptions,
  env: Record<string, string> = {},
): Promise<RunningServer> {
  const proc = startProcess({
    name: label,
    args: [path.join(BENCH_DIST_DIR, 'servers', script)],
    env: { ...process.env, ...env },
    logFile: path.join(opts.runDir, `${id}.log`),
    ipc: true,
    ...(opts.cpu !== undefined ? { cpu: opts.cpu } : {}),
  });
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${label} did not start within 20 s`)), 20_000);
    proc.child.on('message', (m: ListeningMessage) => {
      if (m?.type === 'listening') {
        clearTimeout(timer);
        resolve(m.port);
      }
    });
    void proc.exited.then(() => {
      clearTimeout(timer);
      reject(new Error(`${proc.describeExit()} during start-up: ${tail(proc.logFile)}`));
    });
  }).catch(async (err: unknown) => {
    await proc.stop();
    throw err;
  });
  return { id, label, baseUrl: `http://127.0.0.1:${port}`, process: proc };
}

export const SERVERS: { [K in ServerId]: ServerSpec<K> } = {
  slipway: {
    label: 'Slipway',
    start: (opts) => startSlipway(opts),
  },
  ceiling: {
    label: 'Fastify hello-world',
    start: (opts) => startChildServer('ceiling', 'Fastify hello-world', 'ceiling.js', opts),
  },
  oidc: {
    label: 'oidc-provider',
    async start(opts) {
      const clientId = 'bench-client';
      const clientSecret = randomBytes(32).toString('base64url');
      const server = await startChildServer('oidc', 'oidc-provider', 'oidc.js', opts, {
        BENCH_OIDC_CLIENT_ID: clientId,
        BENCH_OIDC_CLIENT_SECRET: clientSecret,
        BENCH_OIDC_SCOPE: OIDC_SCOPE,
      });
      return { ...server, tokenUrl: `${server.baseUrl}/oauth/v2/token`, clientId, clientSecret, scope: OIDC_SCOPE };
    },
  },
  floor: {
    label: 'Fastify+SQLite floor',
    start: (opts) =>
      startChildServer('floor', 'Fastify+SQLite floor', 'floor.js', opts, {
        BENCH_FLOOR_DB: path.join(opts.runDir, 'floor.db'),
      }),
  },
  writeFloor: {
    label: 'Fastify+SQLite write floor',
    start: (opts) =>
      startChildServer('writeFloor', 'Fastify+SQLite write floor', 'write-floor.js', opts, {
        BENCH_WRITE_FLOOR_DB: path.join(opts.runDir, 'write-floor.db'),
      }),
  },
};
