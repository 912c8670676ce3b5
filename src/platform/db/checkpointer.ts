// The server's SQLite checkpoints, moved off the event loop (see checkpoint-worker.ts).
import { Worker } from 'node:worker_threads';

/** How often the worker copies the log back, in ms. */
const INTERVAL_MS = 250;

export interface Checkpointer {
  /** Ends the worker once it has closed its connection; later calls wait for the same end. */
  stop(): Promise<void>;
}

/**
 * What the worker says of each round's outcome (an error's message, or null when it worked): a
 * failure when it differs from the round before, and null when a round works after failing.
 */
export function roundReporter(say: (error: string | null) => void): (outcome: string | null) => void {
  let failing: string | null = null;
  return (outcome) => {
    if (outcome !== failing) say(outcome);
    failing = outcome;
  };
}

/**
 * `onError` is called with the error of a checkpoint that failed (once while they keep failing the
 * same way), and with null once one works again after that.
 */
export function startCheckpointer(file: string, onError: (message: string | null) => void): Checkpointer {
  const worker = new Worker(new URL('./checkpoint-worker.js', import.meta.url), { workerData: { file, intervalMs: INTERVAL_MS } });
  const exited = new Promise<void>((resolve) => worker.once('exit', () => resolve()));
  worker.on('message', (m: { error?: string; recovered?: boolean }) => {
    if (m.error !== undefined) onError(m.error);
    else if (m.recovered === true) onError(null);
  });
  worker.on('error', (error) => onError(error.message));
  // A checkpointer never keeps the process alive by itself.
  worker.unref();
  let stopping: Promise<void> | null = null;
  return {
    stop() {
      if (stopping === null) {
        // Waited for now: the process stays up until the worker has closed its connection.
        worker.ref();
        worker.postMessage('stop');
        stopping = exited;
      }
      return stopping;
    },
  };
}
