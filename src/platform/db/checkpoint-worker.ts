// Runs in a worker thread: copies the SQLite write-ahead log back into the database file every
// few hundred milliseconds, so that the server's own thread never does it inside a COMMIT. A
// PASSIVE checkpoint takes no lock that writers need; it copies what no reader still needs, and
// the next write transaction starts the log over once everything has been copied.
import { parentPort, workerData } from 'node:worker_threads';
import { roundReporter } from './checkpointer.js';
import { SQLite } from './sqlite-library.js';

const { file, intervalMs } = workerData as { file: string; intervalMs: number };
const db = new SQLite(file, { fileMustExist: true });

// Said once while it fails the same way: a full disk would otherwise be four log lines a second
// for as long as it lasts.
const round = roundReporter((error) => parentPort!.postMessage(error === null ? { recovered: true } : { error }));

const timer = setInterval(() => {
  try {
    db.pragma('wal_checkpoint(PASSIVE)');
    round(null);
  } catch (error) {
    // Busy or failing now: the next round tries again, and the server's own automatic
    // checkpoint (set high, as a backstop) bounds the log meanwhile.
    round((error as Error).message);
  }
}, intervalMs);

parentPort!.on('message', (message: unknown) => {
  if (message !== 'stop') return;
  clearInterval(timer);
  db.close();
  parentPort!.close();
});
