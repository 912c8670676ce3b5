// The API's routes about the caller's own access token, under the base URL like every API route:
// `GET /v1/token` says who the token acts as and with what role now (what a console or a script
// needs to know before offering or trying a change), and `DELETE /v1/token` revokes it. RFC 7009's
// endpoint takes client credentials; this takes only the token, so a holder without the client
// secret (the console) can end its own access.
import { Type } from '@sinclair/typebox';
import type { App } from '../../http/app-types.js';
import { bearerCredentials } from '../../http/bearer.js';
import { enforceLimit, type RateLimiter } from '../../http/rate-limit.js';
import { noStore, Timestamp } from '../../http/schemas.js';
import { RoleSchema } from './roles.js';
import type { TokenService } from './token.service.js';

export interface TokenRoutesDeps {
  tokens: Pick<TokenService, 'revokeOwn' | 'describe'>;
  /** The hourly revocation budget of a client, the one `/oauth/v2/revoke` spends too. */
  revocationsPerClient: RateLimiter;
}

const Caller = Type.Object({
  subject: Type.String({ description: 'Who the token acts as: a service user id (`su_…`), or the external issuer\'s subject.' }),
  clientId: Type.String(),
  name: Type.Union([Type.String(), Type.Null()], { description: 'The service user\'s name; null for a token of the external issuer.' }),
  orgId: Type.String({ description: 'The organization the caller belongs to.' }),
  role: RoleSchema,
  instanceAdmin: Type.Boolean({ description: 'An instance administrator acts as an owner in every organization, and may create and delete organizations.' }),
  issuer: Type.String({ description: 'Who issued the token: this server, or the external issuer.' }),
  scopes: Type.Array(Type.String()),
  expiresAt: Timestamp,
}, { additionalProperties: false });

export function tokenRoutes(app: App, deps: TokenRoutesDeps): void {
  app.get('/v1/token', {
    config: { auth: 'member', operation: 'tokens.describeOwn' },
    schema: {
      tags: ['tokens'],
      summary: 'Who the access token this request carries acts as, and with what role now',
      description: 'Any caller may read its own token\'s description, whatever its role: its subject, organization, role now '
        + '(one changed since the token was issued shows here, as the API applies it to every request), scopes and when it expires. Never the token itself.',
      response: { 200: noStore(Caller) },
    },
  }, async (req, reply) => {
    const caller = await deps.tokens.describe(req.principal!);
    reply.header('cache-control', 'no-store');
    return caller;
  });

  app.delete('/v1/token', {
    config: { auth: 'member', operation: 'tokens.revokeOwn' },
    schema: {
      tags: ['tokens'],
      summary: 'Revoke the access token this request carries (sign out)',
      description: 'Any caller may end its own token, whatever its role; the service user and its other tokens are unaffected. '
        + 'The token is refused from then on: at once by the node that answered, by the others within 5 seconds. '
        + 'It spends the client\'s revocation budget (SLIPWAY_RATE_LIMIT_REVOKE_PER_HOUR, shared with `/oauth/v2/revoke`); past it, 429 and the token stays valid. '
        + 'A token of the external issuer is refused (400 `external_token`): revoke it at that issuer.',
      response: { 204: noStore({ type: 'null', description: 'Revoked' }) },
    },
  }, async (req, reply) => {
    const principal = req.principal!;
    // Each revoked token is kept, and read by every node every few seconds, until it expires. A
    // token of ours names its service user as its subject, the key /oauth/v2/revoke counts under;
    // an external issuer's, refused, spends nothing. The auth hook admitted this request on its
    // bearer token, so the header holds one.
    await deps.tokens.revokeOwn(req.ctx, principal, bearerCredentials(req.headers.authorization!)!, () => enforceLimit(principal.subject, deps.revocationsPerClient, reply));
    return reply.code(204).header('cache-control', 'no-store').send();
  });
}
