// Appends events inside the caller's transaction: the change and its event commit together or not
// at all. Event data never carries a secret value (callers pass names, keys and versions only).
// Every change records an event, so this is also where a request under an Idempotency-Key marks
// its key committed, in the same transaction.
import type { RequestContext } from '../../platform/context.js';
import type { Executor } from '../../platform/db/database.js';
import { errors } from '../../platform/errors.js';
import { newId } from '../../platform/ids.js';
import { idempotencyRepo } from '../idempotency/idempotency.repo.js';
import { eventsRepo, type EventRow } from './events.repo.js';
import { nowIso } from '../../platform/clock.js';

export interface NewEvent {
  orgId: string;
  type: string;
  subject: { type: string; id: string };
  data?: Record<string, unknown>;
}

/** What an update event records: the fields a change touches, with what they were and what they are. */
export interface FieldChanges<F extends string> {
  changed: F[];
  from: Partial<Record<F, unknown>>;
  to: Partial<Record<F, unknown>>;
}

/**
 * The fields of `fields` that `patch` gives a value other than `before`'s, in that order. An
 * update with none changes nothing and appends no event.
 */
export function changesOf<F extends string>(fields: readonly F[], before: Record<F, unknown>, patch: Partial<Record<F, unknown>>): FieldChanges<F> {
  const changed = fields.filter((field) => patch[field] !== undefined && patch[field] !== before[field]);
  return {
    changed,
    from: Object.fromEntries(changed.map((f) => [f, before[f]])) as Partial<Record<F, unknown>>,
    to: Object.fromEntries(changed.map((f) => [f, patch[f]])) as Partial<Record<F, unknown>>,
  };
}

export function toEventRow(ctx: RequestContext, event: NewEvent, at: string): EventRow {
  return {
    id: newId('event'),
    org_id: event.orgId,
    type: event.type,
    actor_id: ctx.actor.id,
    request_id: ctx.requestId,
    subject_type: event.subject.type,
    subject_id: event.subject.id,
    data: JSON.stringify(event.data ?? {}),
    created_at: at,
  };
}

/**
 * The database refuses an event of a deleted organization (migration 0018), which rolls the whole
 * change back: nothing is written into an organization deleted since the request found it.
 */
export async function appendEvents(trx: Executor, ctx: RequestContext, events: NewEvent[], at = nowIso()): Promise<void> {
  if (events.length === 0) return;
  await eventsRepo.insert(trx, events.map((e) => toEventRow(ctx, e, at)));
  await markCommitted(trx, ctx, at);
}

/**
 * For the rare change that records no event (a runner's log lines): marks the request's
 * Idempotency-Key committed in the change's transaction, as `appendEvents` does.
 */
export async function markCommitted(trx: Executor, ctx: RequestContext, at: string): Promise<void> {
  // A retry took the key over, taking this request for dead: it runs in this one's place, so this
  // change rolls back, and this request's caller is sent to that one's response.
  if (ctx.idempotency !== undefined && !(await idempotencyRepo.markCommitted(trx, ctx.idempotency, at))) throw errors.idempotencyRequestInProgress();
}
