import type { App } from '../../http/app-types.js';
import { created, withLocation } from '../../http/created.js';
import { problems } from '../../http/openapi.js';
import { noStore, OrgParams, PageQuery } from '../../http/schemas.js';
import {
  ClientSecretParams, CreatedServiceUser, CreateServiceUserBody, NewClientSecret, ServiceUserList, ServiceUserParams,
  ServiceUserSchema, UpdateServiceUserBody,
} from './service-users.schemas.js';
import { keptByReference } from '../idempotency/idempotency.schemas.js';
import type { ServiceUsersService } from './service-users.service.js';

const tags = ['service users'];
// Who may manage whom, stated once for every route that changes a service user.
const WHO_MAY = 'Admins manage service users up to admin; only owners create, change or remove owners (and their secrets); '
  + 'only instance administrators change instance administrators, who act as owners in every organization. '
  + 'An organization keeps at least one enabled owner (409 `last_owner`).';

export function serviceUsersRoutes(app: App, deps: { serviceUsers: ServiceUsersService }): void {
  const { serviceUsers } = deps;

  /**
   * The answers that hand out a client secret, kept whole (sealed, as every kept answer) for an
   * Idempotency-Key, but replayed only to a caller who may still manage that service user: one
   * demoted since, or whose service user was deleted, gets the refusal the route would give now.
   */
  const handedOut = keptByReference<{ body: unknown; user: string }>(async (req, kept) => {
    await serviceUsers.assertMayStillManage(req.ctx, req.org!.id, kept.user);
    return kept.body;
  });

  app.get('/v1/orgs/:orgId/service-users', {
    config: { auth: 'admin', operation: 'serviceUsers.list' },
    schema: { tags, summary: 'List service users', params: OrgParams, querystring: PageQuery, response: { 200: ServiceUserList } },
  }, async (req) => {
    const page = await serviceUsers.list(req.org!.id, req.query);
    return { serviceUsers: page.items, nextCursor: page.nextCursor };
  });

  app.post('/v1/orgs/:orgId/service-users', {
    config: { auth: 'admin', operation: 'serviceUsers.create', idempotent: handedOut.idempotent },
    schema: {
      tags,
      summary: 'Create a service user; the client secret is returned once',
      description: `The response carries \`clientId\`, \`clientSecret\`, \`tokenUrl\`, \`scope\`, \`orgId\` and \`baseUrl\`; the secret is never shown again (only a keyed hash is kept). ${WHO_MAY}`,
      params: OrgParams,
      body: CreateServiceUserBody,
      response: { 201: noStore(withLocation(CreatedServiceUser)), ...problems(409) },
    },
  }, async (req, reply) => {
    const user = await serviceUsers.create(req.ctx, req.org!.id, req.body);
    handedOut.note(req, { body: user, user: user.id });
    // On the answer that carries the secret only: a refusal carries none.
    reply.header('cache-control', 'no-store');
    return created(reply, `/v1/orgs/${req.org!.id}/service-users/${user.id}`, user);
  });

  app.get('/v1/orgs/:orgId/service-users/:id', {
    config: { auth: 'admin', operation: 'serviceUsers.get' },
    schema: { tags, summary: 'Get a service user by id or name', params: ServiceUserParams, response: { 200: ServiceUserSchema } },
  }, async (req) => serviceUsers.get(req.org!.id, req.params.id));

  app.patch('/v1/orgs/:orgId/service-users/:id', {
    config: { auth: 'admin', operation: 'serviceUsers.update' },
    schema: {
      tags,
      summary: 'Rename, change the role of, disable or enable a service user',
      description: `Disabling refuses new tokens and the service user's live tokens at once. ${WHO_MAY}`,
      params: ServiceUserParams,
      body: UpdateServiceUserBody,
      response: { 200: ServiceUserSchema, ...problems(409) },
    },
  }, async (req) => serviceUsers.update(req.ctx, req.org!.id, req.params.id, req.body));

  app.delete('/v1/orgs/:orgId/service-users/:id', {
    config: { auth: 'admin', operation: 'serviceUsers.delete' },
    schema: { tags, summary: 'Delete a service user; its tokens stop working', description: WHO_MAY, params: ServiceUserParams, response: { 204: { type: 'null', description: 'Deleted' }, ...problems(409) } },
  }, async (req, reply) => {
    await serviceUsers.remove(req.ctx, req.org!.id, req.params.id);
    return reply.code(204).send();
  });

  app.post('/v1/orgs/:orgId/service-users/:id/secrets', {
    config: { auth: 'admin', operation: 'serviceUsers.addSecret', idempotent: handedOut.idempotent },
    schema: {
      tags,
      summary: 'Add a second client secret (rotation); the existing one stays valid until removed',
      description: 'At most two live secrets (409 `too_many_client_secrets` lists them); the new secret is shown once.',
      params: ServiceUserParams,
      response: { 201: noStore(NewClientSecret), ...problems(409) },
    },
  }, async (req, reply) => {
    const { serviceUserId, ...secret } = await serviceUsers.addSecret(req.ctx, req.org!.id, req.params.id);
    reply.code(201).header('cache-control', 'no-store');
    // By id: a service user renamed since is still the one whose secret this is.
    handedOut.note(req, { body: secret, user: serviceUserId });
    return secret;
  });

  app.delete('/v1/orgs/:orgId/service-users/:id/secrets/:secretId', {
    config: { auth: 'admin', operation: 'serviceUsers.removeSecret' },
    schema: { tags, summary: 'Remove a client secret', params: ClientSecretParams, response: { 204: { type: 'null', description: 'Removed' }, ...problems(409) } },
  }, async (req, reply) => {
    await serviceUsers.removeSecret(req.ctx, req.org!.id, req.params.id, req.params.secretId);
    return reply.code(204).send();
  });
}
