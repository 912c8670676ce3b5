// `slipway serve`'s stop signals, caught before the server's code is loaded (which takes a moment).
import { failed } from './output.js';

/**
 * SIGTERM and SIGINT, caught from the very start: a signal while the process starts (migrating,
 * bootstrapping, forking) is remembered and handed to the shutdown once there is one, rather than
 * killing the process with its log lines unwritten.
 */
export interface StopSignals {
  /** The first signal received, or null. */
  readonly received: string | null;
  /** From now on every signal goes to `handler` (called at once for one already received). */
  handle(handler: (signal: string) => void): void;
}

export function catchStopSignals(): StopSignals {
  let received: string | null = null;
  let handler: ((signal: string) => void) | null = null;
  const on = (signal: string) => {
    received ??= signal;
    handler?.(signal);
  };
  process.on('SIGTERM', () => on('SIGTERM'));
  process.on('SIGINT', () => on('SIGINT'));
  return {
    get received() { return received; },
    handle(h) {
      handler = h;
      if (received !== null) h(received);
    },
  };
}

/**
 * For a command that writes a file it has not yet put in place (`backup`, `restore`): until the
 * returned function is called, a stop signal (SIGINT, SIGTERM) runs `undo`, which removes what was
 * written and says what is left, prints that on standard error (as `--json` asks), and then stops
 * the process by that signal, as its default would have. At once, even while a worker thread is
 * still busy in SQLite: an exit would wait for it. SIGHUP is left as the operating system has it:
 * under `nohup` it is ignored, and a listener would end the command all the same.
 */
export function undoOnStop(json: boolean, undo: () => string): () => void {
  const signals = ['SIGINT', 'SIGTERM'] as const;
  const release = () => { for (const s of signals) process.off(s, onSignal); };
  function onSignal(signal: NodeJS.Signals): void {
    release();
    let said: string;
    try {
      said = undo();
    } catch (error) {
      said = `what was written could not be removed (${(error as Error).message})`;
    }
    failed(json, 'interrupted', `interrupted (${signal}): ${said}`);
    process.kill(process.pid, signal);
  }
  for (const s of signals) process.on(s, onSignal);
  return release;
}
