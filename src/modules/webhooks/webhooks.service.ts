// Webhooks: an organization's admins subscribe a URL to its event log. Each webhook delivers the
// events it subscribes to in commit order, each until it is taken (see webhook-dispatcher.ts); its
// signing secret is sealed with the organization's data key and shown once, at creation and at
// each rotation.
import type { RequestContext } from '../../platform/context.js';
import type { Db, Dialect, Executor } from '../../platform/db/database.js';
import { errors, type FieldError } from '../../platform/errors.js';
import { newId } from '../../platform/ids.js';
import { cursorList, pageRequest, toPage, type Page } from '../../platform/pagination.js';
import { appendEvents, changesOf } from '../events/event-log.js';
import { eventsRepo, type EventPosition, type StoredEvent } from '../events/events.repo.js';
import { isKnownEventType } from '../events/events.schemas.js';
import { orgsRepo } from '../orgs/orgs.repo.js';
import type { DataKeys } from '../secrets/data-keys.js';
import { VERSION } from '../../platform/version.js';
import { webhookUrl, webhookUrlProblem } from './webhook-address.js';
import { newWebhookSecret, sendWebhook } from './webhook-sender.js';
import { webhooksRepo, type DeliveryRow, type WebhookRow } from './webhooks.repo.js';
import type { Delivery, Webhook, WebhookTestT } from './webhooks.schemas.js';
import { nowMs, nowIso, nowDate } from '../../platform/clock.js';

/** How long a rotated-out secret still signs deliveries, beside the new one. */
export const PREVIOUS_SECRET_SECONDS = 24 * 3600;

/** How a delivery introduces itself, and how long its answer is waited for. */
export const WEBHOOK_USER_AGENT = `Slipway-Webhooks/${VERSION}`;
export const DELIVERY_TIMEOUT_MS = 10_000;

/** The type of a test delivery's body: never an event of the log, nor one a webhook subscribes to. */
export const TEST_DELIVERY_TYPE = 'webhook.test';

/** What a signing secret's sealing is bound to: the webhook and the secret's generation. */
export const secretBinding = (orgId: string, id: string, generation: number, previous = false) =>
  `webhook/${orgId}/${id}/${generation}${previous ? '/previous' : ''}`;

/** The secrets that sign a delivery: the current one, and the one before it while it is in force. */
export async function signingSecrets(db: Executor, dataKeys: DataKeys, w: WebhookRow, now: number): Promise<string[]> {
  const current = await dataKeys.openBound(db, w.data_key_id, secretBinding(w.org_id, w.id, w.secret_generation), w.secret_sealed);
  const secrets = [current.toString('utf8')];
  if (w.previous_secret_sealed !== null && w.previous_secret_expires_at !== null && Date.parse(w.previous_secret_expires_at) > now) {
    const previous = await dataKeys.openBound(db, w.data_key_id, secretBinding(w.org_id, w.id, w.secret_generation, true), w.previous_secret_sealed);
    secrets.push(previous.toString('utf8'));
  }
  return secrets;
}

export function positionOf(dialect: Dialect, row: StoredEvent): EventPosition {
  return dialect === 'postgres' ? { txId: String(row.tx_id), id: row.id } : { seq: Number(row.seq) };
}

/** A webhook's position as its columns hold it. */
export function positionColumns(position: EventPosition | null): Pick<WebhookRow, 'position_seq' | 'position_tx' | 'position_event_id'> {
  if (position === null) return { position_seq: null, position_tx: null, position_event_id: null };
  return 'seq' in position ? { position_seq: position.seq, position_tx: null, position_event_id: null } : { position_seq: null, position_tx: position.txId, position_event_id: position.id };
}

/** Where a webhook stands in the event log: after this event, or (null) before the first. */
export function positionFrom(row: WebhookRow): EventPosition | null {
  if (row.position_seq !== null) return { seq: Number(row.position_seq) };
  if (row.position_tx !== null && row.position_event_id !== null) return { txId: row.position_tx, id: row.position_event_id };
  return null;
}

/** The events a webhook delivers: each entry a type, or a family (`secret.*`); none: every event. */
export function subscribes(types: readonly string[], type: string): boolean {
  if (types.length === 0) return true;
  return types.some((t) => t === type || (t.endsWith('.*') && type.startsWith(t.slice(0, -1))));
}

export function toWebhook(row: WebhookRow): Webhook {
  return {
    id: row.id,
    url: row.url,
    description: row.description,
    events: JSON.parse(row.event_types) as string[],
    active: row.active === 1,
    state: row.active !== 1 ? 'disabled' : row.failing_since !== null ? 'failing' : 'active',
    disabledReason: row.disabled_reason,
    failingSince: row.failing_since,
    nextAttemptAt: row.active === 1 ? row.next_attempt_at : null,
    lastAttempt: row.last_attempt_at === null ? null : { at: row.last_attempt_at, status: row.last_status, error: row.last_error },
    createdAt: row.created_at,
    updatedAt: row.updated_at,
  };
}

function toDelivery(row: DeliveryRow): Delivery {
  return {
    id: row.id, eventId: row.event_id, eventType: row.event_type, attempt: row.attempt, status: row.status, error: row.error, durationMs: row.duration_ms, createdAt: row.created_at,
  };
}

/** What the event log records of a URL: its origin. A path or query can hold a token (a chat service's incoming-webhook URL does). */
const originOf = (url: string) => new URL(url).origin;

export interface WebhookInput {
  url: string;
  description?: string | undefined;
  events?: string[] | undefined;
  active?: boolean | undefined;
}

export function createWebhooksService(deps: { db: Db; dialect: Dialect; dataKeys: DataKeys; allowPrivate: boolean; maxPerOrg: number }) {
  const { db, dataKeys } = deps;

  /** The input checked, its URL as it is kept (see webhookUrl). */
  function checkInput<T extends Partial<WebhookInput>>(input: T): T {
    const problems: FieldError[] = [];
    if (input.url !== undefined) {
      const problem = webhookUrlProblem(input.url, deps.allowPrivate);
      if (problem !== null) problems.push({ pointer: '/url', message: problem });
    }
    const seen = new Set<string>();
    (input.events ?? []).forEach((type, i) => {
      if (!isKnownEventType(type)) problems.push({ pointer: `/events/${i}`, message: `"${type}" is not an event type or family (such as "deployment.state_changed" or "secret.*"); GET …/events lists them` });
      else if (seen.has(type)) problems.push({ pointer: `/events/${i}`, message: `"${type}" is listed twice` });
      seen.add(type);
    });
    if (problems.length > 0) throw errors.invalidRequest(`The webhook is not valid: ${problems.map((p) => `${p.pointer} ${p.message}`).join('; ')}.`, problems);
    return input.url === undefined ? input : { ...input, url: webhookUrl(input.url) };
  }

  async function load(executor: Executor, orgId: string, id: string, lock = false): Promise<WebhookRow> {
    const row = await webhooksRepo.find(executor, orgId, id, lock && deps.dialect === 'postgres');
    if (row === undefined) throw errors.notFound('webhook', id);
    return row;
  }

  /** A new secret sealed for this webhook's generation, with the data key it is sealed under. */
  async function sealSecret(trx: Executor, orgId: string, id: string, generation: number, secret: string, previous = false) {
    const dataKey = await dataKeys.current(trx, orgId);
    return { dataKeyId: dataKey.id, sealed: dataKeys.sealBound(dataKey, secretBinding(orgId, id, generation, previous), Buffer.from(secret, 'utf8')) };
  }

  return {
    async create(ctx: RequestContext, orgId: string, sent: WebhookInput): Promise<Webhook & { secret: string }> {
      const input = checkInput(sent);
      const now = nowIso();
      const id = newId('webhook');
      const secret = newWebhookSecret();
      const row = await db.transaction().execute(async (trx) => {
        // One create at a time per organization, so that concurrent ones cannot all pass the count.
        await orgsRepo.hold(trx, orgId);
        const count = await webhooksRepo.countInOrg(trx, orgId);
        if (count >= deps.maxPerOrg) {
          throw errors.limitExceeded(`The organization has ${count} webhooks; the limit is ${deps.maxPerOrg} (SLIPWAY_MAX_WEBHOOKS_PER_ORG). Delete one, or add events to one that exists.`, { name: 'SLIPWAY_MAX_WEBHOOKS_PER_ORG', value: deps.maxPerOrg });
        }
        const { dataKeyId, sealed } = await sealSecret(trx, orgId, id, 1, secret);
        // It delivers what is committed after it: from the newest event this transaction can list.
        const [newest] = await eventsRepo.list(trx, deps.dialect, orgId, { after: null, newestFirst: true, limit: 1 });
        const row: WebhookRow = {
          id, org_id: orgId, url: input.url, description: input.description ?? '', event_types: JSON.stringify(input.events ?? []),
          active: input.active === false ? 0 : 1, disabled_reason: null,
          data_key_id: dataKeyId, secret_sealed: sealed, secret_generation: 1, previous_secret_sealed: null, previous_secret_expires_at: null,
          ...positionColumns(newest === undefined ? null : positionOf(deps.dialect, newest)),
          failures: 0, failing_since: null, next_attempt_at: null, last_attempt_at: null, last_status: null, last_error: null,
          lease_owner: null, lease_until: null, turn_at: null, created_at: now, updated_at: now,
        };
        await webhooksRepo.insert(trx, row);
        await appendEvents(trx, ctx, [{
          orgId, type: 'webhook.created', subject: { type: 'webhook', id }, data: { urlOrigin: originOf(row.url), events: input.events ?? [], active: row.active === 1 },
        }], now);
        return row;
      });
      return { ...toWebhook(row), secret };
    },

    async list(orgId: string, query: { limit?: number; cursor?: string }): Promise<Page<Webhook>> {
      const list = cursorList('webhooks', { org: orgId });
      const page = pageRequest(list, query);
      const result = toPage(list, await webhooksRepo.list(db, orgId, page), page.limit, (r) => r.id);
      return { items: result.items.map(toWebhook), nextCursor: result.nextCursor };
    },

    async get(orgId: string, id: string): Promise<Webhook> {
      return toWebhook(await load(db, orgId, id));
    },

    async update(ctx: RequestContext, orgId: string, id: string, sent: Partial<WebhookInput>): Promise<Webhook> {
      const patch = checkInput(sent);
      const now = nowIso();
      return db.transaction().execute(async (trx) => {
        const current = await load(trx, orgId, id, true);
        const before = { url: current.url, description: current.description, events: current.event_types, active: current.active === 1 };
        const changes = changesOf(['url', 'description', 'events', 'active'], before, {
          url: patch.url, description: patch.description, events: patch.events === undefined ? undefined : JSON.stringify(patch.events), active: patch.active,
        });
        if (changes.changed.length === 0) return toWebhook(current);
        const set: Partial<WebhookRow> = { updated_at: now };
        if (patch.url !== undefined) set.url = patch.url;
        if (patch.description !== undefined) set.description = patch.description;
        if (patch.events !== undefined) set.event_types = JSON.stringify(patch.events);
        const active = patch.active ?? current.active === 1;
        if (changes.changed.includes('active')) Object.assign(set, { active: active ? 1 : 0, disabled_reason: null });
        // Turned on again, or pointed elsewhere: the event it stopped at is tried again now. With
        // other events, it may no longer be one it delivers: the next round looks at once.
        if (active && (changes.changed.includes('active') || changes.changed.includes('url'))) {
          Object.assign(set, { failures: 0, failing_since: null, next_attempt_at: null });
        } else if (active && changes.changed.includes('events')) {
          set.next_attempt_at = null;
        }
        const row = await webhooksRepo.update(trx, current.id, set);
        if (row === undefined) throw errors.notFound('webhook', id);
        // The event log keeps a URL's origin only (its path and query may hold a token): a changed
        // URL is named `url` in `changed`, its sides by their origins, the same when only the path
        // or query moved. The types stay a list.
        const shown = (v: Partial<Record<string, unknown>>) => Object.fromEntries(Object.entries(v).map(([k, value]) => [
          k === 'url' ? 'urlOrigin' : k, k === 'url' ? originOf(value as string) : k === 'events' ? JSON.parse(value as string) as unknown : value,
        ]));
        await appendEvents(trx, ctx, [{
          orgId, type: 'webhook.updated', subject: { type: 'webhook', id: current.id },
          data: { changed: changes.changed, from: shown(changes.from), to: shown(changes.to) },
        }], now);
        return toWebhook(row);
      });
    },

    async remove(ctx: RequestContext, orgId: string, id: string): Promise<void> {
      await db.transaction().execute(async (trx) => {
        const current = await load(trx, orgId, id, true);
        await webhooksRepo.delete(trx, current.id);
        await appendEvents(trx, ctx, [{ orgId, type: 'webhook.deleted', subject: { type: 'webhook', id: current.id }, data: { urlOrigin: originOf(current.url) } }]);
      });
    },

    /**
     * A new signing secret, in force at once. The one it replaces still signs, beside it, for
     * PREVIOUS_SECRET_SECONDS, so receivers can switch without refusing a delivery.
     */
    /**
     * Sends one test delivery now, signed as deliveries are, to the webhook's URL (off or on,
     * whatever it subscribes to), and says how the receiver answered. Its body has the form of an
     * event, of type `webhook.test`, with an id of its own; it is not in the event log, and it
     * changes neither the webhook's state nor its deliveries.
     */
    async test(ctx: RequestContext, orgId: string, id: string): Promise<WebhookTestT> {
      const w = await load(db, orgId, id);
      const secrets = await signingSecrets(db, dataKeys, w, nowMs());
      const eventId = newId('event');
      const body = JSON.stringify({
        id: eventId, type: TEST_DELIVERY_TYPE, actor: ctx.actor.id, requestId: ctx.requestId, subject: { type: 'webhook', id: w.id },
        data: { test: true }, createdAt: nowIso(), orgId,
      });
      const result = await sendWebhook(w.url, { id: eventId, body, secrets }, { timeoutMs: DELIVERY_TIMEOUT_MS, allowPrivate: deps.allowPrivate, userAgent: WEBHOOK_USER_AGENT });
      return { eventId, delivered: result.error === null, status: result.status, error: result.error, durationMs: result.durationMs };
    },

    async rotateSecret(ctx: RequestContext, orgId: string, id: string): Promise<{ secret: string; previousSecretExpiresAt: string | null }> {
      const now = nowDate();
      const secret = newWebhookSecret();
      const expires = new Date(now.getTime() + PREVIOUS_SECRET_SECONDS * 1000).toISOString();
      await db.transaction().execute(async (trx) => {
        const current = await load(trx, orgId, id, true);
        const old = await dataKeys.openBound(trx, current.data_key_id, secretBinding(orgId, current.id, current.secret_generation), current.secret_sealed);
        const generation = current.secret_generation + 1;
        const next = await sealSecret(trx, orgId, current.id, generation, secret);
        const previous = await sealSecret(trx, orgId, current.id, generation, old.toString('utf8'), true);
        await webhooksRepo.update(trx, current.id, {
          data_key_id: next.dataKeyId, secret_sealed: next.sealed, secret_generation: generation,
          previous_secret_sealed: previous.sealed, previous_secret_expires_at: expires, updated_at: now.toISOString(),
        });
        await appendEvents(trx, ctx, [{ orgId, type: 'webhook.secret_rotated', subject: { type: 'webhook', id: current.id }, data: { generation, previousSecretExpiresAt: expires } }], now.toISOString());
      });
      return { secret, previousSecretExpiresAt: expires };
    },

    /** After the event log was renumbered by a restore (PostgreSQL): each webhook keeps its place in it. */
    followRenumberedEvents: (trx: Executor) => webhooksRepo.followRenumberedEvents(trx),

    /** A webhook's delivery attempts, newest first (the last DELIVERIES_KEPT). */
    async deliveries(orgId: string, id: string, query: { limit?: number; cursor?: string }): Promise<Page<Delivery>> {
      const webhook = await load(db, orgId, id);
      const list = cursorList('webhook-deliveries', { org: orgId, webhook: webhook.id });
      const page = pageRequest(list, query);
      const result = toPage(list, await webhooksRepo.deliveries(db, webhook.id, page), page.limit, (r) => r.id);
      return { items: result.items.map(toDelivery), nextCursor: result.nextCursor };
    },
  };
}

export type WebhooksService = ReturnType<typeof createWebhooksService>;
