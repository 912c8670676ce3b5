// HTTP pieces the secret routes share: If-Match and If-None-Match in, ETag out, all documented.
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Expected } from './secret-changes.js';
import { etagOf, parseIfMatch, satisfies } from './secret-model.js';

export const IfMatchHeaders = {
  type: 'object',
  properties: {
    'if-match': { type: 'string', description: 'Write only if the secret is still at this version: its ETag (`"3.mi9x0v2k"`), a bare version (`"3"`), a list of them, or `*`. Otherwise 412.' },
    'if-none-match': { type: 'string', description: 'Write only if the secret is not at any of these versions (weak comparison); `*` fails on any existing secret. Otherwise 412.' },
  },
} as const;

/** The ETag response header, documented. */
export function withEtag<T extends object>(schema: T): T {
  return { ...schema, headers: { etag: { type: 'string', description: 'The version and the secret\'s creation time (`"3.mi9x0v2k"`): send it back as If-Match.' } } };
}

/** Sets the ETag of the version a response describes and passes the body through. */
export function tagged<T extends { version: number; createdAt: string }>(reply: FastifyReply, body: T): T {
  reply.header('etag', etagOf(body.version, body.createdAt));
  return body;
}

/** A header that may have come more than once, as one list. */
const joined = (header: string | string[] | undefined) => (Array.isArray(header) ? header.join(',') : header);

/** The request's If-Match and If-None-Match, parsed (a malformed one is a 400). */
export function preconditionsOf(req: FastifyRequest): Expected {
  const noneMatch = joined(req.headers['if-none-match']);
  return {
    match: parseIfMatch(joined(req.headers['if-match'])),
    noneMatch: noneMatch === undefined ? undefined : noneMatch.trim() === '*' ? '*' : parseIfMatch(noneMatch, { header: 'if-none-match', weak: true }),
  };
}

/** A read's If-None-Match names the version it would answer with (RFC 9110 §13.1.2): a 304 then. */
export function notModified(req: FastifyRequest, current: { version: number; createdAt: string }): boolean {
  const { noneMatch } = preconditionsOf(req);
  return noneMatch === '*' || (noneMatch !== undefined && satisfies(noneMatch, current.version, current.createdAt));
}
