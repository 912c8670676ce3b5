// 201 Created with the new resource's address in Location (RFC 9110 §15.3.2), documented. The
// address is absolute, under the public base URL (SLIPWAY_BASE_URL, under whose path the API is
// served), and names the resource by id: it stays valid when it is renamed.
import type { FastifyReply } from 'fastify';

/** Documents the Location header of a 201 response. */
export function withLocation<T extends object>(schema: T): T {
  return { ...schema, headers: { location: { type: 'string', format: 'uri', description: 'The new resource\'s URL (by id), under the public base URL.' } } };
}

/** Answers 201 with the Location of `path` (under the public base URL) and passes the body through. */
export function created<T>(reply: FastifyReply, path: string, body: T): T {
  reply.code(201).header('location', reply.server.publicBaseUrl + path);
  return body;
}
