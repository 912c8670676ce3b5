// What happens when an attempt ends before its runner completed it: the runner stopped renewing
// its lease, or gave the lease back (it is stopping). The deployment goes back to the queue with one
// more attempt, or fails once the attempts are spent. Expiry is run by a periodic sweeper in every
// server and lazily by claims (neither in a server's first lease after it starts: see the runner
// service); each move is a compare-and-set on the exact lease that ended, so any number of
// sweepers on any number of nodes, and the runner's own give-back, move each lease once.
import { SYSTEM_CONTEXT, type RequestContext } from '../../platform/context.js';
import type { Db, Executor } from '../../platform/db/database.js';
import { compareAndSet } from './deployment-state.js';
import { deploymentsRepo, type DeploymentRow } from './deployments.repo.js';
import { nowIso } from '../../platform/clock.js';


const BATCH = 100;

/** The deployment whose attempt ends, as it was read under that attempt's lease. */
type Attempt = Pick<DeploymentRow, 'org_id' | 'id' | 'attempt' | 'lease_token'>;

/**
 * Ends attempt `d.attempt` under its lease, which its runner no longer holds: in_progress → queued
 * with attempt + 1, or → failed once `maxAttempts` are spent. `why` says what ended it, as the
 * start of a sentence. Null when the lease was no longer that (completed, cancelled, ended already).
 */
export async function endAttempt(trx: Executor, ctx: RequestContext, d: Attempt, opts: { maxAttempts: number; why: string; now: string; leaseExpiredBefore?: string }): Promise<DeploymentRow | null> {
  const requeue = d.attempt < opts.maxAttempts;
  return compareAndSet(trx, ctx, {
    orgId: d.org_id,
    id: d.id,
    from: 'in_progress',
    to: requeue ? 'queued' : 'failed',
    leaseToken: d.lease_token ?? '',
    ...(opts.leaseExpiredBefore !== undefined ? { leaseExpiredBefore: opts.leaseExpiredBefore } : {}),
    set: requeue
      // The runner that lost it stays named (host_id, and when: host_seen_at) so that its claims
      // waiting still, frozen with it, are not handed the deployment straight back; whoever claims
      // it next is its host.
      // Its start is the next claim's: `startedAt` is when the current attempt was claimed.
      ? { attempt: d.attempt + 1, lease_token: null, lease_expires_at: null, claimed_by: null, started_at: null, host_seen_at: opts.now, reason: `${opts.why}; re-queued.` }
      : {
        lease_token: null, lease_expires_at: null, finished_at: opts.now,
        reason: `${opts.why}, and ${opts.maxAttempts} attempts are the limit (SLIPWAY_DEPLOYMENT_MAX_ATTEMPTS).`,
      },
  }, opts.now);
}

/** Re-queues or fails every deployment whose lease ran out; returns the organizations touched. */
export async function expireLeases(db: Db, opts: { orgId: string | null; maxAttempts: number; now?: string }): Promise<Set<string>> {
  const now = opts.now ?? nowIso();
  const touched = new Set<string>();
  for (const d of await deploymentsRepo.expiredLeases(db, now, opts.orgId, BATCH)) {
    const moved = await db.transaction().execute(async (trx) => {
      const ended = await endAttempt(trx, SYSTEM_CONTEXT, d, {
        maxAttempts: opts.maxAttempts, now, leaseExpiredBefore: now, why: `The lease of attempt ${d.attempt} expired without a heartbeat`,
      });
      // Its runner, gone silent, said nothing of it: the log says why its lines stop, and what comes next.
      if (ended) await deploymentsRepo.appendServerLine(trx, { orgId: d.org_id, id: d.id, attempt: d.attempt }, `slipway: ${ended.reason}`, now);
      return ended;
    });
    if (moved) touched.add(d.org_id);
  }
  return touched;
}
