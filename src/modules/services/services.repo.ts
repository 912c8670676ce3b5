import { runPrepared, type Executor } from '../../platform/db/database.js';
import type { ServicesTable } from '../../platform/db/schema.js';
import { isId } from '../../platform/ids.js';
import { orgsRepo } from '../orgs/orgs.repo.js';

export type ServiceRow = ServicesTable;

export const servicesRepo = {
  async insert(db: Executor, row: ServiceRow): Promise<void> {
    await db.insertInto('services').values(row).execute();
  },

  /**
   * By id or by name, inside one organization; every deployment starts with it, so its SQL is
   * compiled once. `lock` (PostgreSQL only: SQLite has no row locks, and writes one transaction
   * at a time) holds the row against other changes until the transaction ends
   * (FOR NO KEY UPDATE: a deployment being created, whose foreign key only shares the row's key, goes on),
   * after the organization's row (orgsRepo.holdForChange), so that it waits for an organization's
   * deletion instead of deadlocking with it.
   */
  async findInOrg(db: Executor, orgId: string, idOrName: string, lock = false): Promise<ServiceRow | undefined> {
    const column = isId('service', idOrName) ? 'id' : 'name';
    if (lock) await orgsRepo.holdForChange(db, orgId);
    const [row] = await runPrepared(db, `services.findInOrg.${column}.${lock}`, [orgId, idOrName], () => {
      const q = db.selectFrom('services').selectAll().where('org_id', '=', orgId).where(column, '=', idOrName);
      return lock ? q.forNoKeyUpdate() : q;
    });
    return row;
  },

  async list(db: Executor, orgId: string, opts: { after: string | null; limit: number }): Promise<ServiceRow[]> {
    let q = db.selectFrom('services').selectAll().where('org_id', '=', orgId);
    if (opts.after !== null) q = q.where('id', '>', opts.after);
    return q.orderBy('id', 'asc').limit(opts.limit + 1).execute();
  },

  /** One more version, only if the service is still at `expected`. */
  async update(db: Executor, id: string, expected: number, patch: Partial<ServiceRow>): Promise<ServiceRow | undefined> {
    return db.updateTable('services').set((eb) => ({ ...patch, version: eb('version', '+', 1) })).where('id', '=', id).where('version', '=', expected).returningAll().executeTakeFirst();
  },

  async delete(db: Executor, id: string): Promise<void> {
    await db.deleteFrom('services').where('id', '=', id).execute();
  },
};
