// Cursor pagination: a cursor is the opaque, base64url-encoded sort key of the last item returned,
// with the list it belongs to and a digest of its scope (the organization or other parent it lists
// under, and its filters). Another list's cursor, or one made in another scope, is refused, not read
// as a key of this listing (which would quietly answer an empty, short or wrong page).
import { createHash } from 'node:crypto';
import { errors } from './errors.js';

export const DEFAULT_LIMIT = 50;
export const MAX_LIMIT = 200;

/**
 * What a listing depends on besides its position, each as the list reads it: ids rather than the
 * names a caller may give, defaults filled in. Undefined means not filtered; arrays are sets.
 */
export type CursorScope = Record<string, string | boolean | readonly string[] | undefined>;

/** A list and the scope of one request to it: the same for the request's cursor and its page's. */
export interface CursorList {
  name: string;
  scope: string;
  /**
   * Whether a cursor from before cursors had a scope is still read (unchecked): only the events
   * list's, which clients keep to resume the log from later.
   */
  acceptsUnscoped: boolean;
}

export interface PageRequest {
  limit: number;
  /** Sort key after which the page starts, decoded from the cursor. */
  after: string | null;
}

export interface Page<T> {
  items: T[];
  nextCursor: string | null;
}

/** `name` names the list (`secrets`, `deployments`, …); a digest keeps cursors short whatever the filters. */
export function cursorList(name: string, scope: CursorScope = {}, options: { acceptsUnscoped?: boolean } = {}): CursorList {
  const canonical = Object.keys(scope).sort().flatMap((key) => {
    const value = scope[key];
    if (value === undefined) return [];
    return [[key, Array.isArray(value) ? [...new Set(value)].sort() : value]];
  });
  const digest = createHash('sha256').update(JSON.stringify(canonical)).digest('base64url').slice(0, 16);
  return { name, scope: digest, acceptsUnscoped: options.acceptsUnscoped === true };
}

export function encodeCursor(list: CursorList, key: string): string {
  return Buffer.from(JSON.stringify({ l: list.name, s: list.scope, k: key }), 'utf8').toString('base64url');
}

export function decodeCursor(list: CursorList, cursor: string | undefined): string | null {
  if (cursor === undefined || cursor === '') return null;
  let parsed: { l?: unknown; s?: unknown; k?: unknown } | null;
  try {
    parsed = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8')) as typeof parsed;
  } catch {
    throw errors.invalidCursor();
  }
  // No key holds a NUL, which PostgreSQL refuses in text (a 500 rather than this 400).
  if (parsed?.l !== list.name || typeof parsed.k !== 'string' || parsed.k.includes('\0')) throw errors.invalidCursor();
  if (parsed.s === list.scope || (parsed.s === undefined && list.acceptsUnscoped)) return parsed.k;
  throw typeof parsed.s === 'string' ? errors.cursorOutOfScope() : errors.invalidCursor();
}

export function pageRequest(list: CursorList, query: { limit?: number; cursor?: string }): PageRequest {
  return { limit: query.limit ?? DEFAULT_LIMIT, after: decodeCursor(list, query.cursor) };
}

/** Repositories fetch limit + 1 rows; the extra row only says whether there is a next page. */
export function toPage<T>(list: CursorList, rows: T[], limit: number, keyOf: (row: T) => string): Page<T> {
  if (rows.length <= limit) return { items: rows, nextCursor: null };
  const items = rows.slice(0, limit);
  return { items, nextCursor: encodeCursor(list, keyOf(items[items.length - 1]!)) };
}
