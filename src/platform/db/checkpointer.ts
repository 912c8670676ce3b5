// The server's SQLite checkpoints, moved off the event loop (see checkpoint-worker.ts).
import { Worker } from 'node:worker_threads';

/** How often the worker copies the log back, in ms. */
const INTERVAL_MS = 250;

export interface Checkpointer {
  stop(): Promise<void>;
}

export function startCheckpointer(file: string, onError: (message: string) => void): Checkpointer {
  const worker = new Worker(new URL('./checkpoint-worker.js', import.meta.url), { workerData: { file, intervalMs: INTERVAL_MS } });
  worker.on('message', (m: { error?: string }) => { if (m.error !== undefined) onError(m.error); });
  worker.on('error', (error) => onError(error.message));
  // A checkpointer never keeps the process alive by itself.
  worker.unref();
  return {
    async stop() {
      const exited = new Promise<void>((resolve) => worker.once('exit', () => resolve()));
      // Waited for now: the process stays up until the worker has closed its connection.
      worker.ref();
      worker.postMessage('stop');
      await exited;
    },
  };
}
