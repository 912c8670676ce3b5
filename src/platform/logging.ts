// Structured JSON logs (pino). Request bodies are never logged; the redaction list is the second
// line of defence for anything that carries a credential or a secret value by mistake.
import { pino, type DestinationStream, type Logger } from 'pino';
import { BatchedOutput } from './batched-output.js';

// Explicit paths only: wildcard paths make pino walk every logged object, on every line.
export const REDACTED_PATHS = [
  'req.headers.authorization',
  'req.headers.cookie',
  'req.body',
  'headers.authorization',
  'authorization',
  'body',
  'clientSecret',
  'client_secret',
  'access_token',
  'token',
  'values',
  'password',
  'err.body',
  'err.values',
];

let stampedAt = -1;
let stamp = '';
let secondAt = -1;
let secondPrefix = '';

/**
 * pino's `"time"` field as an ISO 8601 string, formatted once per millisecond however many lines
 * share it; within one second only the milliseconds are written anew.
 */
function isoTime(): string {
  const now = Date.now();
  if (now !== stampedAt) {
    stampedAt = now;
    const ms = now % 1000;
    if (now - ms !== secondAt) {
      secondAt = now - ms;
      secondPrefix = `,"time":"${new Date(secondAt).toISOString().slice(0, 20)}`;
    }
    stamp = `${secondPrefix}${ms < 10 ? '00' : ms < 100 ? '0' : ''}${ms}Z"`;
  }
  return stamp;
}

export function createLogger(level: string, destination?: DestinationStream): Logger {
  return pino(
    {
      level,
      base: { service: 'slipway', pid: process.pid },
      timestamp: isoTime,
      redact: { paths: REDACTED_PATHS, censor: '[redacted]' },
      formatters: { level: (label) => ({ level: label }) },
    },
    destination ?? new BatchedOutput(1),
  );
}

/** The fields of one access-log line: nothing in them is a credential or a secret value. */
export interface AccessLine {
  requestId: string;
  method: string;
  route: string | null;
  path: string;
  status: number;
  ms: number;
  /** The client's address (as SLIPWAY_TRUST_PROXY resolves it). */
  ip: string | undefined;
  sub: string | undefined;
}

/**
 * Writes access-log lines straight to the logger's destination, in exactly the shape pino gives
 * them (level, time, the logger's bindings, the fields, msg), without a child logger per request,
 * pino's serializers or its redaction pass: the fields are fixed and none can carry a secret. One
 * line per request is the logger's hottest use by far.
 */
export function accessLogWriter(logger: Logger): (line: AccessLine) => void {
  const stream = (logger as unknown as Record<symbol, DestinationStream>)[pino.symbols.streamSym]!;
  const bindings = (logger as unknown as Record<symbol, string>)[pino.symbols.chindingsSym] ?? '';
  // Routes are the server's own few patterns: each is written as JSON once.
  const routes = new Map<string, string>();
  const route = (pattern: string): string => {
    let text = routes.get(pattern);
    if (text === undefined) routes.set(pattern, (text = JSON.stringify(pattern)));
    return text;
  };
  return (line) => {
    if (!logger.isLevelEnabled('info')) return;
    stream.write(`{"level":"info"${isoTime()}${bindings},"requestId":${jsonString(line.requestId)},"method":${jsonString(line.method)},"route":${line.route === null ? 'null' : route(line.route)},"path":${jsonString(line.path)},"status":${line.status},"ms":${line.ms}${line.ip === undefined ? '' : `,"ip":${jsonString(line.ip)}`}${line.sub === undefined ? '' : `,"sub":${jsonString(line.sub)}`},"msg":"request"}\n`);
  };
}

/** Printable ASCII but `"` and `\`: such a string is its own JSON text between quotes. */
const PLAIN_JSON = /^[\x20\x21\x23-\x5b\x5d-\x7e]*$/;

/** A string as JSON text; the common plain case (ids, methods, most paths) without JSON.stringify's scan. */
export function jsonString(value: string): string {
  return PLAIN_JSON.test(value) ? `"${value}"` : JSON.stringify(value);
}

type LogArgs = Parameters<Logger['info']>;

/**
 * A request's logger (Fastify makes one per request), which becomes a real pino child only when
 * the request logs something: most requests write nothing but their access-log line.
 */
export class RequestLogger {
  #child: Logger | undefined;
  constructor(
    private readonly parent: Logger,
    private readonly bindings: Record<string, unknown>,
  ) {}

  private get real(): Logger {
    return (this.#child ??= this.parent.child(this.bindings) as Logger);
  }
  get level(): string {
    return this.parent.level;
  }
  isLevelEnabled(level: string): boolean {
    return this.parent.isLevelEnabled(level);
  }
  fatal(...args: LogArgs): void { this.real.fatal(...args); }
  error(...args: LogArgs): void { this.real.error(...args); }
  warn(...args: LogArgs): void { this.real.warn(...args); }
  info(...args: LogArgs): void { this.real.info(...args); }
  debug(...args: LogArgs): void { this.real.debug(...args); }
  trace(...args: LogArgs): void { this.real.trace(...args); }
  silent(): void {}
  child(bindings: Record<string, unknown>, options?: Parameters<Logger['child']>[1]): ReturnType<Logger['child']> {
    return this.real.child(bindings, options);
  }
}

export type { Logger };
