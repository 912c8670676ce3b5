// How versioned resources (secrets, services) speak preconditions over HTTP: If-Match and
// If-None-Match in, ETag out, all documented.
import { Type } from '@sinclair/typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { etagOf, unchangedSince } from '../platform/etags.js';
import { withHeader } from './schemas.js';

export { preconditionsOf, unchangedSince } from '../platform/etags.js';

/**
 * A conditional read's answer (RFC 9110 §13.2.2): the `kind` with its ETag, or a 304 without a
 * body when If-None-Match names its version; a 412 when If-Match names none of its versions.
 */
export function readAnswer<T extends { name: string; version: number; createdAt: string }>(req: FastifyRequest, reply: FastifyReply, kind: string, resource: T): T {
  // Checked first: a 412 is a problem, and carries no ETag of the resource it refused to describe.
  const unchanged = unchangedSince(req, { kind, ...resource });
  tagged(reply, resource);
  // No payload at all: a null would be sent as "null", with a Content-Length of 4.
  if (unchanged) return reply.code(304).send(undefined as never) as never;
  return resource;
}

/** The precondition headers of a write to a `noun` (`secret`, `service`). */
export function ifMatchHeaders(noun: string) {
  return {
    type: 'object',
    properties: {
      'if-match': { type: 'string', description: `Write only if the ${noun} is still at this version: its ETag (\`"3.mi9x0v2k"\`), a bare version (\`"3"\`), a list of them, or \`*\`. Otherwise 412.` },
      'if-none-match': { type: 'string', description: `Write only if the ${noun} is not at any of these versions (weak comparison); \`*\` fails on any existing ${noun}. Otherwise 412.` },
    },
  } as const;
}

/** The ETag response header of a `noun`'s answer, documented. */
export function withEtag<T extends object>(schema: T, noun: string): T {
  return withHeader(schema, 'etag', { type: 'string', description: `The version and the ${noun}'s creation time (\`"3.mi9x0v2k"\`): send it back as If-Match.` });
}

/** Sets the ETag of the version a response describes and passes the body through. */
export function tagged<T extends { version: number; createdAt: string }>(reply: FastifyReply, body: T): T {
  reply.header('etag', etagOf(body.version, body.createdAt));
  return body;
}

/** The precondition headers of a read of a `noun`. */
export function readHeaders(noun: string) {
  return Type.Object({
    'if-none-match': Type.Optional(Type.String({ description: `ETags (or bare versions) the caller holds: a 304 if the ${noun} is still at one of them.` })),
    'if-match': Type.Optional(Type.String({ description: `Answer only if the ${noun} is still at one of these versions (strong comparison); otherwise 412.` })),
  });
}
