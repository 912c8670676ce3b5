// Entity tags of versioned resources (secrets, services) and the preconditions a write or read
// states with them (If-Match, If-None-Match; RFC 9110 §13.1), checked against what is stored.
import { errors } from './errors.js';

/**
 * What distinguishes a resource from an earlier one of the same name: its creation time, in base
 * 36. Versions start again at 1 when a name is deleted for good and created anew, so a version
 * alone would let a stale ETag match a resource its sender has never seen.
 */
function incarnationOf(createdAt: string): string {
  return Date.parse(createdAt).toString(36);
}

/** The ETag of a resource's current version: `"<version>.<incarnation>"`. */
export function etagOf(version: number, createdAt: string): string {
  return `"${version}.${incarnationOf(createdAt)}"`;
}

/** One entity tag of an If-Match: a version, and the resource's incarnation when the tag names one. */
export interface Precondition {
  version: number;
  incarnation?: string;
}

/** Whether the resource (its current version, its creation time) is one that `expected` names; undefined accepts any. */
export function satisfies(expected: Precondition[] | undefined, version: number, createdAt: string): boolean {
  return expected === undefined || expected.some((e) => e.version === version && (e.incarnation === undefined || e.incarnation === incarnationOf(createdAt)));
}

/**
 * The entity tags of an `If-Match` or `If-None-Match` header: undefined when any will do (no
 * header, or `*`). A tag is an ETag as given (`"3.mi9x0v2k"`) or a bare version (`"3"`, which does
 * not tell a resource from one deleted for good and created again under its name). If-Match
 * compares strongly (RFC 9110 §13.1.1), so there a weak tag matches nothing; If-None-Match
 * compares weakly (§13.1.2). A tag that is not one of ours matches nothing; a value that is no
 * entity tag at all is a 400.
 */
export function parseIfMatch(header: string | undefined, opts: { header: 'if-match' | 'if-none-match'; weak: boolean } = { header: 'if-match', weak: false }): Precondition[] | undefined {
  if (header === undefined || header.trim() === '*') return undefined;
  // A list of entity tags (RFC 9110 §8.8.3): a comma inside the quotes is part of a tag, and empty
  // elements (`"1", , "2"`, a trailing comma) are skipped (§5.6.1.2).
  return (header.match(/(?:W\/)?"[^"]*"|[^,\s][^,]*/g) ?? []).flatMap((tag) => {
    const trimmed = tag.trim();
    const ours = /^(W\/)?"(\d{1,15})(?:\.([0-9a-z]{1,12}))?"$/.exec(trimmed);
    if (ours && (ours[1] === undefined || opts.weak)) return [ours[3] === undefined ? { version: Number(ours[2]) } : { version: Number(ours[2]), incarnation: ours[3] }];
    if (/^(?:W\/)?"[\x21\x23-\x7e\x80-\xff]*"$/.test(trimmed)) return [];
    throw errors.invalidRequest(`${opts.header === 'if-match' ? 'If-Match' : 'If-None-Match'} must be * or a list of quoted ETags, such as "3.mi9x0v2k" or "3" (with the quotes); \`${trimmed.slice(0, 40)}\` is not one.`, [
      { pointer: `/headers/${opts.header}`, message: 'is not a quoted ETag' },
    ]);
  });
}

/** What a write requires of the resource (If-Match, If-None-Match); an absent member accepts any. */
export interface Expected {
  match?: Precondition[] | undefined;
  /** `*`: the write must find no resource, which a change of an existing one never does. */
  noneMatch?: Precondition[] | '*' | undefined;
}

/** A header that may have come more than once, as one list. */
const joined = (header: string | string[] | undefined) => (Array.isArray(header) ? header.join(',') : header);

/** A request's headers, as far as preconditions go. */
type WithHeaders = { headers: Record<string, string | string[] | undefined> };

/** A request's If-Match and If-None-Match, parsed (a malformed one is a 400). */
export function preconditionsOf({ headers }: WithHeaders): Expected {
  const noneMatch = joined(headers['if-none-match']);
  return {
    match: parseIfMatch(joined(headers['if-match'])),
    noneMatch: noneMatch === undefined ? undefined : noneMatch.trim() === '*' ? '*' : parseIfMatch(noneMatch, { header: 'if-none-match', weak: true }),
  };
}

/** A stored resource as its preconditions see it. */
export interface Tagged {
  /** `secret`, `service`: how problems name it. */
  kind: string;
  name: string;
  version: number;
  createdAt: string;
}

/** Refuses with 412 (and the current version) a change whose preconditions the resource does not meet. */
export function checkExpected(resource: Tagged, expected: Expected | undefined): void {
  const { match, noneMatch } = expected ?? {};
  const { kind, name, version, createdAt } = resource;
  // Only a refusal names the current ETag: a write that goes ahead does not compute it.
  const current = () => etagOf(version, createdAt);
  if (!satisfies(match, version, createdAt)) {
    const recreated = match!.some((e) => e.version === version);
    throw errors.preconditionFailed(
      recreated
        ? `The ${kind} "${name}" is at version ${version}, but If-Match's ETag for that version is not its own (one read before it was deleted permanently and created again, or not one this API gave); its ETag is ${current()}. Read it again and retry with its ETag.`
        : `The ${kind} "${name}" is at version ${version}, which If-Match does not name${match!.length ? ` (it names ${match!.map((e) => e.version).join(', ')})` : ''}. Read it again and retry with its ETag.`,
      { currentVersion: version },
    );
  }
  if (noneMatch === '*') {
    throw errors.preconditionFailed(`If-None-Match: * asks for a write only where no ${kind} exists, and "${name}" exists (ETag ${current()}). Send the request without it to change the ${kind}.`, { currentVersion: version });
  }
  if (noneMatch !== undefined && satisfies(noneMatch, version, createdAt)) {
    throw errors.preconditionFailed(`The ${kind} "${name}" is still at ${current()}, which If-None-Match names; nothing was changed.`, { currentVersion: version });
  }
}

/**
 * A read's preconditions (RFC 9110 §13.2.2), its headers parsed once: an If-Match that names none
 * of the resource's versions is a 412; then an If-None-Match that names its version (weak
 * comparison, or `*`) means "not modified" (true).
 */
export function unchangedSince(req: WithHeaders, resource: Tagged): boolean {
  const { match, noneMatch } = preconditionsOf(req);
  checkExpected(resource, { match });
  return noneMatch === '*' || (noneMatch !== undefined && satisfies(noneMatch, resource.version, resource.createdAt));
}
