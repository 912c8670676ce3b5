// Schemas every route shares: problems, pagination, the organization path parameter.
import { Type, type Static, type TObject } from '@sinclair/typebox';
import { MAX_LIMIT, DEFAULT_LIMIT } from '../platform/pagination.js';
import { PROBLEM_CODES, PROBLEM_TYPE_BASE, problemType } from '../platform/problem-codes.js';

const codeList = Object.entries(PROBLEM_CODES).map(([code, { status, meaning }]) => `- \`${code}\` (${status}): ${meaning}`).join('\n');

export const ProblemSchema = Type.Object({
  type: Type.String({ description: `A URI naming the kind of problem: \`${PROBLEM_TYPE_BASE}\` and the code, with \`-\` for \`_\` (\`${problemType('invalid_cursor')}\`).` }),
  title: Type.String(),
  status: Type.Integer(),
  detail: Type.String({ description: 'What went wrong and what to do about it.' }),
  instance: Type.Optional(Type.String({ description: 'The request path (absent when the request could not be read: `malformed_http`, `headers_too_large`, `request_timeout`; and for a `CONNECT`, whose target is a host).' })),
  code: Type.String({ description: `Stable, machine-readable error code. New codes may be added; these are the ones there are:\n${codeList}` }),
  requestId: Type.String({ description: 'The request\'s id (its X-Request-Id): quote it when reporting a problem.' }),
  errors: Type.Optional(Type.Array(Type.Object({
    pointer: Type.String({ description: 'JSON Pointer to the offending part of the request (`/query/…`, `/headers/…`, `/path/…` outside the body).' }),
    message: Type.String(),
  }), { description: 'Each offending field, at most 100.' })),
  conflicts: Type.Optional(Type.Array(Type.Object({}, { additionalProperties: true }), {
    description: 'What the request collides with, per code: `secret_exists`/`secret_deleted` `{pointer, name, state}`; `environment_in_use`/`service_in_use` `{deployment, state}`; `too_many_client_secrets` `{id, hint, createdAt}`.',
  })),
  requiredRole: Type.Optional(Type.String({ description: '403: the least role the operation needs.' })),
  requiredScope: Type.Optional(Type.String({ description: '401: the scope a token for this API must be requested with.' })),
  currentVersion: Type.Optional(Type.Integer({ description: '412 on a secret: its current version.' })),
  state: Type.Optional(Type.String({ description: '409 on a deployment: the state it is in.' })),
  requested: Type.Optional(Type.String({ description: '409 `invalid_transition`: the state asked for.' })),
  allowedTransitions: Type.Optional(Type.Array(Type.String(), { description: '409 `invalid_transition`: the states reachable from `state`.' })),
  rollbackFrom: Type.Optional(Type.Array(Type.String(), { description: '409 `not_rollbackable`: the states a deployment can be rolled back to from.' })),
  lock: Type.Optional(Type.Object({ reason: Type.String(), lockedBy: Type.Union([Type.String(), Type.Null()]), lockedAt: Type.String({ format: 'date-time' }) }, { description: '409 `environment_locked`: why the environment is locked, by whom and since when.' })),
  promoteFrom: Type.Optional(Type.Array(Type.String(), { description: '409 `not_promotable`: the states a deployment can be promoted from.' })),
  missing: Type.Optional(Type.Array(Type.String(), { description: '422 `unknown_secrets`, `secret_versions_gone`: what does not exist.' })),
  limit: Type.Optional(Type.Object({ name: Type.String(), value: Type.Integer() }, { description: '400 `limit_exceeded`, 413: the setting and its value.' })),
  restorableUntil: Type.Optional(Type.String({ format: 'date-time', description: '404 `secret_deleted`: until when it can be restored.' })),
  allowed: Type.Optional(Type.Array(Type.String(), { description: '405: the methods the path answers.' })),
  firstRequestId: Type.Optional(Type.Union([Type.String(), Type.Null()], { description: '409 `idempotency_response_lost`: the first request\'s id.' })),
  changed: Type.Optional(Type.Array(Type.Object({ type: Type.String(), id: Type.String() }), { description: '409 `idempotency_response_lost`: what the first request changed.' })),
  externalOrgId: Type.Optional(Type.String({ description: '403 `org_not_linked`, `role_not_granted`: the external issuer\'s organization.' })),
  issuer: Type.Optional(Type.String({ description: '400 `external_token`: the issuer of the token, where it is revoked.' })),
  masterKeyId: Type.Optional(Type.String({ description: '503 `master_key_missing`: the id (a fingerprint) of the master key the server lacks.' })),
}, { additionalProperties: true, description: 'RFC 9457 problem details.' });

export const PageQuery = Type.Object({
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_LIMIT, default: DEFAULT_LIMIT })),
  cursor: Type.Optional(Type.String({ minLength: 1, maxLength: 500, description: 'The `nextCursor` of the previous page, valid only with the filters it was made with.' })),
});

/**
 * Version and sequence numbers a request may name: 32-bit, as both databases store them. A bigger
 * one names nothing that exists, and is refused as such rather than reaching the database.
 */
export const SequenceNumber = (options: { minimum: number; description?: string; default?: number }) =>
  Type.Integer({ maximum: 2_147_483_647, ...options });

/** `?force=true` on the DELETE of an environment or a service: `what` says what it then does anyway. */
export const ForceDeleteQuery = (what: string) => Type.Object({
  force: Type.Optional(Type.Boolean({ default: false, description: `true: ${what}; never while a deployment is queued or in progress.` })),
});

/** `?dryRun=true`: every check a change meets, its answer, and nothing written (see platform/db/dry-run.ts). */
export const DryRunQuery = Type.Object({
  dryRun: Type.Optional(Type.Boolean({
    default: false,
    description: 'true: check the change and answer what it would make (or the problem that refuses it), writing nothing: no version, no event. A create answers 200 without a Location; an Idempotency-Key is not taken (there is nothing to replay). The role the change needs is still needed.',
  })),
});

/**
 * A body that may be left out altogether (`POST …/cancel` with nothing to say): the schema admits
 * null, which is what the validator sees for a missing body.
 */
export function optionalBody<T extends TObject>(schema: T) {
  return Type.Unsafe<Static<T> | null>({ ...schema, type: ['object', 'null'], description: `${schema.description ?? ''} The body may be omitted.`.trim() });
}

/** The longest organization id or slug a path takes. */
export const ORG_PARAM_MAX = 64;
export const OrgIdParam = Type.String({ minLength: 1, maxLength: ORG_PARAM_MAX, description: 'Organization id (`org_…`) or slug.' });
export const OrgParams = Type.Object({ orgId: OrgIdParam });

export const Timestamp = Type.String({ format: 'date-time', description: 'ISO 8601 UTC with milliseconds.' });

export const NullableCursor = Type.Union([Type.String(), Type.Null()], { description: 'Pass as `cursor` for the next page; null on the last.' });

/** `schema` with one more response header documented, beside those it documents already (a 201's Location). */
export function withHeader<T extends object>(schema: T, name: string, header: Record<string, unknown>): T {
  const declared = (schema as { headers?: Record<string, unknown> }).headers;
  return { ...schema, headers: { ...declared, [name]: header } };
}

/**
 * A public answer that caches may keep for `seconds` (key sets, metadata): `header` is what the
 * route sends, the schema says the same in the API reference.
 */
export function publicFor<T extends object>(seconds: number, schema: T): { header: string; schema: T } {
  const header = `public, max-age=${seconds}`;
  return { header, schema: withHeader(schema, 'cache-control', { type: 'string', const: header, description: `Caches may keep the answer ${seconds} seconds.` }) };
}

/**
 * Documents `Cache-Control: no-store` on a response that carries credentials or secret values
 * (beside any headers it already documents); the route sets the header.
 */
export function noStore<T extends object>(schema: T): T {
  return withHeader(schema, 'cache-control', { type: 'string', const: 'no-store', description: 'The answer carries credentials or secret values: no cache may keep it.' });
}
