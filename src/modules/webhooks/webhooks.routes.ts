import { Type } from '@sinclair/typebox';
import type { App } from '../../http/app-types.js';
import { created, withLocation } from '../../http/created.js';
import { problems } from '../../http/openapi.js';
import { noStore, optionalBody, OrgParams, PageQuery } from '../../http/schemas.js';
import { CreatedWebhookSchema, CreateWebhookBody, DeliveryList, RotatedSecretSchema, UpdateWebhookBody, WebhookList, WebhookParams, WebhookSchema, WebhookTestSchema } from './webhooks.schemas.js';
import type { WebhooksService } from './webhooks.service.js';

const tags = ['webhooks'];

const HOW = 'Each event the webhook subscribes to is POSTed to its URL as JSON: the event as `GET …/events` shows it, with `orgId`. '
  + 'Deliveries are signed as Standard Webhooks sign (standardwebhooks.com): `webhook-id` (the event id, the same on every attempt), '
  + '`webhook-timestamp` (Unix seconds) and `webhook-signature` (`v1,<base64 HMAC-SHA256 of "id.timestamp.body">` under each secret in force, separated by spaces). '
  + 'Events go out in commit order, each until a 2xx answers it within 10 seconds (redirects are not followed); after a failure the same event is tried again after '
  + '1 s, 2 s, 4 s, … up to 15 minutes, and nothing after it goes first. A webhook failing for SLIPWAY_WEBHOOK_DISABLE_AFTER_SECONDS (3 days) is disabled.';

export function webhooksRoutes(app: App, deps: { webhooks: WebhooksService }): void {
  const { webhooks } = deps;

  app.get('/v1/orgs/:orgId/webhooks', {
    config: { auth: 'admin', operation: 'webhooks.list' },
    schema: { tags, summary: 'List webhooks, oldest first', params: OrgParams, querystring: PageQuery, response: { 200: WebhookList } },
  }, async (req) => {
    const page = await webhooks.list(req.org!.id, req.query);
    return { webhooks: page.items, nextCursor: page.nextCursor };
  });

  app.post('/v1/orgs/:orgId/webhooks', {
    config: { auth: 'admin', operation: 'webhooks.create' },
    schema: {
      tags,
      summary: 'Subscribe a URL to the organization\'s events; the signing secret is returned once',
      description: `It delivers the events committed after it is created that it subscribes to, its own \`webhook.created\` first when it subscribes to that. ${HOW}`,
      params: OrgParams,
      body: CreateWebhookBody,
      response: { 201: noStore(withLocation(CreatedWebhookSchema)) },
    },
  }, async (req, reply) => {
    const webhook = await webhooks.create(req.ctx, req.org!.id, req.body);
    reply.header('cache-control', 'no-store');
    return created(reply, `/v1/orgs/${req.org!.id}/webhooks/${webhook.id}`, webhook);
  });

  app.get('/v1/orgs/:orgId/webhooks/:id', {
    config: { auth: 'admin', operation: 'webhooks.get' },
    schema: { tags, summary: 'Get a webhook, with how its deliveries are going', params: WebhookParams, response: { 200: WebhookSchema } },
  }, async (req) => webhooks.get(req.org!.id, req.params.id));

  app.patch('/v1/orgs/:orgId/webhooks/:id', {
    config: { auth: 'admin', operation: 'webhooks.update' },
    schema: {
      tags,
      summary: 'Change a webhook\'s URL, description or events, or turn it off and on',
      description: 'A webhook turned on again delivers from the event it stopped at: nothing committed meanwhile is lost.',
      params: WebhookParams,
      body: UpdateWebhookBody,
      response: { 200: WebhookSchema },
    },
  }, async (req) => webhooks.update(req.ctx, req.org!.id, req.params.id, req.body));

  app.delete('/v1/orgs/:orgId/webhooks/:id', {
    config: { auth: 'admin', operation: 'webhooks.delete' },
    schema: { tags, summary: 'Delete a webhook and its delivery records', params: WebhookParams, response: { 204: { type: 'null', description: 'Deleted' } } },
  }, async (req, reply) => {
    await webhooks.remove(req.ctx, req.org!.id, req.params.id);
    return reply.code(204).send();
  });

  app.post('/v1/orgs/:orgId/webhooks/:id/rotate-secret', {
    config: { auth: 'admin', operation: 'webhooks.rotateSecret' },
    schema: {
      tags,
      summary: 'Give a webhook a new signing secret, returned once',
      description: 'Deliveries are signed with the new secret at once, and for 24 hours with the previous one too (two signatures in `webhook-signature`), so a receiver can switch without refusing one. Rotating again within those hours drops the oldest.',
      params: WebhookParams,
      body: optionalBody(Type.Object({}, { additionalProperties: false })),
      response: { 200: noStore(RotatedSecretSchema) },
    },
  }, async (req, reply) => {
    const rotated = await webhooks.rotateSecret(req.ctx, req.org!.id, req.params.id);
    reply.header('cache-control', 'no-store');
    return rotated;
  });

  app.post('/v1/orgs/:orgId/webhooks/:id/test', {
    config: { auth: 'admin', operation: 'webhooks.test' },
    schema: {
      tags,
      summary: 'Send a test delivery now, and see how the receiver answers',
      description: 'One POST to the webhook\'s URL, signed as every delivery is, whether the webhook is on or off and whatever it subscribes to: '
        + 'its body has an event\'s form, of type `webhook.test`, with `data` `{"test": true}` and an id of its own (its `webhook-id`). '
        + 'It is not in the event log, and changes neither the webhook\'s state nor its deliveries. The answer waits for the receiver\'s, up to 10 seconds: '
        + '`delivered` is true for a 2xx; otherwise `status` and `error` say what came back, or why nothing did.',
      params: WebhookParams,
      body: optionalBody(Type.Object({}, { additionalProperties: false })),
      response: { 200: WebhookTestSchema },
    },
  }, async (req) => webhooks.test(req.ctx, req.org!.id, req.params.id));

  app.get('/v1/orgs/:orgId/webhooks/:id/deliveries', {
    config: { auth: 'admin', operation: 'webhooks.deliveries' },
    schema: {
      tags,
      summary: 'A webhook\'s delivery attempts, newest first',
      description: 'The last 100 attempts: the event, the attempt\'s number for that event, the status answered or why none was, and how long it took.',
      params: WebhookParams,
      querystring: PageQuery,
      response: { 200: DeliveryList },
    },
  }, async (req) => {
    const page = await webhooks.deliveries(req.org!.id, req.params.id, req.query);
    return { deliveries: page.items, nextCursor: page.nextCursor };
  });
}
