// A deployment's output on its way to the server. Lines queue in the order they were written and go
// out in batches, one request at a time, so the stored log reads as the process wrote it. The queue
// is bounded: a process that writes faster than the server takes lines loses the excess, and the
// log says how many lines were lost, where they were lost. A batch the server refuses goes again in
// parts, so that a line it cannot take costs no other. Secret values are masked before a line is
// queued, so they never leave the runner, and NUL characters are replaced, so that the server takes
// the line.
import type { LogStreamT } from '../modules/deployments/deployments.schemas.js';
import { cutAt } from '../platform/text.js';
import { LOG_LINE_MAX_CHARS, LOG_LINES_PER_CALL } from '../modules/runner/runner.protocol.js';

export interface LogEntry {
  stream: LogStreamT;
  line: string;
  at: string;
}

export interface LogShipperOptions {
  /**
   * Sends one batch; throwing stops the shipper for good (see onError). `refused`: the server will
   * never take the batch as it is; it goes again in halves, and a line refused on its own is lost.
   */
  send(lines: LogEntry[]): Promise<void | 'refused'>;
  /** Called once, with what `send` threw; later lines are dropped. */
  onError(error: unknown): void;
  mask?: (line: string) => string;
  /** Lines waiting at most; more are counted and dropped. */
  maxQueued?: number;
  /** Characters of line text waiting at most (what a chatty service can make the runner hold); more are counted and dropped. */
  maxQueuedChars?: number;
  /** Characters of line text per request, to stay well inside the server's body limit. */
  batchChars?: number;
  /** How long a line waits for company before it is sent. */
  lingerMs?: number;
}

/** The text that stands for a masked secret value. */
export const MASK = '***';
/** Shorter values are not masked: hiding every "on" or "1" would wreck the log and protect nothing. */
export const MIN_MASKED_CHARS = 4;
/** Ends a line that was cut short (by the runner's line limit or the protocol's). */
export const TRUNCATED = ' …[truncated]';

/**
 * The texts to look for in output for these secret values: each line of a multi-line value as the
 * runner's line splitter leaves it (lines end at LF, one CR before it is dropped), with and
 * without a CR at its end; the pieces between lone CRs too, for output that a terminal would
 * overwrite; each as the process sees it once the value went through its environment (a lone
 * UTF-16 surrogate becomes U+FFFD there); and each as JSON writes it inside a string (a service
 * that logs its configuration as JSON): quotes, backslashes and control characters escaped, and
 * also every non-ASCII character, as some JSON writers do (Python's by default). Longest first.
 * Other encodings of a value (base64, URL-encoding, hashes) are not looked for.
 */
function needlesOf(values: Iterable<string>): string[] {
  const needles = new Set<string>();
  const add = (text: string) => {
    if (text.length < MIN_MASKED_CHARS) return;
    needles.add(text);
    needles.add(Buffer.from(text, 'utf8').toString('utf8'));
  };
  for (const value of values) {
    const escaped = JSON.stringify(value).slice(1, -1);
    add(escaped);
    add(escaped.replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`));
    for (const line of value.split('\n')) {
      add(line);
      if (line.endsWith('\r')) add(line.slice(0, -1));
      for (const piece of line.split('\r')) add(piece);
    }
  }
  return [...needles].sort((a, b) => b.length - a.length);
}

/**
 * A function that replaces every occurrence of a secret value (each line of a multi-line one) with
 * MASK. Occurrences are found by plain search, not a regular expression (one built of many long
 * values is too large to compile), and where two overlap, both are covered by one MASK.
 */
export function secretMasker(values: Iterable<string>): (line: string) => string {
  const needles = needlesOf(values);
  if (needles.length === 0) return (line) => line;
  return (line) => {
    const masked = maskRanges(line, needles);
    if (!masked.endsWith(TRUNCATED)) return masked;
    // A value that the cut went through left its beginning at the end of the line: mask that too.
    const head = masked.slice(0, -TRUNCATED.length);
    let cut = 0;
    for (const n of needles) {
      for (let k = Math.min(n.length - 1, head.length); k > cut; k--) {
        if (head.endsWith(n.slice(0, k))) {
          cut = k;
          break;
        }
      }
    }
    return cut === 0 ? masked : head.slice(0, -cut) + MASK + TRUNCATED;
  };
}

/** `line` with every stretch of characters that occurrences of needles cover replaced by one MASK. */
function maskRanges(line: string, needles: string[]): string {
  let covered: Uint8Array | undefined;
  for (const needle of needles) {
    for (let at = line.indexOf(needle); at !== -1; at = line.indexOf(needle, at + 1)) {
      covered ??= new Uint8Array(line.length);
      covered.fill(1, at, at + needle.length);
    }
  }
  if (covered === undefined) return line;
  let out = '';
  let from = 0;
  for (let i = 0; i < line.length; i++) {
    if (covered[i] === 0) continue;
    let end = i + 1;
    while (end < line.length && covered[end] === 1) end++;
    out += line.slice(from, i) + MASK;
    from = end;
    i = end - 1;
  }
  return out + line.slice(from);
}

export class LogShipper {
  readonly #options: Required<Omit<LogShipperOptions, 'mask'>> & Pick<LogShipperOptions, 'mask'>;
  #queue: LogEntry[] = [];
  /** The characters of the lines in #queue. */
  #queuedChars = 0;
  #dropped = 0;
  #closed = false;
  #failure: { error: unknown } | undefined;
  #pumping: Promise<void> | undefined;
  #timer: NodeJS.Timeout | undefined;

  constructor(options: LogShipperOptions) {
    this.#options = { maxQueued: 10_000, maxQueuedChars: 4 * 1024 * 1024, batchChars: 512 * 1024, lingerMs: 200, ...options };
  }

  /** Queues a line (masked, without NUL, cut to the protocol's length); after close() or a failure, drops it. */
  push(stream: LogStreamT, line: string): void {
    if (this.#closed || this.#failure !== undefined) return;
    const prepared = this.#prepare(line);
    if (this.#queue.length >= this.#options.maxQueued || this.#queuedChars + prepared.length > this.#options.maxQueuedChars) {
      this.#dropped++;
      return;
    }
    this.#noteDropped();
    this.#enqueue({ stream, line: prepared, at: new Date().toISOString() });
    if (this.#queue.length >= LOG_LINES_PER_CALL) this.#pump();
    else this.#timer ??= setTimeout(() => this.#pump(), this.#options.lingerMs).unref();
  }

  /**
   * Takes no more lines and sends what is queued. Resolves once all of it is sent; rejects with what
   * stopped the shipper, if anything did.
   */
  async close(): Promise<void> {
    this.#closed = true;
    this.#noteDropped();
    while (this.#queue.length > 0 || this.#pumping !== undefined) {
      this.#pump();
      await this.#pumping;
    }
    if (this.#failure !== undefined) throw this.#failure.error;
  }

  #prepare(line: string): string {
    // The server refuses U+0000 anywhere in a request (PostgreSQL text cannot hold it), and with it
    // every line of the batch. U+FFFD stands in for it: the character that bytes of the output that
    // are not UTF-8 already became, so the log shows both kinds of binary noise alike.
    const text = (this.#options.mask?.(line) ?? line).replaceAll('\0', '\uFFFD');
    if (text.length <= LOG_LINE_MAX_CHARS) return text;
    // Never between the halves of a surrogate pair, which the server would refuse with the line.
    return cutAt(text, LOG_LINE_MAX_CHARS - TRUNCATED.length) + TRUNCATED;
  }

  /** Lines lost to a full queue are reported where they were lost, once there is room again. */
  #noteDropped(): void {
    if (this.#dropped === 0 || this.#failure !== undefined) return;
    const line = `[runner] ${this.#dropped} line${this.#dropped === 1 ? '' : 's'} of output dropped: they came faster than the server took them`;
    this.#dropped = 0;
    this.#enqueue({ stream: 'runner', line, at: new Date().toISOString() });
  }

  #enqueue(entry: LogEntry): void {
    this.#queue.push(entry);
    this.#queuedChars += entry.line.length;
  }

  #pump(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#pumping ??= this.#drain().finally(() => { this.#pumping = undefined; });
  }

  async #drain(): Promise<void> {
    while (this.#queue.length > 0 && this.#failure === undefined) {
      const batch = this.#takeBatch();
      try {
        await this.#send(batch);
      } catch (error) {
        this.#failure = { error };
        this.#queue = [];
        this.#queuedChars = 0;
        this.#options.onError(error);
      }
    }
  }

  /** One line the server cannot take must not cost the others: a refused batch is halved down to it. */
  async #send(batch: LogEntry[]): Promise<void> {
    if ((await this.#options.send(batch)) !== 'refused' || batch.length === 1) return;
    const half = Math.ceil(batch.length / 2);
    await this.#send(batch.slice(0, half));
    await this.#send(batch.slice(half));
  }

  #takeBatch(): LogEntry[] {
    let chars = 0;
    let count = 0;
    while (count < this.#queue.length && count < LOG_LINES_PER_CALL) {
      chars += this.#queue[count]!.line.length;
      if (count > 0 && chars > this.#options.batchChars) break;
      count++;
    }
    const batch = this.#queue.splice(0, count);
    for (const entry of batch) this.#queuedChars -= entry.line.length;
    return batch;
  }
}
