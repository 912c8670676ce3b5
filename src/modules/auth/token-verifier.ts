// The API's side of tokens. Verifying an ES256 signature costs several times a whole small
// request, so a token's signature and claims are checked once and the result is kept (bounded, and
// never past the token's expiry). What can change while a token lives - revocation, a disabled or
// deleted service user, its role - is checked on every request against short-lived caches.
// With an external issuer configured (a ZITADEL), tokens are routed by `iss`: that issuer's are
// verified against its keys and act in the organization linked to theirs (external-issuer.ts,
// zitadel-claims.ts); any other `iss` meets the checks of our own tokens, and fails them.
import { createLocalJWKSet, decodeJwt, decodeProtectedHeader, errors as joseErrors, jwtVerify, type JWK, type JWTPayload, type JWTVerifyGetKey } from 'jose';
import { LRUCache } from 'lru-cache';
import { AppError, errors } from '../../platform/errors.js';
import type { Organization } from '../orgs/orgs.schemas.js';
import { createExternalKeys, EXTERNAL_ALGORITHMS, type ExternalIssuerConfig } from './external-issuer.js';
import type { Principal } from './principal.js';
import type { PrincipalDirectory, SubjectState } from './principal-directory.js';
import type { RevocationList } from './revocations.js';
import { ROLES } from './roles.js';
import { audienceScope, orgClaim, tokenGenerationClaim } from './scopes.js';
import { SIGNING_ALG, type SigningKeys } from './signing-keys.js';
import { zitadelAudienceScope, zitadelClaims, zitadelRolesClaim, ZITADEL_ROLES_SCOPE, type ExternalClaims } from './zitadel-claims.js';
import { nowDate, nowMs } from '../../platform/clock.js';

interface OwnClaims {
  external: false;
  subject: string;
  clientId: string;
  orgId: string;
  tokenId: string;
  scopes: string[];
  expiresAt: number;
  /** When it was issued (its `iat`), in milliseconds. */
  issuedAt: number;
  /** The generation of its subject's tokens it was issued in (none: issued before there were any, 0). */
  generation: number;
  /** Whether `aud` names this API's project: a token without it is ours but not for the API. */
  forThisApi: boolean;
  /** The signing key it was verified with. */
  kid: string;
}

type VerifiedClaims = OwnClaims | (ExternalClaims & { external: true });

/** The organizations external tokens act in, by the external issuer's organization id (cached like `find`). */
export interface ExternalOrgs {
  knownByExternalId(externalId: string): Organization | null | undefined;
  findByExternalId(externalId: string): Promise<Organization | null>;
}

export interface ExternalIssuerDeps extends ExternalIssuerConfig {
  orgs: ExternalOrgs;
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
  /** An issuer whose tokens are accepted beside ours; absent: ours only. */
  external?: ExternalIssuerDeps;
}

const CLOCK_TOLERANCE = 5;
/** RFC 7515 §4.1.9: compared case-insensitively, with or without `application/`. */
const EXTERNAL_TYPES = new Set(['jwt', 'at+jwt']);
const listed = (items: string[]) => `${items.slice(0, -1).join(', ')} or ${items.at(-1)}`;

const UNKNOWN_KEY = 'The access token was signed with an unknown key.';
/** The longest a verified token is remembered before its signature is checked again. */
const REMEMBER_AT_MOST_MS = 24 * 60 * 60_000;

/** What jose found wrong with a token, in words; `algorithms` is what it should have been signed with. */
function describe(error: unknown, algorithms = SIGNING_ALG): string {
  if (error instanceof joseErrors.JWTExpired) return 'The access token has expired; request a new one.';
  if (error instanceof joseErrors.JWTClaimValidationFailed) {
    switch (error.claim) {
      case 'nbf': return 'The access token is not valid yet (nbf is in the future).';
      case 'iss': return 'The access token was issued by another issuer.';
      case 'typ': return 'The access token has the wrong type; expected an at+jwt access token.';
      default: return `The access token's ${error.claim} claim is invalid.`;
    }
  }
  if (error instanceof joseErrors.JOSEAlgNotAllowed) return `The access token must be signed with ${algorithms}.`;
  if (error instanceof joseErrors.JWSSignatureVerificationFailed) return 'The access token signature is invalid.';
  if (error instanceof joseErrors.JWKSNoMatchingKey) return UNKNOWN_KEY;
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

  /**
   * Verifies with these keys from now on. A key that left the set (its retention ended, or an
   * operator removed it) verifies nothing more, and the tokens it verified before are verified
   * again: the cache of verified tokens is emptied.
   */
  function useKeys(publicJwks: JWK[]): ReturnType<typeof createLocalJWKSet> {
    const kids = new Set(publicJwks.map((k) => k.kid!));
    if (jwks !== null && kids.size === jwksKids.size && [...kids].every((k) => jwksKids.has(k))) return jwks;
    if ([...jwksKids].some((k) => !kids.has(k))) verified.clear();
    jwksKids = kids;
    return (jwks = createLocalJWKSet({ keys: publicJwks }));
  }

  // Every key set read, by whichever caller: a key revoked since empties the cache of verified tokens.
  deps.keys.onKeySet((set) => { useKeys(set.publicJwks); });

  async function keySet(kid: string | undefined) {
    let current = useKeys((await deps.keys.current()).publicJwks);
    // A kid we have not seen may come from a rotation on another node; re-read at most once a second.
    if (kid !== undefined && !jwksKids.has(kid) && nowMs() - lastReload > 1_000) {
      lastReload = nowMs();
      current = useKeys((await deps.keys.reload()).publicJwks);
    }
    return current;
  }

  async function verifyOwn(token: string): Promise<OwnClaims> {
    let payload: JWTPayload;
    let kid: string;
    try {
      const result = await jwtVerify(token, async (header, input) => (await keySet(header.kid))(header, input), {
        algorithms: [SIGNING_ALG],
        issuer: deps.issuer,
        typ: 'at+jwt',
        clockTolerance: deps.clockToleranceSeconds ?? CLOCK_TOLERANCE,
        // By the clock tokens are issued by (platform/clock.ts), not this machine's own.
        currentDate: nowDate(),
        requiredClaims: ['exp', 'iat', 'sub', 'jti'],
      });
      payload = result.payload;
      kid = result.protectedHeader.kid!;
    } catch (error) {
      // Only what jose says about the token is the token's fault; a key set that could not be read is ours.
      if (!(error instanceof joseErrors.JOSEError)) throw error;
      throw errors.invalidToken(describe(error));
    }
    const aud = Array.isArray(payload.aud) ? payload.aud : payload.aud === undefined ? [] : [payload.aud];
    const orgId = payload[orgClaimName];
    if (typeof orgId !== 'string' || typeof payload.client_id !== 'string') throw errors.invalidToken('The access token lacks the organization or client claim.');
    return {
      external: false,
      subject: payload.sub!,
      clientId: payload.client_id,
      orgId,
      tokenId: payload.jti!,
      scopes: typeof payload.scope === 'string' ? payload.scope.split(' ').filter(Boolean) : [],
      expiresAt: payload.exp! * 1000,
      issuedAt: payload.iat! * 1000,
      generation: typeof payload[generationClaimName] === 'number' ? payload[generationClaimName] : 0,
      forThisApi: aud.includes(deps.projectId),
      kid,
    };
  }

  const external = deps.external;
  const externalKeys: JWTVerifyGetKey | null = external ? createExternalKeys(external) : null;
  const externalAudience = zitadelAudienceScope(deps.projectId);
  const externalAlgorithms = listed(EXTERNAL_ALGORITHMS);

  async function verifyExternal(token: string): Promise<VerifiedClaims> {
    const options = {
      algorithms: EXTERNAL_ALGORITHMS,
      issuer: external!.issuer,
      clockTolerance: deps.clockToleranceSeconds ?? CLOCK_TOLERANCE,
      currentDate: nowDate(),
      requiredClaims: ['exp', 'iat', 'sub', 'jti'],
    };
    let verified;
    try {
      verified = await jwtVerify(token, externalKeys!, options);
    } catch (error) {
      if (error instanceof AppError) throw error;
      // Two keys of the set under the token's kid: each is tried, as jose leaves to its caller.
      if (error instanceof joseErrors.JWKSMultipleMatchingKeys) verified = await verifyWithEach(token, error, options);
      else if (error instanceof joseErrors.JOSEError) throw errors.invalidToken(describe(error, externalAlgorithms));
      else throw unusableKey(token, error);
    }
    const typ = verified.protectedHeader.typ?.toLowerCase().replace(/^application\//, '');
    if (typ === undefined || !EXTERNAL_TYPES.has(typ)) throw errors.invalidToken('The access token has the wrong type; expected a JWT (or at+jwt) access token.');
    // jose checks `iat` against the clock only with a maximum age: a token issued in the future
    // (a clock or an issuer gone wrong) would otherwise be good until an `exp` as far ahead.
    if (verified.payload.iat! > nowMs() / 1000 + (deps.clockToleranceSeconds ?? CLOCK_TOLERANCE)) {
      throw errors.invalidToken('The access token was issued in the future (its "iat"): the issuer\'s clock or this server\'s is wrong.');
    }
    return { external: true, ...zitadelClaims(verified.payload, deps.projectId) };
  }

  /**
   * What jose or WebCrypto refuse of the key itself (an RSA key shorter than 2048 bits, an EC key
   * that is not one) is the issuer's key set's fault, not the token's: a 503 naming the key.
   */
  function unusableKey(token: string, error: unknown): AppError {
    return errors.unavailable(`The external issuer's key ${JSON.stringify(decodeProtectedHeader(token).kid ?? null)} cannot be used (${(error as Error).message}); its key set needs fixing.`, 60);
  }

  /**
   * The claims of a token that one of the candidate keys verifies. None: a 401 when one could be
   * used and refused the token, a 503 when none could be used.
   */
  async function verifyWithEach(token: string, candidates: joseErrors.JWKSMultipleMatchingKeys, options: Parameters<typeof jwtVerify>[2]) {
    let refused: unknown;
    let unusable: unknown;
    for await (const key of candidates) {
      try {
        return await jwtVerify(token, key, options);
      } catch (error) {
        if (error instanceof joseErrors.JOSEError) refused = error;
        else unusable = error;
      }
    }
    if (refused === undefined && unusable !== undefined) throw unusableKey(token, unusable);
    throw errors.invalidToken(describe(refused ?? candidates, externalAlgorithms));
  }

  /**
   * Our checks, or the external issuer's for a token that names it in `iss`. The authorization
   * server's own endpoints (`ownOnly`) speak for our tokens only.
   */
  function verifySignature(token: string, ownOnly: boolean): Promise<VerifiedClaims> {
    if (external === undefined || ownOnly) return verifyOwn(token);
    let iss: unknown;
    try {
      iss = decodeJwt(token).iss;
    } catch {
      // Malformed: our checks say so in our words.
    }
    return iss === external.issuer ? verifyExternal(token) : verifyOwn(token);
  }

  /** The claims of a token verified before, or undefined when its signature has yet to be checked. */
  function remembered(token: string): VerifiedClaims | undefined {
    deps.keys.refreshIfStale();
    const entry = verified.get(signatureOf(token));
    const claims = entry !== undefined && entry.token === token ? entry.claims : undefined;
    if (claims !== undefined && claims.expiresAt + (deps.clockToleranceSeconds ?? CLOCK_TOLERANCE) * 1000 <= nowMs()) {
      verified.delete(signatureOf(token));
      throw errors.invalidToken('The access token has expired; request a new one.');
    }
    return claims;
  }

  async function verifyAndRemember(token: string, ownOnly: boolean): Promise<VerifiedClaims> {
    const claims = await verifySignature(token, ownOnly);
    // Its key may have left the set while it was being verified (a revocation read meanwhile, which
    // emptied the cache): it must not be accepted, or remembered, after that.
    if (!claims.external && !jwksKids.has(claims.kid)) throw errors.invalidToken(UNKNOWN_KEY);
    // Never longer than a day (an issuer may write any `exp`), and never past the token's expiry.
    verified.set(signatureOf(token), { token, claims }, { ttl: Math.max(1, Math.min(claims.expiresAt - nowMs(), REMEMBER_AT_MOST_MS)) });
    return claims;
  }

  /**
   * An external token's caller: the organization linked to its issuer's organization, the role it
   * grants there. Never an instance administrator: that is decided here, not at the issuer.
   */
  function externalPrincipal(claims: ExternalClaims, org: Organization | null): Principal {
    if (org === null) throw errors.orgNotLinked(claims.externalOrgId);
    if (claims.role === null) throw errors.roleNotGranted(claims.externalOrgId, ROLES, zitadelRolesClaim(deps.projectId), ZITADEL_ROLES_SCOPE);
    return {
      subject: claims.subject, clientId: claims.clientId, orgId: org.id, tokenId: claims.tokenId, scopes: claims.scopes,
      expiresAt: claims.expiresAt, role: claims.role, instanceAdmin: false, issuer: external!.issuer,
    };
  }

  /** The principal of a token whose subject is as `state` says, or the 401 its subject's state calls for. */
  function principalOf(claims: OwnClaims, state: SubjectState | null): Principal | AppError {
    if (state === null || state.orgId !== claims.orgId) return errors.invalidToken('The service user of this token no longer exists.');
    if (state.disabled) return errors.invalidToken('The service user of this token is disabled.');
    if (claims.generation !== state.tokenGeneration) {
      return errors.invalidToken('The access token was issued before its service user was disabled; request a new one.');
    }
    return {
      subject: claims.subject, clientId: claims.clientId, orgId: claims.orgId, tokenId: claims.tokenId, scopes: claims.scopes,
      expiresAt: claims.expiresAt, role: state.role, instanceAdmin: state.instanceAdmin, issuer: deps.issuer,
    };
  }

  /** Whether the token was issued after what this node remembers of its subject may have been read. */
  const mayBeNewerThanKnown = (claims: OwnClaims) =>
    claims.issuedAt >= nowMs() - deps.principals.ttlMs - (deps.clockToleranceSeconds ?? CLOCK_TOLERANCE) * 1000;

  const revokedError = () => errors.invalidToken('The access token has been revoked.');

  return {
    /**
     * The API's check (signature, claims, audience, revocation, subject state). The authorization
     * server's own endpoints describe or revoke tokens whatever their audience (`anyAudience`), and
     * revoking an already revoked token is not an error (`allowRevoked`).
     */
    async verify(token: string, options: { allowRevoked?: boolean; anyAudience?: boolean } = {}): Promise<Principal> {
      const ownOnly = options.anyAudience === true;
      const claims = remembered(token) ?? (await verifyAndRemember(token, ownOnly));
      if (claims.external && ownOnly) throw errors.invalidToken('The access token was issued by another issuer.');
      if (!claims.forThisApi && !options.anyAudience) throw errors.wrongAudience(claims.external ? externalAudience : audience);
      if (!options.allowRevoked && (await deps.revocations.isRevoked(claims.tokenId))) throw revokedError();
      if (claims.external) return externalPrincipal(claims, await external!.orgs.findByExternalId(claims.externalOrgId));
      let principal = principalOf(claims, await deps.principals.get(claims.subject));
      // Refused on what this node remembers of its subject, which may be older than the token: a
      // service user enabled again on another node (or in the CLI) works at once with a new token.
      if (principal instanceof AppError && mayBeNewerThanKnown(claims)) principal = principalOf(claims, await deps.principals.read(claims.subject));
      if (principal instanceof AppError) throw principal;
      return principal;
    },

    /**
     * The same check as `verify` for the API, without waiting when this node already knows every
     * answer (a token seen before, a fresh revocation list, its subject's state): undefined when
     * something has to be read first, and then `verify` decides.
     */
    known(token: string): Principal | undefined {
      const claims = remembered(token);
      if (claims === undefined) return undefined;
      if (!claims.forThisApi) throw errors.wrongAudience(claims.external ? externalAudience : audience);
      const revoked = deps.revocations.revokedNow(claims.tokenId);
      if (revoked === undefined) return undefined;
      if (revoked) throw revokedError();
      if (claims.external) {
        const org = external!.orgs.knownByExternalId(claims.externalOrgId);
        return org === undefined ? undefined : externalPrincipal(claims, org);
      }
      const state = deps.principals.known(claims.subject);
      if (state === undefined) return undefined;
      const principal = principalOf(claims, state);
      if (!(principal instanceof AppError)) return principal;
      if (mayBeNewerThanKnown(claims)) return undefined;
      throw principal;
    },
    forget(token: string): void {
      verified.delete(signatureOf(token));
    },
  };
}

export type TokenVerifier = ReturnType<typeof createTokenVerifier>;
