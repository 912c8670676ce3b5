// What deleting an environment or a service does to its deployments: refused while one is queued
// or in progress (cancel it first), and also while one serves unless the caller says so (`force`);
// otherwise the finished ones and their logs go with it. The event log keeps the record of what
// was deployed.
import type { RequestContext } from '../../platform/context.js';
import { isForeignKeyViolation, type Db, type Dialect, type Executor } from '../../platform/db/database.js';
import { errors } from '../../platform/errors.js';
import { appendEvents } from '../events/event-log.js';
import { UNFINISHED_STATES } from './deployment-states.js';
import { deploymentsRepo, type DeploymentRow } from './deployments.repo.js';
import { nowIso } from '../../platform/clock.js';

/** An environment or a service, as far as deleting it is concerned. */
export interface DeploymentOwner<R extends { id: string; name: string } = { id: string; name: string }> {
  kind: 'environment' | 'service';
  load(executor: Executor, orgId: string, idOrName: string): Promise<R>;
  delete(executor: Executor, id: string): Promise<void>;
  /** Refuses the deletion of what was loaded, before anything is changed (a precondition, a lock). */
  check?: (row: R, executor: Executor) => void | Promise<void>;
  /** Refuse while a deployment serves (succeeded) too: what runs there would stop, and its rollback targets go. */
  refuseServing?: boolean;
}

/** At most this many serving deployments are named in a deletion's event (one per service of an environment). */
const MAX_SERVING_LISTED = 10_000;

/** How the caller can go ahead once what blocks the deletion is gone, or despite it. */
function inUse(kind: string, name: string, blocking: Array<Pick<DeploymentRow, 'id' | 'state'>>) {
  const list = (ds: typeof blocking) => ds.map((d) => `${d.id} ${d.state}`).join(', ');
  const unfinished = blocking.filter((d) => d.state !== 'succeeded');
  const serving = blocking.filter((d) => d.state === 'succeeded');
  const servingSentence = `${kind === 'environment' ? `Services serve in the environment "${name}" (${list(serving)}): deleting it stops them` : `The service "${name}" serves (${list(serving)}): deleting it stops its processes`} and deletes its deployment history, rollback targets included.`;
  const detail = unfinished.length > 0
    ? `The ${kind} "${name}" has deployments that are queued or in progress (${list(unfinished)}); cancel them or let them finish, then delete it.${serving.length > 0 ? ` Besides, ${servingSentence.charAt(0).toLowerCase()}${servingSentence.slice(1)} That needs ?force=true.` : ''}`
    : `${servingSentence} To do that, send the DELETE again with ?force=true.`;
  return errors.conflict(`${kind}_in_use`, detail, { conflicts: blocking.map((d) => ({ deployment: d.id, state: d.state })) });
}

/**
 * Deletes the environment or service with its finished deployments, and appends `<kind>.deleted`,
 * in one transaction. The event names the deployments that served until then (`stoppedServing`):
 * a reader of the event log learns there that they no longer run.
 */
export async function deleteWithDeployments<R extends { id: string; name: string }>(db: Db, dialect: Dialect, ctx: RequestContext, orgId: string, idOrName: string, owner: DeploymentOwner<R>): Promise<void> {
  const { kind } = owner;
  const column = kind === 'environment' ? 'environment_id' : 'service_id';
  const now = nowIso();
  try {
    await db.transaction().execute(async (trx) => {
      const row = await owner.load(trx, orgId, idOrName);
      await owner.check?.(row, trx);
      const blocking = await deploymentsRepo.withStates(trx, column, row.id, owner.refuseServing ? [...UNFINISHED_STATES, 'succeeded'] : UNFINISHED_STATES, 20);
      if (blocking.length > 0) throw inUse(kind, row.name, blocking);
      const serving = owner.refuseServing ? [] : await deploymentsRepo.withStates(trx, column, row.id, ['succeeded'], MAX_SERVING_LISTED);
      const deleted = await deploymentsRepo.deleteAllOf(trx, column, row.id, UNFINISHED_STATES, dialect === 'postgres');
      await owner.delete(trx, row.id);
      await appendEvents(trx, ctx, [{
        orgId, type: `${kind}.deleted`, subject: { type: kind, id: row.id },
        data: { name: row.name, deploymentsDeleted: deleted, stoppedServing: serving.map((d) => d.id) },
      }], now);
    });
  } catch (error) {
    // PostgreSQL: a deployment created between our check and our delete still references the row.
    if (isForeignKeyViolation(error)) {
      throw errors.conflict(`${kind}_in_use`, `A deployment of the ${kind} "${idOrName}" was just created; cancel it or let it finish, then delete the ${kind}.`);
    }
    throw error;
  }
}
