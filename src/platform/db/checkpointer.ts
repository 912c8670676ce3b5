// The server's SQLite checkpoints, moved off the event loop (see checkpoint-worker.ts).
import { Worker } from 'node:worker_threads';

/** How often the worker copies the log back, in ms. */
const INTERVAL_MS = 250;

export interface Checkpointer {
  /** Ends the worker once it has closed its connection; later calls wait for the same end. */
  stop(): Promise<void>;
}

export function startCheckpointer(file: string, onError: (message: string) => void): Checkpointer {
  const worker = new Worker(new URL('./checkpoint-worker.js', import.meta.url), { workerData: { file, intervalMs: INTERVAL_MS } });
  const exited = new Promise<void>((resolve) => worker.once('exit', () => resolve()));
  worker.on('message', (m: { error?: string }) => { if (m.error !== undefined) onError(m.error); });
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
