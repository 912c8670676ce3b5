// What happens when a runner stops renewing its lease: the deployment goes back to the queue
// with one more attempt, or fails once the attempts are spent. Run by a periodic sweeper in every
// server and lazily by claims (neither in a server's first lease after it starts: see the runner
// service); each move is a compare-and-set on the exact lease that expired, so any number of
// sweepers on any number of nodes move each lease once.
import { SYSTEM_ACTOR_ID, type RequestContext } from '../../platform/context.js';
import type { Db } from '../../platform/db/database.js';
import { compareAndSet } from './deployment-state.js';
import { deploymentsRepo } from './deployments.repo.js';

/** Who the event log names for what Slipway does on its own (lease expiry). */
export const SYSTEM_CONTEXT: RequestContext = {
  requestId: null,
  // Acts for no organization and with no role: it only moves deployments along the graph.
  actor: { id: SYSTEM_ACTOR_ID, kind: 'cli', orgId: null, role: null, instanceAdmin: false },
};

const BATCH = 100;

/** Re-queues or fails every deployment whose lease ran out; returns the organizations touched. */
export async function expireLeases(db: Db, opts: { orgId: string | null; maxAttempts: number; now?: string }): Promise<Set<string>> {
  const now = opts.now ?? new Date().toISOString();
  const touched = new Set<string>();
  for (const d of await deploymentsRepo.expiredLeases(db, now, opts.orgId, BATCH)) {
    const requeue = d.attempt < opts.maxAttempts;
    const moved = await db.transaction().execute((trx) => compareAndSet(trx, SYSTEM_CONTEXT, {
      orgId: d.org_id,
      id: d.id,
      from: 'in_progress',
      to: requeue ? 'queued' : 'failed',
      leaseToken: d.lease_token ?? '',
      leaseExpiredBefore: now,
      set: requeue
        // The runner that lost it stays named (host_id, and when: host_seen_at) so that its claims
        // waiting still, frozen with it, are not handed the deployment straight back; whoever claims
        // it next is its host.
        // Its start is the next claim's: `startedAt` is when the current attempt was claimed.
        ? { attempt: d.attempt + 1, lease_token: null, lease_expires_at: null, claimed_by: null, started_at: null, host_seen_at: now, reason: `The lease of attempt ${d.attempt} expired without a heartbeat; re-queued.` }
        : {
          lease_token: null, lease_expires_at: null, finished_at: now,
          reason: `The lease of attempt ${d.attempt} expired without a heartbeat, and ${opts.maxAttempts} attempts are the limit (SLIPWAY_DEPLOYMENT_MAX_ATTEMPTS).`,
        },
    }, now));
    if (moved) touched.add(d.org_id);
  }
  return touched;
}
