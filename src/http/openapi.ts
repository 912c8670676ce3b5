// The OpenAPI 3.1 document is generated from the route schemas. Each route declares its own
// success and domain statuses; this file adds what the shared machinery can answer (401/403/404
// from the auth hook, 400/413/415 from parsing, 429, 5xx) from the route's own declaration, so the
// document and the responses cannot drift apart.
import { STATUS_CODES } from 'node:http';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { RouteOptions } from 'fastify';
import { routePrefix } from '../platform/config.js';
import type { App } from './app-types.js';
import { ProblemSchema } from './schemas.js';
import { declareIdempotencyKey, isIdempotentRoute } from '../modules/idempotency/idempotency.schemas.js';

export interface OpenApiOptions {
  baseUrl: string;
  tokenUrl: string;
  scope: string;
  version: string;
}

const PROBLEM_ID = 'Problem';

// Problems are sent as application/problem+json and documented so; the schema is shared once under
// components.schemas instead of being copied into every response of every operation.
const problem = (description: string) => ({ description, content: { 'application/problem+json': { schema: { $ref: `${PROBLEM_ID}#` } } } });

/** Shared problem responses a route adds for its own domain failures: `...problems(409, 412)`. */
export function problems(...statuses: number[]): Record<number, unknown> {
  const text: Record<number, string> = { 400: 'Invalid request', 404: 'Not found', 409: 'Conflict', 412: 'Precondition failed (If-Match)', 422: 'Unprocessable' };
  return Object.fromEntries(statuses.map((s) => [s, problem(text[s] ?? 'Problem')]));
}

/** POST, PUT, PATCH and DELETE: the methods that write, and on which Fastify reads a body whether or not the route wants one. */
export function isWriteMethod(method: string | string[]): boolean {
  return [method].flat().some((m) => m === 'POST' || m === 'PUT' || m === 'PATCH' || m === 'DELETE');
}

function enrich(route: RouteOptions): void {
  const config = (route.config ?? {}) as { auth?: string; operation?: string; errorFormat?: string };
  const schema = (route.schema ??= {}) as Record<string, unknown> & { response?: Record<string, unknown> };
  if (config.operation) schema.operationId = config.operation;
  const response = (schema.response ??= {});
  const add = (status: string, description: string) => {
    if (!(status in response)) response[status] = problem(description);
  };
  // Public routes (health, discovery) say so with an empty requirement: a statement, not an omission.
  if (!config.auth) schema.security ??= [];
  // Fastify reads a body on these methods whether or not the route wants one, so any of them can
  // answer malformed JSON (400), too large (413) or wrong media type (415).
  const takesBody = isWriteMethod(route.method);
  if (isIdempotentRoute(route)) declareIdempotencyKey(schema, add);
  if (config.errorFormat !== 'oauth') {
    // Every route, even one without input, refuses a URL that cannot be taken (a NUL character).
    add('400', takesBody || schema.querystring || schema.params ? 'Invalid request: the problem points at each offending field' : 'Invalid request: a malformed URL');
    if (takesBody) {
      add('413', 'Request body too large');
      add('415', 'Unsupported media type: send application/json');
    }
    // Answered before routing: a path segment longer than any name or id.
    if (route.url.includes(':')) add('414', 'A path segment longer than any name or id');
    if (config.auth) {
      // A bearer token, which the client credentials flow below gets (tools that run flows, the
      // reference page's Authorize among them, fetch one themselves).
      schema.security = [{ bearerAuth: [] }, { clientCredentials: [] }];
      // The role matrix, machine-readable: the least role (or `runner`, `member`, `instance-admin`) the route admits.
      schema['x-required-role'] = config.auth;
      add('401', 'Missing, invalid, expired or revoked access token');
      add('403', 'The caller\'s role is too low');
      add('429', 'Rate limited: see Retry-After and RateLimit');
      if (route.url.includes(':')) add('404', 'Unknown resource, or an organization the caller does not belong to');
      if (takesBody) {
        add('412', 'Precondition failed: an If-Match or If-None-Match that cannot hold');
        // PostgreSQL may stop any write for a concurrent one (write_conflict, with Retry-After).
        add('409', 'Conflict: another request changed the same data at the same moment (`write_conflict`); nothing was written, retry after Retry-After');
      }
    }
  }
  // The OAuth endpoints answer server errors in the same RFC 6749 shape as their other failures.
  if (config.errorFormat === 'oauth' && response['400'] && !('5XX' in response)) response['5XX'] = response['400'];
  add('5XX', 'Server error or unavailable (Retry-After)');
}

type Operation = {
  tags?: string[];
  security?: Array<Record<string, unknown>>;
  parameters?: Array<{ in?: string; name?: string; $ref?: string }>;
  responses?: Record<string, { description?: string; headers?: Record<string, unknown> }>;
};

const ref = (kind: 'headers' | 'parameters', name: string) => ({ $ref: `#/components/${kind}/${name}` });

/** The response headers every operation's answers share, declared once and referred to. */
const HEADERS = {
  'X-Request-Id': { required: true, description: 'The request\'s id: the one sent, when it is 1 to 128 letters, digits and `._:-`, else a new one. Problems and events carry it.', schema: { type: 'string' } },
  RateLimit: { description: 'On every answer once the caller is authenticated, what is left of each limit that applied (draft-ietf-httpapi-ratelimit-headers): `"api";r=<remaining>;t=<seconds until it resets>` (the OAuth endpoints: `"token-client"` for the client\'s limit, `"token-failures"` for the refused attempts of one address; on revocations, `DELETE /v1/token` too, `"token-revocations"`).', schema: { type: 'string' } },
  'RateLimit-Policy': { description: 'The limits that applied: `"api";q=<requests>;w=<window seconds>` (SLIPWAY_RATE_LIMIT_API_PER_MINUTE; the OAuth endpoints: `"token-client"` or `"token-failures"`, each SLIPWAY_RATE_LIMIT_TOKEN_PER_MINUTE, and on revocations, `DELETE /v1/token` too, `"token-revocations"`, SLIPWAY_RATE_LIMIT_REVOKE_PER_HOUR).', schema: { type: 'string' } },
  'Retry-After': { description: 'Seconds to wait before sending the request again.', schema: { type: 'integer', minimum: 0 } },
  'WWW-Authenticate': { required: true, description: 'The challenge (RFC 6750 §3; the OAuth endpoints: `Basic realm="slipway", charset="UTF-8", error="invalid_client"`), with `error` when a token or client credentials were sent but refused.', schema: { type: 'string' } },
  'Cache-Control': { required: true, description: 'The answer carries credentials or token information: no cache may keep it.', schema: { type: 'string', const: 'no-store' } },
  'Idempotent-Replayed': { description: '`true` on an answer replayed for a retry with the same Idempotency-Key.', schema: { type: 'string', const: 'true' } },
  'Accept-Encoding': { description: 'On a 415 for a Content-Encoding: `identity`, the only coding accepted.', schema: { type: 'string' } },
} as const;

const PARAMETERS = {
  'X-Request-Id': { name: 'X-Request-Id', in: 'header', required: false, description: 'An id for this request, kept when it is 1 to 128 letters, digits and `._:-` (otherwise one is made): it is echoed, logged and recorded on the events the request appends.', schema: { type: 'string' } },
} as const;

/**
 * The headers the shared machinery sends, on the answers that carry them: the request id on every
 * answer; the rate-limit fields on every answer to an authenticated caller; Retry-After on 429,
 * 409 and 5XX; the challenge on 401; no-store on the OAuth endpoints' answers; the replay marker
 * on the successes of idempotent operations.
 */
function declareHeaders(op: Operation): void {
  const bearer = op.security?.some((s) => 'bearerAuth' in s) === true;
  const oauth = op.tags?.includes('oauth') === true && op.security?.some((s) => 'clientBasic' in s) === true;
  const idempotent = op.parameters?.some((p) => p.in === 'header' && p.name?.toLowerCase() === 'idempotency-key') === true;
  (op.parameters ??= []).push(ref('parameters', 'X-Request-Id'));
  for (const [status, response] of Object.entries(op.responses ?? {})) {
    // The plugin's placeholder for a response schema without a description of its own.
    if (response.description === 'Default Response') response.description = STATUS_CODES[Number(status)] ?? status;
    const add = (name: keyof typeof HEADERS) => {
      (response.headers ??= {})[name] = ref('headers', name);
    };
    add('X-Request-Id');
    if (((bearer && status !== '401') || oauth) && status !== '5XX') {
      add('RateLimit');
      add('RateLimit-Policy');
    }
    if (status === '429') add('Retry-After');
    if (status === '409' || status === '5XX') add('Retry-After');
    if (status === '401') add('WWW-Authenticate');
    if (status === '415') add('Accept-Encoding');
    if (oauth) add('Cache-Control');
    // Kept and replayed: successes and refusals of the request itself; not a failure on the
    // server's side, a refusal of the caller (401, 403: a retry with a new token must run) or a
    // rate limit (met before the key is looked at).
    if (idempotent && (status.startsWith('2') || (status.startsWith('4') && !['401', '403', '429'].includes(status)))) add('Idempotent-Replayed');
  }
}

type BodySchema = { type?: unknown; description?: string; 'x-form'?: Record<string, unknown> };
type Servers = Array<{ url: string }>;

/**
 * The path of a route in the document: relative to the server it is served under, the one its
 * schema names (the OAuth endpoints name SLIPWAY_AUTH_URL, or its origin) or else the document's
 * (SLIPWAY_BASE_URL), whose path prefixes the route's.
 */
function documentedPath(url: string, servers: Servers | undefined, baseUrl: string): string {
  const prefix = routePrefix(servers?.[0]?.url ?? baseUrl);
  return url.startsWith(`${prefix}/`) ? url.slice(prefix.length) : url;
}

/**
 * Request bodies: one whose schema admits null may be left out; a form documented with `x-form`
 * (the OAuth endpoints, whose handlers check their fields themselves) gets that as its schema.
 * The servers an operation names go on its path (the OpenAPI place for a path served elsewhere).
 */
function fixPaths<T>(doc: T): T {
  const paths = (doc as { paths?: Record<string, Record<string, { servers?: Servers; requestBody?: { required?: boolean; description?: string; content?: Record<string, { schema?: BodySchema }> } }>> }).paths ?? {};
  for (const item of Object.values(paths)) {
    for (const op of Object.values(item)) {
      declareHeaders(op as Operation);
      if (op.servers !== undefined) {
        (item as { servers?: Servers }).servers = op.servers;
        delete op.servers;
      }
      for (const media of Object.values(op.requestBody?.content ?? {})) {
        const form = media.schema?.['x-form'];
        if (form === undefined) continue;
        media.schema = { description: media.schema!.description, ...form };
        delete op.requestBody!.description;
      }
      const schema = op.requestBody?.content?.['application/json']?.schema;
      // A body schema that admits null, or has no type at all, may be left out.
      if (schema !== undefined && (schema.type === undefined || (Array.isArray(schema.type) && schema.type.includes('null')))) op.requestBody!.required = false;
    }
  }
  return doc;
}

export async function registerOpenApi(app: App, options: OpenApiOptions): Promise<void> {
  const apiPrefix = routePrefix(options.baseUrl);
  app.addHook('onRoute', (route) => {
    if (route.url.startsWith(`${apiPrefix}/docs`) || route.url === `${apiPrefix}/openapi.json`) return;
    enrich(route);
  });

  app.addSchema({ $id: PROBLEM_ID, ...ProblemSchema });
  await app.register(swagger, {
    // Shared schemas keep their own name in components.schemas (`Problem`, not `def-0`).
    refResolver: { buildLocalReference: (json, _base, _fragment, i) => (typeof json.$id === 'string' ? json.$id : `def-${i}`) },
    // The plugin marks every request body required, and knows nothing of x-form; its own stripping
    // of the base path would cut the server's path off routes served elsewhere too.
    transformObject: (doc) => fixPaths('openapiObject' in doc ? doc.openapiObject : doc.swaggerObject),
    stripBasePath: false,
    transform: ({ schema, url }) => ({ schema, url: documentedPath(url, (schema as { servers?: Servers }).servers, options.baseUrl) }),
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'Slipway API',
        version: options.version,
        description: 'Deployment management: organizations, service users, secrets, environments, services and deployments. ' +
          `Get a token with the client credentials grant at ${options.tokenUrl} and the scope \`${options.scope}\`. ` +
          'Errors are RFC 9457 problems (`application/problem+json`) with a stable `code`.',
        license: { name: 'Apache-2.0', identifier: 'Apache-2.0' },
      },
      servers: [{ url: options.baseUrl }],
      components: {
        headers: HEADERS,
        parameters: PARAMETERS,
        securitySchemes: {
          bearerAuth: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT', description: 'An access token from the token endpoint.' },
          clientBasic: { type: 'http', scheme: 'basic', description: 'client_id:client_secret, each form-url-encoded (RFC 6749 §2.3.1).' },
          clientCredentials: {
            type: 'oauth2',
            description: `The client credentials grant of a service user: its token is the bearer token the API takes. Ask for the scopes below, the audience scope \`${options.scope.split(' ').find((s) => s.startsWith('urn:'))}\` at least.`,
            flows: { clientCredentials: { tokenUrl: options.tokenUrl, scopes: Object.fromEntries(options.scope.split(' ').map((s) => [s, s.startsWith('urn:') ? 'The API\'s audience: a token without it is refused' : 'Granted, and changes nothing'])) } },
          },
        },
      },
      tags: [
        { name: 'oauth', description: 'The authorization server' },
        { name: 'organizations', description: 'Organizations' },
        { name: 'tokens', description: 'The caller\'s own access token' },
        { name: 'service users', description: 'Machine identities and their client secrets' },
        { name: 'secrets', description: 'Organization secrets' },
        { name: 'environments', description: 'Where deployments go; protected ones take deployments from admins and owners only' },
        { name: 'services', description: 'What deployments run: command or image, port, health check, variables and secret references' },
        { name: 'deployments', description: 'A service into an environment: the state machine, cancel, rollback and logs' },
        { name: 'runner', description: 'The runner protocol: claim (long poll), heartbeat, logs and complete, fenced by the lease token' },
        { name: 'events', description: 'The audit log' },
        { name: 'webhooks', description: 'The audit log\'s events POSTed to a URL as they happen, signed (Standard Webhooks), in order, retried until taken' },
        { name: 'health', description: 'Liveness and readiness' },
      ],
    },
  });

  app.get(`${apiPrefix}/openapi.json`, { schema: { hide: true } }, async () => app.swagger());
  // The reference shares the console's origin, whose tab keeps a token: it gets a policy of its own
  // (only its own scripts run; no one may frame it), and the same headers as the console.
  await app.register(swaggerUi, {
    routePrefix: `${apiPrefix}/docs`, theme: { title: 'Slipway API reference' }, uiConfig: { docExpansion: 'list', deepLinking: true, validatorUrl: null },
    staticCSP: true,
    transformStaticCSP: (policy: string) => policy
      .replace("frame-ancestors 'self'", "frame-ancestors 'none'")
      .replace(' validator.swagger.io', '')
      // Swagger UI sets styles from its script; a style cannot read the tab's storage.
      .replace("style-src 'self'", "style-src 'self' 'unsafe-inline'")
      // Over plain HTTP (a laptop, 127.0.0.1) an upgrade would send the page's own requests to an HTTPS port nobody serves.
      .replace(/\s*upgrade-insecure-requests;/, ''),
    uiHooks: {
      onRequest: (_req, reply, done) => {
        reply.headers({ 'x-frame-options': 'DENY', 'x-content-type-options': 'nosniff', 'referrer-policy': 'no-referrer' });
        done();
      },
    },
  });
}
