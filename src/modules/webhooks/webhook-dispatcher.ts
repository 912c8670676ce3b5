// Delivers every active webhook's events, on every node. Each round a node looks for webhooks that
// have events past their position and are due (not waiting out a failure's pause); it takes one
// with a lease (a compare-and-set, so two nodes never deliver one webhook at once), delivers its
// events in commit order, and records each attempt. An event is delivered until a 2xx takes it,
// and nothing after it goes first: a receiver sees the log in order, each event at least once
// (the same `webhook-id` on every attempt, for it to drop repeats). A webhook that has failed for
// SLIPWAY_WEBHOOK_DISABLE_AFTER_SECONDS is disabled, with a `webhook.disabled` event.
import { randomUUID } from 'node:crypto';
import { SYSTEM_CONTEXT } from '../../platform/context.js';
import type { Db, Dialect } from '../../platform/db/database.js';
import { newId } from '../../platform/ids.js';
import type { Logger } from '../../platform/logging.js';
import { appendEvents } from '../events/event-log.js';
import { eventsRepo, type EventPosition } from '../events/events.repo.js';
import { toEvent } from '../events/events.service.js';
import type { DataKeys } from '../secrets/data-keys.js';
import { sendWebhook } from './webhook-sender.js';
import { webhooksRepo, type WebhookRow } from './webhooks.repo.js';
import { positionColumns, positionFrom, positionOf, secretBinding, subscribes } from './webhooks.service.js';

/** How long a node holds a webhook it delivers; each attempt it records renews it. */
const LEASE_MS = 60_000;
/** Webhooks a node delivers at once, and events it reads for one in a round. */
const WEBHOOKS_IN_FLIGHT = 20;
const EVENTS_PER_ROUND = 50;
/** The pause after the n-th failure in a row: 1 s, doubling, at most 15 minutes. */
export const retryPauseMs = (failures: number) => Math.min(1000 * 2 ** Math.min(failures - 1, 20), 15 * 60_000);

export interface DispatcherOptions {
  db: Db;
  dialect: Dialect;
  dataKeys: DataKeys;
  logger: Logger;
  allowPrivate: boolean;
  disableAfterSeconds: number;
  userAgent: string;
  pollMs?: number;
  timeoutMs?: number;
}

export function createWebhookDispatcher(deps: DispatcherOptions) {
  const { db, dialect, dataKeys, logger } = deps;
  const owner = randomUUID();
  const pollMs = deps.pollMs ?? 1000;
  const timeoutMs = deps.timeoutMs ?? 10_000;
  const stopping = new AbortController();
  let timer: NodeJS.Timeout | undefined;
  let round: Promise<void> | null = null;
  const inFlight = new Map<string, Promise<void>>();

  /** The secrets that sign a delivery: the current one, and the one before it while it is in force. */
  async function secretsOf(w: WebhookRow, now: number): Promise<string[]> {
    const current = await dataKeys.openBound(db, w.data_key_id, secretBinding(w.org_id, w.id, w.secret_generation), w.secret_sealed);
    const secrets = [current.toString('utf8')];
    if (w.previous_secret_sealed !== null && w.previous_secret_expires_at !== null && Date.parse(w.previous_secret_expires_at) > now) {
      const previous = await dataKeys.openBound(db, w.data_key_id, secretBinding(w.org_id, w.id, w.secret_generation, true), w.previous_secret_sealed);
      secrets.push(previous.toString('utf8'));
    }
    return secrets;
  }

  /** Delivers what one webhook has waiting, in order, until a failure or EVENTS_PER_ROUND events. */
  async function deliverWaiting(id: string): Promise<void> {
    const started = Date.now();
    if (!(await webhooksRepo.lease(db, id, owner, new Date(started).toISOString(), new Date(started + LEASE_MS).toISOString()))) return;
    try {
      // Read again under the lease: another node may have moved it on since it was found due.
      const found = await webhooksRepo.byId(db, id);
      if (found === undefined || found.active !== 1) return;
      let w: WebhookRow = found;
      const events = (await eventsRepo.list(db, dialect, w.org_id, { after: positionFrom(w), newestFirst: false, limit: EVENTS_PER_ROUND })).slice(0, EVENTS_PER_ROUND);
      const types = JSON.parse(w.event_types) as string[];
      const secrets = await secretsOf(w, started);
      // Events it does not subscribe to are passed over: the position moves past them with the next write.
      let passed: EventPosition | null = null;
      for (const event of events) {
        if (stopping.signal.aborted) break;
        const position = positionOf(dialect, event);
        if (!subscribes(types, event.type)) {
          passed = position;
          continue;
        }
        const body = JSON.stringify({ ...toEvent(event), orgId: w.org_id });
        const result = await sendWebhook(w.url, { id: event.id, body, secrets }, { timeoutMs, allowPrivate: deps.allowPrivate, userAgent: deps.userAgent, signal: stopping.signal });
        if (stopping.signal.aborted && result.error !== null) break;
        const at = Date.now();
        const atIso = new Date(at).toISOString();
        const delivered = result.error === null;
        const failures = delivered ? 0 : w.failures + 1;
        const failingSince = delivered ? null : (w.failing_since ?? atIso);
        const disable = failingSince !== null && at - Date.parse(failingSince) >= deps.disableAfterSeconds * 1000;
        const reason = disable ? `Disabled after failing since ${failingSince} (${failures} attempts; SLIPWAY_WEBHOOK_DISABLE_AFTER_SECONDS is ${deps.disableAfterSeconds}); the last: ${result.error}` : null;
        const attempted = w;
        const updated = await db.transaction().execute(async (trx) => {
          const row = await webhooksRepo.updateLeased(trx, attempted.id, owner, {
            ...(delivered ? positionColumns(position) : passed !== null ? positionColumns(passed) : {}),
            failures, failing_since: failingSince, next_attempt_at: delivered ? null : new Date(at + retryPauseMs(failures)).toISOString(),
            last_attempt_at: atIso, last_status: result.status, last_error: result.error, lease_until: new Date(at + LEASE_MS).toISOString(),
            ...(disable ? { active: 0, disabled_reason: reason } : {}),
          });
          // Deleted, turned off or taken over meanwhile: the attempt is not recorded, and the event is tried again if it is turned on.
          if (row === undefined) return undefined;
          await webhooksRepo.insertDelivery(trx, {
            id: newId('webhookDelivery'), webhook_id: attempted.id, event_id: event.id, event_type: event.type, attempt: attempted.failures + 1,
            status: result.status, error: result.error, duration_ms: result.durationMs, created_at: atIso,
          });
          if (disable) {
            await appendEvents(trx, SYSTEM_CONTEXT, [{
              orgId: attempted.org_id, type: 'webhook.disabled', subject: { type: 'webhook', id: attempted.id }, data: { failingSince, failures, lastStatus: result.status, lastError: result.error },
            }], atIso);
          }
          return row;
        });
        if (updated === undefined) return;
        if (disable) logger.warn({ webhookId: w.id, orgId: w.org_id, failingSince, failures }, 'disabled a webhook that kept failing');
        w = updated;
        passed = null;
        if (!delivered) break;
      }
      if (passed !== null) await webhooksRepo.updateLeased(db, w.id, owner, positionColumns(passed));
      await webhooksRepo.pruneDeliveries(db, w.id);
    } finally {
      await webhooksRepo.release(db, id, owner);
    }
  }

  /**
   * Starts delivering each due webhook not in flight here, each on its own: a slow receiver holds
   * up its own webhook only.
   */
  async function deliverDue(): Promise<void> {
    if (inFlight.size >= WEBHOOKS_IN_FLIGHT) return;
    const due = await webhooksRepo.due(db, dialect, new Date().toISOString(), WEBHOOKS_IN_FLIGHT);
    for (const webhook of due) {
      if (stopping.signal.aborted || inFlight.size >= WEBHOOKS_IN_FLIGHT) return;
      if (inFlight.has(webhook.id)) continue;
      inFlight.set(webhook.id, deliverWaiting(webhook.id)
        .catch((err: unknown) => logger.warn({ err, webhookId: webhook.id }, 'delivering a webhook\'s events failed; trying again shortly'))
        .finally(() => inFlight.delete(webhook.id)));
    }
  }

  function schedule(): void {
    if (stopping.signal.aborted) return;
    timer = setTimeout(() => {
      round = deliverDue()
        .catch((err: unknown) => logger.warn({ err }, 'looking for webhooks to deliver failed; trying again shortly'))
        .finally(() => { round = null; schedule(); });
    }, pollMs);
    timer.unref();
  }

  return {
    start(): void {
      schedule();
    },
    /** Stops looking, ends the deliveries in flight (their events are tried again later), and waits for them. */
    async stop(): Promise<void> {
      stopping.abort();
      clearTimeout(timer);
      await round;
      await Promise.all(inFlight.values());
    },
  };
}
