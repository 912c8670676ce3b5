// HTTP pieces the secret routes share: If-Match in, ETag out, both documented.
import type { FastifyReply, FastifyRequest } from 'fastify';
import { etagOf, parseIfMatch, type Precondition } from './secret-model.js';

export const IfMatchHeaders = {
  type: 'object',
  properties: {
    'if-match': { type: 'string', description: 'Write only if the secret is still at this version: its ETag (`"3.mi9x0v2k"`), a bare version (`"3"`), a list of them, or `*`. Otherwise 412.' },
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

export function ifMatchOf(req: FastifyRequest): Precondition[] | undefined {
  const header = req.headers['if-match'];
  return parseIfMatch(Array.isArray(header) ? header.join(',') : header);
}
