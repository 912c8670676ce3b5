// Boots the real Slipway on a real database (a temporary SQLite file, or a fresh database in the
// throwaway PostgreSQL cluster when SLIPWAY_TEST_DB=postgres) listening on a real port, and gives
// tests an HTTP client and factories. Every log line the server writes is kept for assertions.
import { randomInt } from 'node:crypto';
import fs from 'node:fs';
import { createServer } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { createSlipway, type Core, type Slipway } from '../../src/app.js';
import { loadConfig, routePrefix, type Config } from '../../src/platform/config.js';
import { createTcpProxy, type TcpProxy } from './tcp-proxy.js';
import { cliContext } from '../../src/platform/context.js';
import type { Role } from '../../src/modules/auth/roles.js';
import type { Organization } from '../../src/modules/orgs/orgs.schemas.js';
import type { CredentialsT, ServiceUser } from '../../src/modules/service-users/service-users.schemas.js';

export const TEST_DB = (process.env.SLIPWAY_TEST_DB ?? 'sqlite') as 'sqlite' | 'postgres';

/**
 * The skip option of a test that reads no database (usage errors, help, the version): it runs
 * once, in the SQLite suite, rather than again beside PostgreSQL.
 */
export const NO_DATABASE = TEST_DB === 'sqlite' ? false : 'reads no database: runs in the SQLite suite only';

interface PostgresScript {
  createDatabase(adminUrl: string, name: string): Promise<string>;
  dropDatabase(adminUrl: string, name: string): Promise<void>;
}

let dbCounter = 0;

/** Ports this process has handed out, each once. */
const handedOut = new Set<number>();

/**
 * A port for a test server to listen on a moment later, or again after a restart: free when it is
 * picked, and below the range the system hands out for `listen(0)` and for outgoing connections
 * (32768-60999 by default on Linux, where the database clients', the HTTP clients' and the runners'
 * ports come from), so that only another test's pick, itself checked free, could take it meanwhile.
 */
export async function freePort(): Promise<number> {
  for (;;) {
    const port = 20_000 + randomInt(12_000);
    if (handedOut.has(port)) continue;
    const probe = createServer();
    const free = await new Promise<boolean>((resolve) => {
      probe.once('error', () => resolve(false));
      probe.listen(port, '127.0.0.1', () => resolve(true));
    });
    if (free) await new Promise<void>((resolve) => probe.close(() => resolve()));
    if (!free) continue;
    handedOut.add(port);
    return port;
  }
}

/** A database for one test server: its URL (null = SQLite in the data dir) and how to drop it. */
export async function testDatabase(): Promise<{ url: string | null; drop: () => Promise<void> }> {
  if (TEST_DB !== 'postgres') return { url: null, drop: async () => {} };
  if (process.env.SLIPWAY_TEST_DATABASE_URL) return { url: process.env.SLIPWAY_TEST_DATABASE_URL, drop: async () => {} };
  const admin = process.env.SLIPWAY_TEST_PG_ADMIN_URL;
  if (!admin) throw new Error('SLIPWAY_TEST_DB=postgres needs SLIPWAY_TEST_PG_ADMIN_URL (scripts/run-tests.mjs sets it)');
  const pg = (await import(new URL('../../../scripts/postgres.mjs', import.meta.url).href)) as PostgresScript;
  const name = `slipway_t${process.pid}_${++dbCounter}_${Date.now().toString(36)}`;
  const url = await pg.createDatabase(admin, name);
  return { url, drop: () => pg.dropDatabase(admin, name) };
}

export function tempDir(prefix = 'slipway-test-'): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), prefix));
}

export interface HttpResult<T = any> {
  status: number;
  headers: Headers;
  body: T;
  text: string;
}

export interface RequestOptions {
  headers?: Record<string, string>;
  /** Sent as JSON unless `raw` is given. */
  body?: unknown;
  raw?: string | Buffer;
  contentType?: string;
}

export function httpClient(baseUrl: string, token?: string) {
  async function request<T = any>(method: string, urlPath: string, options: RequestOptions = {}): Promise<HttpResult<T>> {
    const headers: Record<string, string> = { ...(options.headers ?? {}) };
    if (token !== undefined && headers.authorization === undefined) headers.authorization = `Bearer ${token}`;
    let body: string | Buffer | undefined;
    if (options.raw !== undefined) {
      body = options.raw;
      if (options.contentType) headers['content-type'] = options.contentType;
    } else if (options.body !== undefined) {
      body = JSON.stringify(options.body);
      headers['content-type'] = options.contentType ?? 'application/json';
    }
    const res = await fetch(baseUrl + urlPath, { method, headers, ...(body !== undefined ? { body } : {}) });
    const text = await res.text();
    let parsed: unknown = text;
    try {
      parsed = text ? JSON.parse(text) : null;
    } catch {
      // not JSON: leave the text
    }
    return { status: res.status, headers: res.headers, body: parsed as T, text };
  }
  return {
    request,
    get: <T = any>(p: string, o?: RequestOptions) => request<T>('GET', p, o),
    post: <T = any>(p: string, body?: unknown, o: RequestOptions = {}) => request<T>('POST', p, { ...o, ...(body !== undefined ? { body } : {}) }),
    put: <T = any>(p: string, body?: unknown, o: RequestOptions = {}) => request<T>('PUT', p, { ...o, ...(body !== undefined ? { body } : {}) }),
    patch: <T = any>(p: string, body?: unknown, o: RequestOptions = {}) => request<T>('PATCH', p, { ...o, ...(body !== undefined ? { body } : {}) }),
    delete: <T = any>(p: string, o?: RequestOptions) => request<T>('DELETE', p, o),
  };
}
export type HttpClient = ReturnType<typeof httpClient>;

/** The spec's token request: client credentials grant, HTTP Basic, the scope string as given. */
export function clientCredentialsGrant(tokenUrl: string, creds: { clientId: string; clientSecret: string }, scope: string): Promise<Response> {
  return fetch(tokenUrl, {
    method: 'POST',
    headers: {
      authorization: 'Basic ' + Buffer.from(`${encodeURIComponent(creds.clientId)}:${encodeURIComponent(creds.clientSecret)}`).toString('base64'),
      'content-type': 'application/x-www-form-urlencoded',
    },
    body: new URLSearchParams({ grant_type: 'client_credentials', scope }).toString(),
  });
}

export type Credentials = CredentialsT;

export interface Actor extends ServiceUser, CredentialsT {
  token: string;
  http: HttpClient;
}

export interface TestServer {
  url: string;
  config: Config;
  slipway: Slipway;
  core: Core;
  /** Every log line written so far, raw. */
  logs: string[];
  /** Responses whose status the route did not declare (should stay empty). */
  undeclared: string[];
  bootstrap: Credentials;
  /** The bootstrap owner (an instance administrator) with a token. */
  owner: Actor;
  dataDir: string;
  /** A client of the API, whose paths are under SLIPWAY_BASE_URL's path when it has one. */
  http: (token?: string) => HttpClient;
  /** Client credentials grant with HTTP Basic and the full scope string. */
  token(creds: { clientId: string; clientSecret: string }, scope?: string): Promise<string>;
  createOrg(slug?: string): Promise<Organization>;
  /** A service user of `orgId` with a token, made through the domain service. */
  actor(orgId: string, role: Role, name?: string): Promise<Actor>;
  /**
   * Stops this server, runs `whileDown` (when given), and starts a new one on the same data dir,
   * database and port (so clients' URLs and tokens stay good); close the new one only.
   */
  restart(whileDown?: () => Promise<unknown>): Promise<TestServer>;
  close(): Promise<void>;
}

let actorCounter = 0;

export interface StartOptions {
  /** Extra SLIPWAY_* variables. */
  env?: Record<string, string>;
  /** The data dir and database of a stopped server, taken over by the new one (see `restart`). */
  reuse?: { dataDir: string; database: Awaited<ReturnType<typeof testDatabase>>; port?: number };
}

/**
 * PostgreSQL only: a server whose connections to the database pass through a TCP proxy on this
 * machine, for a test to cut or silence. `close` opens the proxy again (so that the server can end
 * its connections), stops the server, then the proxy.
 */
export async function startServerBehindProxy(options: Omit<StartOptions, 'reuse'> = {}): Promise<{ server: TestServer; proxy: TcpProxy; close(): Promise<void> }> {
  const database = await testDatabase();
  const proxy = createTcpProxy();
  const url = new URL(database.url!);
  url.port = String(await proxy.open(url.hostname, Number(url.port)));
  const server = await startServer({ ...options, reuse: { dataDir: tempDir(), database: { url: url.href, drop: database.drop } } });
  return {
    server,
    proxy,
    async close() {
      await proxy.open();
      await server.close();
      await proxy.cut();
    },
  };
}

export async function startServer(options: StartOptions = {}): Promise<TestServer> {
  // A free port is free when it is picked, not always when the server listens on it a moment
  // later: the other suite's processes pick ports too, and outgoing connections take them.
  for (let attempt = 1; ; attempt++) {
    try {
      return await startServerOnce(options);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EADDRINUSE' || options.reuse?.port !== undefined || attempt === 3) throw error;
    }
  }
}

async function startServerOnce(options: StartOptions): Promise<TestServer> {
  const dataDir = options.reuse?.dataDir ?? tempDir();
  const database = options.reuse?.database ?? await testDatabase();
  const port = options.reuse?.port ?? await freePort();
  const config = loadConfig({
    SLIPWAY_DATA_DIR: dataDir,
    SLIPWAY_PORT: String(port),
    SLIPWAY_LOG_LEVEL: 'info',
    SLIPWAY_RATE_LIMIT_TOKEN_PER_MINUTE: '1000000',
    SLIPWAY_RATE_LIMIT_API_PER_MINUTE: '1000000',
    // Tests run their clients, their child processes' waits and several servers on one event loop:
    // its lag says nothing about a server's load here. overload.test.ts turns the check on.
    SLIPWAY_MAX_EVENT_LOOP_DELAY_MS: '0',
    ...(database.url ? { SLIPWAY_DATABASE_URL: database.url } : {}),
    ...options.env,
  });
  const logs: string[] = [];
  let partial = '';
  const logStream = new Writable({
    write(chunk: Buffer, _enc, done) {
      const text = partial + chunk.toString('utf8');
      const lines = text.split('\n');
      partial = lines.pop()!;
      logs.push(...lines.filter(Boolean));
      done();
    },
  });
  const undeclared: string[] = [];
  const slipway = await createSlipway(config, {
    logStream,
    onUndeclaredStatus: (route, status) => undeclared.push(`${route} → ${status}`),
  });
  const url = `http://127.0.0.1:${port}`;
  // The API answers under SLIPWAY_BASE_URL's path, the token endpoint under SLIPWAY_AUTH_URL's.
  const api = `${url}${routePrefix(config.baseUrl)}`;
  let bootstrap!: Credentials;

  async function token(creds: { clientId: string; clientSecret: string }, scope = bootstrap.scope): Promise<string> {
    const res = await clientCredentialsGrant(`${url}${routePrefix(config.authUrl)}/oauth/v2/token`, creds, scope);
    const body = (await res.json()) as { access_token?: string };
    if (res.status !== 200 || !body.access_token) throw new Error(`token request failed: ${res.status} ${JSON.stringify(body)}`);
    return body.access_token;
  }

  let ownerToken: string;
  let ownerUser: Awaited<ReturnType<typeof slipway.core.serviceUsers.get>>;
  try {
    await slipway.listen();
    bootstrap = JSON.parse(fs.readFileSync(path.join(dataDir, 'bootstrap.json'), 'utf8')) as Credentials;
    ownerToken = await token(bootstrap);
    ownerUser = await slipway.core.serviceUsers.get(bootstrap.orgId, bootstrap.clientId);
  } catch (error) {
    // A server that cannot be used (a port taken meanwhile, say) must not keep the test file's
    // process alive; the first error is the one to see.
    await slipway.close().catch(() => undefined);
    if (!options.reuse) {
      await database.drop().catch(() => undefined);
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
    throw error;
  }
  let handedOver = false;
  const owner: Actor = { ...ownerUser, ...bootstrap, token: ownerToken, http: httpClient(api, ownerToken) };

  return {
    url,
    config,
    slipway,
    core: slipway.core,
    logs,
    undeclared,
    bootstrap,
    owner,
    dataDir,
    http: (t?: string) => httpClient(api, t),
    token,
    async createOrg(slug = `org-${process.pid}-${++actorCounter}`) {
      return slipway.core.orgs.create(cliContext(), { slug, name: `Test ${slug}` });
    },
    async actor(orgId: string, role: Role, name = `${role}-${++actorCounter}`) {
      const created = await slipway.core.serviceUsers.create(cliContext(), orgId, { name, role });
      const t = await token(created);
      return { ...created, token: t, http: httpClient(api, t) };
    },
    async restart(whileDown) {
      await slipway.close();
      handedOver = true;
      await whileDown?.();
      return startServer({ ...options, reuse: { dataDir, database, port } });
    },
    async close() {
      if (handedOver) return;
      await slipway.close();
      await database.drop();
      fs.rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** The raw bytes of everything the database keeps on disk, for "no plain text" checks. */
export async function rawDatabaseBytes(server: TestServer): Promise<Buffer[]> {
  if (server.core.database.dialect === 'sqlite') {
    const file = server.core.database.file!;
    return [file, `${file}-wal`, `${file}-shm`].filter((f) => fs.existsSync(f)).map((f) => fs.readFileSync(f));
  }
  const dir = process.env.SLIPWAY_TEST_PG_DATA_DIR;
  if (!dir) throw new Error('SLIPWAY_TEST_PG_DATA_DIR is not set: cannot read PostgreSQL files');
  // Make sure what was written is in the data files, not only in shared buffers.
  await (await import('kysely')).sql`checkpoint`.execute(server.core.db);
  const out: Buffer[] = [];
  const walk = (d: string) => {
    for (const entry of fs.readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, entry.name);
      try {
        if (entry.isDirectory()) walk(p);
        else if (entry.isFile()) out.push(fs.readFileSync(p));
      } catch (error) {
        // Another test file may drop its database while we walk the cluster's files.
        if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
      }
    }
  };
  walk(dir);
  return out;
}

/**
 * Another node on `server`'s database, as a second `slipway serve` on another machine would be:
 * its own port and caches. On PostgreSQL it has a data directory of its own holding copies of the
 * first node's master key and bootstrap file; on SQLite it opens the same data directory (the file
 * is the database). Close it before `server`, which drops the database.
 */
export async function startSecondNode(server: TestServer, env: Record<string, string> = {}): Promise<TestServer> {
  let dataDir = server.dataDir;
  if (server.config.databaseUrl !== null) {
    dataDir = tempDir();
    for (const file of ['master.key', 'bootstrap.json']) fs.copyFileSync(path.join(server.dataDir, file), path.join(dataDir, file));
  }
  // Behind one load balancer every node has the same public URLs: a token one issued, the others accept.
  const urls = { SLIPWAY_BASE_URL: server.config.baseUrl, SLIPWAY_AUTH_URL: server.config.authUrl };
  const node = await startServer({ env: { ...urls, ...env }, reuse: { dataDir, database: { url: server.config.databaseUrl, drop: async () => {} } } });
  const close = node.close;
  return {
    ...node,
    async close() {
      // The data directory is the first node's on SQLite: only the server stops here.
      if (dataDir === server.dataDir) await node.slipway.close();
      else await close();
    },
  };
}
