// How the runner talks HTTP to Slipway: every answer is either what was asked for, a refusal
// (`Refused`: the server understood and said no; asking again changes nothing), or a failure worth
// trying again (`Unavailable`: no connection, a timeout, 429, 5xx — the server may be restarting).
// `untilAvailable` retries the latter with growing pauses until it works or the caller gives up.
import { setTimeout as sleep } from 'node:timers/promises';
import { mustStop } from '../modules/runner/runner.protocol.js';

/** A definite no from the server (a 4xx), with the problem's `code` and `detail`. */
export class Refused extends Error {
  override readonly name = 'Refused';

  constructor(readonly status: number, readonly code: string, readonly detail: string) {
    super(detail);
  }

  /** The deployment is no longer this runner's to work on (see runner.protocol.ts). */
  get mustStop(): boolean {
    return mustStop(this.code);
  }
}

/** No usable answer this time; `retryAfterMs` when the server said how long to wait. */
export class Unavailable extends Error {
  override readonly name = 'Unavailable';

  constructor(message: string, readonly retryAfterMs?: number, options?: ErrorOptions) {
    super(message, options);
  }
}

const FIRST_PAUSE_MS = 200;
// Short enough that a runner is back within a few seconds of a server restart, well inside a lease.
const LONGEST_PAUSE_MS = 5_000;
const LONGEST_RETRY_AFTER_MS = 60_000;

/** The pause before try number `attempt + 1`: doubling, capped, with jitter so runners do not retry in step. */
export function backoffMs(attempt: number): number {
  const ceiling = Math.min(LONGEST_PAUSE_MS, FIRST_PAUSE_MS * 2 ** Math.max(0, attempt - 1));
  return Math.round(ceiling / 2 + (Math.random() * ceiling) / 2);
}

/** Retry-After in seconds or as an HTTP date, bounded. */
export function retryAfterMs(headers: Headers): number | undefined {
  const value = headers.get('retry-after');
  if (value === null || value.trim() === '') return undefined;
  const seconds = Number(value);
  const ms = Number.isFinite(seconds) ? seconds * 1000 : Date.parse(value) - Date.now();
  return Number.isNaN(ms) ? undefined : Math.min(LONGEST_RETRY_AFTER_MS, Math.max(0, ms));
}

export interface RetryOptions {
  signal: AbortSignal;
  onRetry?: (error: Unavailable, attempt: number, delayMs: number) => void;
  /** The longest pause, whatever Retry-After says. */
  longestPauseMs?: number;
}

/** Runs `attempt` until it returns, throws something other than Unavailable, or `signal` aborts. */
export async function untilAvailable<T>(attempt: () => Promise<T>, options: RetryOptions): Promise<T> {
  for (let n = 1; ; n++) {
    options.signal.throwIfAborted();
    try {
      return await attempt();
    } catch (error) {
      if (!(error instanceof Unavailable) || options.signal.aborted) throw error;
      const delay = Math.min(error.retryAfterMs ?? backoffMs(n), options.longestPauseMs ?? Infinity);
      options.onRetry?.(error, n, delay);
      // An abort while pausing ends the retries with the abort's own reason.
      await sleep(delay, undefined, { signal: options.signal }).catch(() => options.signal.throwIfAborted());
    }
  }
}

/** What went wrong with a connection, in a few words (fetch hides the errno in `cause`). */
function networkReason(error: unknown, timedOut: boolean): string {
  if (timedOut) return 'no answer in time';
  const cause = (error as { cause?: { code?: string; message?: string } }).cause;
  return cause?.code ?? cause?.message ?? (error instanceof Error ? error.message : String(error));
}

export interface Answer {
  status: number;
  headers: Headers;
  text: string;
}

/**
 * One request, read to the end. A connection that fails, times out or breaks off mid-answer is
 * Unavailable, naming `what` was asked (by default the server, by its origin); an abort of
 * `signal` rethrows its reason.
 */
export async function request(url: string, init: RequestInit, timeoutMs: number, signal: AbortSignal, what = new URL(url).origin): Promise<Answer> {
  signal.throwIfAborted();
  // By hand rather than AbortSignal.any, so that nothing stays attached to a long-lived signal.
  const controller = new AbortController();
  const onAbort = () => controller.abort(signal.reason);
  signal.addEventListener('abort', onAbort, { once: true });
  let timedOut = false;
  const timer = setTimeout(() => { timedOut = true; controller.abort(); }, timeoutMs);
  try {
    const res = await fetch(url, { ...init, signal: controller.signal });
    return { status: res.status, headers: res.headers, text: await res.text() };
  } catch (error) {
    if (signal.aborted) throw signal.reason;
    throw new Unavailable(`${what} cannot be reached: ${networkReason(error, timedOut)}`, undefined, { cause: error });
  } finally {
    clearTimeout(timer);
    signal.removeEventListener('abort', onAbort);
  }
}

/** The answers worth asking again later: rate limited, or the server failing or overloaded. */
export function isTransientStatus(status: number): boolean {
  return status === 429 || status >= 500;
}

/** JSON, or null for an empty or non-JSON body (a proxy's HTML error page, say). */
export function parseJson(text: string): any {
  if (text === '') return null;
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
}

/** `promise`, or the abort reason as soon as `signal` aborts; leaves no listener behind either way. */
export function abortable<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}
