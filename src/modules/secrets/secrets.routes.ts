import type { App } from '../../http/app-types.js';
import { problems } from '../../http/openapi.js';
import { OrgParams } from '../../http/schemas.js';
import type { Limits } from '../../platform/config.js';
import { bulkBodySchema, SecretList } from './secrets.schemas.js';
import type { SecretsService } from './secrets.service.js';

export function secretsRoutes(app: App, deps: { secrets: SecretsService; limits: Limits }): void {
  app.post('/v1/orgs/:orgId/secrets', {
    config: { auth: 'developer', operation: 'secrets.bulkCreate' },
    schema: {
      tags: ['secrets'],
      summary: 'Bulk create organization secrets: all or nothing, in request order, version 1',
      description: 'Creates every secret in the request or none of them. A name that already exists in the organization (even a deleted secret awaiting purge) or a name given twice fails the whole batch; the problem lists every offending item. The response lists key names only, never values.',
      params: OrgParams,
      body: bulkBodySchema(deps.limits),
      response: { 201: SecretList, ...problems(409) },
    },
  }, async (req, reply) => {
    const secrets = await deps.secrets.bulkCreate(req.ctx, req.org!.id, req.body.secrets);
    reply.code(201);
    return { secrets };
  });
}
