// Where log lines go: standard output, in batches. One write(2) per line was the largest single cost
// of a small request; a general-purpose buffered stream that re-measures its buffer on every line
// was the next. Lines are gathered as they come and written together when enough have gathered,
// within a quarter of a second when few do, and at exit however the process ends.
import cluster from 'node:cluster';
import fs from 'node:fs';

/** Writes to a pipe of at most this size are never interleaved with another process's (POSIX PIPE_BUF). */
const ATOMIC_PIPE_WRITE = 4096;
const BATCH_BYTES = 64 * 1024;
const FLUSH_MS = 250;
const pause = new Int32Array(new SharedArrayBuffer(4));

export class BatchedOutput {
  #lines: string[] = [];
  /** UTF-16 length of what is gathered: close enough to its size to decide when to write. */
  #gathered = 0;
  readonly #chunkBytes: number;
  readonly #timer: NodeJS.Timeout;
  readonly #atExit = () => this.flushSync();

  /**
   * @param shared whether other processes write to the same descriptor (the workers of `serve
   *   --workers N` share standard output): their lines must not cut into each other's, so each
   *   write(2) is kept to whole lines within PIPE_BUF.
   */
  constructor(private readonly fd: number, shared = cluster.isWorker) {
    this.#chunkBytes = shared ? ATOMIC_PIPE_WRITE : BATCH_BYTES;
    this.#timer = setInterval(() => this.flushSync(), FLUSH_MS).unref();
    process.once('exit', this.#atExit);
  }

  /** Writes what is gathered and stops the periodic flush and the one at exit. */
  end(): void {
    clearInterval(this.#timer);
    process.removeListener('exit', this.#atExit);
    this.flushSync();
  }

  write(line: string): void {
    this.#lines.push(line);
    this.#gathered += line.length;
    if (this.#gathered >= BATCH_BYTES) this.flushSync();
  }

  /** pino's `logger.flush(cb)`. */
  flush(done?: (error?: Error) => void): void {
    this.flushSync();
    done?.();
  }

  flushSync(): void {
    if (this.#lines.length === 0) return;
    const lines = this.#lines;
    this.#lines = [];
    this.#gathered = 0;
    if (this.#chunkBytes >= BATCH_BYTES) return this.#writeAll(Buffer.from(lines.join(''), 'utf8'));
    let chunk = '';
    for (const line of lines) {
      if (chunk.length > 0 && Buffer.byteLength(chunk) + Buffer.byteLength(line) > this.#chunkBytes) {
        this.#writeAll(Buffer.from(chunk, 'utf8'));
        chunk = '';
      }
      chunk += line;
    }
    this.#writeAll(Buffer.from(chunk, 'utf8'));
  }

  #writeAll(data: Buffer): void {
    let offset = 0;
    while (offset < data.length) {
      try {
        offset += fs.writeSync(this.fd, data, offset);
      } catch (error) {
        // A full non-blocking pipe: wait for the reader, as a blocking descriptor would.
        if ((error as NodeJS.ErrnoException).code === 'EAGAIN') {
          Atomics.wait(pause, 0, 0, 1);
          continue;
        }
        // The reader is gone (EPIPE, a closed descriptor): there is nowhere left to write.
        return;
      }
    }
  }
}
