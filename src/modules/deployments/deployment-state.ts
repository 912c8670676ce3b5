// The deployment state machine: the one function that moves a deployment along the graph of
// deployment-states.ts. Every state change in Slipway goes through `compareAndSet` (an
// `UPDATE … WHERE id = ? AND state = ?` that changes nothing when someone else got there first)
// or `moveDeployment` on top of it, and each appends its `deployment.state_changed` event in the
// same transaction.
import type { RequestContext } from '../../platform/context.js';
import type { Executor } from '../../platform/db/database.js';
import { appendEvents } from '../events/event-log.js';
import { deploymentsRepo, type DeploymentPatch, type DeploymentRow } from './deployments.repo.js';
import { errors } from '../../platform/errors.js';
import { nowIso } from '../../platform/clock.js';
import { canTransition, transitionConflict, type DeploymentState } from './deployment-states.js';

export interface CompareAndSet {
  orgId: string;
  id: string;
  from: DeploymentState;
  to: DeploymentState;
  /** Columns to change with the state (reason, lease, timestamps, attempt). */
  set?: DeploymentPatch;
  /** Only if the deployment still holds this lease (the runner's fencing token). */
  leaseToken?: string;
  /** Only if its lease expired before this instant (the sweeper). */
  leaseExpiredBefore?: string;
  /** Extra event data (never secret values). */
  eventData?: Record<string, unknown>;
}

/**
 * Moves one deployment from exactly `from` to `to` if it is still in `from` and the guards hold.
 * Returns the updated row, or null when nothing matched (the caller decides what that means: a
 * stale runner, a lost race). Throws the 409 when the graph has no such edge.
 */
export async function compareAndSet(trx: Executor, ctx: RequestContext, change: CompareAndSet, now = nowIso()): Promise<DeploymentRow | null> {
  if (!canTransition(change.from, change.to)) throw transitionConflict(change.id, change.from, change.to);
  const row = await deploymentsRepo.compareAndSet(trx, {
    orgId: change.orgId,
    id: change.id,
    from: change.from,
    leaseToken: change.leaseToken,
    leaseExpiredBefore: change.leaseExpiredBefore,
    set: { ...change.set, state: change.to, updated_at: now },
  });
  if (!row) return null;
  await appendEvents(trx, ctx, [{
    orgId: row.org_id,
    type: 'deployment.state_changed',
    subject: { type: 'deployment', id: row.id },
    data: {
      from: change.from, to: change.to, attempt: row.attempt,
      service: row.service_id, environment: row.environment_id,
      ...(change.set?.reason ? { reason: change.set.reason } : {}),
      ...change.eventData,
    },
  }], now);
  return row;
}

/**
 * Moves a deployment to `to` from whatever state it is in now, if the graph allows it: 404 when
 * there is no such deployment, 409 with the allowed transitions when there is no such edge. A
 * concurrent change between the read and the write is noticed by the compare-and-set and the
 * decision is taken again on the new state. `read`: the row as the caller read it in `trx` just
 * before, which the first decision is taken on.
 */
export async function moveDeployment(
  trx: Executor,
  ctx: RequestContext,
  change: Omit<CompareAndSet, 'from' | 'leaseToken' | 'leaseExpiredBefore'>,
  read?: DeploymentRow,
): Promise<{ from: DeploymentState; row: DeploymentRow }> {
  for (let tries = 0; ; tries++) {
    const current = tries === 0 && read !== undefined ? read : await deploymentsRepo.findInOrg(trx, change.orgId, change.id);
    if (!current) throw errors.notFound('deployment', change.id);
    const from = current.state as DeploymentState;
    const row = await compareAndSet(trx, ctx, { ...change, from });
    if (row) return { from, row };
    // Changed under us: decide again on the new state, a few rounds at most.
    if (tries >= 5) throw errors.raced('concurrent_change', `Deployment ${change.id} keeps changing; retry.`);
  }
}
