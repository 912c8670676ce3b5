// `slipway serve`'s stop signals, caught before the server's code is loaded (which takes a moment).
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
