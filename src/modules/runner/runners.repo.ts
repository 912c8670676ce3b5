import type { ExpressionBuilder } from 'kysely';
import { textContains, type Dialect, type Executor } from '../../platform/db/database.js';
import type { RunnersTable, Schema } from '../../platform/db/schema.js';

/** A runner, with its service user's name and the environments that service user is kept to (JSON ids; null: all). */
export type RunnerRow = RunnersTable & { service_user_name: string; kept_to: string | null };

export interface RunnerListFilter {
  after: string | null;
  limit: number;
  /** Only those that take this environment's deployments (those that take all included). */
  environmentId?: string | undefined;
  /** Heard from since (`online`), or not (`offline`). */
  seen?: { since: string; online: boolean } | undefined;
}

/** Online: heard from since `since`, and not said to have stopped. */
const onlineSince = (since: string) => (eb: ExpressionBuilder<Schema, 'runners'>) =>
  eb.and([eb('runners.last_seen_at', '>=', since), eb('runners.stopped_at', 'is', null)]);

export const runnersRepo = {
  /**
   * A runner heard from now: its row made, or brought up to date. A row under another service
   * user's name is left alone: one runner cannot pass for another's process.
   */
  async seen(db: Executor, row: RunnersTable): Promise<void> {
    // A stopped runner stays stopped: a call of its still under way then does not list it online.
    const { org_id: _org, host: _host, first_seen_at: _first, service_user_id: _user, stopped_at: _stopped, ...update } = row;
    await db.insertInto('runners').values(row)
      .onConflict((oc) => oc.columns(['org_id', 'host']).doUpdateSet(update).where('runners.service_user_id', '=', row.service_user_id))
      .execute();
  },

  /**
   * Heard from now, nothing else said (a serving report, from `address`; a heartbeat of a
   * deployment it carries out, without one): what its claims and adoptions said of it stays. Only
   * its own service user's; a runner not yet written down is not.
   */
  async heardFrom(db: Executor, orgId: string, host: string, serviceUserId: string, at: string, address?: string | null): Promise<void> {
    await db.updateTable('runners').set(address === undefined ? { last_seen_at: at } : { last_seen_at: at, address }).where('org_id', '=', orgId).where('host', '=', host)
      .where('service_user_id', '=', serviceUserId).where('last_seen_at', '<', at).execute();
  },

  /** `host` said it stopped: offline from now on. Only its own service user's. */
  async stopped(db: Executor, orgId: string, host: string, serviceUserId: string, at: string): Promise<void> {
    await db.updateTable('runners').set({ stopped_at: at }).where('org_id', '=', orgId).where('host', '=', host)
      .where('service_user_id', '=', serviceUserId).where('stopped_at', 'is', null).execute();
  },

  /** The organization's runners online (see onlineSince), `limit` at most, by host. */
  async online(db: Executor, orgId: string, since: string, limit: number): Promise<RunnersTable[]> {
    return db.selectFrom('runners').selectAll().where('org_id', '=', orgId).where(onlineSince(since)).orderBy('host').limit(limit).execute();
  },

  async list(db: Executor, dialect: Dialect, orgId: string, filter: RunnerListFilter): Promise<RunnerRow[]> {
    let q = db.selectFrom('runners').innerJoin('service_users', 'service_users.id', 'runners.service_user_id')
      .selectAll('runners').select(['service_users.name as service_user_name', 'service_users.runner_environments as kept_to'])
      .where('runners.org_id', '=', orgId);
    if (filter.after !== null) q = q.where('runners.host', '>', filter.after);
    if (filter.seen !== undefined) {
      const { since } = filter.seen;
      q = q.where((eb) => (filter.seen!.online ? onlineSince(since)(eb) : eb.not(onlineSince(since)(eb))));
    }
    if (filter.environmentId !== undefined) {
      // Ids are JSON strings in the arrays: the quoted id appears in one exactly when it is listed.
      // It asks for that environment (or for all), and its service user is kept to it (or to none).
      const needle = JSON.stringify(filter.environmentId);
      const lists = (column: 'runners.environment_ids' | 'service_users.runner_environments') => textContains(dialect, column, needle);
      q = q.where((eb) => eb.and([
        eb.or([eb('runners.environment_ids', 'is', null), lists('runners.environment_ids')]),
        eb.or([eb('service_users.runner_environments', 'is', null), lists('service_users.runner_environments')]),
      ]));
    }
    return q.orderBy('runners.host', 'asc').limit(filter.limit + 1).execute();
  },

  /**
   * What these runners carry out now (ids: those their own service user claimed under their host),
   * and how many serving deployments each runs: not those it let go of (released, orphans for
   * another runner to adopt) nor those whose process is stopped for good.
   */
  async workOf(db: Executor, orgId: string, runners: Array<Pick<RunnersTable, 'host' | 'service_user_id'>>): Promise<{ inProgress: Map<string, string[]>; serving: Map<string, number> }> {
    const inProgress = new Map<string, string[]>();
    const serving = new Map<string, number>();
    if (runners.length === 0) return { inProgress, serving };
    const hosts = runners.map((r) => r.host);
    const owner = new Map(runners.map((r) => [r.host, r.service_user_id]));
    const claimed = await db.selectFrom('deployments').select(['id', 'host_id', 'claimed_by']).where('org_id', '=', orgId).where('state', '=', 'in_progress')
      .where('host_id', 'in', hosts).orderBy('id', 'asc').execute();
    for (const row of claimed) {
      if (owner.get(row.host_id!) !== row.claimed_by) continue;
      inProgress.set(row.host_id!, [...(inProgress.get(row.host_id!) ?? []), row.id]);
    }
    const counts = await db.selectFrom('deployments').select(['host_id', (eb) => eb.fn.countAll<number | string>().as('n')])
      .where('org_id', '=', orgId).where('state', '=', 'succeeded').where('host_id', 'in', hosts)
      .where('host_seen_at', 'is not', null).where((eb) => eb.or([eb('process_state', 'is', null), eb('process_state', '!=', 'stopped')]))
      .groupBy('host_id').execute();
    for (const row of counts) serving.set(row.host_id!, Number(row.n));
    return { inProgress, serving };
  },

  /** Rows not heard from since `before`: runners long gone. */
  async prune(db: Executor, before: string): Promise<number> {
    const result = await db.deleteFrom('runners').where('last_seen_at', '<', before).executeTakeFirst();
    return Number(result.numDeletedRows);
  },
};
