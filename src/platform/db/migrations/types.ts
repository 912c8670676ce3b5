import type { Kysely } from 'kysely';
import type { Dialect } from '../database.js';

/** Column types that differ between the two databases; everything else is written once. */
export interface ColumnTypes {
  /** For the few steps that are written per database. */
  dialect: Dialect;
  timestamp: 'timestamptz' | 'text';
  bytes: 'bytea' | 'blob';
}

export function columnTypes(dialect: Dialect): ColumnTypes {
  return dialect === 'postgres' ? { dialect, timestamp: 'timestamptz', bytes: 'bytea' } : { dialect, timestamp: 'text', bytes: 'blob' };
}

export interface MigrationStep {
  name: string;
  // Migrations see the schema as it was then, not as the code sees it now.
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  up(db: Kysely<any>, types: ColumnTypes): Promise<void>;
}
