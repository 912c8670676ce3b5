// Runs in a worker thread: one copy of `slipway backup` or `slipway restore` (see copy-job.ts).
import fs from 'node:fs';
import { parentPort, workerData } from 'node:worker_threads';
import { SQLite } from '../platform/db/sqlite-library.js';
import { copyToNewOwnerOnly } from '../platform/owner-only-file.js';
import type { CopyJob, CopyResult } from './copy-job.js';

function run(job: CopyJob): CopyResult {
  if (job.kind === 'copy') {
    copyToNewOwnerOnly(job.source, job.target);
    return null;
  }
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

parentPort!.postMessage(run(workerData as CopyJob));
