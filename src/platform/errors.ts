// One error type for the whole service, made by the named factories below and turned into an
// RFC 9457 problem in exactly one place (http/error-handler.ts). Domain code throws these and
// knows nothing of HTTP beyond the status each one stands for.

export interface FieldError {
  /** JSON Pointer into the request body (or `/query/limit`, `/path/orgId`). */
  pointer: string;
  message: string;
}

/** One segment of an RFC 6901 JSON Pointer: `~` and `/` in a key are escaped. */
export function pointerSegment(key: string): string {
  return key.replace(/~/g, '~0').replace(/\//g, '~1');
}

export interface ProblemExtras {
  errors?: FieldError[];
  conflicts?: unknown[];
  [key: string]: unknown;
}

export class AppError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    readonly title: string,
    readonly detail: string,
    readonly extras: ProblemExtras = {},
    readonly headers: Record<string, string> = {},
  ) {
    // An AppError is an answer, not a fault: no stack trace, whose capture costs more than the
    // rest of a refused request (a flood of bad tokens must stay cheap to refuse).
    const limit = Error.stackTraceLimit;
    Error.stackTraceLimit = 0;
    super(detail);
    Error.stackTraceLimit = limit;
    this.name = 'AppError';
  }
}

export function isAppError(value: unknown): value is AppError {
  return value instanceof AppError;
}

const refusedByDesign = new WeakSet<AppError>();

/**
 * A 5xx the server answers by design rather than by failing (overloaded, shutting down): the access
 * log and the metrics count each, and the server logs the condition once rather than an error per
 * request, which would add to the load it is shedding.
 */
export function byDesign(error: AppError): AppError {
  refusedByDesign.add(error);
  return error;
}

export function isByDesign(error: AppError): boolean {
  return refusedByDesign.has(error);
}

/**
 * An `error_description` as RFC 6749 §5.2 and RFC 6750 §3 allow it: printable ASCII without `"` or
 * `\` (%x20-21 / %x23-5B / %x5D-7E), in an OAuth error's JSON as in a Bearer challenge. A quote
 * becomes `'`, a backslash `/`, anything else outside the set `?`: a description can repeat what a
 * request or a token said, and a character that a header cannot carry would lose the whole answer.
 */
export function errorDescription(text: string): string {
  return text.replace(/"/g, "'").replace(/\\/g, '/').replace(/[^\x20-\x7e]/g, '?');
}

const bearer = (error: string, description: string, extra = ''): Record<string, string> => ({
  'www-authenticate': `Bearer realm="slipway", error="${error}", error_description="${errorDescription(description)}"${extra}`,
});

const cursorProblem = (detail: string, message: string) =>
  new AppError(400, 'invalid_cursor', 'Invalid cursor', detail, { errors: [{ pointer: '/query/cursor', message }] });

/**
 * Field errors a problem lists at most: a body of a few MiB can hold hundreds of thousands of bad
 * keys, and a problem listing each would be ten times the body's size.
 */
export const MAX_FIELD_ERRORS = 100;

export const errors = {
  // 400
  invalidRequest: (detail: string, fieldErrors: FieldError[] = []) =>
    new AppError(400, 'invalid_request', 'Invalid request', detail, fieldErrors.length ? { errors: fieldErrors } : {}),
  malformedJson: (detail: string, fieldErrors: FieldError[] = []) => new AppError(400, 'malformed_json', 'Malformed JSON body', detail, fieldErrors.length ? { errors: fieldErrors } : {}),
  invalidCursor: () => cursorProblem('The cursor is not one this API returned; start again without it.', 'unknown cursor'),
  /** A cursor of the same list, returned for other filters or under another organization or parent. */
  cursorOutOfScope: () => cursorProblem(
    'The cursor was returned for other filters (or another order), or for another organization or parent resource: repeat the request with the filters and order the cursor was made with, or start again without it.',
    'cursor made with other filters',
  ),
  limitExceeded: (detail: string, limit: { name: string; value: number }, fieldErrors: FieldError[] = []) =>
    new AppError(400, 'limit_exceeded', 'Limit exceeded', detail, { limit, ...(fieldErrors.length ? { errors: fieldErrors } : {}) }),
  /** A spec (a service's, or the one a deployment freezes) whose JSON is larger than SLIPWAY_MAX_SPEC_BYTES. */
  specTooLarge: (what: string, bytes: number, limit: number, pointer: string) =>
    errors.limitExceeded(`${what} is ${bytes} bytes as JSON; the limit is ${limit} (SLIPWAY_MAX_SPEC_BYTES).`, { name: 'SLIPWAY_MAX_SPEC_BYTES', value: limit }, [
      { pointer, message: `is ${bytes} bytes as JSON, more than ${limit}` },
    ]),
  /** What Node's HTTP parser refused before there was a request (its code, e.g. HPE_INVALID_METHOD, says what). */
  malformedHttp: (parserCode: string | undefined) =>
    new AppError(400, 'malformed_http', 'Malformed HTTP request', `The request is not valid HTTP/1.1${parserCode ? ` (${parserCode})` : ''}; nothing was done. Check the request line, the headers and Content-Length or Transfer-Encoding.`),
  malformedPath: (path: string) =>
    new AppError(400, 'malformed_path', 'Malformed path', `The path ${JSON.stringify(path)} has a malformed percent-encoding: % must be followed by two hex digits, and the bytes they spell must be UTF-8.`),
  malformedQuery: (parameter: string | null) =>
    new AppError(400, 'malformed_query', 'Malformed query', `The query ${parameter === null ? '' : `parameter ${JSON.stringify(parameter)} `}has a malformed percent-encoding: % must be followed by two hex digits, and the bytes they spell must be UTF-8 (a % of its own is %25); nothing was done.`,
      { errors: [{ pointer: parameter === null ? '/query' : `/query/${pointerSegment(parameter)}`, message: 'has a malformed percent-encoding' }] }),
  /** PostgreSQL text cannot hold U+0000, and no name, key, value or variable of a process can either. */
  nulCharacter: (where: string, fieldErrors: FieldError[] = []) =>
    new AppError(400, 'invalid_request', 'Invalid request', `${where} contains a NUL character (U+0000), which no name, key, value or parameter may hold.`, fieldErrors.length ? { errors: fieldErrors } : {}),
  /** `taken`: names of the request that are taken besides, said and listed in the same problem. */
  duplicateNames: (pointers: FieldError[], taken?: { also: string; conflicts: unknown[] }) =>
    new AppError(400, 'duplicate_names', 'Duplicate names in request',
      `Each name may appear only once in one request${pointers.length > MAX_FIELD_ERRORS ? ` (${pointers.length} items repeat a name; errors lists the first ${MAX_FIELD_ERRORS})` : ''}.${taken ? ` Besides: ${taken.also}` : ''}`,
      { errors: pointers.slice(0, MAX_FIELD_ERRORS), ...(taken ? { conflicts: taken.conflicts } : {}) }),
  /**
   * A token of the external issuer sent to be revoked here: revoking it is that issuer's business
   * (as RFC 7009 §2.2.1's unsupported_token_type, a 400: no retry can succeed).
   */
  externalToken: (issuer: string) =>
    new AppError(400, 'external_token', 'Token issued elsewhere',
      `This access token was issued by ${issuer}, not by Slipway: revoke it at that issuer. Slipway does not ask the issuer about each token, so it is accepted here until it expires.`,
      { issuer }),

  // 401 (RFC 6750: the challenge says what is wrong)
  /** No token, or credentials of another scheme: RFC 6750 §3.1 gives no error code for either. */
  missingToken: (detail = 'Send an access token as `Authorization: Bearer <token>`.') =>
    new AppError(401, 'unauthenticated', 'Authentication required', detail, {}, {
      'www-authenticate': 'Bearer realm="slipway"',
    }),
  invalidToken: (detail: string) =>
    new AppError(401, 'invalid_token', 'Invalid access token', detail, {}, bearer('invalid_token', detail)),
  wrongAudience: (scope: string) => {
    const detail = `The access token is not meant for this API: request a token with the scope \`${scope}\`.`;
    return new AppError(401, 'invalid_token', 'Invalid access token', detail, { requiredScope: scope }, bearer('invalid_token', detail, `, scope="${scope}"`));
  },

  // 403
  forbidden: (detail: string) => new AppError(403, 'forbidden', 'Forbidden', detail),
  roleTooLow: (required: string, actual: string) =>
    new AppError(403, 'forbidden', 'Forbidden', `This operation needs the role ${required}; the caller's role here is ${actual}.`, {
      requiredRole: required,
    }),
  /** A genuine token of the external issuer whose organization no Slipway organization is linked to. */
  orgNotLinked: (externalOrgId: string) =>
    new AppError(403, 'org_not_linked', 'Forbidden',
      `The access token's organization "${externalOrgId}" (its issuer's resource owner) is linked to no organization here: an instance operator links it with \`slipway org link --org ORG --external-id ${externalOrgId}\`.`,
      { externalOrgId }),
  /** A genuine token of the external issuer that grants none of our roles in its organization. */
  roleNotGranted: (externalOrgId: string, roles: readonly string[], rolesClaim: string, rolesScope: string) =>
    new AppError(403, 'role_not_granted', 'Forbidden',
      `The access token grants none of the roles ${roles.join(', ')} in its organization "${externalOrgId}": grant the user one of these project roles at the issuer, and request the token with the scope \`${rolesScope}\` so that it carries ${rolesClaim}.`,
      { externalOrgId }),
  protectedEnvironment: (environment: string, role: string, what = 'deploy to it') =>
    new AppError(403, 'environment_protected', 'Forbidden', `The environment "${environment}" is protected: only an admin or owner may ${what}; this service user is ${role}.`, {
      requiredRole: 'admin',
    }),

  /** A locked environment (a deploy freeze): no deployment into it until it is unlocked. */
  environmentLocked: (environment: string, lock: { reason: string; lockedBy: string | null; lockedAt: string }, what: string) =>
    new AppError(409, 'environment_locked', 'Environment locked',
      `The environment "${environment}" is locked since ${lock.lockedAt}${lock.lockedBy !== null ? ` by ${lock.lockedBy}` : ''} ("${lock.reason}"): no one may ${what} until an admin or owner unlocks it (DELETE …/environments/${environment}/lock).`,
      { lock }),

  // 404
  /** `pointer`: where the request body names it, for a resource a body refers to rather than the path. */
  notFound: (resource: string, id: string, pointer?: string) =>
    new AppError(404, `${resource.replace(/ /g, '_')}_not_found`, 'Not found', `No ${resource} "${id}" here.`,
      pointer === undefined ? {} : { errors: [{ pointer, message: `names no ${resource} of this organization` }] }),
  /** Writes to one secret change it, never create it: the detail says what does. */
  secretNotFound: (name: string) =>
    new AppError(404, 'secret_not_found', 'Not found', `No secret "${name}" in this organization. Create it with POST …/secrets, or PUT …/secrets (which creates the missing and updates the rest).`),
  /** `versionGiven`: a restore of one of its versions, which a deleted secret does not take. */
  secretDeleted: (name: string, restorableUntil: string, versionGiven = false) =>
    versionGiven
      ? new AppError(404, 'secret_deleted', 'Not found', `The secret "${name}" is deleted, and a deleted secret is restored whole, as it was: send this restore without \`version\` (until ${restorableUntil}, when it is purged), then restore a version of it if need be.`,
        { restorableUntil, errors: [{ pointer: '/version', message: 'is not taken while the secret is deleted: leave it out to restore the secret' }] })
      : new AppError(404, 'secret_deleted', 'Not found', `The secret "${name}" is deleted. An admin or owner can restore it until ${restorableUntil} (POST …/secrets/${name}/restore); after that it is purged.`, { restorableUntil }),
  routeNotFound: (method: string, url: string, reference: string, why?: string) =>
    new AppError(404, 'route_not_found', 'Not found', `There is no route ${method} ${url}${why === undefined ? '' : `: ${why}`}. See ${reference} for the API.`),

  // 405
  methodNotAllowed: (method: string, url: string, allowed: string[]) =>
    new AppError(405, 'method_not_allowed', 'Method not allowed', `${url} does not answer ${method}; it answers ${allowed.join(', ')}.`, {
      allowed,
    }, { allow: allowed.join(', ') }),

  // 409
  conflict: (code: string, detail: string, extras: ProblemExtras = {}) => new AppError(409, code, 'Conflict', detail, extras),
  /**
   * A conflict with another request at the same moment, not with the state of things: nothing was
   * written, and the same request is expected to succeed when retried (Retry-After says when). An
   * Idempotency-Key is not held to this answer.
   */
  raced: (code: string, detail: string) => new AppError(409, code, 'Conflict', detail, {}, { 'retry-after': '1' }),
  /** PostgreSQL gave up one of two transactions that waited for each other (or could not serialize them). */
  writeConflict: () => new AppError(409, 'write_conflict', 'Conflict',
    'Another request changed the same data at the same moment, and this one was stopped so that neither overwrote the other; nothing was written. Retry.', {}, { 'retry-after': '1' }),
  /** A deployment state change the state graph does not have; `allowed` are the states reachable from `from`. */
  invalidTransition: (id: string, from: string, to: string, allowed: string[], hint?: string) =>
    new AppError(409, 'invalid_transition', 'Conflict',
      (allowed.length > 0
        ? `Deployment ${id} is ${from} and cannot become ${to}; from ${from} it can only become ${allowed.join(', ')}.`
        : `Deployment ${id} is ${from === to ? 'already ' : ''}${from}, a final state: it cannot become ${to}${from === to ? ' again' : ''}, nor anything else.`) + (hint === undefined ? '' : ` ${hint}`),
      { state: from, requested: to, allowedTransitions: allowed }),
  leaseLost: (id: string) =>
    new AppError(409, 'lease_lost', 'Conflict',
      `This runner no longer holds the lease on deployment ${id} (it expired, or another attempt was claimed): stop working on it and claim again.`),
  deploymentCancelled: (id: string) =>
    new AppError(409, 'deployment_cancelled', 'Conflict', `Deployment ${id} was cancelled: stop working on it.`, { state: 'cancelled' }),
  deploymentFinished: (id: string, state: string) =>
    new AppError(409, 'deployment_finished', 'Conflict', `Deployment ${id} is already ${state}: it takes no more heartbeats or log lines.`, { state }),
  /**
   * The first attempt committed its change and then died, or failed, before its response was
   * kept: nothing can be replayed, and running it again would do it twice.
   */
  idempotencyResponseLost: (firstRequestId: string | null, changed: Array<{ type: string; id: string }>) =>
    new AppError(409, 'idempotency_response_lost', 'Response lost',
      `The first request with this Idempotency-Key${firstRequestId === null ? '' : ` (request id ${firstRequestId})`} made its change, but its response was lost before it could be kept (the server stopped, or failed after the change), so there is none to replay. It was not run again, and will not be: read what it changed (\`changed\`, and the organization's events with its request id) instead of retrying.`,
      { firstRequestId, changed }),
  idempotencyRequestInProgress: () =>
    new AppError(409, 'idempotency_request_in_progress', 'Request in progress',
      'A request with this Idempotency-Key is still being processed; retry after Retry-After seconds to get its response.', {}, { 'retry-after': '1' }),
  // 408
  requestTimeout: () =>
    new AppError(408, 'request_timeout', 'Request timeout', 'The request did not arrive in full within the server\'s time limit; nothing was done. Send it again.'),
  // 412
  preconditionFailed: (detail: string, extras: ProblemExtras = {}) =>
    new AppError(412, 'precondition_failed', 'Precondition failed', detail, extras),
  // 413
  payloadTooLarge: (limit: number) =>
    new AppError(413, 'payload_too_large', 'Payload too large', `The request body is larger than the limit of ${limit} bytes (SLIPWAY_BODY_LIMIT_BYTES).`, {
      limit: { name: 'SLIPWAY_BODY_LIMIT_BYTES', value: limit },
    }),
  // 414
  pathSegmentTooLong: (limit: number) =>
    new AppError(414, 'uri_too_long', 'URI too long', `A segment of the path is longer than ${limit} characters; no name or id is that long.`),
  // 415
  unsupportedMediaType: (got: string | undefined, expected: string) =>
    new AppError(415, 'unsupported_media_type', 'Unsupported media type', `Send the body as ${expected}${got ? `, not ${got}` : ''}.`),
  /** RFC 9110 §15.5.16: a coding the server does not decode, answered with the codings it accepts. */
  unsupportedContentEncoding: (coding: string) =>
    new AppError(415, 'unsupported_media_type', 'Unsupported media type', `Request bodies are not decoded: send the body without Content-Encoding (it says ${JSON.stringify(coding)}).`, {}, { 'accept-encoding': 'identity' }),
  // 417
  /** An Expect other than 100-continue (RFC 9110 §10.1.1), which Node would answer with a bare 417. */
  expectationFailed: (expect: string) =>
    new AppError(417, 'expectation_failed', 'Expectation failed', `This server meets no expectation but 100-continue, and the request's Expect is ${JSON.stringify(expect.length > 100 ? `${expect.slice(0, 100)}…` : expect)}; nothing was done. Send it without Expect (or with Expect: 100-continue).`),
  // 422
  unprocessable: (code: string, detail: string) => new AppError(422, code, 'Unprocessable request', detail),
  /**
   * `references`: a pointer to each reference of a missing secret, and to each missing key of a
   * secret that exists; `missingKeys` (those among them) are said in the detail too, so that one
   * answer names everything there is to fix.
   */
  unknownSecrets: (missing: string[], references: FieldError[] = [], missingKeys: FieldError[] = []) =>
    new AppError(422, 'unknown_secrets', 'Unknown secrets',
      `${missing.length === 1 ? 'This secret does not exist, or is deleted,' : 'These secrets do not exist, or are deleted,'} in this organization: ${missing.join(', ')}.${missingKeys.length > 0 ? ` Besides, ${missingKeys.map((e) => e.message).join('; ')}.` : ''} Create ${missing.length === 1 ? 'it' : 'them'} first, restore ${missing.length === 1 ? 'it if it is' : 'those'} deleted (POST …/secrets/{name}/restore; slipway secret restore --name NAME), or fix the references.`,
      { missing, ...(references.length > 0 ? { errors: references } : {}) }),
  /**
   * Pinned secret versions whose secret was deleted permanently or purged: whatever pinned them can
   * never run. `refused`, when given, leads the detail with what is refused (a rollback).
   */
  secretVersionsGone: (missing: string[], refused?: string) => {
    const one = missing.length === 1;
    const gone = `the pinned secret version${one ? '' : 's'} ${missing.join(', ')} no longer exist${one ? 's' : ''} (${one ? 'its secret was' : 'their secrets were'} deleted permanently, or purged when the retention window of a deletion ended)`;
    return new AppError(422, 'secret_versions_gone', 'Secret versions gone',
      `${refused !== undefined ? `${refused}: ${gone}` : gone.charAt(0).toUpperCase() + gone.slice(1)}. Deploy the service again instead (POST …/deployments): a new deployment pins the secrets' current versions (should its spec still name a secret deleted permanently, create that secret again or change the service first).`,
      { missing });
  },
  unknownSecretReferences: (fieldErrors: FieldError[]) =>
    new AppError(422, 'unknown_secret_reference', 'Unknown secret reference',
      `The spec refers to ${fieldErrors.length === 1 ? 'a secret or key that does' : `${fieldErrors.length} secrets or keys that do`} not exist in this organization: ${fieldErrors.map((e) => e.message).join('; ')}. Create them first or fix the reference.`,
      { errors: fieldErrors }),
  /** PORT set by a spec or a deployment: the runner sets it to the port it picks, over any value given. */
  reservedVariable: (fieldErrors: FieldError[]) =>
    new AppError(422, 'reserved_variable', 'Reserved variable',
      `PORT is the runner's to set: it passes the port it picks for the process as PORT, over any value given. Here ${fieldErrors.map((e) => e.message).join('; ')}. Remove it: the spec's \`port\` asks runners that do not pick a port for one, and a secret that holds a PORT key is exported key by key (\`key\`, with \`as\` to rename one) rather than whole.`,
      { errors: fieldErrors }),
  variableConflict: (fieldErrors: FieldError[]) =>
    new AppError(422, 'variable_conflict', 'Variable defined twice',
      `Each environment variable may come from one place only: ${fieldErrors.map((e) => e.message).join('; ')}. Rename one with \`as\` or drop it.`,
      { errors: fieldErrors }),
  idempotencyKeyReused: (firstUse: string) =>
    new AppError(422, 'idempotency_key_reused', 'Idempotency key reused',
      `This Idempotency-Key was already used for a different request (${firstUse}). Send a new key for a new request; a retry must repeat the first request exactly, body included.`),
  // 431
  headersTooLarge: (limitBytes: number) =>
    new AppError(431, 'headers_too_large', 'Request header fields too large', `The request's URL and headers together are larger than the ${limitBytes} bytes the server reads; nothing was done. Send a shorter URL (a long query string counts), or fewer or shorter headers.`),
  // 429
  rateLimited: (retryAfterSeconds: number) =>
    new AppError(429, 'rate_limited', 'Too many requests', `Rate limit reached; retry after ${retryAfterSeconds} s.`, {}, {
      'retry-after': String(retryAfterSeconds),
    }),
  // 503
  unavailable: (detail: string, retryAfterSeconds = 1) =>
    new AppError(503, 'unavailable', 'Service unavailable', detail, {}, { 'retry-after': String(retryAfterSeconds) }),
  /**
   * A row this request needs is wrapped under a master key the server is not configured with: no
   * retry helps until an operator gives it the key (the server log names where it reads keys).
   */
  masterKeyMissing: (masterKeyId: string, viaEnvironment: boolean) =>
    new AppError(503, 'master_key_missing', 'Service unavailable',
      `Data this request needs is wrapped under master key ${masterKeyId}, which this server is not configured with. An operator must configure that key: ${viaEnvironment ? 'add it to SLIPWAY_MASTER_KEY_PREVIOUS and restart the server' : 'add it to the master key file as a line at its end, after the current key (the server reads the file again)'}; until then such requests fail.`,
      { masterKeyId }, { 'retry-after': '30' }),
  internal: () => new AppError(500, 'internal', 'Internal error', 'Something went wrong on our side. Quote the request id when reporting it.'),
};
