import { Type, type Static } from '@sinclair/typebox';
import { NullableCursor, OrgIdParam, Timestamp } from '../../http/schemas.js';
import { WEBHOOK_URL_MAX_CHARS } from './webhook-address.js';

/** Event types and families a webhook may subscribe to, at most. */
export const MAX_WEBHOOK_EVENT_TYPES = 50;

const Url = Type.String({
  minLength: 1, maxLength: WEBHOOK_URL_MAX_CHARS, format: 'uri',
  description: 'Where events are POSTed: http(s), without credentials or fragment. Not an address of this machine or of a private network, unless SLIPWAY_WEBHOOK_ALLOW_PRIVATE is set.',
});
const Description = Type.String({ maxLength: 500 });
const EventTypes = Type.Array(Type.String({ minLength: 1, maxLength: 100 }), {
  maxItems: MAX_WEBHOOK_EVENT_TYPES,
  description: 'Event types (`deployment.state_changed`) and families (`secret.*`) to deliver; empty or absent: every event. The types are those of `GET …/events`.',
});

export const WebhookSchema = Type.Object({
  id: Type.String({ examples: ['whk_01jd6xq0m3b8c2v4w5x6y7z8a9'] }),
  url: Type.String(),
  description: Type.String(),
  events: Type.Array(Type.String(), { description: 'What it delivers; empty: every event.' }),
  active: Type.Boolean({ description: 'false: nothing is delivered (set by an admin, or after failing for SLIPWAY_WEBHOOK_DISABLE_AFTER_SECONDS).' }),
  state: Type.Union([Type.Literal('active'), Type.Literal('failing'), Type.Literal('disabled')], {
    description: '`failing` once an attempt has failed, until one succeeds: the event is tried again at `nextAttemptAt`, and nothing after it is delivered meanwhile.',
  }),
  disabledReason: Type.Union([Type.String(), Type.Null()]),
  failingSince: Type.Union([Timestamp, Type.Null()]),
  nextAttemptAt: Type.Union([Timestamp, Type.Null()]),
  lastAttempt: Type.Union([Type.Object({
    at: Timestamp,
    status: Type.Union([Type.Integer(), Type.Null()], { description: 'The HTTP status it answered, or null when none came back.' }),
    error: Type.Union([Type.String(), Type.Null()], { description: 'Why it was not a delivery; null for a 2xx.' }),
  }), Type.Null()]),
  createdAt: Timestamp,
  updatedAt: Timestamp,
});
export type Webhook = Static<typeof WebhookSchema>;

const Secret = Type.String({ description: 'The signing secret (`whsec_…`), shown once: verify each delivery\'s `webhook-signature` with it (Standard Webhooks).' });

export const CreatedWebhookSchema = Type.Composite([WebhookSchema, Type.Object({ secret: Secret })]);

export const CreateWebhookBody = Type.Object({
  url: Url,
  description: Type.Optional(Description),
  events: Type.Optional(EventTypes),
  active: Type.Optional(Type.Boolean({ default: true })),
}, { additionalProperties: false });

export const UpdateWebhookBody = Type.Object({
  url: Type.Optional(Url),
  description: Type.Optional(Description),
  events: Type.Optional(EventTypes),
  active: Type.Optional(Type.Boolean({ description: 'false stops deliveries; true on a disabled webhook starts them again, from the event it stopped at. A new `url` also tries a failing webhook\'s event again at once.' })),
}, { additionalProperties: false, minProperties: 1 });

export const WebhookParams = Type.Object({
  orgId: OrgIdParam,
  id: Type.String({ minLength: 1, maxLength: 100, description: 'Webhook id (`whk_…`).' }),
});

export const WebhookList = Type.Object({ webhooks: Type.Array(WebhookSchema), nextCursor: NullableCursor });

export const RotatedSecretSchema = Type.Object({
  secret: Secret,
  previousSecretExpiresAt: Type.Union([Timestamp, Type.Null()], { description: 'Until then deliveries carry a signature by the previous secret too.' }),
});

export const WebhookTestSchema = Type.Object({
  eventId: Type.String({ description: 'The test delivery\'s `webhook-id` (and its body\'s `id`): one of its own, not an event of the log.' }),
  delivered: Type.Boolean({ description: 'Whether the receiver took it: a 2xx within 10 seconds.' }),
  status: Type.Union([Type.Integer(), Type.Null()], { description: 'The status the receiver answered, or null when none came.' }),
  error: Type.Union([Type.String(), Type.Null()], { description: 'Why it is not a delivery (a status other than 2xx, a redirect, no answer in time, an address webhooks do not reach), or null.' }),
  durationMs: Type.Integer(),
});
export type WebhookTestT = Static<typeof WebhookTestSchema>;

export const DeliverySchema = Type.Object({
  id: Type.String(),
  eventId: Type.String({ description: 'The event delivered: also the `webhook-id` header, the same on every attempt.' }),
  eventType: Type.String(),
  attempt: Type.Integer({ description: '1 for the first attempt at this event, then 2, 3, …; a change of the webhook (a PATCH), or turning it on again, counts from 1 again.' }),
  status: Type.Union([Type.Integer(), Type.Null()], { description: 'The HTTP status it answered, or null when none came back.' }),
  error: Type.Union([Type.String(), Type.Null()], { description: 'Why it was not a delivery; null for a 2xx.' }),
  durationMs: Type.Integer(),
  createdAt: Timestamp,
});
export type Delivery = Static<typeof DeliverySchema>;

export const DeliveryList = Type.Object({ deliveries: Type.Array(DeliverySchema), nextCursor: NullableCursor });
