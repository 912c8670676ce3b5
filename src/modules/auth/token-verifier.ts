// The API's side of tokens. Verifying an ES256 signature costs several times a whole small
// request, so a token's signature and claims are checked once and the result is kept (bounded, and
// never past the token's expiry). What can change while a token lives - revocation, a disabled or
// deleted service user, its role - is checked on every request against short-lived caches.
import { createLocalJWKSet, errors as joseErrors, jwtVerify, type JWTPayload } from 'jose';
import { LRUCache } from 'lru-cache';
import { errors } from '../../platform/errors.js';
import type { Principal } from './principal.js';
import type { PrincipalDirectory, SubjectState } from './principal-directory.js';
import type { RevocationList } from './revocations.js';
import { audienceScope, orgClaim, tokenGenerationClaim } from './scopes.js';
import { SIGNING_ALG, type SigningKeys } from './signing-keys.js';

interface VerifiedClaims {
  subject: string;
  clientId: string;
  orgId: string;
  tokenId: string;
  scopes: string[];
  expiresAt: number;
  /** The generation of its subject's tokens it was issued in (none: issued before there were any, 0). */
  generation: number;
  /** Whether `aud` names this API's project: a token without it is ours but not for the API. */
  forThisApi: boolean;
}

export interface TokenVerifierDeps {
  keys: SigningKeys;
  principals: PrincipalDirectory;
  revocations: RevocationList;
  issuer: string;
  idpName: string;
  projectId: string;
  /** Allowed clock difference for exp and nbf, seconds. */
  clockToleranceSeconds?: number;
}

const CLOCK_TOLERANCE = 5;

function describe(error: unknown): string {
  if (error instanceof joseErrors.JWTExpired) return 'The access token has expired; request a new one.';
  if (error instanceof joseErrors.JWTClaimValidationFailed) {
    switch (error.claim) {
      case 'nbf': return 'The access token is not valid yet (nbf is in the future).';
      case 'iss': return 'The access token was issued by another issuer.';
      case 'typ': return 'The access token has the wrong type; expected an at+jwt access token.';
      default: return `The access token's ${error.claim} claim is invalid.`;
    }
  }
  if (error instanceof joseErrors.JOSEAlgNotAllowed) return `The access token must be signed with ${SIGNING_ALG}.`;
  if (error instanceof joseErrors.JWSSignatureVerificationFailed) return 'The access token signature is invalid.';
  if (error instanceof joseErrors.JWKSNoMatchingKey) return 'The access token was signed with an unknown key.';
  return 'The access token is malformed.';
}

export function createTokenVerifier(deps: TokenVerifierDeps) {
  const audience = audienceScope(deps.idpName, deps.projectId);
  const orgClaimName = orgClaim(deps.idpName);
  const generationClaimName = tokenGenerationClaim(deps.idpName);
  // Keyed by the signature, the token's last and shortest part: hashing a whole ~800-character
  // token on every request costs more than comparing it with the one remembered.
  const verified = new LRUCache<string, { token: string; claims: VerifiedClaims }>({ max: 20_000, ttlAutopurge: false });
  const signatureOf = (token: string) => token.slice(token.lastIndexOf('.') + 1);
  let jwks: ReturnType<typeof createLocalJWKSet> | null = null;
  let jwksKids = new Set<string>();
  let lastReload = 0;

  async function keySet(kid: string | undefined) {
    const set = await deps.keys.current();
    if (jwks === null || set.publicJwks.some((k) => !jwksKids.has(k.kid!))) {
      jwks = createLocalJWKSet({ keys: set.publicJwks });
      jwksKids = new Set(set.publicJwks.map((k) => k.kid!));
    }
    // A kid we have not seen may come from a rotation on another node; re-read at most once a second.
    if (kid !== undefined && !jwksKids.has(kid) && Date.now() - lastReload > 1_000) {
      lastReload = Date.now();
      const fresh = await deps.keys.reload();
      jwks = createLocalJWKSet({ keys: fresh.publicJwks });
      jwksKids = new Set(fresh.publicJwks.map((k) => k.kid!));
    }
    return jwks;
  }

  async function verifySignature(token: string): Promise<VerifiedClaims> {
    let payload: JWTPayload;
    try {
      const result = await jwtVerify(token, async (header, input) => (await keySet(header.kid))(header, input), {
        algorithms: [SIGNING_ALG],
        issuer: deps.issuer,
        typ: 'at+jwt',
        clockTolerance: deps.clockToleranceSeconds ?? CLOCK_TOLERANCE,
        requiredClaims: ['exp', 'iat', 'sub', 'jti'],
      });
      payload = result.payload;
    } catch (error) {
      // Only what jose says about the token is the token's fault; a key set that could not be read is ours.
      if (!(error instanceof joseErrors.JOSEError)) throw error;
      throw errors.invalidToken(describe(error));
    }
    const aud = Array.isArray(payload.aud) ? payload.aud : payload.aud === undefined ? [] : [payload.aud];
    const orgId = payload[orgClaimName];
    if (typeof orgId !== 'string' || typeof payload.client_id !== 'string') throw errors.invalidToken('The access token lacks the organization or client claim.');
    return {
      subject: payload.sub!,
      clientId: payload.client_id,
      orgId,
      tokenId: payload.jti!,
      scopes: typeof payload.scope === 'string' ? payload.scope.split(' ').filter(Boolean) : [],
      expiresAt: payload.exp! * 1000,
      generation: typeof payload[generationClaimName] === 'number' ? payload[generationClaimName] : 0,
      forThisApi: aud.includes(deps.projectId),
    };
  }

  /** The claims of a token verified before, or undefined when its signature has yet to be checked. */
  function remembered(token: string): VerifiedClaims | undefined {
    const entry = verified.get(signatureOf(token));
    const claims = entry !== undefined && entry.token === token ? entry.claims : undefined;
    if (claims !== undefined && claims.expiresAt + (deps.clockToleranceSeconds ?? CLOCK_TOLERANCE) * 1000 <= Date.now()) {
      verified.delete(signatureOf(token));
      throw errors.invalidToken('The access token has expired; request a new one.');
    }
    return claims;
  }

  async function verifyAndRemember(token: string): Promise<VerifiedClaims> {
    const claims = await verifySignature(token);
    verified.set(signatureOf(token), { token, claims }, { ttl: Math.max(1, claims.expiresAt - Date.now()) });
    return claims;
  }

  function principalOf(claims: VerifiedClaims, state: SubjectState | null): Principal {
    if (state === null || state.orgId !== claims.orgId) throw errors.invalidToken('The service user of this token no longer exists.');
    if (state.disabled) throw errors.invalidToken('The service user of this token is disabled.');
    if (claims.generation !== state.tokenGeneration) {
      throw errors.invalidToken('The access token was issued before its service user was disabled; request a new one.');
    }
    return {
      subject: claims.subject, clientId: claims.clientId, orgId: claims.orgId, tokenId: claims.tokenId, scopes: claims.scopes,
      expiresAt: claims.expiresAt, role: state.role, instanceAdmin: state.instanceAdmin,
    };
  }

  const revokedError = () => errors.invalidToken('The access token has been revoked.');

  return {
    /**
     * The API's check (signature, claims, audience, revocation, subject state). The authorization
     * server's own endpoints describe or revoke tokens whatever their audience (`anyAudience`), and
     * revoking an already revoked token is not an error (`allowRevoked`).
     */
    async verify(token: string, options: { allowRevoked?: boolean; anyAudience?: boolean } = {}): Promise<Principal> {
      const claims = remembered(token) ?? (await verifyAndRemember(token));
      if (!claims.forThisApi && !options.anyAudience) throw errors.wrongAudience(audience);
      if (!options.allowRevoked && (await deps.revocations.isRevoked(claims.tokenId))) throw revokedError();
      return principalOf(claims, await deps.principals.get(claims.subject));
    },

    /**
     * The same check as `verify` for the API, without waiting when this node already knows every
     * answer (a token seen before, a fresh revocation list, its subject's state): undefined when
     * something has to be read first, and then `verify` decides.
     */
    known(token: string): Principal | undefined {
      const claims = remembered(token);
      if (claims === undefined) return undefined;
      if (!claims.forThisApi) throw errors.wrongAudience(audience);
      const revoked = deps.revocations.revokedNow(claims.tokenId);
      if (revoked === undefined) return undefined;
      if (revoked) throw revokedError();
      const state = deps.principals.known(claims.subject);
      return state === undefined ? undefined : principalOf(claims, state);
    },
    forget(token: string): void {
      verified.delete(signatureOf(token));
    },
  };
}

export type TokenVerifier = ReturnType<typeof createTokenVerifier>;
