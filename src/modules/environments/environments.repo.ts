import { sql } from 'kysely';
import { runPrepared, type Executor } from '../../platform/db/database.js';
import type { EnvironmentsTable } from '../../platform/db/schema.js';
import { isId } from '../../platform/ids.js';
import { orgsRepo } from '../orgs/orgs.repo.js';

export type EnvironmentRow = EnvironmentsTable;
/** How a read holds the row (PostgreSQL only; see findInOrg). */
export type EnvironmentLock = boolean | 'deploy' | 'freeze';

export const environmentsRepo = {
  async insert(db: Executor, row: EnvironmentRow): Promise<void> {
    await db.insertInto('environments').values(row).execute();
  },

  /**
   * By id or by name, inside one organization; every deployment starts with it, so its SQL is
   * compiled once. `lock` (PostgreSQL only) holds the row until the transaction ends: `true`
   * against other changes (FOR NO KEY UPDATE: a deployment being created, whose foreign key only
   * shares the row's key, goes on); `'deploy'` for a deployment into it (FOR KEY SHARE, as its
   * foreign key would take at the insert, taken at the read instead), which waits for a lock or
   * an unlock being made, and reads the row as that left it; `'freeze'` for a lock or an unlock
   * (FOR UPDATE), which waits for the deployments being made into it.
   *
   * Each takes the organization's row first (orgsRepo.holdForChange), so that it waits for an
   * organization's deletion instead of deadlocking with it.
   *
   * `'deploy'` and `'freeze'` first queue on the environment's advisory lock (shared, exclusive),
   * before anything gives their transaction an id: row locks let a deployment go ahead of a lock
   * already waiting for the row (a lock could wait for ever), and events are listed by transaction
   * id, which a waiting lock had already taken: deployments made while it waited were listed after
   * it, as if made into a locked environment. In the advisory lock's queue nothing overtakes, and a
   * transaction takes its id only once through it, so events list in the order it let them through.
   */
  async findInOrg(db: Executor, orgId: string, idOrName: string, lock: EnvironmentLock = false): Promise<EnvironmentRow | undefined> {
    const column = isId('environment', idOrName) ? 'id' : 'name';
    if (lock === 'deploy' || lock === 'freeze') {
      // One round trip: found and queued for at once (nothing found, nothing to queue for).
      const take = lock === 'deploy' ? sql`pg_advisory_xact_lock_shared` : sql`pg_advisory_xact_lock`;
      const { rows } = await sql<{ id: string }>`select id, ${take}(hashtext('slipway.environment'), hashtext(id)) from environments where org_id = ${orgId} and ${sql.ref(column)} = ${idOrName}`.execute(db);
      if (rows.length === 0) return undefined;
    }
    if (lock !== false) await orgsRepo.holdForChange(db, orgId);
    const [row] = await runPrepared(db, `environments.findInOrg.${column}.${lock}`, [orgId, idOrName], () => {
      const q = db.selectFrom('environments').selectAll().where('org_id', '=', orgId).where(column, '=', idOrName);
      return lock === true ? q.forNoKeyUpdate() : lock === 'deploy' ? q.forKeyShare() : lock === 'freeze' ? q.forUpdate() : q;
    });
    return row;
  },

  /**
   * A locked environment in which a deployment of `serviceId` serves, if there is one. `hold`
   * (PostgreSQL) first queues, as a deployment into each of them does, on the advisory lock of every
   * environment where it serves (shared, in id order): a lock or an unlock being made waits for the
   * caller's transaction, and one being made already is waited for and then read as it left the
   * environment. Without it, a service's deletion that read an environment unlocked could stop what
   * serves there after a lock had answered.
   */
  async lockedWhereServing(db: Executor, serviceId: string, hold = false): Promise<EnvironmentRow | undefined> {
    if (hold) {
      await sql`select pg_advisory_xact_lock_shared(hashtext('slipway.environment'), hashtext(environment_id))
        from (select distinct environment_id from deployments where service_id = ${serviceId} and state = 'succeeded' order by environment_id) serving`.execute(db);
    }
    return db.selectFrom('environments').selectAll('environments')
      .innerJoin('deployments', 'deployments.environment_id', 'environments.id')
      .where('deployments.service_id', '=', serviceId).where('deployments.state', '=', 'succeeded').where('environments.locked_at', 'is not', null)
      .limit(1).executeTakeFirst();
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
