import { runPrepared, type Executor } from '../../platform/db/database.js';
import type { EnvironmentsTable } from '../../platform/db/schema.js';
import { isId } from '../../platform/ids.js';

export type EnvironmentRow = EnvironmentsTable;

export const environmentsRepo = {
  async insert(db: Executor, row: EnvironmentRow): Promise<void> {
    await db.insertInto('environments').values(row).execute();
  },

  /**
   * By id or by name, inside one organization; every deployment starts with it, so its SQL is
   * compiled once. `lock` (PostgreSQL only) holds the row against other changes until the transaction ends
   * (FOR NO KEY UPDATE: a deployment being created, whose foreign key only shares the row's key, goes on).
   */
  async findInOrg(db: Executor, orgId: string, idOrName: string, lock = false): Promise<EnvironmentRow | undefined> {
    const column = isId('environment', idOrName) ? 'id' : 'name';
    const [row] = await runPrepared(db, `environments.findInOrg.${column}.${lock}`, [orgId, idOrName], () => {
      const q = db.selectFrom('environments').selectAll().where('org_id', '=', orgId).where(column, '=', idOrName);
      return lock ? q.forNoKeyUpdate() : q;
    });
    return row;
  },

  /** Those of `idsOrNames` that exist, by id or by name. */
  async findManyInOrg(db: Executor, orgId: string, idsOrNames: string[]): Promise<EnvironmentRow[]> {
    if (idsOrNames.length === 0) return [];
    return db.selectFrom('environments').selectAll().where('org_id', '=', orgId)
      .where((eb) => eb.or([eb('id', 'in', idsOrNames), eb('name', 'in', idsOrNames)]))
      .execute();
  },

  async list(db: Executor, orgId: string, opts: { after: string | null; limit: number }): Promise<EnvironmentRow[]> {
    let q = db.selectFrom('environments').selectAll().where('org_id', '=', orgId);
    if (opts.after !== null) q = q.where('id', '>', opts.after);
    return q.orderBy('id', 'asc').limit(opts.limit + 1).execute();
  },

  async update(db: Executor, id: string, patch: Partial<EnvironmentRow>): Promise<EnvironmentRow | undefined> {
    return db.updateTable('environments').set(patch).where('id', '=', id).returningAll().executeTakeFirst();
  },

  async delete(db: Executor, id: string): Promise<void> {
    await db.deleteFrom('environments').where('id', '=', id).execute();
  },
};
