// The scopes a token request may ask for. The spec's client sends all five; we grant what was
// asked of these and refuse anything else, so a typo in a pipeline fails loudly.

export const STANDARD_SCOPES = ['openid', 'email', 'profile', 'offline_access'] as const;

export function audienceScope(idpName: string, projectId: string): string {
  return `urn:${idpName}:iam:org:project:id:${projectId}:aud`;
}

/** The exact scope string a client should request (bootstrap.json, `service-user create`). */
export function fullScope(idpName: string, projectId: string): string {
  return [...STANDARD_SCOPES, audienceScope(idpName, projectId)].join(' ');
}

export type ScopeParse =
  | { ok: true; granted: string[]; audience: boolean }
  | { ok: false; unknown: string[] };

/**
 * RFC 6749 §3.3: space-delimited, case-sensitive; repeated scopes count once. The parser is made
 * once per server, so a token request does not rebuild the set of known scopes.
 */
export function scopeParser(idpName: string, projectId: string): (scope: string | undefined) => ScopeParse {
  const audience = audienceScope(idpName, projectId);
  const known = new Set<string>([...STANDARD_SCOPES, audience]);
  return (scope) => {
    const requested = (scope ?? '').split(' ').filter((s) => s !== '');
    const unknown = requested.filter((s) => !known.has(s));
    if (unknown.length > 0) return { ok: false, unknown: [...new Set(unknown)] };
    const granted = [...new Set(requested)];
    return { ok: true, granted, audience: granted.includes(audience) };
  };
}

/** The claim that names the token's organization, in the form ZITADEL uses for its resource owner. */
export function orgClaim(idpName: string): string {
  return `urn:${idpName}:iam:user:resourceowner:id`;
}

/** The claim that carries the generation of its service user's tokens a token was issued in (see token_generation). */
export function tokenGenerationClaim(idpName: string): string {
  return `urn:${idpName}:iam:user:token_generation`;
}
