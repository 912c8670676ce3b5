// The API's one route about the caller's own access token, under the base URL like every API route:
// `DELETE /v1/token` revokes the token the request carries. RFC 7009's endpoint takes client
// credentials; this takes only the token, so a holder without the client secret (the console) can
// end its own access.
import type { App } from '../../http/app-types.js';
import { bearerCredentials } from '../../http/bearer.js';
import { enforceLimit, type RateLimiter } from '../../http/rate-limit.js';
import { noStore } from '../../http/schemas.js';
import type { TokenService } from './token.service.js';

export interface TokenRoutesDeps {
  tokens: Pick<TokenService, 'revokeOwn'>;
  /** The hourly revocation budget of a client, the one `/oauth/v2/revoke` spends too. */
  revocationsPerClient: RateLimiter;
}

export function tokenRoutes(app: App, deps: TokenRoutesDeps): void {
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
