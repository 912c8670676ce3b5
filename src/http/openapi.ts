// The OpenAPI 3.1 document is generated from the route schemas. Each route declares its own
// success and domain statuses; this file adds what the shared machinery can answer (401/403/404
// from the auth hook, 400/413/415 from parsing, 429, 5xx) from the route's own declaration, so the
// document and the responses cannot drift apart.
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { RouteOptions } from 'fastify';
import type { App } from './app-types.js';
import { ProblemSchema } from './schemas.js';

export interface OpenApiOptions {
  baseUrl: string;
  tokenUrl: string;
  scope: string;
  version: string;
}

const problem = (description: string) => ({ ...ProblemSchema, description });

/** Shared problem responses a route adds for its own domain failures: `...problems(409, 412)`. */
export function problems(...statuses: number[]): Record<number, unknown> {
  const text: Record<number, string> = { 400: 'Invalid request', 404: 'Not found', 409: 'Conflict', 412: 'Precondition failed (If-Match)', 422: 'Unprocessable' };
  return Object.fromEntries(statuses.map((s) => [s, problem(text[s] ?? 'Problem')]));
}

function enrich(route: RouteOptions): void {
  const config = (route.config ?? {}) as { auth?: string; operation?: string; errorFormat?: string };
  const schema = (route.schema ??= {}) as Record<string, unknown> & { response?: Record<string, unknown> };
  if (config.operation) schema.operationId = config.operation;
  const response = (schema.response ??= {});
  const add = (status: string, description: string) => {
    if (!(status in response)) response[status] = problem(description);
  };
  if (config.errorFormat !== 'oauth') {
    if (schema.body || schema.querystring || schema.params) add('400', 'Invalid request: the problem points at each offending field');
    if (schema.body) {
      add('413', 'Request body too large');
      add('415', 'Unsupported media type: send application/json');
    }
    if (config.auth) {
      schema.security = [{ bearerAuth: [] }];
      // The role matrix, machine-readable: the least role (or `runner`, `member`, `instance-admin`) the route admits.
      schema['x-required-role'] = config.auth;
      add('401', 'Missing, invalid, expired or revoked access token');
      add('403', 'The caller\'s role is too low');
      add('429', 'Rate limited: see Retry-After and RateLimit');
      if (route.url.includes(':')) add('404', 'Unknown resource, or an organization the caller does not belong to');
    }
  }
  add('5XX', 'Server error or unavailable (Retry-After)');
}

export async function registerOpenApi(app: App, options: OpenApiOptions): Promise<void> {
  app.addHook('onRoute', (route) => {
    if (route.url.startsWith('/docs') || route.url === '/openapi.json') return;
    enrich(route);
  });

  await app.register(swagger, {
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
        securitySchemes: {
          bearerAuth: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT', description: 'An access token from the token endpoint.' },
          clientBasic: { type: 'http', scheme: 'basic', description: 'client_id:client_secret, each form-url-encoded (RFC 6749 §2.3.1).' },
        },
      },
      tags: [
        { name: 'oauth', description: 'The authorization server' },
        { name: 'organizations', description: 'Organizations' },
        { name: 'service users', description: 'Machine identities and their client secrets' },
        { name: 'secrets', description: 'Organization secrets' },
        { name: 'events', description: 'The audit log' },
        { name: 'health', description: 'Liveness and readiness' },
      ],
    },
  });

  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());
  await app.register(swaggerUi, { routePrefix: '/docs', uiConfig: { docExpansion: 'list', deepLinking: true } });
}
