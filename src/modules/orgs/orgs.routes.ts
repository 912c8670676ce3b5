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
}
