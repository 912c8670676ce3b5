// The Fastify instance type the route modules register on, and what our hooks add to requests.
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyBaseLogger, FastifyInstance, RawReplyDefaultExpression, RawRequestDefaultExpression, RawServerDefault } from 'fastify';
import type { RequestContext } from '../platform/context.js';
import type { Access } from '../modules/auth/roles.js';
import type { Principal } from '../modules/auth/principal.js';
import type { Organization } from '../modules/orgs/orgs.schemas.js';

export type App = FastifyInstance<RawServerDefault, RawRequestDefaultExpression, RawReplyDefaultExpression, FastifyBaseLogger, TypeBoxTypeProvider>;

declare module 'fastify' {
  interface FastifyInstance {
    /** SLIPWAY_BASE_URL, without a trailing slash: where clients reach this API. */
    publicBaseUrl: string;
  }
  interface FastifyContextConfig {
    /** Who may call the route; absent means public (health, discovery, the token endpoint). */
    auth?: Access;
    /** Stable dotted operation name, used as the OpenAPI operationId and in logs. */
    operation?: string;
    /** Problem format: RFC 9457 for the API, RFC 6749 §5.2 for the OAuth endpoints. */
    errorFormat?: 'problem' | 'oauth';
    /**
     * false: the route does not take Idempotency-Key. For answers that must not be kept or
     * replayed: a reveal (each one audited) and a runner's claim (both carry secret values).
     */
    idempotent?: false;
  }
  interface FastifyRequest {
    principal: Principal | null;
    /** The organization named by `:orgId`, resolved and checked against the caller. */
    org: Organization | null;
    ctx: RequestContext;
    /**
     * Checks the caller's token again, as at the start (revoked, its service user disabled, deleted
     * or given another role since): for a request that waits long before it acts, a long poll.
     */
    reauthenticate: () => Promise<void>;
  }
}
