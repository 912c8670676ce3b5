// The keys of an external issuer (a ZITADEL) whose access tokens the API accepts beside its own.
// Where they are comes from the issuer's discovery document (or SLIPWAY_EXTERNAL_JWKS_URL); they
// are fetched on first use, not at start-up, so neither `serve` nor the CLI waits for the issuer.
// jose's remote key set keeps them (10 minutes) and reads them again when a token names a kid it
// does not know, at most once a second: a rotation at the issuer is picked up without a restart.
import { createLocalJWKSet, createRemoteJWKSet, customFetch, errors as joseErrors, type JWTVerifyGetKey } from 'jose';
import { errors } from '../../platform/errors.js';

/** Asymmetric algorithms only: never an HMAC (whose key would be the public key), never `none`. */
export const EXTERNAL_ALGORITHMS = ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'EdDSA', 'Ed25519'];

export interface ExternalIssuerConfig {
  /** The tokens' `iss`, exactly. */
  issuer: string;
  /** The key set's URL; null: the `jwks_uri` of the issuer's discovery document. */
  jwksUrl: string | null;
}

const FETCH_TIMEOUT_MS = 5_000;
/** Least time between two reads of the key set for a kid it lacks (jose's default is 30 s). */
const REFRESH_COOLDOWN_MS = 1_000;
/** How long after the issuer last answered the keys it sent keep verifying while it is out of reach. */
const LAST_READ_GRACE_MS = 60 * 60_000;
/** After a failed read the issuer is not asked again for this long: requests meanwhile get 503 at once. */
const RETRY_AFTER_SECONDS = 5;
/** The most of a discovery document or key set read: a few keys take a few KiB. */
const MAX_DOCUMENT_BYTES = 1024 * 1024;

/** OpenID Connect Discovery §4: the issuer without its trailing slash, then the well-known path. */
export function discoveryUrl(issuer: string): string {
  return `${issuer.replace(/\/+$/, '')}/.well-known/openid-configuration`;
}

const unreachable = (reason: string) =>
  errors.unavailable(`The external issuer's signing keys cannot be read now (${reason}); retry later.`, RETRY_AFTER_SECONDS);

/**
 * The key resolver for `jwtVerify`. A kid the issuer does not publish is the token's fault
 * (jose's JWKSNoMatchingKey, a 401); an issuer that cannot be read is a 503 with Retry-After.
 */
export function createExternalKeys(config: ExternalIssuerConfig): JWTVerifyGetKey {
  // After a failure the issuer is left alone for a few seconds: a flood of tokens naming unknown
  // kids while it is down (or misconfigured) costs it one request per RETRY_AFTER_SECONDS.
  let failedUntil = 0;
  let reason = '';
  // When the issuer last answered with a document that is one, and whether it is only out of reach
  // now (no answer, a 5xx) rather than answering something else (a 4xx, a moved document, a key set
  // that is not one); each read decides it again.
  let answeredAt = 0;
  let outOfReach = false;
  const fail = (why: string, transient = false): never => {
    failedUntil = Date.now() + RETRY_AFTER_SECONDS * 1000;
    reason = why;
    outOfReach = transient;
    throw unreachable(why);
  };
  // Both documents come through here, read whole and checked to be what they should be before the
  // issuer counts as having answered. Redirects are not followed (jose's choice for key sets): a
  // moved document is a 3xx to fix.
  const fetchFromIssuer = async (url: string, init: RequestInit, isKeySet: boolean): Promise<Response> => {
    if (Date.now() < failedUntil) throw unreachable(reason);
    const noAnswer = (error: unknown) => fail(`${url}: ${(error as Error).name === 'TimeoutError' ? 'no answer in time' : (error as Error).message}`, true);
    let response: Response;
    try {
      response = await fetch(url, { ...init, redirect: 'manual', signal: init.signal ?? AbortSignal.timeout(FETCH_TIMEOUT_MS) });
    } catch (error) {
      return noAnswer(error);
    }
    if (response.status !== 200) {
      await response.body?.cancel();
      return fail(`${url} answered ${response.status}`, response.status >= 500);
    }
    let text: string | null;
    try {
      text = await readUpTo(response, MAX_DOCUMENT_BYTES);
    } catch (error) {
      // A body that stops coming is no answer.
      return noAnswer(error);
    }
    if (text === null) return fail(`${url} answered more than ${MAX_DOCUMENT_BYTES} bytes`);
    let document: unknown;
    try {
      document = JSON.parse(text);
    } catch {
      return fail(`${url} answered 200 with a body that is not JSON`);
    }
    if (document === null || typeof document !== 'object' || Array.isArray(document)) return fail(`${url} answered 200 with JSON that is not an object`);
    if (isKeySet && !Array.isArray((document as { keys?: unknown }).keys)) return fail(`${url} answered 200 with no "keys" array: not a JSON Web Key Set`);
    answeredAt = Date.now();
    outOfReach = false;
    return new Response(text, { status: 200, headers: { 'content-type': 'application/json' } });
  };
  const remoteSet = (url: string) => createRemoteJWKSet(new URL(url), {
    cooldownDuration: REFRESH_COOLDOWN_MS, timeoutDuration: FETCH_TIMEOUT_MS, [customFetch]: (u: string, init: RequestInit) => fetchFromIssuer(u, init, true),
  });
  let keys = config.jwksUrl === null ? null : remoteSet(config.jwksUrl);
  let discovering: Promise<ReturnType<typeof remoteSet>> | null = null;

  async function discover(): Promise<ReturnType<typeof remoteSet>> {
    const url = discoveryUrl(config.issuer);
    const response = await fetchFromIssuer(url, { headers: { accept: 'application/json' } }, false);
    const document = (await response.json()) as { issuer?: unknown; jwks_uri?: unknown };
    // Discovery §4.3: the document must be the configured issuer's own.
    if (document.issuer !== config.issuer) return fail(`${url} names the issuer ${JSON.stringify(document.issuer ?? null)}, not "${config.issuer}"`);
    if (typeof document.jwks_uri !== 'string' || !/^https?:\/\//.test(document.jwks_uri)) return fail(`${url} has no http(s) jwks_uri`);
    // Keys fetched in the clear would let anyone on the way swap in their own for an https issuer's.
    if (config.issuer.startsWith('https:') && !document.jwks_uri.startsWith('https:')) return fail(`${url} names a jwks_uri that is not https`);
    return remoteSet(document.jwks_uri);
  }

  return async (header, token) => {
    if (keys === null) {
      discovering ??= discover().finally(() => { discovering = null; });
      keys = await discovering;
    }
    const remote = keys;
    try {
      return await remote(header, token);
    } catch (error) {
      if (error instanceof joseErrors.JWKSNoMatchingKey || error instanceof joseErrors.JWKSMultipleMatchingKeys) throw error;
      // The issuer is out of reach (its set was due for a refresh): for a while the keys last read
      // still verify what they signed. Not when it answered something else (the set moved, or is
      // not one), and not for long: a key it has removed must not stay good while it is down.
      const lastRead = remote.jwks();
      if (outOfReach && Date.now() - answeredAt < LAST_READ_GRACE_MS && lastRead !== undefined && lastRead.keys.some((key) => key.kid === header.kid)) {
        return createLocalJWKSet(lastRead)(header, token);
      }
      if (error instanceof joseErrors.JOSEError) fail(`its key set: ${error.message}`);
      throw error;
    }
  };
}

/** The body's text, or null when it is longer than `max` bytes (then no more of it is read). */
async function readUpTo(response: Response, max: number): Promise<string | null> {
  const declared = Number(response.headers.get('content-length'));
  if (declared > max) {
    await response.body?.cancel();
    return null;
  }
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of response.body ?? []) {
    size += chunk.byteLength;
    // Leaving the loop cancels the rest of the body.
    if (size > max) return null;
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}
