// The access token of a request: `Authorization: Bearer <credentials>` (RFC 6750 §2.1).

/** The credentials of `Authorization: Bearer <credentials>` (the scheme is case-insensitive), or null. */
export function bearerCredentials(header: string): string | null {
  if (header.length < 8 || header.slice(0, 7).toLowerCase() !== 'bearer ') return null;
  return header.slice(7).trim();
}
