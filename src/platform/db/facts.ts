// What can be told about a database without loading a driver: which SQLite file a configuration
// opens, and what kind of failure an error from either database is. Kept apart from database.ts
// (which loads Kysely, pg and better-sqlite3) so that the CLI can refuse bad usage at once.
import path from 'node:path';
import { redactUrl } from '../config.js';

/** The SQLite file these settings open, or null for PostgreSQL. */
export function sqliteFile(databaseUrl: string | null, dataDir: string): string | null {
  if (databaseUrl === null) return path.join(dataDir, 'slipway.db');
  if (databaseUrl.startsWith('sqlite:')) return path.resolve(databaseUrl.slice('sqlite:'.length));
  return null;
}

/** A unique or primary-key constraint refused the write (both databases). */
export function isUniqueViolation(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return code === '23505' || code === 'SQLITE_CONSTRAINT_UNIQUE' || code === 'SQLITE_CONSTRAINT_PRIMARYKEY';
}

/** SQLite: another process (a CLI command, a second server) held the write lock past busy_timeout. */
export function isDatabaseBusy(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  // The extended codes too: SQLITE_BUSY_SNAPSHOT, SQLITE_LOCKED_SHAREDCACHE, …
  return typeof code === 'string' && (code.startsWith('SQLITE_BUSY') || code.startsWith('SQLITE_LOCKED'));
}

const UNREACHABLE_SOCKET_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN', 'EPIPE']);

/**
 * PostgreSQL cannot be reached or is going away: the connection was refused, lost or timed out
 * (pg's own messages carry no code), the server is shutting down or starting (57P01-57P03), out of
 * connections (53300), or a connection exception (class 08). Answered with 503 and Retry-After.
 */
export function isDatabaseUnreachable(error: unknown): boolean {
  const { code, message } = (error ?? {}) as { code?: unknown; message?: unknown };
  if (typeof code === 'string') {
    return UNREACHABLE_SOCKET_CODES.has(code) || code.startsWith('08') || code === '57P01' || code === '57P02' || code === '57P03' || code === '53300';
  }
  return typeof message === 'string' && /^(Connection terminated|timeout exceeded when trying to connect|Client has encountered a connection error)/.test(message);
}

/**
 * The database takes no writes at the moment: SQLite's file or file system is read-only (a disk
 * remounted read-only after errors) or its disk is full; PostgreSQL is a read-only standby, or in a
 * read-only transaction by default (25006), or out of disk (53100). Answered with 503.
 */
export function isDatabaseUnwritable(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && (code.startsWith('SQLITE_READONLY') || code === 'SQLITE_FULL' || code === '25006' || code === '53100');
}

/** PostgreSQL: a deadlock, or a serializable transaction that could not be ordered; retrying it is safe. */
export function isTransactionAborted(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return code === '40P01' || code === '40001';
}

/** A foreign key refused the write: the row it names is gone, or a row still names the one deleted (both databases). */
export function isForeignKeyViolation(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return code === '23503' || code === 'SQLITE_CONSTRAINT_FOREIGNKEY';
}

/**
 * A change into an organization deleted since the request found it: the database refused its event
 * (migration 0018; raised as `organization_deleted`), and the change rolled back.
 */
export function isOrganizationDeleted(error: unknown): boolean {
  const { code, message } = (error ?? {}) as { code?: unknown; message?: unknown };
  return (code === 'P0001' || code === 'SQLITE_CONSTRAINT_TRIGGER') && message === 'organization_deleted';
}

/** What went wrong, in one line (a connection error can come as an AggregateError without a message of its own). */
export function errorMessage(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  if (error.message) return error.message;
  const code = (error as { code?: unknown }).code;
  const inner = error instanceof AggregateError ? error.errors.find((e: unknown) => e instanceof Error && e.message) as Error | undefined : undefined;
  return inner?.message ?? (typeof code === 'string' ? code : error.name);
}

/** PostgreSQL refused the user (a wrong password, no pg_hba.conf entry), or has no such database. */
const CONNECT_ADVICE: Record<string, string> = {
  '28P01': 'check the user name and password',
  '28000': 'check the user name, and that pg_hba.conf lets it connect from this host',
  '3D000': 'check the database name, or create that database',
};

/**
 * The first connection to PostgreSQL failed: the driver's words alone ("connect ECONNREFUSED …")
 * name neither the setting nor the database, which this says, without the password, and what to check.
 */
export function cannotConnect(databaseUrl: string, error: unknown): Error {
  const code = String((error as { code?: unknown } | null)?.code ?? '');
  const verb = isDatabaseUnreachable(error) ? 'cannot reach' : 'cannot connect to';
  const advice = CONNECT_ADVICE[code] ?? 'check that PostgreSQL runs there and accepts connections';
  return new Error(`${verb} the database SLIPWAY_DATABASE_URL (--database-url) ${redactUrl(databaseUrl)}: ${errorMessage(error)}; ${advice}`, { cause: error });
}
