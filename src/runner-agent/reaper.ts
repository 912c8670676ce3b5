// The runner's side of the reaper (reaper-main.ts): started with the first process group a runner
// starts, told of every group started and stopped. It needs nothing from the runner to do its
// work but the end of its standard input, which comes however the runner ends.
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';

let reaper: ChildProcess | null | undefined;
/** When the last reaper was started: one that ends at once (its file gone) is not started again in a loop. */
let startedAt = 0;
const RESTART_AT_MOST_EVERY_MS = 1_000;
/** The groups it is to stop: told again to a reaper started anew after the last one ended. */
const watched = new Set<number>();

/** From now on `pgid` is stopped when this process ends, however it ends. */
export function watchGroup(pgid: number): void {
  watched.add(pgid);
  tell(`+${pgid}`);
}

/** `pgid` has been stopped: the reaper forgets it. */
export function unwatchGroup(pgid: number): void {
  if (!watched.delete(pgid)) return;
  tell(`-${pgid}`);
}

/** Whether a reaper is there to stop the groups when this process ends (SIGTERM, then SIGKILL 5 s later). */
export function reaperWatching(): boolean {
  return reaper !== undefined && reaper !== null && reaper.exitCode === null && reaper.signalCode === null;
}

function tell(line: string): void {
  if (reaper === undefined) startTellingAll();
  else if (reaper?.stdin?.writable) reaper.stdin.write(`${line}\n`);
}

/** Starts a reaper, and tells it everything watched: a new one knows nothing yet. */
function startTellingAll(): void {
  reaper = start();
  if (reaper?.stdin?.writable) for (const pgid of watched) reaper.stdin.write(`+${pgid}\n`);
}

function start(): ChildProcess | null {
  startedAt = Date.now();
  try {
    const child = spawn(process.execPath, [fileURLToPath(new URL('./reaper-main.js', import.meta.url))], {
      // Its own process group: a signal to the runner's group (Ctrl-C, `kill -9 -PGID`) does not reach it.
      detached: true,
      // Nothing but the pipe: it must not hold the runner's stdout or stderr open after the runner ends.
      stdio: ['pipe', 'ignore', 'ignore'],
      env: { PATH: process.env.PATH ?? '' },
    });
    child.on('error', () => {});
    child.stdin!.on('error', () => {});
    // A reaper that ended (killed by someone) is started again at once while there are groups to
    // stop, told of each: a runner that crashes next still leaves none behind. At most once a second.
    child.once('exit', () => {
      if (reaper !== child) return;
      reaper = undefined;
      const restart = () => { if (reaper === undefined && watched.size > 0) startTellingAll(); };
      const wait = startedAt + RESTART_AT_MOST_EVERY_MS - Date.now();
      if (wait <= 0) restart();
      else setTimeout(restart, wait).unref();
    });
    // It must keep neither this process nor its event loop alive.
    child.unref();
    (child.stdin as unknown as { unref(): void }).unref();
    return child;
  } catch {
    return null;
  }
}
