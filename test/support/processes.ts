// The real `slipway` program as child processes: one-shot CLI commands, and `serve` (or `runner`)
// running in the background with its log lines collected.
import { spawn, type ChildProcess } from 'node:child_process';
import { after } from 'node:test';
import { fileURLToPath } from 'node:url';
import type { Actor, TestServer } from './harness.js';

/** The compiled CLI entry of this build (test/support → src/cli in the same output directory). */
export const CLI_ENTRY = fileURLToPath(new URL('../../src/cli/run.js', import.meta.url));

// A command started here that is still running once every test of the file has ended (a log
// follower that a failed test left behind retries for a day) is killed then: it would otherwise
// keep the file's process alive. Node 20 and 22 fail such a file at --test-timeout; Node 24 applies
// that timeout to each test instead of to the file, and would wait for the command to end.
const running = new Map<ChildProcess, { group: boolean }>();
after(() => {
  for (const [child, { group }] of running) {
    process.stderr.write(`test support: killing a command left running: slipway ${child.spawnargs.slice(2).join(' ')}\n`);
    try {
      // One started as a process group's leader goes with its group.
      process.kill(group ? -child.pid! : child.pid!, 'SIGKILL');
    } catch {
      // Gone meanwhile.
    }
  }
});
function track(child: ChildProcess, group = false): ChildProcess {
  if (child.pid === undefined) return child; // not started: its 'error' says why
  running.set(child, { group });
  child.once('exit', () => running.delete(child));
  return child;
}

/** The parent's environment without SLIPWAY_* settings (a developer's own must not leak in), plus `env`. */
function childEnv(env: Record<string, string>): Record<string, string> {
  const clean = Object.fromEntries(Object.entries(process.env).filter(([key, value]) => !key.startsWith('SLIPWAY_') && value !== undefined)) as Record<string, string>;
  return { ...clean, ...env };
}

export interface CliResult {
  code: number | null;
  /** The signal that ended the command (null: it exited). */
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** A signal sent to a command once `when` (looked at every 5 ms while it runs) holds. */
export interface Interruption {
  when: () => boolean;
  signal: NodeJS.Signals;
}

/** `input`: what the command reads on its standard input (none: no standard input). */
export function runCli(args: string[], env: Record<string, string>, input?: string, interrupt?: Interruption): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = track(spawn(process.execPath, [CLI_ENTRY, ...args], { env: childEnv(env), stdio: [input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'] }));
    if (input !== undefined) child.stdin!.end(input);
    let stdout = '';
    let stderr = '';
    child.stdout!.on('data', (chunk: Buffer) => { stdout += chunk.toString('utf8'); });
    child.stderr!.on('data', (chunk: Buffer) => { stderr += chunk.toString('utf8'); });
    const watch = interrupt === undefined ? undefined : setInterval(() => {
      if (!interrupt.when()) return;
      clearInterval(watch);
      child.kill(interrupt.signal);
    }, 5);
    child.on('error', reject);
    child.on('close', (code, signal) => {
      clearInterval(watch);
      resolve({ code, signal, stdout, stderr });
    });
  });
}

/**
 * A service user's credentials as SLIPWAY_* variables, as a CI job or a shell has them, for the API
 * of the server at `serverUrl` (or at `url`, a proxy in front of it: the token URL stays the server's).
 */
export function clientVariables(serverUrl: string, orgId: string, who: Pick<Actor, 'clientId' | 'clientSecret' | 'scope'>, url = serverUrl): Record<string, string> {
  return {
    SLIPWAY_URL: url, SLIPWAY_TOKEN_URL: `${serverUrl}/oauth/v2/token`, SLIPWAY_ORG: orgId,
    SLIPWAY_CLIENT_ID: who.clientId, SLIPWAY_CLIENT_SECRET: who.clientSecret, SLIPWAY_SCOPE: who.scope,
  };
}

/** Runs a command that must succeed with --json and returns what it printed. */
export async function cliJson<T = any>(args: string[], env: Record<string, string>): Promise<T> {
  const result = await runCli([...args, '--json'], env);
  if (result.code !== 0) throw new Error(`slipway ${args.join(' ')} exited ${result.code}: ${result.stderr}`);
  return JSON.parse(result.stdout) as T;
}

export interface LogLine {
  msg?: string;
  pid?: number;
  level?: string;
  [key: string]: unknown;
}

/** A long-running `slipway` command (`serve`, `runner`). */
export interface SlipwayProcess {
  child: ChildProcess;
  /** Every line the process wrote to stdout or stderr, raw. */
  output: string[];
  /** The JSON log lines among them. */
  logs(): LogLine[];
  /** Resolves with the first log line (already written or still to come) that matches; rejects if the process exits first. */
  waitForLog(match: (line: LogLine) => boolean, what: string): Promise<LogLine>;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

export type ServeProcess = SlipwayProcess;

export interface SpawnOptions {
  /** Leads a process group of its own (with its workers), as under a service manager: signal it with process.kill(-pid). */
  processGroup?: boolean;
}

export function spawnServe(args: string[], env: Record<string, string>, options: SpawnOptions = {}): ServeProcess {
  return spawnSlipway(['serve', ...args], env, options);
}

/** `slipway COMMAND …` in the background: `args[0]` is the command. */
export function spawnSlipway(args: string[], env: Record<string, string>, options: SpawnOptions = {}): SlipwayProcess {
  const child = track(spawn(process.execPath, [CLI_ENTRY, ...args], { env: childEnv(env), stdio: ['ignore', 'pipe', 'pipe'], detached: options.processGroup ?? false }), options.processGroup ?? false);
  const output: string[] = [];
  const waiters = new Set<() => void>();
  let exitedWith: { code: number | null; signal: NodeJS.Signals | null } | null = null;
  for (const stream of [child.stdout!, child.stderr!]) {
    let partial = '';
    stream.on('data', (chunk: Buffer) => {
      const lines = (partial + chunk.toString('utf8')).split('\n');
      partial = lines.pop()!;
      output.push(...lines.filter(Boolean));
      for (const wake of waiters) wake();
    });
  }
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.on('close', (code, signal) => {
      exitedWith = { code, signal };
      for (const wake of waiters) wake();
      resolve(exitedWith);
    });
  });
  const logs = (): LogLine[] => output.flatMap((line) => {
    try {
      return [JSON.parse(line) as LogLine];
    } catch {
      return [];
    }
  });
  return {
    child,
    output,
    logs,
    exited,
    waitForLog(match, what) {
      return new Promise((resolve, reject) => {
        const check = () => {
          const found = logs().find(match);
          if (found) {
            waiters.delete(check);
            resolve(found);
          } else if (exitedWith) {
            waiters.delete(check);
            reject(new Error(`slipway ${args[0]} exited (${JSON.stringify(exitedWith)}) before logging ${what}:\n${output.join('\n')}`));
          }
        };
        waiters.add(check);
        check();
      });
    },
  };
}

/** The environment of a CLI command run against `server`'s data directory and database. */
export function cliEnv(server: Pick<TestServer, 'dataDir' | 'config'>, extra: Record<string, string> = {}): Record<string, string> {
  return {
    SLIPWAY_DATA_DIR: server.dataDir,
    SLIPWAY_LOG_LEVEL: 'info',
    ...(server.config.databaseUrl ? { SLIPWAY_DATABASE_URL: server.config.databaseUrl } : {}),
    ...extra,
  };
}
