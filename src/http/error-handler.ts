// The one place errors become responses: our AppErrors, Fastify's own (validation, body parsing,
// size, media type) and anything unexpected (an opaque 500 that only names the request id).
import { STATUS_CODES } from 'node:http';
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { AppError, errorDescription, errors, isAppError, isByDesign, MAX_FIELD_ERRORS, pointerSegment, type FieldError } from '../platform/errors.js';
import { problemType } from '../platform/problem-codes.js';
import { KeyFileRefusedError, MasterKeyNotHeldError } from '../platform/crypto/master-key.js';
import { isDatabaseBusy, isDatabaseUnreachable, isDatabaseUnwritable, isForeignKeyViolation, isOrganizationDeleted, isTransactionAborted } from '../platform/db/facts.js';

export interface AjvError {
  instancePath: string;
  keyword: string;
  message?: string;
  params: Record<string, unknown>;
  parentSchema?: Record<string, unknown>;
}


/** Where in the request an ajv error points, as a JSON Pointer (RFC 6901). */
function pointerOf(error: AjvError, context: string | undefined): string {
  const prefix = context === 'body' || context === undefined ? '' : `/${context === 'querystring' ? 'query' : context}`;
  let pointer = prefix + error.instancePath;
  if (error.keyword === 'required') pointer += `/${pointerSegment(String(error.params.missingProperty))}`;
  if (error.keyword === 'additionalProperties') pointer += `/${pointerSegment(String(error.params.additionalProperty))}`;
  // The later of two equal items: the one to remove.
  if (error.keyword === 'uniqueItems') pointer += `/${Math.max(Number(error.params.i), Number(error.params.j))}`;
  // A failure inside propertyNames names the offending key on the error itself.
  const key = (error as { propertyName?: string }).propertyName;
  if (key !== undefined) pointer += `/${pointerSegment(key)}`;
  return pointer;
}

const listOf = (values: unknown[]) => values.map((v) => JSON.stringify(v)).join(', ');

/** The values of a union of literals (TypeBox compiles it to anyOf of consts), or undefined. */
function constChoices(schema: Record<string, unknown>): unknown[] | undefined {
  const branches = schema.anyOf as Array<Record<string, unknown>> | undefined;
  return branches?.every((b) => 'const' in b) ? branches.map((b) => b.const) : undefined;
}

/** A union of one schema and null, as TypeBox writes `Type.Union([X, Type.Null()])`. */
function isNullable(schema: Record<string, unknown>): boolean {
  const branches = schema.anyOf as Array<Record<string, unknown>> | undefined;
  return branches?.length === 2 && branches.some((b) => b.type === 'null') && !constChoices(schema);
}

function messageOf(error: AjvError, context?: string): string {
  const schema = error.parentSchema ?? {};
  const limit = schema['x-limit'] as string | undefined;
  // `?limit=1&limit=2` arrives as a list where one value is taken.
  if (error.keyword === 'type' && context === 'querystring' && Array.isArray((error as { data?: unknown }).data)) return 'is given more than once; give it once';
  switch (error.keyword) {
    case 'additionalProperties': {
      if (context !== 'querystring') return 'is not a known field';
      const known = Object.keys((schema.properties ?? {}) as object);
      return `is not a query parameter of this operation (${known.length > 0 ? `it takes ${known.join(', ')}` : 'it takes none'})`;
    }
    case 'required':
      return 'is required';
    case 'pattern': {
      if ((error as { propertyName?: string }).propertyName !== undefined) return `is not a valid key name: must match ${String(error.params.pattern)}`;
      // A field's own short hint; a long description (the whole story of a header, say) is for the docs.
      const text = (schema['x-pattern-hint'] ?? schema.description) as string | undefined;
      const hint = text !== undefined && text.length <= 200 ? ` (${text})` : '';
      return `must match ${String(error.params.pattern)}${hint}`;
    }
    case 'maxItems':
    case 'maxProperties':
    case 'maxLength':
      return `${error.message ?? 'is too large'}${limit ? ` (limit ${limit})` : ''}`;
    case 'enum':
      return `must be one of ${listOf(error.params.allowedValues as unknown[])}`;
    case 'const':
      return `must be ${JSON.stringify(error.params.allowedValue)}`;
    case 'anyOf': {
      const choices = constChoices(schema);
      return choices ? `must be one of ${listOf(choices)}` : (error.message ?? 'is invalid');
    }
    case 'minLength':
      if (Number(error.params.limit) === 1) return 'must not be empty';
      return error.message ?? 'is too short';
    case 'minProperties':
      return Number(error.params.limit) === 1 ? 'must not be empty' : `must hold at least ${String(error.params.limit)} entries`;
    case 'uniqueItems':
      return `repeats item ${Math.min(Number(error.params.i), Number(error.params.j))}: give each once`;
    case 'type': {
      const types = String(error.params.type).split(',');
      const named = types.map((t) => (t === 'null' ? 'null' : t === 'integer' ? 'a whole number' : `${/^[aeiou]/.test(t) ? 'an' : 'a'} ${t}`));
      return `must be ${named.length > 1 ? `${named.slice(0, -1).join(', ')} or ${named.at(-1)}` : named[0]}`;
    }
    default:
      return error.message ?? 'is invalid';
  }
}


// Keywords whose failure means a documented limit was hit rather than a malformed request.
const LIMIT_KEYWORDS = new Set(['maxItems', 'maxProperties', 'maxLength']);

function fromValidation(error: FastifyError): AppError {
  return validationProblem((error.validation ?? []) as unknown as AjvError[], (error as { validationContext?: string }).validationContext);
}

/** The problem for what a validator (see validators.ts) found wrong in one part of a request. */
export function validationProblem(ajvErrors: AjvError[], context: string | undefined): AppError {
  // propertyNames reports the key's own failure and then once more for the object; keep the first.
  // A union of literals fails once per literal and then as a whole: the whole names the choices.
  const unions = new Set(ajvErrors.filter((e) => e.keyword === 'anyOf' && constChoices(e.parentSchema ?? {})).map((e) => e.instancePath));
  // A nullable value (anyOf: a schema, or null) that fails the schema fails `null` too, and the
  // anyOf as a whole: the schema's own failure is the one that says what to fix.
  const nullable = new Set(ajvErrors.filter((e) => e.keyword === 'anyOf' && isNullable(e.parentSchema ?? {})).map((e) => e.instancePath));
  const relevant = ajvErrors.filter((e) => e.keyword !== 'propertyNames' && e.keyword !== 'if' && !(e.keyword === 'const' && unions.has(e.instancePath))
    && !(nullable.has(e.instancePath) && (e.keyword === 'anyOf' || (e.keyword === 'type' && e.params.type === 'null'))));
  const seen = new Set<string>();
  const fieldErrors: FieldError[] = [];
  const found = relevant.length ? relevant : ajvErrors;
  let unlisted = 0;
  for (const [index, e] of found.entries()) {
    if (fieldErrors.length === MAX_FIELD_ERRORS) {
      unlisted = found.length - index;
      break;
    }
    const message = messageOf(e, context);
    const item = { pointer: pointerOf(e, context), message: e.keyword === 'type' && nullable.has(e.instancePath) ? `${message} or null` : message };
    const key = `${item.pointer}\0${item.message}`;
    if (!seen.has(key)) {
      seen.add(key);
      fieldErrors.push(item);
    }
  }
  const limitHit = (relevant.length ? relevant : ajvErrors).find((e) => LIMIT_KEYWORDS.has(e.keyword) && e.parentSchema?.['x-limit']);
  if (limitHit) {
    const name = String(limitHit.parentSchema!['x-limit']);
    const value = Number(limitHit.params.limit);
    return errors.limitExceeded(`${pointerOf(limitHit, context) || 'the body'} ${messageOf(limitHit)}.`, { name, value }, fieldErrors);
  }
  const first = fieldErrors[0];
  const summary = first ? `${first.pointer || 'the body'} ${first.message}` : 'it does not match its schema';
  const more = unlisted > 0 ? ` (and more: errors lists the first ${MAX_FIELD_ERRORS} of ${found.length})`
    : fieldErrors.length > 1 ? ` (and ${fieldErrors.length - 1} more; see errors)` : '';
  return errors.invalidRequest(`The request is not valid: ${summary}${more}.`, fieldErrors);
}

/** Fastify's own errors, by their stable codes. */
function fromFastify(error: FastifyError, req: FastifyRequest, bodyLimit: number): AppError | null {
  if (error.validation) {
    if ((error as { validationContext?: string }).validationContext === 'body' && req.body === undefined) {
      return errors.invalidRequest('This operation needs a JSON body; send one with Content-Type: application/json.', [{ pointer: '', message: 'is required' }]);
    }
    return fromValidation(error);
  }
  switch (error.code) {
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return errors.unsupportedMediaType(req.headers['content-type'], 'application/json');
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return errors.payloadTooLarge(bodyLimit);
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return errors.invalidRequest('The Content-Length header does not match the body.');
    default:
      break;
  }
  // JSON.parse failures carry status 400 and a SyntaxError message.
  if (error.statusCode === 400 && (error.name === 'SyntaxError' || error.code === 'FST_ERR_CTP_INVALID_JSON_BODY' || /JSON/.test(error.message))) {
    return errors.malformedJson(`The body is not valid JSON: ${error.message}`);
  }
  if (error.statusCode === 413) return errors.payloadTooLarge(bodyLimit);
  if (error.statusCode === 415) return errors.unsupportedMediaType(req.headers['content-type'], 'application/json');
  return null;
}

/** The path of a request URL, without its query string (problems' `instance`, the access log, 404/405). */
export function pathOf(url: string): string {
  const query = url.indexOf('?');
  return query < 0 ? url : url.slice(0, query);
}

export function problemBody(error: AppError, req: FastifyRequest): Record<string, unknown> {
  return problemFields(error, pathOf(req.url), req.id);
}

function problemFields(error: AppError, instance: string | undefined, requestId: string): Record<string, unknown> {
  return {
    type: problemType(error.code),
    title: error.title,
    status: error.status,
    detail: error.detail,
    ...(instance !== undefined ? { instance } : {}),
    code: error.code,
    requestId,
    ...error.extras,
  };
}

/**
 * What Node's HTTP parser refuses before there is a request to answer (malformed HTTP, headers past
 * its limit, a request not received in time), as a whole HTTP/1.1 response carrying a problem like
 * every other refusal. The connection is closed after it, as Node's own answer does.
 */
export function clientErrorResponse(error: { code?: string }, requestId: string, maxHeaderBytes: number): { status: number; raw: string } {
  const problem = error.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? errors.requestTimeout()
    : error.code === 'HPE_HEADER_OVERFLOW' ? errors.headersTooLarge(maxHeaderBytes)
    : errors.malformedHttp(error.code);
  return { status: problem.status, raw: rawProblemResponse(problem, requestId) };
}

/** A problem as a whole HTTP/1.1 response, without `instance`, for a connection that is closed after it. */
export function rawProblemResponse(problem: AppError, requestId: string): string {
  const body = JSON.stringify(problemFields(problem, undefined, requestId));
  return `HTTP/1.1 ${problem.status} ${STATUS_CODES[problem.status]}\r\nContent-Type: application/problem+json; charset=utf-8\r\n`
    + `Content-Length: ${Buffer.byteLength(body)}\r\nX-Request-Id: ${requestId}\r\nConnection: close\r\n\r\n${body}`;
}

/**
 * An Expect that Node's HTTP server would answer itself, with a bare 417 before any hook sees the
 * request: the same refusal as a problem, with the request id the request would have had.
 */
export function expectationFailedResponse(expect: string, url: string, requestId: string): { status: number; headers: Record<string, string | number>; body: string } {
  const problem = errors.expectationFailed(expect);
  const body = JSON.stringify(problemFields(problem, pathOf(url), requestId));
  return { status: problem.status, headers: { 'content-type': 'application/problem+json; charset=utf-8', 'content-length': Buffer.byteLength(body), 'x-request-id': requestId, connection: 'close' }, body };
}

/** OAuth endpoints answer in RFC 6749 §5.2 form; any non-OAuth code becomes the closest one. */
function oauthBody(error: AppError): Record<string, unknown> {
  const oauthCode = error.status === 503 ? 'temporarily_unavailable' : error.status >= 500 ? 'server_error' : error.status === 429 ? 'slow_down' : error.code.match(/^(invalid_|unsupported_|unauthorized_|access_denied|server_error|temporarily_unavailable)/) ? error.code : 'invalid_request';
  return { error: oauthCode, error_description: errorDescription(error.detail) };
}

export function sendError(error: AppError, req: FastifyRequest, reply: FastifyReply): FastifyReply {
  reply.code(error.status);
  for (const [name, value] of Object.entries(error.headers)) reply.header(name, value);
  if (req.routeOptions.config?.errorFormat === 'oauth') {
    // As a token response carries them (RFC 6749 §5.1), and as §5.2's example of an error does.
    return reply.header('cache-control', 'no-store').header('pragma', 'no-cache').type('application/json').send(oauthBody(error));
  }
  return reply.type('application/problem+json').send(problemBody(error, req));
}

/** The request stream's error when the client hung up while sending its body (Node's `aborted`, ECONNRESET). */
function isClientAbort(error: FastifyError, req: FastifyRequest): boolean {
  return error.code === 'ECONNRESET' && !req.raw.complete;
}

export function createErrorHandler(bodyLimit: number) {
  return function errorHandler(error: FastifyError, req: FastifyRequest, reply: FastifyReply) {
    const known = isAppError(error) ? error
      // The client closed the connection before its body was in: its fault, not the database's
      // (whose lost connections share the code), and not worth an error in the log.
      : isClientAbort(error, req) ? errors.invalidRequest('The connection was closed before the request body arrived in full; nothing was done. Send it again.')
      : isTransactionAborted(error) ? errors.writeConflict()
      // Deleted since this request found it (another node's caches, or a request under way).
      : isOrganizationDeleted(error) ? errors.notFound('organization', req.org?.id ?? (req.params as { orgId?: string } | undefined)?.orgId ?? 'named')
      // What it names was deleted by a request that committed first (a change checks what it names before it writes).
      : isForeignKeyViolation(error) ? errors.raced('deleted_meanwhile', 'Something this request names (its organization, a secret, a service, an environment, a data key) was deleted by another request at the same moment; nothing was written. Retry to see what remains.')
      : isDatabaseBusy(error) ? errors.unavailable('The database is held by another process (a long slipway command, or a second server on the same SQLite file); nothing was written. Retry.', 2)
      : isDatabaseUnreachable(error) ? errors.unavailable('The database cannot be reached at the moment. Retry after Retry-After seconds. A write whose connection was lost while it committed may have taken effect: check before sending it again.', 5)
      : isDatabaseUnwritable(error) ? errors.unavailable('The database takes no writes at the moment: its disk is full or read-only, or it is a read-only standby (the server log says which). Nothing was written. Retry later.', 30)
      : error instanceof KeyFileRefusedError ? errors.unavailable('The server cannot protect new keys at the moment: its master key file does not hold the key it uses, and an operator has to put the right file back (the server log says which). Nothing was written. Retry later.', 30)
      : error instanceof MasterKeyNotHeldError ? errors.masterKeyMissing(error.masterKeyId, error.source === 'SLIPWAY_MASTER_KEY')
      : fromFastify(error, req, bodyLimit);
    if (known) {
      if (known.status >= 500 && !isByDesign(known)) req.log.error({ err: { message: error.message, code: known.code } }, 'request failed');
      return sendError(known, req, reply);
    }
    // Unexpected: log the error (never the body) and answer opaquely.
    req.log.error({ err: error }, 'unexpected error');
    return sendError(errors.internal(), req, reply);
  };
}
