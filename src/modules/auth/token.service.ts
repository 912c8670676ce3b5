// The authorization server's side: authenticate a client, issue an RFC 9068 JWT access token,
// introspect (RFC 7662) and revoke (RFC 7009).
import { decodeJwt } from 'jose';
import { secretMatches } from '../../platform/crypto/client-secret.js';
import type { Db } from '../../platform/db/database.js';
import { isAppError } from '../../platform/errors.js';
import { newId } from '../../platform/ids.js';
import { serviceUsersRepo, type ServiceUserRow } from '../service-users/service-users.repo.js';
import { oauthErrors } from './oauth-errors.js';
import type { Principal } from './principal.js';
import type { RevocationList } from './revocations.js';
import { audienceScope, orgClaim, scopeParser, STANDARD_SCOPES, tokenGenerationClaim } from './scopes.js';

export { orgClaim };
import type { SigningKeys } from './signing-keys.js';
import type { TokenVerifier } from './token-verifier.js';

export interface ClientCredentials {
  clientId: string;
  clientSecret: string;
}

export interface TokenResponse {
  access_token: string;
  token_type: 'Bearer';
  expires_in: number;
  scope: string;
}

export interface TokenServiceDeps {
  db: Db;
  pepper: Buffer;
  keys: SigningKeys;
  revocations: RevocationList;
  verifier: TokenVerifier;
  issuer: string;
  idpName: string;
  projectId: string;
  ttlSeconds: number;
}


const LAST_USED_RESOLUTION_MS = 60_000;

/**
 * A token the verifier refuses is simply not active (introspection) or nothing to revoke. Anything
 * else (the database did not answer) is a server error: never report a revocation that did not happen.
 */
function inactiveUnlessBroken(error: unknown): { active: false } {
  if (isAppError(error)) return { active: false };
  throw error;
}

export function createTokenService(deps: TokenServiceDeps) {
  const supported = [...STANDARD_SCOPES, audienceScope(deps.idpName, deps.projectId)].join(' ');
  const claimName = orgClaim(deps.idpName);
  const generationClaimName = tokenGenerationClaim(deps.idpName);
  const parseScopes = scopeParser(deps.idpName, deps.projectId);
  // last_used_at is written at most once a minute per secret, not on every token request.
  const lastTouched = new Map<string, number>();

  async function authenticate(creds: ClientCredentials): Promise<ServiceUserRow> {
    // Every failure says the same to the caller: which one it was is for the log, not the client.
    const fail = () => oauthErrors.invalidClient('Client authentication failed: unknown client, wrong secret or disabled service user.');
    if (!creds.clientId.startsWith('su_') || creds.clientId.length > 64) throw fail();
    // Read afresh every time (one query): a removed secret or a disabled client is refused at once,
    // on every node, whatever process made the change.
    const found = await serviceUsersRepo.findWithSecrets(deps.db, creds.clientId);
    if (!found) throw fail();
    const { user, secrets } = found;
    const match = secrets.find((s) => secretMatches(deps.pepper, creds.clientSecret, s.hash));
    if (!match || user.disabled_at !== null) throw fail();
    const now = Date.now();
    if (now - (lastTouched.get(match.id) ?? 0) > LAST_USED_RESOLUTION_MS) {
      lastTouched.set(match.id, now);
      if (lastTouched.size > 100_000) lastTouched.clear();
      await serviceUsersRepo.touchSecret(deps.db, match.id, new Date(now).toISOString());
    }
    return user;
  }

  return {
    authenticate,

    /** Issues a token to a client that `authenticate` has accepted: only it learns what is wrong with its scope. */
    async clientCredentialsGrant(user: ServiceUserRow, scope: string | undefined): Promise<TokenResponse> {
      const parsed = parseScopes(scope);
      if (!parsed.ok) throw oauthErrors.invalidScope(parsed.unknown, supported);
      const { signer } = await deps.keys.current();
      const now = Math.floor(Date.now() / 1000);
      const granted = parsed.granted.join(' ');
      const accessToken = signer.signAccessToken({
        iss: deps.issuer,
        sub: user.id,
        aud: parsed.audience ? [deps.projectId, user.id] : [user.id],
        iat: now,
        nbf: now,
        exp: now + deps.ttlSeconds,
        jti: newId('token'),
        client_id: user.id,
        scope: granted,
        [claimName]: user.org_id,
        // Disabling the user starts a new generation: this token dies with its generation.
        [generationClaimName]: Number(user.token_generation),
      });
      // RFC 6749 §4.4.3: no refresh token for this grant, even when offline_access is asked for.
      return { access_token: accessToken, token_type: 'Bearer', expires_in: deps.ttlSeconds, scope: granted };
    },

    /**
     * RFC 7662. Only tokens of the caller's own organization are described; others are inactive.
     * A token issued without the API's audience is still active: `aud` says whom it is for.
     */
    async introspect(caller: ServiceUserRow, token: string): Promise<Record<string, unknown>> {
      try {
        const principal = await deps.verifier.verify(token, { anyAudience: true });
        if (principal.orgId !== caller.org_id) return { active: false };
        const claims = decodeJwt(token);
        return {
          active: true,
          scope: principal.scopes.join(' '),
          client_id: principal.clientId,
          sub: principal.subject,
          token_type: 'Bearer',
          exp: claims.exp,
          iat: claims.iat,
          nbf: claims.nbf,
          iss: claims.iss,
          aud: claims.aud,
          jti: claims.jti,
          [claimName]: principal.orgId,
        };
      } catch (error) {
        return inactiveUnlessBroken(error);
      }
    },

    /**
     * RFC 7009 §2.1: a client revokes its own tokens. A token that is not one of ours, or no longer
     * valid, is not an error (200, nothing to do); a live token issued to another client is refused
     * and stays valid, since the caller may not end another client's access.
     */
    async revoke(caller: ServiceUserRow, token: string): Promise<void> {
      let principal: Principal;
      try {
        principal = await deps.verifier.verify(token, { allowRevoked: true, anyAudience: true });
      } catch (error) {
        inactiveUnlessBroken(error);
        return;
      }
      if (principal.clientId !== caller.id) throw oauthErrors.tokenOfAnotherClient();
      await deps.revocations.revoke({ jti: principal.tokenId, serviceUserId: caller.id, expiresAt: principal.expiresAt });
      deps.verifier.forget(token);
    },
  };
}

export type TokenService = ReturnType<typeof createTokenService>;
