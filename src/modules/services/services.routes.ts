import type { App } from '../../http/app-types.js';
import { created, withLocation } from '../../http/created.js';
import { problems } from '../../http/openapi.js';
import { OrgParams, PageQuery } from '../../http/schemas.js';
import type { Limits } from '../../platform/config.js';
import { createServiceBody, DeleteServiceQuery, ServiceList, ServiceParams, ServiceSchema, updateServiceBody } from './services.schemas.js';
import type { ServicesService } from './services.service.js';

const tags = ['services'];
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
      body: createServiceBody(deps.limits),
      response: { 201: withLocation(ServiceSchema), ...problems(409, 422) },
    },
  }, async (req, reply) => {
    const service = await services.create(req.ctx, req.org!.id, req.body);
    return created(reply, `/v1/orgs/${req.org!.id}/services/${service.id}`, service);
  });

  app.get('/v1/orgs/:orgId/services/:svc', {
    config: { auth: 'viewer', operation: 'services.get' },
    schema: { tags, summary: 'Get a service by id or name', params: ServiceParams, response: { 200: ServiceSchema } },
  }, async (req) => services.get(req.org!.id, req.params.svc));

  app.patch('/v1/orgs/:orgId/services/:svc', {
    config: { auth: 'developer', operation: 'services.update' },
    schema: {
      tags,
      summary: 'Rename a service, change its description, or replace its spec',
      description: `\`spec\`, when given, replaces the whole spec; the version goes up by one. Deployments already created keep the spec they snapshotted. ${SPEC_RULES}`,
      params: ServiceParams,
      body: updateServiceBody(deps.limits),
      response: { 200: ServiceSchema, ...problems(409, 422) },
    },
  }, async (req) => services.update(req.ctx, req.org!.id, req.params.svc, req.body));

  app.delete('/v1/orgs/:orgId/services/:svc', {
    config: { auth: 'admin', operation: 'services.delete' },
    schema: {
      tags,
      summary: 'Delete a service and its finished deployments',
      description: 'Refused (409 `service_in_use`, listing them) while a deployment of it is queued or in progress: cancel those first. Also refused while it serves (an active, succeeded deployment), unless `force=true`: the runners then stop its processes. Finished deployments and their logs are deleted with it; the event log keeps their record.',
      params: ServiceParams,
      querystring: DeleteServiceQuery,
      response: { 204: { type: 'null', description: 'Deleted' }, ...problems(409) },
    },
  }, async (req, reply) => {
    await services.remove(req.ctx, req.org!.id, req.params.svc, { force: req.query.force === true });
    return reply.code(204).send();
  });
}
