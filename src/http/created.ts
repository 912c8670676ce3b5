// 201 Created with the new resource's address in Location (RFC 9110 §15.3.2), documented. The
// address is a path on this server, by id: it stays valid when the resource is renamed.
import type { FastifyReply } from 'fastify';

/** Documents the Location header of a 201 response. */
export function withLocation<T extends object>(schema: T): T {
  return { ...schema, headers: { location: { type: 'string', description: 'The new resource\'s path on this server (by id).' } } };
}

/** Answers 201 with the Location of `path` and passes the body through. */
export function created<T>(reply: FastifyReply, path: string, body: T): T {
  reply.code(201).header('location', path);
  return body;
}
