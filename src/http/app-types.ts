// The Fastify instance type the route modules register on, and what our hooks add to requests.
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyBaseLogger, FastifyInstance, RawReplyDefaultExpression, RawRequestDefaultExpression, RawServerDefault } from 'fastify';
import type { RequestContext } from '../platform/context.js';
import type { Access } from '../modules/auth/roles.js';
import type { Principal } from '../modules/auth/principal.js';
import type { Organization } from '../modules/orgs/orgs.schemas.js';
import type { ReplayedByReference } from '../modules/idempotency/idempotency.schemas.js';

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
     * false: the route does not take Idempotency-Key (a runner's claim, whose answer carries secret
     * values, and its serving question, which changes nothing). An object: the route takes it, but
     * what its 2xx answer carries must not be kept (a reveal's values), so a reference is kept and
     * a replay makes the answer again from it.
     */
    idempotent?: false | ReplayedByReference;
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
