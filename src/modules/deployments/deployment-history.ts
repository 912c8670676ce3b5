// What deleting an environment or a service does to its deployments: refused while one is queued
// or in progress (cancel it first), otherwise the finished ones and their logs go with it. The
// event log keeps the record of what was deployed.
import type { RequestContext } from '../../platform/context.js';
import { isForeignKeyViolation, type Db, type Executor } from '../../platform/db/database.js';
import { errors } from '../../platform/errors.js';
import { appendEvents } from '../events/event-log.js';
import { UNFINISHED_STATES } from './deployment-state.js';
import { deploymentsRepo } from './deployments.repo.js';

/** An environment or a service, as far as deleting it is concerned. */
export interface DeploymentOwner {
  kind: 'environment' | 'service';
  load(executor: Executor, orgId: string, idOrName: string): Promise<{ id: string; name: string }>;
  delete(executor: Executor, id: string): Promise<void>;
}

/** Deletes the environment or service with its finished deployments, and appends `<kind>.deleted`, in one transaction. */
export async function deleteWithDeployments(db: Db, ctx: RequestContext, orgId: string, idOrName: string, owner: DeploymentOwner): Promise<void> {
  const { kind } = owner;
  const column = kind === 'environment' ? 'environment_id' : 'service_id';
  const now = new Date().toISOString();
  try {
    await db.transaction().execute(async (trx) => {
      const row = await owner.load(trx, orgId, idOrName);
      const unfinished = await deploymentsRepo.withStates(trx, column, row.id, UNFINISHED_STATES, 20);
      if (unfinished.length > 0) {
        throw errors.conflict(`${kind}_in_use`,
          `The ${kind} "${row.name}" has deployments that are queued or in progress (${unfinished.map((d) => `${d.id} ${d.state}`).join(', ')}); cancel them or let them finish, then delete it.`,
          { conflicts: unfinished.map((d) => ({ deployment: d.id, state: d.state })) });
      }
      const deleted = await deploymentsRepo.deleteAllOf(trx, column, row.id, UNFINISHED_STATES);
      await owner.delete(trx, row.id);
      await appendEvents(trx, ctx, [{ orgId, type: `${kind}.deleted`, subject: { type: kind, id: row.id }, data: { name: row.name, deploymentsDeleted: deleted } }], now);
    });
  } catch (error) {
    // PostgreSQL: a deployment created between our check and our delete still references the row.
    if (isForeignKeyViolation(error)) {
      throw errors.conflict(`${kind}_in_use`, `A deployment of the ${kind} "${idOrName}" was just created; cancel it or let it finish, then delete the ${kind}.`);
    }
    throw error;
  }
}
