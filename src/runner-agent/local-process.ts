// Local process management for the reference runner: start a service as a
// child process, wait until it is healthy, stream its output line by line and
// stop it (with what it spawned in its process group) again. Knows nothing
// about the HTTP protocol between runner and server; the runner wires it up.
//
// POSIX only: stopping relies on process groups (`detached: true` makes the
// child a group leader, `process.kill(-pid, sig)` signals the whole group).
// A process that leaves the group (setsid, setpgid) is out of reach: nothing
// short of cgroups would follow it, and the service must stop it itself.

import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { stat } from 'node:fs/promises';
import { get as httpGet } from 'node:http';
import { createServer, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { TRUNCATED } from './log-shipper.js';
import { reaperWatching, unwatchGroup, watchGroup } from './reaper.js';

export interface LaunchSpec {
  /** argv; command[0] is resolved via PATH like spawn does, no shell. */
  command: string[];
  /** Variables and secret values for the process, merged over a minimal inherited env. */
  env: Record<string, string>;
  /** Exported to the process as PORT. */
  port: number;
  /**
   * HTTP GET http://127.0.0.1:PORT{path} must answer 2xx within the timeout.
   * Without it the process only has to stay up for one second.
   */
  healthCheck?: { path: string; timeoutSeconds: number };
  /** Once healthy, it must keep running this long more; an exit within it is a LaunchError. */
  minReadySeconds?: number;
  cwd?: string;
}

export type OutputSink = (stream: 'stdout' | 'stderr', line: string) => void;

export interface ExitStatus {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface RunningProcess {
  readonly pid: number;
  readonly port: number;
  /** Settles once the process has exited and its output has been delivered; never rejects. */
  readonly exited: Promise<ExitStatus>;
  /** SIGTERM to the whole process group, SIGKILL after graceMs; resolves when it has exited. Idempotent. */
  stop(graceMs?: number): Promise<void>;
}

/** A launch that did not lead to a healthy process; `reason` is a one-line explanation for humans. */
export class LaunchError extends Error {
  override readonly name = 'LaunchError';
  readonly reason: string;
  /** How the process ended, when it started and exited on its own before becoming healthy. */
  readonly exit: ExitStatus | undefined;

  constructor(reason: string, options?: ErrorOptions & { exit?: ExitStatus }) {
    super(reason, options);
    this.reason = reason;
    this.exit = options?.exit;
  }
}

// Only what a process needs to find programs and behave sanely; everything
// else (NODE_OPTIONS, the runner's own credentials, ...) must not leak into
// deployed services.
const INHERITED_ENV = ['PATH', 'HOME', 'LANG', 'TZ', 'TMPDIR', 'SYSTEMROOT'] as const;

const DEFAULT_STOP_GRACE_MS = 5000;
// A launch that failed is not serving anyone; don't wait long to clean it up.
const FAILED_LAUNCH_GRACE_MS = 2000;
const STAY_UP_WITHOUT_HEALTH_CHECK_MS = 1000;
const HEALTH_POLL_INTERVAL_MS = 100;
const GROUP_POLL_INTERVAL_MS = 50;
// A grandchild that escaped the group (setsid) can hold the pipes open forever;
// don't let that keep `exited` pending once the process itself is gone.
const OUTPUT_DRAIN_AFTER_EXIT_MS = 500;

const MAX_LINE_BYTES = 16 * 1024;

export async function launch(spec: LaunchSpec, sink: OutputSink, signal?: AbortSignal): Promise<RunningProcess> {
  validateSpec(spec);
  if (signal?.aborted) throw abortedError(signal);
  if (spec.cwd !== undefined) await assertDirectory(spec.cwd);

  const child = spawnChild(spec);
  pipeLines(child, sink);
  await waitForSpawn(child, spec.command[0]!);

  const proc = new LocalProcess(child, spec.port);
  try {
    await waitUntilReady(proc, spec, signal);
  } catch (err) {
    await proc.stop(FAILED_LAUNCH_GRACE_MS);
    throw err;
  }
  return proc;
}

/** A port that was free a moment ago on 127.0.0.1 (the usual bind-to-0 trick; racy by nature). */
export async function freePort(): Promise<number> {
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (address === null || typeof address === 'string') throw new Error('could not determine a free port');
  return address.port;
}

/** Ports handed to processes of this runner that still run, so two of them never share one. */
export class PortPool {
  readonly #taken = new Set<number>();

  async reserve(): Promise<number> {
    for (;;) {
      const port = await freePort();
      if (!this.#taken.has(port)) {
        this.#taken.add(port);
        return port;
      }
    }
  }

  release(port: number): void {
    this.#taken.delete(port);
  }
}

/** How what runs for a key is doing: `restarting` from an exit on its own until the next process is in place. */
export interface ProcessHealth {
  state: 'running' | 'restarting';
  /**
   * Exits on its own since the first process of this tag was put in place, counting those of
   * processes started again that exited before they became healthy.
   */
  exits: number;
  lastExit: (ExitStatus & { at: string }) | null;
}

/**
 * The running process per key (e.g. service + environment). The runner puts a
 * new process in only once it is healthy, so the previous one keeps serving
 * until then.
 */
export class ProcessTable {
  readonly #processes = new Map<string, { proc: RunningProcess; tag: string; health: ProcessHealth }>();

  current(key: string): RunningProcess | undefined {
    return this.#processes.get(key)?.proc;
  }

  /** Every process in place, with its key, the tag it was put there with and how it is doing. */
  entries(): Array<{ key: string; proc: RunningProcess; tag: string; health: ProcessHealth }> {
    return [...this.#processes].map(([key, { proc, tag, health }]) => ({ key, proc, tag, health: { ...health } }));
  }

  /**
   * Puts `next` in place for `key`, with a tag saying what it runs for (the runner: its
   * deployment), then stops the previous process (awaited) and returns it. A process of the same
   * tag (started again after an exit) carries on its count of exits; another tag starts at none.
   */
  async replace(key: string, next: RunningProcess, tag = ''): Promise<RunningProcess | undefined> {
    const current = this.#processes.get(key);
    const previous = current?.proc;
    const exits = current?.tag === tag ? current.health : { exits: 0, lastExit: null };
    this.#processes.set(key, { proc: next, tag, health: { state: 'running', exits: exits.exits, lastExit: exits.lastExit } });
    if (previous === undefined || previous === next) return undefined;
    await previous.stop();
    return previous;
  }

  /** `proc`, in place for `key`, exited on its own and is to be started again; false when it is no longer in place. */
  exitedOnItsOwn(key: string, proc: RunningProcess, status: ExitStatus, at = new Date()): boolean {
    const entry = this.#processes.get(key);
    if (entry?.proc !== proc) return false;
    entry.health = { state: 'restarting', exits: entry.health.exits + 1, lastExit: { code: status.code, signal: status.signal, at: at.toISOString() } };
    return true;
  }

  /** Takes `proc` out and stops it, if it is still the one in place for `key`; false otherwise. */
  async retire(key: string, proc: RunningProcess): Promise<boolean> {
    if (this.#processes.get(key)?.proc !== proc) return false;
    this.#processes.delete(key);
    await proc.stop();
    return true;
  }

  /** What the runner calls on SIGTERM/SIGINT so no service outlives it. */
  async stopAll(): Promise<void> {
    const all = [...this.#processes.values()];
    this.#processes.clear();
    await Promise.allSettled(all.map(({ proc }) => proc.stop()));
  }
}

// ---------------------------------------------------------------------------
// Spawning

function validateSpec(spec: LaunchSpec): void {
  if (spec.command.length === 0 || spec.command[0] === '') throw new LaunchError('empty command');
  if (!Number.isInteger(spec.port) || spec.port < 1 || spec.port > 65535) {
    throw new LaunchError(`invalid port: ${spec.port}`);
  }
  const timeout = spec.healthCheck?.timeoutSeconds;
  if (timeout !== undefined && !(timeout > 0)) throw new LaunchError(`invalid health check timeout: ${timeout} s`);
}

// spawn reports a missing cwd as ENOENT of the command; check first so the
// reason names the real problem.
async function assertDirectory(cwd: string): Promise<void> {
  let isDirectory: boolean;
  try {
    isDirectory = (await stat(cwd)).isDirectory();
  } catch {
    throw new LaunchError(`working directory does not exist: ${cwd}`);
  }
  if (!isDirectory) throw new LaunchError(`working directory is not a directory: ${cwd}`);
}

function buildEnv(spec: LaunchSpec): Record<string, string> {
  const env: Record<string, string> = {};
  for (const name of INHERITED_ENV) {
    const value = process.env[name];
    if (value !== undefined) env[name] = value;
  }
  // PORT last: the runner chose the port and health-checks it, so the process must use it.
  return { ...env, ...spec.env, PORT: String(spec.port) };
}

function spawnChild(spec: LaunchSpec): ChildProcess {
  const [file, ...args] = spec.command;
  const env = buildEnv(spec);
  try {
    return spawn(file!, args, {
      cwd: spec.cwd,
      env,
      // Own process group, so stop() reaches everything the service starts that stays in it.
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
  } catch (err) {
    // Synchronous failures are argument problems, not runtime ones. Node's message quotes the
    // offending argument, which may be a secret's value (one holding a NUL character, say).
    const code = (err as { code?: string }).code;
    if (code === 'E2BIG') {
      const bytes = [...spec.command, ...Object.entries(env).map(([k, v]) => `${k}=${v ?? ''}`)].reduce((sum, s) => sum + Buffer.byteLength(s) + 1, 0);
      throw new LaunchError(`could not start ${file}: its command and environment (${bytes} bytes, or a single variable over the system's limit for one) are larger than the system allows (E2BIG); give the service fewer or smaller variables and secrets`, { cause: err });
    }
    throw new LaunchError(`could not start ${file}: its command or environment was refused${code ? ` (${code})` : ''}; no argument or variable may hold a NUL character`, { cause: err });
  }
}

async function waitForSpawn(child: ChildProcess, file: string): Promise<void> {
  try {
    await once(child, 'spawn');
  } catch (err) {
    throw new LaunchError(spawnFailureReason(err, file), { cause: err });
  }
  // From here on errors (e.g. a failed kill) must not crash the runner as unhandled 'error' events.
  child.on('error', () => {});
}

function spawnFailureReason(err: unknown, file: string): string {
  switch ((err as NodeJS.ErrnoException).code) {
    case 'ENOENT':
      return `command not found: ${file}`;
    case 'EACCES':
      return `command not executable: ${file}`;
    default:
      return `could not start ${file}: ${errorMessage(err)}`;
  }
}

// ---------------------------------------------------------------------------
// Readiness

/**
 * The process's readiness (`check`, given a signal that ends once the race is decided) against its
 * exit (`exited` says how that reads) and the caller's abort, whose listener is taken off after.
 */
async function raceForReadiness(proc: LocalProcess, signal: AbortSignal | undefined, check: (done: AbortSignal) => Promise<void>, exited: (status: ExitStatus) => string): Promise<void> {
  const done = new AbortController();
  let onAbort: (() => void) | undefined;
  const aborted = new Promise<never>((_, reject) => {
    onAbort = () => reject(abortedError(signal));
    if (signal?.aborted) onAbort();
    else signal?.addEventListener('abort', onAbort, { once: true });
  });
  try {
    await Promise.race([
      check(done.signal),
      proc.leaderExit.then((status) => {
        throw new LaunchError(exited(status), { exit: status });
      }),
      aborted,
    ]);
  } finally {
    if (onAbort !== undefined) signal?.removeEventListener('abort', onAbort);
    done.abort();
  }
  // Exit and readiness may land in the same tick; a dead process is never ready.
  if (proc.hasExited) {
    const status = await proc.leaderExit;
    throw new LaunchError(exited(status), { exit: status });
  }
}

async function waitUntilReady(proc: LocalProcess, spec: LaunchSpec, signal: AbortSignal | undefined): Promise<void> {
  await raceForReadiness(proc, signal, (done) => readinessCheck(spec, done), (status) => `${describeExit(status)} before becoming healthy`);
  // Healthy, it keeps running for minReadySeconds more, or that is why it failed.
  const seconds = spec.minReadySeconds;
  if (seconds === undefined) return;
  const healthyAt = Date.now();
  await raceForReadiness(proc, signal, (done) => sleep(seconds * 1000, undefined, { signal: done }),
    (status) => `${describeExit(status)} ${((Date.now() - healthyAt) / 1000).toFixed(1)} s after becoming healthy, within the ${seconds} s it had to keep running (minReadySeconds)`);
}

async function readinessCheck(spec: LaunchSpec, signal: AbortSignal): Promise<void> {
  if (spec.healthCheck === undefined) {
    await sleep(STAY_UP_WITHOUT_HEALTH_CHECK_MS, undefined, { signal });
    return;
  }
  await pollHealth(spec.port, spec.healthCheck.path, spec.healthCheck.timeoutSeconds, signal);
}

async function pollHealth(port: number, rawPath: string, timeoutSeconds: number, signal: AbortSignal): Promise<void> {
  const path = rawPath.startsWith('/') ? rawPath : `/${rawPath}`;
  const deadline = Date.now() + timeoutSeconds * 1000;
  let last: ProbeFailure | undefined;
  for (;;) {
    const remaining = deadline - Date.now();
    if (remaining <= 0) break;
    // One probe may take what is left of the timeout: an endpoint that answers slowly still answers.
    const result = await probe(port, path, remaining, signal);
    if (result.ok) return;
    // A probe that the deadline cut short says less than an answer before it (an HTTP 500, say),
    // but more than a connection that failed before it: the process listens now, and does not answer.
    if (!(result.timedOut && last?.answered)) last = result;
    const wait = Math.min(HEALTH_POLL_INTERVAL_MS, deadline - Date.now());
    if (wait > 0) await sleep(wait, undefined, { signal });
  }
  throw new LaunchError(
    `health check GET ${path} on port ${port} did not answer 2xx within ${timeoutSeconds} s (last: ${last?.detail ?? 'no attempt'})`,
  );
}

/** `answered`: the process sent an HTTP answer (not 2xx). */
type ProbeFailure = { ok: false; detail: string; answered?: boolean; timedOut?: boolean };
type ProbeResult = { ok: true } | ProbeFailure;

function probe(port: number, path: string, timeoutMs: number, signal: AbortSignal): Promise<ProbeResult> {
  return new Promise((settle) => {
    // The whole probe is bounded, not only its silences: an endpoint that trickles its answer a
    // byte at a time must not hold a deployment in progress for as long as it keeps trickling.
    const timer = setTimeout(() => {
      resolve({ ok: false, detail: `no response within ${timeoutMs} ms`, timedOut: true });
      req.destroy();
    }, timeoutMs);
    const resolve = (result: ProbeResult) => {
      clearTimeout(timer);
      settle(result);
    };
    // agent: false → one connection per probe, closed afterwards; nothing pooled to a process we may kill.
    const req = httpGet({ host: '127.0.0.1', port, path, agent: false, signal }, (res) => {
      res.resume();
      const status = res.statusCode ?? 0;
      resolve(status >= 200 && status < 300 ? { ok: true } : { ok: false, detail: `HTTP ${status}`, answered: true });
    });
    // 101 Switching Protocols is no answer to a health check (and without this, no answer at all).
    req.on('upgrade', (res, socket) => {
      socket.destroy();
      resolve({ ok: false, detail: `HTTP ${res.statusCode ?? 101} (a protocol switch, not an answer)`, answered: true });
    });
    req.on('error', (err) => resolve({ ok: false, detail: describeConnectError(err) }));
  });
}

function describeConnectError(err: NodeJS.ErrnoException): string {
  switch (err.code) {
    case 'ECONNREFUSED':
      return 'connection refused';
    case 'ECONNRESET':
      return 'connection reset';
    default:
      return err.code ?? err.message;
  }
}

function describeExit({ code, signal }: ExitStatus): string {
  return signal !== null ? `process was killed by ${signal}` : `process exited with code ${code}`;
}

function abortedError(signal: AbortSignal | undefined): LaunchError {
  return new LaunchError('launch was aborted', { cause: signal?.reason });
}

// ---------------------------------------------------------------------------
// The running process

class LocalProcess implements RunningProcess {
  readonly pid: number;
  readonly port: number;
  readonly exited: Promise<ExitStatus>;
  /** Settles as soon as the group leader exits, without waiting for its output to drain. */
  readonly leaderExit: Promise<ExitStatus>;
  #hasExited = false;
  #stopping: Promise<void> | undefined;

  constructor(child: ChildProcess, port: number) {
    this.pid = child.pid!;
    this.port = port;
    this.leaderExit = new Promise((resolve) => {
      child.once('exit', (code, signal) => {
        this.#hasExited = true;
        forgetGroup(this.pid);
        resolve({ code, signal });
      });
    });
    const closed = once(child, 'close').then(() => undefined);
    this.exited = this.leaderExit.then(async (status) => {
      const drained = new AbortController();
      await Promise.race([closed, sleep(OUTPUT_DRAIN_AFTER_EXIT_MS, undefined, { signal: drained.signal }).catch(() => undefined)]);
      drained.abort();
      // A process that escaped the group and inherited the pipes may write on: it is still read
      // (closing the pipes would kill it with SIGPIPE at its next write), but no longer keeps the
      // runner itself from exiting.
      for (const stream of [child.stdout, child.stderr]) (stream as Socket | null)?.unref();
      return status;
    });
    rememberGroup(this.pid);
  }

  get hasExited(): boolean {
    return this.#hasExited;
  }

  stop(graceMs = DEFAULT_STOP_GRACE_MS): Promise<void> {
    this.#stopping ??= this.#terminate(graceMs);
    return this.#stopping;
  }

  async #terminate(graceMs: number): Promise<void> {
    const deadline = Date.now() + graceMs;
    // The runner stays up until the group is gone: once its leader has exited, nothing else may be
    // keeping the event loop alive while the rest of the group is waited for (a runner stopping
    // would then exit halfway, without releasing or giving back its deployments).
    const keepAlive = setInterval(() => undefined, 1000);
    try {
      // Also after the leader exited on its own: its group may still hold orphans (e.g. a worker holding the port).
      signalGroup(this.pid, 'SIGTERM');
      await Promise.race([this.leaderExit, sleep(graceMs, undefined, { ref: false })]);
      // The leader may go quickly while children that also got SIGTERM are still shutting down: they get the rest of the grace.
      while (this.#hasExited && groupAlive(this.pid) && Date.now() < deadline) {
        await sleep(GROUP_POLL_INTERVAL_MS, undefined, { ref: false });
      }
      if (!this.#hasExited || groupAlive(this.pid)) signalGroup(this.pid, 'SIGKILL');
      await this.exited;
      unwatchGroup(this.pid);
    } finally {
      clearInterval(keepAlive);
    }
  }
}

function signalGroup(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(-pid, sig);
  } catch {
    // ESRCH: the whole group is gone already, which is what we want.
  }
}

function groupAlive(pid: number): boolean {
  try {
    process.kill(-pid, 0);
    return true;
  } catch (err) {
    // EPERM means something exists in the group that we may not signal.
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

// Runner exits that skip stopAll() (process.exit(), an uncaught exception):
// SIGTERM to the groups of leaders still running, and the reaper, which sees
// the runner gone, sends SIGKILL 5 s later (at once, when there is no reaper).
// SIGTERM/SIGINT don't run 'exit' handlers, hence ProcessTable.stopAll();
// nothing runs on SIGKILL, hence the reaper (reaper.ts), which also stops
// groups whose leader exited first.
const liveGroups = new Set<number>();
let exitHookInstalled = false;

function rememberGroup(pid: number): void {
  liveGroups.add(pid);
  watchGroup(pid);
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    process.on('exit', () => {
      const signal = reaperWatching() ? 'SIGTERM' : 'SIGKILL';
      for (const group of liveGroups) signalGroup(group, signal);
    });
  }
}

function forgetGroup(pid: number): void {
  liveGroups.delete(pid);
}

// ---------------------------------------------------------------------------
// Output

function pipeLines(child: ChildProcess, sink: OutputSink): void {
  for (const stream of ['stdout', 'stderr'] as const) {
    const readable = child[stream]!;
    const splitter = new LineSplitter((line) => deliver(sink, stream, line));
    readable.on('data', (chunk: Buffer) => splitter.push(chunk));
    // 'end' on a normal close; 'close' also covers a stream destroyed by an error.
    readable.once('end', () => splitter.end());
    readable.once('close', () => splitter.end());
  }
}

let sinkWarningShown = false;

// A throwing sink must neither crash the runner from inside a stream event
// nor stop the rest of the output from being delivered.
function deliver(sink: OutputSink, stream: 'stdout' | 'stderr', line: string): void {
  try {
    sink(stream, line);
  } catch (err) {
    if (!sinkWarningShown) {
      sinkWarningShown = true;
      process.emitWarning(`output sink threw: ${errorMessage(err)}`);
    }
  }
}

/**
 * Splits a byte stream into lines. Works on bytes rather than strings so a
 * multi-byte character split across chunks is never mangled (0x0A never occurs
 * inside a UTF-8 sequence) and the cap is in bytes. Lines longer than
 * MAX_LINE_BYTES are cut there and the rest up to the newline is dropped, so a
 * process writing without newlines can't grow the runner's memory.
 */
class LineSplitter {
  #parts: Buffer[] = [];
  #length = 0;
  #discarding = false;
  #ended = false;

  constructor(private readonly emit: (line: string) => void) {}

  push(chunk: Buffer): void {
    let start = 0;
    while (start < chunk.length) {
      const newline = chunk.indexOf(0x0a, start);
      this.#append(chunk.subarray(start, newline === -1 ? chunk.length : newline));
      if (newline === -1) return;
      this.#finishLine();
      start = newline + 1;
    }
  }

  /** Delivers a trailing line that had no newline; later calls do nothing. */
  end(): void {
    if (this.#ended) return;
    this.#ended = true;
    if (this.#length > 0) this.#finishLine();
  }

  #append(piece: Buffer): void {
    if (this.#discarding || piece.length === 0) return;
    if (this.#length + piece.length <= MAX_LINE_BYTES) {
      this.#parts.push(piece);
      this.#length += piece.length;
      return;
    }
    const room = MAX_LINE_BYTES - Buffer.byteLength(TRUNCATED);
    const head = Buffer.concat([...this.#parts, piece.subarray(0, Math.max(0, room - this.#length))]);
    this.emit(head.subarray(0, utf8Boundary(head, room)).toString('utf8') + TRUNCATED);
    this.#reset();
    this.#discarding = true;
  }

  #finishLine(): void {
    if (this.#discarding) {
      // The truncated head of this line was emitted already.
      this.#discarding = false;
      return;
    }
    let line = Buffer.concat(this.#parts, this.#length).toString('utf8');
    if (line.endsWith('\r')) line = line.slice(0, -1);
    this.#reset();
    this.emit(line);
  }

  #reset(): void {
    this.#parts = [];
    this.#length = 0;
  }
}

/** The largest cut ≤ limit that doesn't split a UTF-8 character. */
function utf8Boundary(buf: Buffer, limit: number): number {
  let cut = Math.min(limit, buf.length);
  // Continuation bytes look like 10xxxxxx; back off to the start of their character.
  while (cut > 0 && cut < buf.length && (buf[cut]! & 0xc0) === 0x80) cut--;
  return cut;
}

function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
