// The secrets collection and one secret: list, bulk create, bulk upsert, read, replace, patch and
// delete. Versions, reveal and restore are in secret-versions.routes.ts.
import { Type } from '@sinclair/typebox';
import type { App } from '../../http/app-types.js';
import { problems } from '../../http/openapi.js';
import { DryRunQuery, OrgParams } from '../../http/schemas.js';
import type { Limits } from '../../platform/config.js';
import { errors } from '../../platform/errors.js';
import { allows } from '../auth/roles.js';
import { readAnswer } from '../../http/etag-headers.js';
import { IfMatchHeaders, preconditionsOf, ReadHeaders, tagged, withEtag } from './secret-http.js';
import { secretVersionsRoutes } from './secret-versions.routes.js';
import {
  bulkBodySchema, DeleteQuery, patchBodySchema, replaceBodySchema, SecretChange, SecretList, SecretListQuery, SecretMetadata,
  SecretPage, SecretParams, UpsertList,
} from './secrets.schemas.js';
import type { SecretsService } from './secrets.service.js';

const tags = ['secrets'];

const UNCHANGED = 'When the values come out identical to the current ones, no version is made: the answer is 200 with the current metadata and `"result": "unchanged"`.';

export function secretsRoutes(app: App, deps: { secrets: SecretsService; limits: Limits }): void {
  const { secrets, limits } = deps;

  app.get('/v1/orgs/:orgId/secrets', {
    config: { auth: 'viewer', operation: 'secrets.list' },
    schema: {
      tags,
      summary: 'List secrets (metadata only), by name',
      description: 'Names, versions, key names and timestamps, never values; ordered by name, cursor-paginated. `prefix` narrows to names that start with it. `deleted=true` lists deleted secrets that can still be restored, with `deletedAt` and `restorableUntil`, instead of the live ones.',
      params: OrgParams,
      querystring: SecretListQuery,
      response: { 200: SecretPage },
    },
  }, async (req) => {
    const page = await secrets.list(req.org!.id, req.query);
    return { secrets: page.items, nextCursor: page.nextCursor };
  });

  app.post('/v1/orgs/:orgId/secrets', {
    config: { auth: 'developer', operation: 'secrets.bulkCreate' },
    schema: {
      tags,
      summary: 'Bulk create organization secrets: all or nothing, in request order, version 1',
      description: 'Creates every secret in the request or none of them. A name that already exists in the organization (even a deleted secret awaiting purge) or a name given twice fails the whole batch, and one problem lists every offending item: names given twice in `errors` (400 `duplicate_names`), taken names in `conflicts`, each with its `state` (`exists` or `deleted`; 409 `secret_exists`, or `secret_deleted` when every taken name is a deleted secret). The response lists key names only, never values.',
      params: OrgParams,
      body: bulkBodySchema(limits),
      response: { 201: SecretList, ...problems(409) },
    },
  }, async (req, reply) => {
    const created = await secrets.bulkCreate(req.ctx, req.org!.id, req.body.secrets);
    reply.code(201);
    return { secrets: created };
  });

  app.put('/v1/orgs/:orgId/secrets', {
    config: { auth: 'developer', operation: 'secrets.bulkUpsert' },
    schema: {
      tags,
      summary: 'Bulk upsert: create the missing secrets, make new versions of the changed ones',
      description: 'The bulk-create body; one transaction. Each result item, in request order, says `created` (version 1), `updated` (a new version) or `unchanged` (values identical: no version made). A name that belongs to a deleted secret still within its retention window fails the whole batch with 409 `secret_deleted` (restore it or delete it permanently first). This is what a `.env` import uses.',
      params: OrgParams,
      querystring: DryRunQuery,
      body: bulkBodySchema(limits),
      response: { 200: UpsertList, ...problems(409) },
    },
  }, async (req) => ({ secrets: await secrets.upsert(req.ctx, req.org!.id, req.body.secrets, req.query.dryRun === true) }));

  app.get('/v1/orgs/:orgId/secrets/:name', {
    config: { auth: 'viewer', operation: 'secrets.get' },
    schema: {
      tags,
      summary: 'Get one secret\'s metadata, with its ETag',
      description: 'Never values (see `POST …/reveal`). A deleted secret is a 404 with code `secret_deleted` that says until when it can be restored. With `If-None-Match` naming the current version (weak comparison, or `*`), a 304 without a body; with `If-Match` naming none of its versions, a 412.',
      params: SecretParams,
      headers: ReadHeaders,
      response: { 200: withEtag(SecretMetadata), 304: withEtag(Type.Null({ description: 'Not modified: the secret is still at a version If-None-Match names' })), ...problems(412) },
    },
  }, async (req, reply) => readAnswer(req, reply, 'secret', await secrets.get(req.org!.id, req.params.name)));

  app.put('/v1/orgs/:orgId/secrets/:name', {
    config: { auth: 'developer', operation: 'secrets.replace' },
    schema: {
      tags,
      summary: 'Replace a secret\'s values (a new version)',
      description: `The secret must exist (create it with POST or the bulk PUT). Keys not in \`values\` are dropped. Honours If-Match. ${UNCHANGED}`,
      params: SecretParams,
      headers: IfMatchHeaders,
      body: replaceBodySchema(limits),
      response: { 200: withEtag(SecretChange), ...problems(409, 412) },
    },
  }, async (req, reply) => tagged(reply, await secrets.replace(req.ctx, req.org!.id, req.params.name, req.body.values, preconditionsOf(req))));

  app.patch('/v1/orgs/:orgId/secrets/:name', {
    config: { auth: 'developer', operation: 'secrets.patch' },
    schema: {
      tags,
      summary: 'Set some keys and remove others (a new version)',
      description: `\`set\` gives keys their new values, \`unset\` removes keys (one that is not there is ignored, so a retry does the same); a key cannot be in both, and the result must keep at least one key and at most SLIPWAY_MAX_KEYS_PER_SECRET (${limits.keysPerSecret}). Honours If-Match. ${UNCHANGED}`,
      params: SecretParams,
      headers: IfMatchHeaders,
      body: patchBodySchema(limits),
      response: { 200: withEtag(SecretChange), ...problems(409, 412) },
    },
  }, async (req, reply) => tagged(reply, await secrets.patch(req.ctx, req.org!.id, req.params.name, req.body, preconditionsOf(req))));

  app.delete('/v1/orgs/:orgId/secrets/:name', {
    config: { auth: 'developer', operation: 'secrets.delete' },
    schema: {
      tags,
      summary: 'Delete a secret: restorable by default, or permanently (`?permanent=true`: admin and owner only)',
      description: 'Without `permanent`: the secret leaves lists and reads, keeps its name and every version, and an admin can restore it for SLIPWAY_SECRET_RETENTION_DAYS; then it is purged (its versions destroyed, its name freed). Queued deployments that pinned one of its versions still resolve it until then. With `permanent=true` (admin or owner only; also on an already deleted secret): the secret and every version\'s ciphertext are removed at once and the name is free (on SQLite no copy stays in the database files; on PostgreSQL the tables are vacuumed, but the bytes may linger in their pages and write-ahead log until overwritten, and in backups; they open only with the organization\'s data key, which its other secrets keep). Only a permanent delete and the purge free a name. Honours If-Match.',
      params: SecretParams,
      querystring: DeleteQuery,
      headers: IfMatchHeaders,
      response: { 204: { type: 'null', description: 'Deleted' }, ...problems(409, 412) },
    },
  }, async (req, reply) => {
    const permanent = req.query.permanent === true;
    const principal = req.principal!;
    if (permanent && !allows('admin', principal.role, principal.instanceAdmin)) throw errors.roleTooLow('admin', principal.role);
    await secrets.remove(req.ctx, req.org!.id, req.params.name, { permanent, expected: preconditionsOf(req) });
    return reply.code(204).send();
  });

  secretVersionsRoutes(app, { secrets });
}
