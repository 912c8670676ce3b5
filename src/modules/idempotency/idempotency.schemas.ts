// Which routes take an Idempotency-Key, and the header's one schema: it validates the header and
// documents it in the OpenAPI document (declared on each route by http/openapi.ts).
import { Type, type TSchema } from '@sinclair/typebox';
import type { FastifyRequest } from 'fastify';

export const IDEMPOTENCY_HEADER = 'idempotency-key';
export const REPLAYED_HEADER = 'idempotent-replayed';

export const IdempotencyKeyHeader = Type.String({
  pattern: '^[\\x20-\\x7E]{1,255}$',
  'x-pattern-hint': '1-255 printable ASCII characters; a UUID is a good choice',
  description: 'Makes the POST safe to retry: 1-255 printable ASCII characters (a UUID is a good choice), unique per request. '
    + 'A retry with the same key and body within 24 hours replays the first response (with `Idempotent-Replayed: true`) '
    + 'instead of running again; the same key with another body is a 422; a retry while the first is still running is a 409 '
    + 'with Retry-After. Keys are per service user. A 5xx is not kept: retry it with the same key.',
});

/**
 * For a route whose 2xx answer must not be kept (it carries secret values): what is kept instead,
 * and how a replay makes the answer again from it, without running the route's effects again.
 */
export interface ReplayedByReference {
  /** What to keep of the request's 2xx answer, which its handler noted. */
  reference(req: FastifyRequest): Buffer;
  /** The body to send for a replay: serialized by the route's response schema, as the first was. */
  replay(req: FastifyRequest, reference: Buffer): Promise<unknown>;
}

/**
 * A route's ReplayedByReference from what its handler notes of each answer (`note(req, kept)`),
 * kept as JSON; `replay` makes the answer again from it.
 */
export function keptByReference<T>(replay: (req: FastifyRequest, kept: T) => Promise<unknown>): { note(req: FastifyRequest, kept: T): void; idempotent: ReplayedByReference } {
  const noted = new WeakMap<FastifyRequest, { kept: T }>();
  return {
    note: (req, kept) => { noted.set(req, { kept }); },
    idempotent: {
      reference: (req) => Buffer.from(JSON.stringify(noted.get(req)!.kept)),
      replay: (req, reference) => replay(req, JSON.parse(reference.toString('utf8')) as T),
    },
  };
}

interface RouteShape {
  method: string | string[];
  url: string;
  /** The route's own path, without the prefix it is registered under (SLIPWAY_BASE_URL's path). */
  routePath?: string;
  config?: unknown;
}

/** Every authenticated POST of the API; not the OAuth endpoints, whose retry semantics RFC 6749 fixes. */
export function isIdempotentRoute(route: RouteShape): boolean {
  const config = route.config as { auth?: unknown; idempotent?: false | ReplayedByReference } | undefined;
  return [route.method].flat().includes('POST') && (route.routePath ?? route.url).startsWith('/v1/') && config?.auth !== undefined && config.idempotent !== false;
}

const IN_PROGRESS = 'a request with the same Idempotency-Key is still in progress (Retry-After), or was carried out but its response was lost (`idempotency_response_lost`: it is not run again)';

/** Declares the header on a route (validated and documented) and the statuses it can answer. */
export function declareIdempotencyKey(schema: Record<string, unknown>, add: (status: string, description: string) => void): void {
  const headers = (schema.headers ?? { type: 'object', properties: {} }) as { properties?: Record<string, TSchema> };
  schema.headers = { ...headers, properties: { ...headers.properties, [IDEMPOTENCY_HEADER]: IdempotencyKeyHeader } };
  // A route's own 409 gains the in-progress case; a copy, as its schema object may be shared.
  const response = (schema.response ??= {}) as Record<string, { description?: string }>;
  const conflict = response['409'];
  if (conflict) response['409'] = { ...conflict, description: `${conflict.description ?? 'Conflict'}; or ${IN_PROGRESS}` };
  add('409', `Conflict: ${IN_PROGRESS}`);
  add('422', 'The Idempotency-Key was already used for a different request');
}
