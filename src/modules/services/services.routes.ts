import type { App } from '../../http/app-types.js';
import { created, withLocation } from '../../http/created.js';
import { ifMatchHeaders, preconditionsOf, readAnswer, readHeaders, tagged, withEtag } from '../../http/etag-headers.js';
import { problems } from '../../http/openapi.js';
import { Type } from '@sinclair/typebox';
import { DryRunQuery, OrgParams, PageQuery } from '../../http/schemas.js';
import type { Limits } from '../../platform/config.js';
import { createServiceBody, DeleteServiceQuery, ServiceList, ServiceParams, ServiceSchema, updateServiceBody } from './services.schemas.js';
import type { ServicesService } from './services.service.js';

const tags = ['services'];
const IfMatchHeaders = ifMatchHeaders('service');
const tagOf = <T extends object>(schema: T) => withEtag(schema, 'service');
const SPEC_RULES = 'The spec needs `command` or `image`. Every secret reference must name a live secret of the organization (otherwise 422 `unknown_secrets`, listing every missing name in `missing`, with `errors` pointing at each reference to one and at each missing key of the others), and a `key` must exist in its current version (otherwise 422 `unknown_secret_reference`, pointing at each reference). ' +
  'A whole-secret reference exports each key under its own name; `key` + `as` exports one key under another name. A variable set twice (by two references, or by a reference and `variables`) is 422 `variable_conflict`. ' +
  'PORT is the runner\'s (it passes the port it picks as PORT; `port` asks runners that do not pick one): set in `variables`, by a reference\'s `key` or `as`, or by a whole-secret reference whose secret holds a PORT key, it is 422 `reserved_variable`, pointing at each. Values never leave the secret store here.';

export function servicesRoutes(app: App, deps: { services: ServicesService; limits: Limits }): void {
  const { services } = deps;

  app.get('/v1/orgs/:orgId/services', {
    config: { auth: 'viewer', operation: 'services.list' },
    schema: { tags, summary: 'List services, oldest first', params: OrgParams, querystring: PageQuery, response: { 200: ServiceList } },
  }, async (req) => {
    const page = await services.list(req.org!.id, req.query);
    return { services: page.items, nextCursor: page.nextCursor };
  });

  app.post('/v1/orgs/:orgId/services', {
    config: { auth: 'developer', operation: 'services.create' },
    schema: {
      tags,
      summary: 'Create a service',
      description: SPEC_RULES,
      params: OrgParams,
      querystring: DryRunQuery,
      body: createServiceBody(deps.limits),
      response: { 201: tagOf(withLocation(ServiceSchema)), 200: { ...ServiceSchema, description: 'A dry run: the service it would create; nothing was' }, ...problems(409, 422) },
    },
  }, async (req, reply) => {
    const dryRun = req.query.dryRun === true;
    const service = await services.create(req.ctx, req.org!.id, req.body, dryRun);
    if (dryRun) return service;
    return created(reply, `/v1/orgs/${req.org!.id}/services/${service.id}`, tagged(reply, service));
  });

  app.get('/v1/orgs/:orgId/services/:svc', {
    config: { auth: 'viewer', operation: 'services.get' },
    schema: {
      tags,
      summary: 'Get a service by id or name, with its ETag',
      description: 'With `If-None-Match` naming the current version (weak comparison, or `*`), a 304 without a body; with `If-Match` naming none of its versions, a 412.',
      params: ServiceParams,
      headers: readHeaders('service'),
      response: { 200: tagOf(ServiceSchema), 304: tagOf(Type.Null({ description: 'Not modified: the service is still at a version If-None-Match names' })), ...problems(412) },
    },
  }, async (req, reply) => readAnswer(req, reply, 'service', await services.get(req.org!.id, req.params.svc)));

  app.patch('/v1/orgs/:orgId/services/:svc', {
    config: { auth: 'developer', operation: 'services.update' },
    schema: {
      tags,
      summary: 'Rename a service, change its description, or replace its spec',
      description: `\`spec\`, when given, replaces the whole spec. A change makes the version go up by one and appends \`service.updated\`; a patch that changes nothing (the same name, description and spec) makes neither. Honours If-Match: read the service, change it, and send its ETag back, so that a change made meanwhile by someone else is a 412 instead of lost. Deployments already created keep the spec they snapshotted. ${SPEC_RULES}`,
      params: ServiceParams,
      querystring: DryRunQuery,
      headers: IfMatchHeaders,
      body: updateServiceBody(deps.limits),
      response: { 200: tagOf(ServiceSchema), ...problems(409, 412, 422) },
    },
  }, async (req, reply) => {
    const dryRun = req.query.dryRun === true;
    const service = await services.update(req.ctx, req.org!.id, req.params.svc, req.body, { expected: preconditionsOf(req), dryRun });
    // A dry run's version is one that does not exist: no ETag to send back as If-Match.
    return dryRun ? service : tagged(reply, service);
  });

  app.delete('/v1/orgs/:orgId/services/:svc', {
    config: { auth: 'admin', operation: 'services.delete' },
    schema: {
      tags,
      summary: 'Delete a service and its finished deployments',
      description: 'Refused (409 `service_in_use`, listing them) while a deployment of it is queued or in progress: cancel those first. Also refused while it serves (an active, succeeded deployment), unless `force=true`: the runners then stop its processes, and the `service.deleted` event names those deployments (`stoppedServing`). Finished deployments and their logs are deleted with it; the event log keeps their record. Refused (409 `environment_locked`) while it serves in a locked environment, with `force=true` or without: what serves there stays until it is unlocked. Honours If-Match.',
      params: ServiceParams,
      querystring: DeleteServiceQuery,
      headers: IfMatchHeaders,
      response: { 204: { type: 'null', description: 'Deleted' }, ...problems(409, 412) },
    },
  }, async (req, reply) => {
    await services.remove(req.ctx, req.org!.id, req.params.svc, { force: req.query.force === true, expected: preconditionsOf(req) });
    return reply.code(204).send();
  });
}
