// Building blocks for probes: a hand-made preflight request that proves the
// endpoint answers what we expect before it is loaded (autocannon does not look
// at bodies), and the standard load shapes.

import type { BenchContext } from './harness.js';
import { ProbeError } from './harness.js';
import type { BulkSecretsBody, BulkUpsertBody } from './bodies.js';
import type { RequestTemplate, SequenceJob, ThroughputJob } from './load-protocol.js';

export interface PlainRequest {
  url: string;
  method?: string;
  headers?: Record<string, string>;
  body?: string;
}

/** Returns a problem description, or undefined when the answer is right. */
export type ResponseCheck = (status: number, body: string) => string | undefined;

export async function preflight(req: PlainRequest, check: ResponseCheck): Promise<void> {
  const method = req.method ?? 'GET';
  const where = `${method} ${new URL(req.url).pathname}`;
  let res: Response;
  try {
    res = await fetch(req.url, {
      method,
      ...(req.headers ? { headers: req.headers } : {}),
      ...(req.body !== undefined ? { body: req.body } : {}),
      signal: AbortSignal.timeout(60_000),
    });
  } catch (err) {
    const cause = err instanceof Error ? ((err.cause as Error | undefined)?.message ?? err.message) : String(err);
    throw new ProbeError(`preflight ${where}: ${cause}`);
  }
  const text = await res.text();
  const problem = check(res.status, text);
  if (problem) throw new ProbeError(`preflight ${where} → HTTP ${res.status}: ${problem}; body: ${text.slice(0, 300)}`);
}

/** Expect this status and, optionally, a JSON body that passes `bodyCheck`. */
export function expectJson(status: number, bodyCheck?: (json: unknown) => string | undefined): ResponseCheck {
  return (actual, body) => {
    if (actual !== status) return `expected ${status}`;
    if (!bodyCheck) return undefined;
    let json: unknown;
    try {
      json = JSON.parse(body);
    } catch {
      return 'body is not JSON';
    }
    return bodyCheck(json);
  };
}

/** A token response whose access_token is a JWT signed with an asymmetric algorithm. */
export function expectJwtTokenResponse(json: unknown): string | undefined {
  const token = (json as { access_token?: unknown }).access_token;
  if (typeof token !== 'string') return 'no access_token';
  const parts = token.split('.');
  if (parts.length !== 3) return 'access_token is not a JWS';
  try {
    const header = JSON.parse(Buffer.from(parts[0]!, 'base64url').toString('utf8')) as { alg?: string };
    if (!header.alg || header.alg === 'none' || header.alg.startsWith('HS')) return `unexpected JWS alg ${header.alg}`;
  } catch {
    return 'access_token header is not JSON';
  }
  return undefined;
}

/** The standard saturation load: the configured connections, warm-up and duration. */
export function throughputJob(
  ctx: BenchContext,
  req: { url: string; method: string; headers?: Record<string, string>; body?: string; template?: RequestTemplate },
): ThroughputJob {
  return {
    kind: 'throughput',
    url: req.url,
    method: req.method,
    headers: req.headers ?? {},
    ...(req.body !== undefined ? { body: req.body } : {}),
    ...(req.template !== undefined ? { template: req.template } : {}),
    connections: ctx.config.connections,
    warmupSeconds: ctx.config.warmupSec,
    durationSeconds: ctx.config.durationSec,
  };
}

/** The standard bulk-secrets latency load: one request at a time, unique names per request. */
export function bulkSecretsJob(
  ctx: BenchContext,
  req: { url: string; method: string; headers?: Record<string, string>; prefix: string },
): SequenceJob & { body: BulkSecretsBody } {
  return {
    kind: 'sequence',
    url: req.url,
    method: req.method,
    headers: { 'content-type': 'application/json', ...req.headers },
    body: { generator: 'bulkSecrets', params: { count: ctx.config.bulkSize, prefix: req.prefix, keys: ['K1', 'K2'], value: 'v' } },
    warmupRequests: ctx.config.bulkWarmup,
    requests: ctx.config.bulkRequests,
    itemsPerRequest: ctx.config.bulkSize,
    itemsLabel: 'secrets/s',
  };
}

/**
 * The bulk-upsert latency load: the bulk-secrets shape, where the first half of every request's
 * names exist already (the probe creates them beforehand with upsertSetupBody) and get new values.
 */
export function bulkUpsertJob(
  ctx: BenchContext,
  req: { url: string; headers?: Record<string, string>; prefix: string },
): SequenceJob & { body: BulkUpsertBody } {
  const job = bulkSecretsJob(ctx, { ...req, method: 'PUT' });
  return { ...job, body: { generator: 'bulkUpsert', params: { ...job.body.params, existing: Math.floor(ctx.config.bulkSize / 2) } } };
}
