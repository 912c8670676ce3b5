import type { App } from '../../http/app-types.js';
import { created, withLocation } from '../../http/created.js';
import { problems } from '../../http/openapi.js';
import { CreateOrgBody, OrganizationSchema, OrgList, OrgParams, PageQuery, UpdateOrgBody } from './orgs.schemas.js';
import type { OrgsService } from './orgs.service.js';

export function orgsRoutes(app: App, deps: { orgs: OrgsService }): void {
  app.get('/v1/orgs', {
    config: { auth: 'member', operation: 'orgs.list' },
    schema: {
      tags: ['organizations'],
      summary: 'List the organizations the caller belongs to (every one, for an instance administrator)',
      querystring: PageQuery,
      response: { 200: OrgList },
    },
  }, async (req) => {
    const p = req.principal!;
    const page = await deps.orgs.list({ orgId: p.orgId, all: p.instanceAdmin }, req.query);
    return { orgs: page.items, nextCursor: page.nextCursor };
  });

  app.post('/v1/orgs', {
    config: { auth: 'instance-admin', operation: 'orgs.create' },
    schema: {
      tags: ['organizations'],
      summary: 'Create an organization (instance administrators only)',
      body: CreateOrgBody,
      response: { 201: withLocation(OrganizationSchema), ...problems(409) },
    },
  }, async (req, reply) => {
    const org = await deps.orgs.create(req.ctx, req.body);
    return created(reply, `/v1/orgs/${org.id}`, org);
  });

  app.get('/v1/orgs/:orgId', {
    config: { auth: 'member', operation: 'orgs.get' },
    schema: {
      tags: ['organizations'],
      summary: 'Get an organization by id or slug',
      params: OrgParams,
      response: { 200: OrganizationSchema },
    },
  }, async (req) => req.org!);

  app.patch('/v1/orgs/:orgId', {
    config: { auth: 'owner', operation: 'orgs.update' },
    schema: {
      tags: ['organizations'],
      summary: 'Rename an organization or change its slug',
      params: OrgParams,
      body: UpdateOrgBody,
      response: { 200: OrganizationSchema, ...problems(409) },
    },
  }, async (req) => deps.orgs.update(req.ctx, req.org!.id, req.body));

  app.delete('/v1/orgs/:orgId', {
    config: { auth: 'instance-admin', operation: 'orgs.delete' },
    schema: {
      tags: ['organizations'],
      summary: 'Delete an organization and everything it holds (instance administrators only)',
      description: 'In one transaction: its service users (their tokens refused from then on: at once on this node, within 5 s on the others, where a change into it meanwhile is refused with 404), secrets with every version\'s ciphertext and its data keys, environments, services, deployments and their logs, webhooks and their deliveries, and its event log. Refused with 409 `organization_in_use` while a deployment of it is queued, in progress or serving (cancel those, and delete its services or environments with `?force=true` so that its runners stop what they run) or while one of its runners is online (stop it: with its credentials gone it would keep running what it runs), and with 409 `organization_has_instance_admins` while it holds an instance administrator. Its slugs stay reserved: no other organization can take them. The deletion is recorded as `organization.deleted` in the caller\'s own organization.',
      params: OrgParams,
      response: { 204: { type: 'null', description: 'Deleted' }, ...problems(409) },
    },
  }, async (req, reply) => {
    await deps.orgs.remove(req.ctx, req.org!.id);
    return reply.code(204).send();
  });
}
