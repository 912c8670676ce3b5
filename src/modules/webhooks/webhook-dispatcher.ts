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
import { NO_METRICS, type Metrics } from '../../platform/metrics.js';
import { appendEvents } from '../events/event-log.js';
import { eventsRepo, type EventPosition } from '../events/events.repo.js';
import { toEvent } from '../events/events.service.js';
import type { DataKeys } from '../secrets/data-keys.js';
import { sendWebhook } from './webhook-sender.js';
import { webhooksRepo, type WebhookRow } from './webhooks.repo.js';
import { DELIVERY_TIMEOUT_MS, positionColumns, positionFrom, positionOf, signingSecrets, subscribes, WEBHOOK_USER_AGENT } from './webhooks.service.js';
import { nowMs, nowIso } from '../../platform/clock.js';

/** How long a node holds a webhook it delivers; each attempt it records renews it. */
const LEASE_MS = 60_000;
/** Webhooks a node delivers at once, and of one organization's. */
const WEBHOOKS_IN_FLIGHT = 100;
const PER_ORG_IN_FLIGHT = 10;
/** Events read for a webhook at a time, and how long a node delivers one webhook's before letting it go. */
const EVENTS_PER_ROUND = 50;
const BUSY_MS = 30_000;
/** The pause after the n-th failure in a row: 1 s, doubling, at most 15 minutes. */
export const retryPauseMs = (failures: number) => Math.min(1000 * 2 ** Math.min(failures - 1, 20), 15 * 60_000);

export interface DispatcherOptions {
  db: Db;
  dialect: Dialect;
  dataKeys: DataKeys;
  logger: Logger;
  allowPrivate: boolean;
  disableAfterSeconds: number;
  /** WEBHOOK_USER_AGENT by default. */
  userAgent?: string;
  /** Counts each attempt recorded, and each webhook disabled. */
  metrics?: Pick<Metrics, 'webhookAttempt' | 'webhookDisabled'>;
  pollMs?: number;
  timeoutMs?: number;
}

export function createWebhookDispatcher(deps: DispatcherOptions) {
  const { db, dialect, dataKeys, logger } = deps;
  const metrics = deps.metrics ?? NO_METRICS;
  const owner = randomUUID();
  const pollMs = deps.pollMs ?? 1000;
  const timeoutMs = deps.timeoutMs ?? DELIVERY_TIMEOUT_MS;
  const stopping = new AbortController();
  let timer: NodeJS.Timeout | undefined;
  let round: Promise<void> | null = null;
  const inFlight = new Map<string, { orgId: string; delivery: Promise<void> }>();

  /**
   * Delivers one round of what a webhook has waiting, in order: up to EVENTS_PER_ROUND events,
   * until one fails or the webhook changes. True when it delivered a full round, and more may wait.
   */
  async function deliverRound(webhook: WebhookRow, until: number): Promise<boolean> {
    const events = (await eventsRepo.list(db, dialect, webhook.org_id, { after: positionFrom(webhook), newestFirst: false, limit: EVENTS_PER_ROUND })).slice(0, EVENTS_PER_ROUND);
    if (events.length === 0) return false;
    const types = JSON.parse(webhook.event_types) as string[];
    const secrets = await signingSecrets(db, dataKeys, webhook, nowMs());
    let w = webhook;
    // Events it does not subscribe to are passed over: the position moves past them with the next
    // write. The failures on record are the first event's (the one the position stops before):
    // passed over (its type no longer subscribed to), they go with it.
    let passed: EventPosition | null = null;
    const cleared = { failures: 0, failing_since: null, next_attempt_at: null } as const;
    let failure: Pick<WebhookRow, 'failures' | 'failing_since'> = w;
    for (const event of events) {
      if (stopping.signal.aborted) return false;
      if (nowMs() > until) break;
      const position = positionOf(dialect, event);
      if (!subscribes(types, event.type)) {
        passed = position;
        if (failure.failures > 0) failure = cleared;
        continue;
      }
      const body = JSON.stringify({ ...toEvent(event), orgId: w.org_id });
      const result = await sendWebhook(w.url, { id: event.id, body, secrets }, { timeoutMs, allowPrivate: deps.allowPrivate, userAgent: deps.userAgent ?? WEBHOOK_USER_AGENT, signal: stopping.signal });
      if (stopping.signal.aborted && result.error !== null) return false;
      const at = nowMs();
      const atIso = new Date(at).toISOString();
      const delivered = result.error === null;
      const failures = delivered ? 0 : failure.failures + 1;
      const failingSince = delivered ? null : (failure.failing_since ?? atIso);
      const disable = failingSince !== null && at - Date.parse(failingSince) >= deps.disableAfterSeconds * 1000;
      const reason = disable ? `Disabled after failing since ${failingSince} (${failures} attempts; SLIPWAY_WEBHOOK_DISABLE_AFTER_SECONDS is ${deps.disableAfterSeconds}); the last: ${result.error}` : null;
      const attempted = w;
      const updated = await db.transaction().execute(async (trx) => {
        const row = await webhooksRepo.updateLeased(trx, attempted.id, owner, attempted.updated_at, {
          ...(delivered ? positionColumns(position) : passed !== null ? positionColumns(passed) : {}),
          failures, failing_since: failingSince, next_attempt_at: delivered ? null : new Date(at + retryPauseMs(failures)).toISOString(),
          last_attempt_at: atIso, last_status: result.status, last_error: result.error, lease_until: new Date(at + LEASE_MS).toISOString(),
          ...(disable ? { active: 0, disabled_reason: reason } : {}),
        });
        // Deleted, turned off, changed (a new URL, events or secret) or taken over meanwhile: the
        // attempt is not recorded, and the event goes again, as the webhook is now.
        if (row === undefined) return undefined;
        await webhooksRepo.insertDelivery(trx, {
          id: newId('webhookDelivery'), webhook_id: attempted.id, event_id: event.id, event_type: event.type, attempt: failure.failures + 1,
          status: result.status, error: result.error, duration_ms: result.durationMs, created_at: atIso,
        });
        if (disable) {
          await appendEvents(trx, SYSTEM_CONTEXT, [{
            orgId: attempted.org_id, type: 'webhook.disabled', subject: { type: 'webhook', id: attempted.id }, data: { failingSince, failures, lastStatus: result.status, lastError: result.error },
          }], atIso);
        }
        return row;
      });
      if (updated === undefined) return false;
      metrics.webhookAttempt(delivered, result.durationMs / 1000);
      if (disable) metrics.webhookDisabled();
      if (disable) logger.warn({ webhookId: w.id, orgId: w.org_id, failingSince, failures }, 'disabled a webhook that kept failing');
      w = updated;
      failure = updated;
      passed = null;
      if (!delivered) return false;
    }
    if (passed !== null) {
      const moved = await webhooksRepo.updateLeased(db, w.id, owner, w.updated_at, {
        ...positionColumns(passed), ...(failure.failures === 0 && w.failures > 0 ? cleared : {}), lease_until: new Date(nowMs() + LEASE_MS).toISOString(),
      });
      if (moved === undefined) return false;
    }
    return events.length === EVENTS_PER_ROUND && nowMs() <= until;
  }

  /**
   * Delivers what one webhook has waiting: round after round while full ones come, for at most
   * BUSY_MS, then lets it go (another node, or this one, goes on at the next look).
   */
  async function deliverWaiting(id: string): Promise<void> {
    const started = nowMs();
    if (!(await webhooksRepo.lease(db, id, owner, new Date(started).toISOString(), new Date(started + LEASE_MS).toISOString()))) return;
    try {
      for (;;) {
        // Read again under the lease and at each round: another node may have moved it on, and
        // its URL, events or secret may have changed.
        const w = await webhooksRepo.byId(db, id);
        if (w === undefined || w.active !== 1 || (w.next_attempt_at !== null && Date.parse(w.next_attempt_at) > nowMs())) return;
        const more = await deliverRound(w, started + BUSY_MS);
        await webhooksRepo.pruneDeliveries(db, id);
        if (!more || stopping.signal.aborted || nowMs() - started > BUSY_MS) return;
      }
    } finally {
      await webhooksRepo.release(db, id, owner);
    }
  }

  /**
   * Starts delivering each due webhook not in flight here, each on its own: a slow receiver holds
   * up its own webhook only, and no organization takes more than PER_ORG_IN_FLIGHT of the places.
   */
  async function deliverDue(): Promise<void> {
    if (inFlight.size >= WEBHOOKS_IN_FLIGHT) return;
    const due = await webhooksRepo.due(db, dialect, nowIso(), WEBHOOKS_IN_FLIGHT * 2);
    const perOrg = new Map<string, number>();
    for (const { orgId } of inFlight.values()) perOrg.set(orgId, (perOrg.get(orgId) ?? 0) + 1);
    for (const webhook of due) {
      if (stopping.signal.aborted || inFlight.size >= WEBHOOKS_IN_FLIGHT) return;
      if (inFlight.has(webhook.id) || (perOrg.get(webhook.org_id) ?? 0) >= PER_ORG_IN_FLIGHT) continue;
      perOrg.set(webhook.org_id, (perOrg.get(webhook.org_id) ?? 0) + 1);
      const delivery = deliverWaiting(webhook.id)
        .catch((err: unknown) => logger.warn({ err, webhookId: webhook.id }, 'delivering a webhook\'s events failed; trying again shortly'))
        .finally(() => inFlight.delete(webhook.id));
      inFlight.set(webhook.id, { orgId: webhook.org_id, delivery });
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
      await Promise.all([...inFlight.values()].map((f) => f.delivery));
    },
  };
}
