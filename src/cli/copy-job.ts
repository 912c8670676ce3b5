// The long copies of `slipway backup` and `slipway restore`, each run in a worker thread
// (copy-worker.ts): the main thread stays free to answer a stop signal at once, removing the part
// written (see undoOnStop), instead of after SQLite or the copy returns, which for a large
// database is minutes.
import { Worker } from 'node:worker_threads';

export type CopyJob =
  /** A consistent copy of the database `source` into `target` (an empty owner-only file), checked and on disk. */
  | { kind: 'vacuum'; source: string; target: string }
  /** `source`'s bytes into `target`, a new owner-only file, on disk. */
  | { kind: 'copy'; source: string; target: string };

/** SQLite's quick check of the copy, for a `vacuum`; null for a `copy`. */
export type CopyResult = string | null;

/** Runs `job` in a worker thread; its error is the job's. */
export function runCopyJob(job: CopyJob): Promise<CopyResult> {
  return new Promise((resolve, reject) => {
    const worker = new Worker(new URL('./copy-worker.js', import.meta.url), { workerData: job });
    let result: CopyResult | undefined;
    worker.once('message', (message: CopyResult) => { result = message; });
    worker.once('error', reject);
    worker.once('exit', (code) => {
      if (result !== undefined) resolve(result);
      else reject(new Error(`the copy stopped without finishing (its thread exited with ${code})`));
    });
  });
}
