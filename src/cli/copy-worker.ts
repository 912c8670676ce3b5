// The long copies of `slipway backup` and `slipway restore`, each in a worker thread: the main
// thread stays free to answer a stop signal at once, removing the part written (see undoOnStop),
// instead of after SQLite or the copy returns, which for a large database is minutes.
import fs from 'node:fs';
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';
import { copyToNewOwnerOnly } from '../platform/owner-only-file.js';

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
    const worker = new Worker(new URL(import.meta.url), { workerData: job });
    let result: CopyResult | undefined;
    worker.once('message', (message: CopyResult) => { result = message; });
    worker.once('error', reject);
    worker.once('exit', (code) => {
      if (result !== undefined) resolve(result);
      else reject(new Error(`the copy stopped without finishing (its thread exited with ${code})`));
    });
  });
}

async function run(job: CopyJob): Promise<CopyResult> {
  if (job.kind === 'copy') {
    copyToNewOwnerOnly(job.source, job.target);
    return null;
  }
  const { SQLite } = await import('../platform/db/sqlite-library.js');
  const source = new SQLite(job.source, { fileMustExist: true });
  try {
    source.pragma('busy_timeout = 10000');
    // One read transaction, a consistent snapshot: servers keep writing meanwhile (WAL), and unlike
    // the page-by-page backup API, which starts again whenever another connection writes, it cannot
    // be kept from finishing by a busy server.
    source.prepare('VACUUM INTO ?').run(job.target);
  } finally {
    source.close();
  }
  // Checked before it is called a backup: a copy that does not open whole is no use when needed.
  const copy = new SQLite(job.target, { fileMustExist: true });
  let check: string;
  try {
    check = String(copy.pragma('quick_check', { simple: true }));
  } finally {
    copy.close();
  }
  const fd = fs.openSync(job.target, 'r+');
  try {
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
  return check;
}

if (!isMainThread && (workerData as { kind?: unknown } | null)?.kind !== undefined) {
  parentPort!.postMessage(await run(workerData as CopyJob));
}
