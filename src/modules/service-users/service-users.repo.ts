import { runPrepared, type Db, type Executor } from '../../platform/db/database.js';
import type { ClientSecretsTable, ServiceUsersTable } from '../../platform/db/schema.js';

export type ServiceUserRow = ServiceUsersTable;
export type ClientSecretRow = ClientSecretsTable;

export const serviceUsersRepo = {
  async insert(db: Executor, row: ServiceUserRow): Promise<void> {
    await db.insertInto('service_users').values(row).execute();
  },

  /** A service user and its live client secrets in one round trip (the token endpoint's read). */
  async findWithSecrets(db: Db, id: string): Promise<{ user: ServiceUserRow; secrets: ClientSecretRow[] } | null> {
    const rows = await runPrepared(db, 'serviceUsers.findWithSecrets', [id], () => db.selectFrom('service_users as u')
      .leftJoin('client_secrets as s', 's.service_user_id', 'u.id')
      .selectAll('u')
      .select(['s.id as secret_id', 's.hash', 's.hint', 's.created_at as secret_created_at', 's.last_used_at'])
      .where('u.id', '=', id));
    const first = rows[0];
    if (first === undefined) return null;
    const { secret_id: _i, hash: _h, hint: _n, secret_created_at: _c, last_used_at: _l, ...user } = first;
    const secrets = rows.filter((r) => r.secret_id !== null).map((r) => ({
      id: r.secret_id!, service_user_id: user.id, hash: r.hash!, hint: r.hint!, created_at: r.secret_created_at!, last_used_at: r.last_used_at,
    }));
    return { user, secrets };
  },

  /** The token generation a service user's tokens carry now, or null when it is gone or disabled: one indexed read. */
  async liveGeneration(db: Db, id: string): Promise<number | null> {
    const [row] = await runPrepared(db, 'serviceUsers.liveGeneration', [id], () => db.selectFrom('service_users')
      .select(['token_generation', 'disabled_at']).where('id', '=', id));
    return row === undefined || row.disabled_at !== null ? null : Number(row.token_generation);
  },

  /** A service user's name, by id; undefined when it is gone. */
  async nameOf(db: Executor, id: string): Promise<string | undefined> {
    return (await db.selectFrom('service_users').select('name').where('id', '=', id).executeTakeFirst())?.name;
  },

  /** By id or by name, inside one organization; an id wins over a name that looks like one. */
  async findInOrg(db: Executor, orgId: string, idOrName: string): Promise<ServiceUserRow | undefined> {
    const by = (column: 'id' | 'name') =>
      db.selectFrom('service_users').selectAll().where('org_id', '=', orgId).where(column, '=', idOrName).executeTakeFirst();
    return (idOrName.startsWith('su_') ? await by('id') : undefined) ?? by('name');
  },

  async list(db: Executor, orgId: string, opts: { after: string | null; limit: number }): Promise<ServiceUserRow[]> {
    let q = db.selectFrom('service_users').selectAll().where('org_id', '=', orgId);
    if (opts.after !== null) q = q.where('id', '>', opts.after);
    return q.orderBy('id', 'asc').limit(opts.limit + 1).execute();
  },

  async update(db: Executor, id: string, patch: Partial<ServiceUserRow>): Promise<ServiceUserRow | undefined> {
    return db.updateTable('service_users').set(patch).where('id', '=', id).returningAll().executeTakeFirst();
  },

  async delete(db: Executor, id: string): Promise<void> {
    await db.deleteFrom('client_secrets').where('service_user_id', '=', id).execute();
    await db.deleteFrom('service_users').where('id', '=', id).execute();
  },

  /** Enabled owners of an organization other than `exceptId`: an organization must keep one. */
  async countOtherOwners(db: Executor, orgId: string, exceptId: string): Promise<number> {
    const row = await db.selectFrom('service_users').select((eb) => eb.fn.countAll<number>().as('n'))
      .where('org_id', '=', orgId).where('role', '=', 'owner').where('disabled_at', 'is', null).where('id', '!=', exceptId)
      .executeTakeFirstOrThrow();
    return Number(row.n);
  },

  async insertSecret(db: Executor, row: ClientSecretRow): Promise<void> {
    await db.insertInto('client_secrets').values(row).execute();
  },

  async secretsOf(db: Executor, serviceUserIds: string[]): Promise<ClientSecretRow[]> {
    if (serviceUserIds.length === 0) return [];
    return db.selectFrom('client_secrets').selectAll().where('service_user_id', 'in', serviceUserIds).orderBy('id', 'asc').execute();
  },

  async deleteSecret(db: Executor, serviceUserId: string, secretId: string): Promise<boolean> {
    const result = await db.deleteFrom('client_secrets').where('id', '=', secretId).where('service_user_id', '=', serviceUserId).executeTakeFirst();
    return Number(result.numDeletedRows) > 0;
  },

  async touchSecret(db: Executor, secretId: string, at: string): Promise<void> {
    await db.updateTable('client_secrets').set({ last_used_at: at }).where('id', '=', secretId).execute();
  },
};
