// Throwaway PostgreSQL clusters for tests, benchmarks and local development.
//
// A cluster lives entirely in a fresh temporary directory (data dir, server
// log and unix socket), listens on 127.0.0.1 only, trusts every connection and
// trades durability for speed. Nothing outside that directory is touched, so
// it is safe next to a system PostgreSQL and leaves nothing behind.
//
// Library use:
//   const pg = await startThrowawayPostgres({ log: console.error });
//   const url = await createDatabase(pg.adminUrl, 'my_test_db');
//   ...
//   await pg.stop();
//
// Standalone use (prints the URL, runs until SIGINT/SIGTERM):
//   node scripts/postgres.mjs

import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const SUPERUSER = 'slipway';
// PostgreSQL refuses to run as root, so as root we drop to this system user.
const UNPRIVILEGED_USER = 'postgres';
// pg_ctl's own wait limit for startup/shutdown, in seconds.
const PG_CTL_TIMEOUT_S = 60;
// Unix socket paths are limited to ~107 bytes (sun_path); leave headroom for
// the "/.s.PGSQL.NNNNN" suffix PostgreSQL appends.
const MAX_SOCKET_DIR_LENGTH = 90;
const START_ATTEMPTS = 3;

// ---------------------------------------------------------------------------
// Locating binaries
// ---------------------------------------------------------------------------

function isExecutableFile(file) {
  try {
    if (!fs.statSync(file).isFile()) return false;
    fs.accessSync(file, fs.constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

function findOnPath(name, extraDirs = []) {
  const dirs = (process.env.PATH ?? '').split(path.delimiter).filter(Boolean).concat(extraDirs);
  for (const dir of dirs) {
    const candidate = path.join(dir, name);
    if (isExecutableFile(candidate)) return candidate;
  }
  return null;
}

// Debian/Ubuntu install server binaries outside PATH, one directory per major
// version; the newest is the most likely to be the one people expect.
function debianVersionedBinDirs() {
  const root = '/usr/lib/postgresql';
  let versions;
  try {
    versions = fs.readdirSync(root);
  } catch {
    return [];
  }
  return versions
    .filter((v) => /^\d+(\.\d+)?$/.test(v))
    .sort((a, b) => Number(b) - Number(a))
    .map((v) => path.join(root, v, 'bin'));
}

/**
 * Locate a PostgreSQL program (`initdb`, `pg_ctl`, `postgres`, ...): first on
 * PATH, then under /usr/lib/postgresql/<version>/bin, newest version first.
 * Returns the absolute path, or null when it is not installed.
 */
export function findPostgresBin(name) {
  return findOnPath(name) ?? findOnPath(name, debianVersionedBinDirs()) ?? null;
}

// initdb and pg_ctl must come from the same installation as each other (and
// they find `postgres` next to themselves), so once initdb is known, prefer the
// directory it really lives in over whatever else PATH offers.
function findServerBinaries() {
  const initdb = findPostgresBin('initdb');
  if (!initdb) {
    throw new Error(
      'PostgreSQL server binaries not found: no `initdb` on PATH or under /usr/lib/postgresql/*/bin ' +
        '(install the PostgreSQL server package, e.g. postgresql-15).',
    );
  }
  const home = path.dirname(fs.realpathSync(initdb));
  const sibling = (name) => {
    const candidate = path.join(home, name);
    return isExecutableFile(candidate) ? candidate : findPostgresBin(name);
  };
  const pgCtl = sibling('pg_ctl');
  const postgres = sibling('postgres');
  const missing = [!pgCtl && 'pg_ctl', !postgres && 'postgres'].filter(Boolean);
  if (missing.length > 0) {
    throw new Error(`PostgreSQL server binaries incomplete: found ${initdb} but not ${missing.join(', ')}.`);
  }
  return { initdb, pgCtl };
}

// ---------------------------------------------------------------------------
// Running PostgreSQL programs as the right user
// ---------------------------------------------------------------------------

function isRoot() {
  return typeof process.getuid === 'function' && process.getuid() === 0;
}

function lookupId(flag, user) {
  const res = spawnSync('id', [flag, user], { encoding: 'utf8' });
  const id = Number.parseInt(res.stdout ?? '', 10);
  return res.status === 0 && Number.isInteger(id) ? id : null;
}

// Builds a function mapping (program, args) to the actual command to spawn.
// As root everything goes through runuser (or setpriv where runuser is
// missing) so that initdb/pg_ctl/postgres run as the unprivileged user.
function commandWrapper() {
  if (!isRoot()) return { wrap: (cmd, args) => [cmd, args], owner: null };

  const uid = lookupId('-u', UNPRIVILEGED_USER);
  const gid = lookupId('-g', UNPRIVILEGED_USER);
  if (uid === null || gid === null) {
    throw new Error(
      `PostgreSQL cannot run as root, and there is no '${UNPRIVILEGED_USER}' system user to run it as ` +
        '(create one, or run the tests as a non-root user).',
    );
  }
  // sbin is often missing from PATH even for root (e.g. in containers).
  const sbin = ['/usr/sbin', '/sbin', '/usr/bin', '/bin'];
  const runuser = findOnPath('runuser', sbin);
  if (runuser) {
    return { wrap: (cmd, args) => [runuser, ['-u', UNPRIVILEGED_USER, '--', cmd, ...args]], owner: { uid, gid } };
  }
  const setpriv = findOnPath('setpriv', sbin);
  if (setpriv) {
    return {
      wrap: (cmd, args) => [setpriv, [`--reuid=${uid}`, `--regid=${gid}`, '--init-groups', cmd, ...args]],
      owner: { uid, gid },
    };
  }
  throw new Error(
    `PostgreSQL cannot run as root and neither runuser nor setpriv is available to switch to '${UNPRIVILEGED_USER}'.`,
  );
}

// The developer's PG* variables (PGDATA, PGPORT, PGOPTIONS, ...) would
// otherwise leak into initdb/pg_ctl and could point them at another cluster;
// a C locale keeps messages parseable and avoids "invalid locale" failures on
// machines whose LANG names a locale that is not installed.
function childEnv() {
  const env = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (!key.startsWith('PG') && !key.startsWith('LC_')) env[key] = value;
  }
  env.LANG = 'C';
  env.LC_ALL = 'C';
  return env;
}

function run(wrapper, cmd, args, { cwd, detached = false }) {
  const [file, argv] = wrapper.wrap(cmd, args);
  return new Promise((resolve) => {
    // pg_ctl is started with -l, so the postmaster it forks writes to the log
    // file rather than inheriting these pipes; 'close' therefore fires as soon
    // as pg_ctl itself is done.
    const child = spawn(file, argv, { cwd, detached, env: childEnv(), stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (chunk) => (output += chunk));
    child.stderr.on('data', (chunk) => (output += chunk));
    child.on('error', (err) => resolve({ code: null, output: `${output}${err.message}\n` }));
    child.on('close', (code, signal) => resolve({ code, signal, output }));
  });
}

function runSync(wrapper, cmd, args, { cwd }) {
  const [file, argv] = wrapper.wrap(cmd, args);
  return spawnSync(file, argv, { cwd, env: childEnv(), stdio: 'ignore', timeout: (PG_CTL_TIMEOUT_S + 5) * 1000 });
}

// ---------------------------------------------------------------------------
// Cleanup on process exit
// ---------------------------------------------------------------------------

// Every cluster that may have a running postmaster, mapped to its synchronous
// stop. pg_ctl detaches the postmaster into its own session, so nothing but
// this registry stops it if our process goes away.
const liveClusters = new Map();
const EXIT_SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP'];

function stopAllSync() {
  for (const stopSync of [...liveClusters.values()]) stopSync();
}

function onSignal(signal) {
  // Another listener (e.g. the test runner) owns shutdown for this signal and
  // will exit in its own time, at which point the 'exit' hook still runs.
  if (process.listenerCount(signal) > 1) return;
  // Otherwise we are the only reason the default "terminate" did not happen:
  // clean up, then re-raise so the process dies exactly as it would have.
  stopAllSync();
  uninstallExitHooks();
  process.kill(process.pid, signal);
}

function installExitHooks() {
  if (liveClusters.size > 0) return;
  process.on('exit', stopAllSync);
  for (const signal of EXIT_SIGNALS) process.on(signal, onSignal);
}

function uninstallExitHooks() {
  process.off('exit', stopAllSync);
  for (const signal of EXIT_SIGNALS) process.off(signal, onSignal);
}

function register(key, stopSync) {
  installExitHooks();
  liveClusters.set(key, stopSync);
}

function unregister(key) {
  liveClusters.delete(key);
  if (liveClusters.size === 0) uninstallExitHooks();
}

// ---------------------------------------------------------------------------
// Starting and stopping a cluster
// ---------------------------------------------------------------------------

async function findFreePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

function fileSize(file) {
  try {
    return fs.statSync(file).size;
  } catch {
    return 0;
  }
}

// The last `lines` lines written to `file` after byte offset `from`, so that
// a failed attempt is judged by its own log output, not an earlier one's.
function readTail(file, { from = 0, lines = 40 } = {}) {
  try {
    const text = fs.readFileSync(file).subarray(from).toString('utf8').trimEnd();
    return text ? text.split('\n').slice(-lines).join('\n') : '(server log is empty)';
  } catch {
    return '(no server log)';
  }
}

function indent(text) {
  return text
    .trimEnd()
    .split('\n')
    .map((line) => `    ${line}`)
    .join('\n');
}

function quoteConfString(value) {
  return `'${value.replace(/\\/g, '\\\\').replace(/'/g, "''")}'`;
}

function removeDir(dir) {
  try {
    fs.rmSync(dir, { recursive: true, force: true, maxRetries: 3 });
  } catch {
    // Best effort: a leftover temp dir is harmless, an exception during
    // shutdown would hide the real result.
  }
}

// Last resort when pg_ctl could not stop the server (e.g. the data dir was
// damaged): SIGQUIT is PostgreSQL's "immediate shutdown" signal.
function killPostmaster(dataDir) {
  try {
    const pid = Number.parseInt(fs.readFileSync(path.join(dataDir, 'postmaster.pid'), 'utf8'), 10);
    if (Number.isInteger(pid) && pid > 0) process.kill(pid, 'SIGQUIT');
  } catch {
    // No pid file or no such process: nothing is running.
  }
}

/**
 * Start a fresh, empty PostgreSQL cluster in a temporary directory.
 *
 * Resolves to { url, adminUrl, port, dir, stop }:
 *   url / adminUrl  superuser connection to the `postgres` maintenance
 *                   database (postgres://slipway@127.0.0.1:PORT/postgres);
 *                   create per-test databases from it with createDatabase().
 *   stop()          stops the server and deletes the directory; idempotent.
 *
 * The cluster is also stopped automatically when the process exits.
 * Rejects with an Error explaining why PostgreSQL is unavailable.
 */
export async function startThrowawayPostgres({ log = () => {} } = {}) {
  const { initdb, pgCtl } = findServerBinaries();
  const wrapper = commandWrapper();

  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'slipway-pg-'));
  const dataDir = path.join(dir, 'data');
  const logFile = path.join(dir, 'postgres.log');
  // Run everything from inside the temp dir: as the unprivileged user the
  // caller's cwd (e.g. /root) may be unreadable, which PostgreSQL warns about.
  const opts = { cwd: dir };
  const key = Symbol(dir);

  const stopArgs = ['stop', '-D', dataDir, '-m', 'immediate', '-w', '-t', String(PG_CTL_TIMEOUT_S)];
  // `done` flips only once the server is down and the directory gone, so if
  // the process exits while an async stop() is still in flight, the exit hook
  // (still registered) finishes the job synchronously.
  let done = false;
  const finish = () => {
    done = true;
    unregister(key);
    removeDir(dir);
  };
  const stopSync = () => {
    if (done) return;
    if (runSync(wrapper, pgCtl, stopArgs, opts).status !== 0) killPostmaster(dataDir);
    finish();
  };
  let stopPromise = null;
  const stop = () => {
    stopPromise ??= (async () => {
      if (done) return;
      log(`postgres: stopping cluster in ${dir}`);
      // Detached, so that a second Ctrl-C on the terminal (delivered to our
      // whole process group) cannot kill pg_ctl halfway through the stop.
      const res = await run(wrapper, pgCtl, stopArgs, { ...opts, detached: true });
      if (done) return;
      if (res.code !== 0 && fs.existsSync(path.join(dataDir, 'postmaster.pid'))) {
        const why = res.signal ? `killed by ${res.signal}` : `exit code ${res.code}`;
        log(`postgres: pg_ctl stop failed (${why}), killing postmaster:\n${indent(res.output)}`);
        killPostmaster(dataDir);
      }
      finish();
    })();
    return stopPromise;
  };

  // From here on any failure must not leave the directory (or a server) behind.
  register(key, stopSync);
  try {
    if (wrapper.owner) fs.chownSync(dir, wrapper.owner.uid, wrapper.owner.gid);

    log(`postgres: initdb in ${dataDir}`);
    const init = await run(
      wrapper,
      initdb,
      ['-D', dataDir, '-U', SUPERUSER, '--auth=trust', '--encoding=UTF8', '--no-locale', '--no-sync'],
      opts,
    );
    if (init.code !== 0) {
      const hint = wrapper.owner ? ` (running as '${UNPRIVILEGED_USER}'; is ${os.tmpdir()} accessible to it?)` : '';
      throw new Error(`PostgreSQL unavailable: initdb failed${hint}:\n${indent(init.output)}`);
    }

    // Fixed settings go into postgresql.conf rather than `pg_ctl -o`, because
    // pg_ctl passes -o through a shell and the socket path would need quoting;
    // only the port, which changes per attempt, is passed with -o. Where the
    // temp path is too long for a unix socket (some macOS TMPDIRs), the
    // cluster is simply TCP-only: the URLs never use the socket.
    const socketDir = dir.length <= MAX_SOCKET_DIR_LENGTH ? dir : '';
    const settings = {
      listen_addresses: quoteConfString('127.0.0.1'),
      unix_socket_directories: quoteConfString(socketDir),
      max_connections: '300',
      // Durability is worthless for a cluster deleted after the run.
      fsync: 'off',
      synchronous_commit: 'off',
      full_page_writes: 'off',
    };
    const conf = Object.entries(settings)
      .map(([name, value]) => `${name} = ${value}`)
      .join('\n');
    fs.appendFileSync(path.join(dataDir, 'postgresql.conf'), `\n# slipway throwaway cluster\n${conf}\n`);

    // The free port can be taken by someone else between probing and
    // binding; if so, simply try another one.
    for (let attempt = 1; ; attempt++) {
      const port = await findFreePort();
      log(`postgres: starting on 127.0.0.1:${port}`);
      const logOffset = fileSize(logFile);
      const start = await run(
        wrapper,
        pgCtl,
        ['start', '-D', dataDir, '-l', logFile, '-w', '-t', String(PG_CTL_TIMEOUT_S), '-o', `-p ${port}`],
        opts,
      );
      if (start.code === 0) {
        const url = `postgres://${SUPERUSER}@127.0.0.1:${port}/postgres`;
        log(`postgres: ready at ${url}`);
        return { url, adminUrl: url, port, dir, stop };
      }
      const serverLog = readTail(logFile, { from: logOffset });
      if (attempt < START_ATTEMPTS && /could not bind|address already in use/i.test(serverLog)) {
        log(`postgres: port ${port} was taken, retrying`);
        continue;
      }
      throw new Error(
        `PostgreSQL unavailable: pg_ctl start failed:\n${indent(start.output)}\n  server log (${logFile}):\n${indent(serverLog)}`,
      );
    }
  } catch (err) {
    stopSync();
    throw err;
  }
}

// ---------------------------------------------------------------------------
// Per-test databases
// ---------------------------------------------------------------------------

function quoteIdent(name) {
  if (typeof name !== 'string' || name.length === 0) throw new Error('database name must be a non-empty string');
  // PostgreSQL silently truncates longer identifiers, which could make two
  // test databases collide.
  if (Buffer.byteLength(name) > 63) throw new Error(`database name too long (max 63 bytes): ${name}`);
  return `"${name.replace(/"/g, '""')}"`;
}

/** The URL of database `name` on the same server (and with the same credentials) as `adminUrl`. */
export function databaseUrl(adminUrl, name) {
  const url = new URL(adminUrl);
  url.pathname = `/${encodeURIComponent(name)}`;
  return url.toString();
}

async function withAdminClient(adminUrl, fn) {
  // Imported lazily so that merely starting a cluster does not need `pg`.
  const { default: pg } = await import('pg');
  const client = new pg.Client({ connectionString: adminUrl });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

/** CREATE DATABASE "name" on the server behind `adminUrl`; resolves to the new database's URL. */
export async function createDatabase(adminUrl, name) {
  const ident = quoteIdent(name);
  await withAdminClient(adminUrl, (client) => client.query(`CREATE DATABASE ${ident}`));
  return databaseUrl(adminUrl, name);
}

/** DROP DATABASE IF EXISTS "name", disconnecting any clients a test left open. */
export async function dropDatabase(adminUrl, name) {
  const ident = quoteIdent(name);
  await withAdminClient(adminUrl, async (client) => {
    try {
      await client.query(`DROP DATABASE IF EXISTS ${ident} WITH (FORCE)`);
    } catch (err) {
      // WITH (FORCE) needs PostgreSQL 13+; a developer-provided older server
      // gets the plain form.
      if (err?.code !== '42601') throw err;
      await client.query(`DROP DATABASE IF EXISTS ${ident}`);
    }
  });
}

// ---------------------------------------------------------------------------
// Standalone: node scripts/postgres.mjs
// ---------------------------------------------------------------------------

function isMainModule() {
  if (!process.argv[1]) return false;
  try {
    return fs.realpathSync(process.argv[1]) === fs.realpathSync(fileURLToPath(import.meta.url));
  } catch {
    return false;
  }
}

async function main() {
  const log = (message) => process.stderr.write(`${message}\n`);
  let cluster;
  try {
    cluster = await startThrowawayPostgres({ log });
  } catch (err) {
    log(err.message);
    process.exit(1);
  }
  // The URL alone on stdout, so scripts can capture it; chatter goes to stderr.
  process.stdout.write(`${cluster.url}\n`);
  log('PostgreSQL is running; press Ctrl-C (or send SIGTERM) to stop it.');

  // Nothing else keeps the event loop alive while we wait for a signal.
  const keepAlive = setInterval(() => {}, 1 << 30);
  const shutdown = async (signal) => {
    clearInterval(keepAlive);
    await cluster.stop();
    log(`PostgreSQL stopped (${signal}).`);
    // A requested stop is the normal way to end this program, not a failure.
    process.exit(0);
  };
  // Handlers stay installed so that an impatient second Ctrl-C cannot
  // interrupt the cleanup halfway.
  let stopping = false;
  const handleSignal = (signal) => {
    if (stopping) return;
    stopping = true;
    shutdown(signal);
  };
  process.on('SIGINT', handleSignal);
  process.on('SIGTERM', handleSignal);
}

if (isMainModule()) await main();
