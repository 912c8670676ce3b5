// RFC 6749 §5.2 errors of the token, introspection and revocation endpoints. They are AppErrors
// whose code is the OAuth error code; routes marked `errorFormat: 'oauth'` render them as
// `{ error, error_description }`.
import { AppError } from '../../platform/errors.js';

const oauth = (status: number, code: string, description: string, headers: Record<string, string> = {}) =>
  new AppError(status, code, 'OAuth error', description, {}, headers);

export const oauthErrors = {
  invalidRequest: (description: string) => oauth(400, 'invalid_request', description),
  /**
   * 401 with a Basic challenge (RFC 6749 §5.2): unknown client, wrong secret, disabled client. The
   * challenge names the error too, as oidc-provider's does: OAuth client libraries (openid-client,
   * oauth4webapi) report a 401 with a challenge by that challenge, not by the body.
   */
  invalidClient: (description: string) => oauth(401, 'invalid_client', description, { 'www-authenticate': 'Basic realm="slipway", charset="UTF-8", error="invalid_client"' }),
  unsupportedGrantType: (grant: string) =>
    oauth(400, 'unsupported_grant_type', `The grant type '${grant}' is not supported; use client_credentials.`),
  invalidScope: (unknown: string[], supported: string) =>
    oauth(400, 'invalid_scope', `Unknown scope ${unknown.map((s) => `'${s}'`).join(', ')}; supported scopes are: ${supported}.`),
  /** RFC 7009 §2.1: the token is valid but was issued to another client (the error Keycloak also answers). */
  tokenOfAnotherClient: () =>
    oauth(400, 'unauthorized_client', 'This token was issued to another client; a client can revoke only its own tokens. Revoke it with that client\'s credentials, or disable that service user.'),
};
