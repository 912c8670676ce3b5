// Child processes of the benchmark: start (optionally pinned to one CPU with
// taskset), log to a file, stop, and make sure none outlives the run. Every
// process started here is registered; stopAll() ends them in `finally`, an
// 'exit' hook SIGKILLs stragglers, and a small reaper process kills them if the
// orchestrator itself dies without running either.

import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** dist/bench */
export const BENCH_DIST_DIR = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
/** The repository root (dist/bench/../..). */
export const REPO_ROOT = path.resolve(BENCH_DIST_DIR, '..', '..');

export interface ProcessExit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface StartProcessOptions {
  name: string;
  /** Arguments to `node`: the script and its arguments. */
  args: string[];
  cwd?: string;
  env?: NodeJS.ProcessEnv;
  /** stdout and stderr go here (appended). */
  logFile: string;
  /** Pin to this CPU when pinning is enabled. */
  cpu?: number;
  /** Open an IPC channel (for our own child scripts). */
  ipc?: boolean;
}

export class ManagedProcess {
  readonly exited: Promise<ProcessExit>;
  private exit: ProcessExit | undefined;

  constructor(
    readonly name: string,
    readonly child: ChildProcess,
    readonly logFile: string,
  ) {
    this.exited = new Promise((resolve) => {
      child.once('exit', (code, signal) => {
        this.exit = { code, signal };
        live.delete(this);
        if (child.pid !== undefined && reaper?.connected) reaper.send({ op: 'remove', pid: child.pid });
        resolve(this.exit);
      });
    });
  }

  get pid(): number {
    return this.child.pid ?? -1;
  }

  exitInfo(): ProcessExit | undefined {
    return this.exit;
  }

  describeExit(): string {
    const e = this.exit;
    if (!e) return `${this.name} is running`;
    return `${this.name} exited (${e.signal ? `signal ${e.signal}` : `code ${e.code}`})`;
  }

  /** SIGTERM, then SIGKILL after graceMs. Resolves when the process is gone. */
  async stop(graceMs = 5000): Promise<ProcessExit> {
    if (this.exit) return this.exit;
    this.child.kill('SIGTERM');
    let timer: NodeJS.Timeout | undefined;
    const killed = new Promise<void>((resolve) => {
      timer = setTimeout(() => {
        if (!this.exit) this.child.kill('SIGKILL');
        resolve();
      }, graceMs);
    });
    await Promise.race([this.exited, killed]);
    clearTimeout(timer);
    return this.exited;
  }
}

const live = new Set<ManagedProcess>();
let pinning = false;
let shuttingDown = false;
let reaper: ChildProcess | undefined;

export function setPinning(enabled: boolean): void {
  pinning = enabled;
}

export function tasksetAvailable(): boolean {
  const dirs = (process.env.PATH ?? '').split(path.delimiter).filter(Boolean);
  return dirs.some((dir) => {
    try {
      fs.accessSync(path.join(dir, 'taskset'), fs.constants.X_OK);
      return true;
    } catch {
      return false;
    }
  });
}

export function startProcess(opts: StartProcessOptions): ManagedProcess {
  if (shuttingDown) throw new Error('the benchmark is shutting down');
  fs.mkdirSync(path.dirname(opts.logFile), { recursive: true });
  const fd = fs.openSync(opts.logFile, 'a');
  let command = process.execPath;
  let args = opts.args;
  if (pinning && opts.cpu !== undefined) {
    // taskset execs node, so the pid (and the IPC fd) are node's own.
    command = 'taskset';
    args = ['-c', String(opts.cpu), process.execPath, ...opts.args];
  }
  let child: ChildProcess;
  try {
    child = spawn(command, args, {
      cwd: opts.cwd ?? REPO_ROOT,
      env: opts.env ?? process.env,
      stdio: opts.ipc ? ['ignore', fd, fd, 'ipc'] : ['ignore', fd, fd],
    });
  } finally {
    fs.closeSync(fd);
  }
  const managed = new ManagedProcess(opts.name, child, opts.logFile);
  // Without this, a failed spawn would be an unhandled 'error' event.
  child.on('error', (err) => fs.appendFileSync(opts.logFile, `\n[bench] spawn error: ${err.message}\n`));
  if (child.pid !== undefined) {
    live.add(managed);
    if (reaper?.connected) reaper.send({ op: 'add', pid: child.pid });
  }
  return managed;
}

/** Stop every process still running (SIGTERM, then SIGKILL); with `final`, refuse to start new ones. */
export async function stopAll(graceMs = 5000, final = false): Promise<void> {
  if (final) shuttingDown = true;
  await Promise.all([...live].map((p) => p.stop(graceMs)));
}

/** Last lines of a log file, for failure messages. */
export function tail(file: string, lines = 6): string {
  try {
    const text = fs.readFileSync(file, 'utf8').trimEnd();
    return text.split('\n').slice(-lines).join('\n');
  } catch {
    return '';
  }
}

/**
 * Arm the safety nets: SIGKILL everything on process exit, and a reaper child
 * that does the same if this process dies without running its exit hooks.
 */
export function armCleanup(): void {
  process.on('exit', () => {
    for (const p of live) p.child.kill('SIGKILL');
  });
  const r = spawn(process.execPath, [path.join(BENCH_DIST_DIR, 'lib', 'reaper.js')], {
    stdio: ['ignore', 'ignore', 'ignore', 'ipc'],
  });
  r.on('error', () => undefined);
  // Never let the reaper keep this process alive.
  r.unref();
  (r.channel as { unref?: () => void } | undefined)?.unref?.();
  reaper = r;
}

export function disarmReaper(): void {
  if (reaper?.connected) reaper.disconnect();
  reaper = undefined;
}

export { freePort } from '../../src/runner-agent/local-process.js';

/** CPU seconds (user + system, all threads) used so far by a Linux process. */
export function processCpuSeconds(pid: number): number | undefined {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after "(comm)": state is field 3, utime 14, stime 15.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const ticks = Number(fields[11]) + Number(fields[12]);
    return Number.isFinite(ticks) ? ticks / CLOCK_TICKS : undefined;
  } catch {
    return undefined;
  }
}

/** CPU seconds all CPUs of this machine have been busy (incl. steal) since boot, from /proc/stat. */
export function machineBusySeconds(): number | undefined {
  try {
    const line = fs.readFileSync('/proc/stat', 'utf8').split('\n', 1)[0]!;
    // cpu user nice system idle iowait irq softirq steal ...
    const [user, nice, system, , , irq, softirq, steal] = line.trim().split(/\s+/).slice(1).map(Number);
    const ticks = (user ?? 0) + (nice ?? 0) + (system ?? 0) + (irq ?? 0) + (softirq ?? 0) + (steal ?? 0);
    return Number.isFinite(ticks) ? ticks / CLOCK_TICKS : undefined;
  } catch {
    return undefined;
  }
}

// sysconf(_SC_CLK_TCK) is 100 on every Linux that Node supports.
const CLOCK_TICKS = 100;

/** Poll `url` until it answers 200; fail early if `proc` exits. */
export async function waitForHttpOk(url: string, proc: ManagedProcess, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = 'no answer';
  while (Date.now() < deadline) {
    if (proc.exitInfo()) throw new Error(`${proc.describeExit()} before ${url} answered 200`);
    try {
      const res = await fetch(url, { signal: AbortSignal.timeout(2000) });
      await res.arrayBuffer();
      if (res.status === 200) return;
      last = `HTTP ${res.status}`;
    } catch (err) {
      last = err instanceof Error ? ((err.cause as Error | undefined)?.message ?? err.message) : String(err);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${url} did not answer 200 within ${timeoutMs / 1000} s (last: ${last})`);
}
