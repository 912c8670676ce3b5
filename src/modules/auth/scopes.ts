// The scopes a token request may ask for. The spec's client sends all five; we grant what was
// asked of these and refuse anything else, so a typo in a pipeline fails loudly. A request that
// names no scope at all gets all five (RFC 6749 §3.3's pre-defined default): a token the API takes.

export const STANDARD_SCOPES = ['openid', 'email', 'profile', 'offline_access'] as const;

export function audienceScope(idpName: string, projectId: string): string {
  return `urn:${idpName}:iam:org:project:id:${projectId}:aud`;
}

/** The exact scope string a client should request (bootstrap.json, `service-user create`). */
export function fullScope(idpName: string, projectId: string): string {
  return [...STANDARD_SCOPES, audienceScope(idpName, projectId)].join(' ');
}

export type ScopeParse =
  | { ok: true; granted: string[]; audience: boolean; scope: string }
  | { ok: false; unknown: string[] };

/** Distinct scope strings whose parse is remembered: clients send the same one every time. */
const REMEMBERED_SCOPES = 64;
/** Longer scope strings are parsed every time rather than kept. */
const REMEMBERED_SCOPE_CHARS = 1024;

/**
 * RFC 6749 §3.3: space-delimited, case-sensitive; repeated scopes count once. The parser is made
 * once per server, so a token request does not rebuild the set of known scopes, and it remembers
 * (frozen) what it answered for the last few scope strings.
 */
export function scopeParser(idpName: string, projectId: string): (scope: string | undefined) => ScopeParse {
  const audience = audienceScope(idpName, projectId);
  const known = new Set<string>([...STANDARD_SCOPES, audience]);
  const remembered = new Map<string, ScopeParse>();
  const parse = (scope: string): ScopeParse => {
    const requested = scope.split(' ').filter((s) => s !== '');
    const unknown = requested.filter((s) => !known.has(s));
    if (unknown.length > 0) return { ok: false, unknown: [...new Set(unknown)] };
    const granted = [...new Set(requested)];
    return { ok: true, granted, audience: granted.includes(audience), scope: granted.join(' ') };
  };
  const all = fullScope(idpName, projectId);
  return (given) => {
    const scope = given === undefined || given.trim() === '' ? all : given;
    let parsed = remembered.get(scope);
    if (parsed === undefined) {
      parsed = deepFreeze(parse(scope));
      if (scope.length > REMEMBERED_SCOPE_CHARS) return parsed;
      if (remembered.size >= REMEMBERED_SCOPES) remembered.clear();
      remembered.set(scope, parsed);
    }
    return parsed;
  };
}

function deepFreeze(parsed: ScopeParse): ScopeParse {
  Object.freeze(parsed.ok ? parsed.granted : parsed.unknown);
  return Object.freeze(parsed);
}

/** The claim that names the token's organization, in the form ZITADEL uses for its resource owner. */
export function orgClaim(idpName: string): string {
  return `urn:${idpName}:iam:user:resourceowner:id`;
}

/** The claim that carries the generation of its service user's tokens a token was issued in (see token_generation). */
export function tokenGenerationClaim(idpName: string): string {
  return `urn:${idpName}:iam:user:token_generation`;
}
