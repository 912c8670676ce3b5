import type { Executor } from '../../platform/db/database.js';
import type { SecretsTable, SecretVersionsTable } from '../../platform/db/schema.js';

export type SecretRow = SecretsTable;
export type SecretVersionRow = SecretVersionsTable;

// Rows per INSERT statement: well under SQLite's and PostgreSQL's bound-parameter limits.
const CHUNK = 400;

async function insertChunked<T extends 'secrets' | 'secret_versions'>(db: Executor, table: T, rows: Array<T extends 'secrets' ? SecretRow : SecretVersionRow>): Promise<void> {
  for (let i = 0; i < rows.length; i += CHUNK) {
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    await db.insertInto(table).values(rows.slice(i, i + CHUNK) as any).execute();
  }
}

export const secretsRepo = {
  /** Which of these names the organization already uses (deleted secrets keep their names). */
  async existingNames(db: Executor, orgId: string, names: string[]): Promise<string[]> {
    const found: string[] = [];
    for (let i = 0; i < names.length; i += CHUNK) {
      const rows = await db.selectFrom('secrets').select('name').where('org_id', '=', orgId).where('name', 'in', names.slice(i, i + CHUNK)).execute();
      found.push(...rows.map((r) => r.name));
    }
    return found;
  },

  async insertSecrets(db: Executor, rows: SecretRow[]): Promise<void> {
    await insertChunked(db, 'secrets', rows);
  },

  async insertVersions(db: Executor, rows: SecretVersionRow[]): Promise<void> {
    await insertChunked(db, 'secret_versions', rows);
  },
};
