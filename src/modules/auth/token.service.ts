// The authorization server's side: authenticate a client, issue an RFC 9068 JWT access token,
// introspect (RFC 7662) and revoke (RFC 7009, and the API's DELETE /v1/token, where a caller ends
// the token it sends).
import { decodeJwt } from 'jose';
import { ReadThroughCache } from '../../platform/read-through-cache.js';
import { hashClientSecret, pepperKey, sameSecretHash, secretDigest } from '../../platform/crypto/client-secret.js';
import type { RequestContext } from '../../platform/context.js';
import type { Db } from '../../platform/db/database.js';
import { errors, isAppError } from '../../platform/errors.js';
import { newId } from '../../platform/ids.js';
import { appendEvents } from '../events/event-log.js';
import { serviceUsersRepo, type ClientSecretRow, type ServiceUserRow } from '../service-users/service-users.repo.js';
import { oauthErrors } from './oauth-errors.js';
import type { Principal } from './principal.js';
import type { RevocationList } from './revocations.js';
import { audienceScope, orgClaim, scopeParser, STANDARD_SCOPES, tokenGenerationClaim } from './scopes.js';

export { orgClaim };
import type { SigningKeys } from './signing-keys.js';
import type { TokenVerifier } from './token-verifier.js';
import { nowMs } from '../../platform/clock.js';

export interface ClientCredentials {
  clientId: string;
  clientSecret: string;
}

/** A client whose credentials were accepted: its service user, and which of its secrets it gave. */
export interface AuthenticatedClient {
  user: ServiceUserRow;
  secretId: string;
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
  /** Database.writesElsewhere: while it stays the same, no other process changed a service user. */
  writesElsewhere: () => number | null;
}

export interface CallerDescription {
  subject: string;
  clientId: string;
  name: string | null;
  orgId: string;
  role: Principal['role'];
  instanceAdmin: boolean;
  issuer: string;
  scopes: string[];
  expiresAt: string;
}

const LAST_USED_RESOLUTION_MS = 60_000;

/**
 * How long this process trusts a client record it has read (the service user and its secrets'
 * hashes) to accept the client again without a database read: the window in which the API's
 * checks of a token's subject and of revocations see a change (principal-directory.ts,
 * revocations.ts). A change made through this process's service-users service is forgotten here
 * at once (`forgetClient`). A change made by another process on the same database - the CLI's
 * `service-user disable` or `rotate-secret`, another worker of `serve --workers N`, another node
 * on PostgreSQL - reaches this one within the window: until then, a secret removed there can still
 * get tokens here. Whether the service user is enabled, and its token generation, are read again
 * before a kept record issues a token (one indexed read; on SQLite only once another process has
 * written to the file since): a user disabled elsewhere gets no token here, and one disabled and
 * enabled again never gets one of the generation it left behind, which the API would refuse.
 */
export const CLIENT_CACHE_MS = 5_000;
/** Clients remembered at once; past this, the least recently used is read again when it comes back. */
const CLIENT_CACHE_MAX = 10_000;

interface ClientRecord {
  user: ServiceUserRow;
  secrets: Array<Pick<ClientSecretRow, 'id' | 'hash'>>;
  /**
   * Digests (`secretDigest`) of the secrets presented and matched since the record was read, and
   * which secret each was: a client that comes back is recognized without another HMAC, which
   * costs several times as much inside a busy server.
   */
  recognized: Array<{ digest: Buffer; secretId: string }>;
  /** `writesElsewhere()` when the user's generation was last found current (null: PostgreSQL, never trusted). */
  checkedAt: number | null;
}

/** The presented secret: its digest, and its keyed hash, computed only when needed and only once. */
interface Presented {
  digest: Buffer;
  keyedHash: () => Buffer;
}

/** The client and which of its secrets was presented, when that client may have a token. */
function accepted(record: ClientRecord | null | undefined, presented: Presented): { user: ServiceUserRow; secretId: string } | undefined {
  if (record === null || record === undefined || record.user.disabled_at !== null) return undefined;
  let secretId = record.recognized.find((r) => sameSecretHash(presented.digest, r.digest))?.secretId;
  if (secretId === undefined) {
    const candidate = presented.keyedHash();
    secretId = record.secrets.find((s) => sameSecretHash(candidate, s.hash))?.id;
    if (secretId !== undefined) record.recognized.push({ digest: presented.digest, secretId });
  }
  return secretId === undefined ? undefined : { user: record.user, secretId };
}

/**
 * A token the verifier refuses is simply not active (introspection) or nothing to revoke. Anything
 * else (the database did not answer) is a server error: never report a revocation that did not happen.
 */
function inactiveUnlessBroken(error: unknown): { active: false } {
  if (isAppError(error)) return { active: false };
  throw error;
}


export type ClientRefusal = 'not a client id' | 'unknown client' | 'disabled service user' | 'wrong secret';
/** Why a client's authentication failed, by its error: for the log, never for the client. */
export const clientRefusals = new WeakMap<Error, ClientRefusal>();

/** The shape of every client id (a service user's id, `su_…`: see ids.ts), with room to spare. */
export const CLIENT_ID = /^su_[0-9a-z]{1,61}$/;

export function createTokenService(deps: TokenServiceDeps) {
  const supported = [...STANDARD_SCOPES, audienceScope(deps.idpName, deps.projectId)].join(' ');
  const claimName = orgClaim(deps.idpName);
  const parseScopes = scopeParser(deps.idpName, deps.projectId);
  // An access token's claims as JSON text, from a template: the claim names and the fixed values
  // are serialized once, the rest with JSON.stringify each (see es256Signer).
  const str = JSON.stringify;
  const issuerJson = str(deps.issuer);
  const projectJson = str(deps.projectId);
  const orgClaimJson = str(claimName);
  const generationClaimJson = str(tokenGenerationClaim(deps.idpName));
  const accessTokenClaims = (user: ServiceUserRow, audience: boolean, scope: string, now: number): string => {
    const sub = str(user.id);
    return `{"iss":${issuerJson},"sub":${sub},"aud":[${audience ? `${projectJson},` : ''}${sub}],"iat":${now},"nbf":${now},`
      + `"exp":${now + deps.ttlSeconds},"jti":${str(newId('token'))},"client_id":${sub},"scope":${str(scope)},`
      // Disabling the user starts a new generation: this token dies with its generation.
      + `${orgClaimJson}:${str(user.org_id)},${generationClaimJson}:${Number(user.token_generation)}}`;
  };
  const pepper = pepperKey(deps.pepper);
  // last_used_at is written at most once a minute per secret, not on every token request.
  const lastTouched = new Map<string, number>();
  // The last record read of each existing client, for CLIENT_CACHE_MS.
  const clients = new ReadThroughCache<string, ClientRecord>({
    max: CLIENT_CACHE_MAX, ttlMs: CLIENT_CACHE_MS, rememberMissing: false,
    load: async (clientId) => {
      // Asked before the read: a write elsewhere during it is seen at the next request.
      const checkedAt = deps.writesElsewhere();
      const found = await serviceUsersRepo.findWithSecrets(deps.db, clientId);
      return found && { user: found.user, secrets: found.secrets.map(({ id, hash }) => ({ id, hash })), recognized: [], checkedAt };
    },
  });

  async function authenticate(creds: ClientCredentials): Promise<AuthenticatedClient> {
    // Every failure says the same to the caller: which one it was is for the log, not the client.
    const fail = (reason: ClientRefusal) => {
      const error = oauthErrors.invalidClient('Client authentication failed: unknown client, wrong secret or disabled service user.');
      clientRefusals.set(error, reason);
      return error;
    };
    // Only what an id can be reaches the database: a NUL, say, which PostgreSQL refuses in text.
    if (!CLIENT_ID.test(creds.clientId)) throw fail('not a client id');
    let keyed: Buffer | undefined;
    const presented = { digest: secretDigest(creds.clientSecret), keyedHash: () => (keyed ??= hashClientSecret(pepper, creds.clientSecret)) };
    // The cache only ever accepts. Whatever it would refuse is decided on a fresh read, so a secret
    // just added or a user just enabled, on any node, works at once, and a wrong guess costs the
    // database read it always did.
    let fresh: ClientRecord | null | undefined;
    const record = clients.known(creds.clientId);
    let client = accepted(record, presented);
    // A token carries its user's generation, and dies with it: one issued from a record read before
    // the user was disabled elsewhere (and perhaps enabled again since) would be refused by the API
    // for the whole of its life. The generation is read each time; a record that is behind it is
    // read again whole, secrets included (the disable may have come with a secret removed).
    // On SQLite, while no other process has written to the file since the record was last checked,
    // nothing can have changed it (this one's changes forget it at once): no read then.
    const writes = deps.writesElsewhere();
    if (client !== undefined && record && (writes === null || writes !== record.checkedAt)) {
      if ((await serviceUsersRepo.liveGeneration(deps.db, record.user.id)) === Number(record.user.token_generation)) record.checkedAt = writes;
      else client = undefined;
    }
    client ??= accepted(fresh = await clients.read(creds.clientId), presented);
    if (client === undefined) throw fail(fresh === null || fresh === undefined ? 'unknown client' : fresh.user.disabled_at !== null ? 'disabled service user' : 'wrong secret');
    return { user: client.user, secretId: client.secretId };
  }

  /**
   * Records the revocation of a token of ours (`principal`, verified): this node refuses it from
   * now on, the others once they next read the revocation list (revocations.ts, every 5 seconds).
   */
  async function recordRevocation(ctx: RequestContext, principal: Principal, token: string): Promise<void> {
    // A token of ours is its service user's: `client_id` and `sub` both name it.
    const entry = { jti: principal.tokenId, serviceUserId: principal.clientId, expiresAt: principal.expiresAt };
    // A revocation is a change like any other: its event commits with it (once per token).
    await deps.db.transaction().execute(async (trx) => {
      if (!(await deps.revocations.revoke(entry, trx))) return;
      await appendEvents(trx, ctx, [{
        orgId: principal.orgId, type: 'service_user.token_revoked', subject: { type: 'service_user', id: principal.clientId },
        data: { tokenId: principal.tokenId, expiresAt: new Date(principal.expiresAt).toISOString() },
      }]);
    });
    deps.revocations.remember(entry);
    deps.verifier.forget(token);
  }

  return {
    authenticate,

    /**
     * The client's secret served a request that was answered: its `lastUsedAt` says so (at most
     * once a minute per secret). Not at authentication: a request refused after it (a scope
     * unknown, a rate limit) did not use the secret for anything.
     */
    async markUsed(client: AuthenticatedClient): Promise<void> {
      const now = nowMs();
      if (now - (lastTouched.get(client.secretId) ?? 0) <= LAST_USED_RESOLUTION_MS) return;
      lastTouched.set(client.secretId, now);
      if (lastTouched.size > 100_000) lastTouched.clear();
      await serviceUsersRepo.touchSecret(deps.db, client.secretId, new Date(now).toISOString());
    },

    /** Called once a change to this service user (role, state, secrets, deletion) has committed. */
    forgetClient(serviceUserId: string): void {
      clients.forget(serviceUserId);
    },

    /** Issues a token to a client that `authenticate` has accepted: only it learns what is wrong with its scope. */
    async clientCredentialsGrant(user: ServiceUserRow, scope: string | undefined): Promise<TokenResponse> {
      const parsed = parseScopes(scope);
      if (!parsed.ok) throw oauthErrors.invalidScope(parsed.unknown, supported);
      const signer = await deps.keys.signer();
      const accessToken = signer.signAccessToken(accessTokenClaims(user, parsed.audience, parsed.scope, Math.floor(nowMs() / 1000)));
      // RFC 6749 §4.4.3: no refresh token for this grant, even when offline_access is asked for.
      return { access_token: accessToken, token_type: 'Bearer', expires_in: deps.ttlSeconds, scope: parsed.scope };
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
    async revoke(ctx: RequestContext, caller: ServiceUserRow, token: string): Promise<void> {
      let principal: Principal;
      try {
        principal = await deps.verifier.verify(token, { allowRevoked: true, anyAudience: true });
      } catch (error) {
        inactiveUnlessBroken(error);
        return;
      }
      if (principal.clientId !== caller.id) throw oauthErrors.tokenOfAnotherClient();
      await recordRevocation(ctx, principal, token);
    },

    /**
     * The caller ends the access token it authenticated this request with (`DELETE /v1/token`),
     * which the API has verified: `principal` is that token's. An external issuer's token is that
     * issuer's to revoke. `spend` takes from the caller's revocation budget (or refuses), once the
     * token is known to be one this server can revoke.
     */
    /** The caller as `GET /v1/token` describes it: the principal, and its service user's name when it is one of ours. */
    async describe(principal: Principal): Promise<CallerDescription> {
      const name = principal.issuer === deps.issuer ? await serviceUsersRepo.nameOf(deps.db, principal.subject) : undefined;
      return {
        subject: principal.subject, clientId: principal.clientId, name: name ?? null, orgId: principal.orgId,
        role: principal.role, instanceAdmin: principal.instanceAdmin, issuer: principal.issuer, scopes: principal.scopes,
        expiresAt: new Date(principal.expiresAt).toISOString(),
      };
    },
    async revokeOwn(ctx: RequestContext, principal: Principal, token: string, spend: () => void = () => {}): Promise<void> {
      if (principal.issuer !== deps.issuer) throw errors.externalToken(principal.issuer);
      spend();
      await recordRevocation(ctx, principal, token);
    },
  };
}

export type TokenService = ReturnType<typeof createTokenService>;
