// Schemas every route shares: problems, pagination, the organization path parameter.
import { Type } from '@sinclair/typebox';
import { MAX_LIMIT, DEFAULT_LIMIT } from '../platform/pagination.js';

export const ProblemSchema = Type.Object({
  type: Type.String({ description: 'A URI naming the kind of problem.' }),
  title: Type.String(),
  status: Type.Integer(),
  detail: Type.String({ description: 'What went wrong and what to do about it.' }),
  instance: Type.String({ description: 'The request path.' }),
  code: Type.String({ description: 'Stable, machine-readable error code.' }),
  requestId: Type.String(),
  errors: Type.Optional(Type.Array(Type.Object({
    pointer: Type.String({ description: 'JSON Pointer to the offending part of the request.' }),
    message: Type.String(),
  }))),
  conflicts: Type.Optional(Type.Array(Type.Unknown())),
}, { additionalProperties: true, description: 'RFC 9457 problem details.' });

export const PageQuery = Type.Object({
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_LIMIT, default: DEFAULT_LIMIT })),
  cursor: Type.Optional(Type.String({ maxLength: 500, description: 'The `nextCursor` of the previous page, valid only with the filters it was made with.' })),
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

export const OrgIdParam = Type.String({ minLength: 1, maxLength: 64, description: 'Organization id (`org_…`) or slug.' });
export const OrgParams = Type.Object({ orgId: OrgIdParam });

export const Timestamp = Type.String({ format: 'date-time', description: 'ISO 8601 UTC with milliseconds.' });

export const NullableCursor = Type.Union([Type.String(), Type.Null()], { description: 'Pass as `cursor` for the next page; null on the last.' });
