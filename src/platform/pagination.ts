// Cursor pagination: a cursor is the opaque, base64url-encoded sort key of the last item returned,
// with the list it belongs to: another list's cursor is refused, not read as a key of this one
// (which would quietly answer an empty or wrong page).
import { errors } from './errors.js';

export const DEFAULT_LIMIT = 50;
export const MAX_LIMIT = 200;

export interface PageRequest {
  limit: number;
  /** Sort key after which the page starts, decoded from the cursor. */
  after: string | null;
}

export interface Page<T> {
  items: T[];
  nextCursor: string | null;
}

export function encodeCursor(list: string, key: string): string {
  return Buffer.from(JSON.stringify({ l: list, k: key }), 'utf8').toString('base64url');
}

export function decodeCursor(list: string, cursor: string | undefined): string | null {
  if (cursor === undefined || cursor === '') return null;
  try {
    const parsed = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8')) as { l?: unknown; k?: unknown };
    // No key holds a NUL, which PostgreSQL refuses in text (a 500 rather than this 400).
    if (parsed.l === list && typeof parsed.k === 'string' && !parsed.k.includes('\0')) return parsed.k;
  } catch {
    // fall through to the problem below
  }
  throw errors.invalidCursor();
}

/** `list` names the list (`secrets`, `deployments`, …): the same name for the request and the page. */
export function pageRequest(list: string, query: { limit?: number; cursor?: string }): PageRequest {
  return { limit: query.limit ?? DEFAULT_LIMIT, after: decodeCursor(list, query.cursor) };
}

/** Repositories fetch limit + 1 rows; the extra row only says whether there is a next page. */
export function toPage<T>(list: string, rows: T[], limit: number, keyOf: (row: T) => string): Page<T> {
  if (rows.length <= limit) return { items: rows, nextCursor: null };
  const items = rows.slice(0, limit);
  return { items, nextCursor: encodeCursor(list, keyOf(items[items.length - 1]!)) };
}
