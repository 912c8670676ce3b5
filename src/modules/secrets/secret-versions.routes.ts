// A secret's history and values: list and read versions, reveal values (admin, audited), and
// restore (undelete, or bring back an earlier version's values as a new version).
import type { App } from '../../http/app-types.js';
import { problems } from '../../http/openapi.js';
import { noStore, optionalBody, PageQuery } from '../../http/schemas.js';
import { keptByReference } from '../idempotency/idempotency.schemas.js';
import { IfMatchHeaders, preconditionsOf, tagged, withEtag } from './secret-http.js';
import { RevealedSecret, SecretParams, SecretRestore, SecretVersion, SecretVersionPage, SecretVersionParams, VersionBody } from './secrets.schemas.js';
import type { SecretsService } from './secrets.service.js';

const tags = ['secrets'];

/** `{ "version"?: n }` bodies are optional: a bare POST means "no version". */
async function emptyBodyIsEmptyObject(req: { body: unknown }): Promise<void> {
  if (req.body === undefined || req.body === null) req.body = {};
}

export function secretVersionsRoutes(app: App, deps: { secrets: SecretsService }): void {
  const { secrets } = deps;
  /**
   * What each reveal showed, kept by reference for its Idempotency-Key: the version, and the secret
   * it belongs to (a replay does not read one created since under its name).
   */
  const revealed = keptByReference<{ secretId: string; version: number }>(async (req, { secretId, version }) => {
    const { name } = req.params as { name: string };
    req.log.info({ secret: name, version }, 'a reveal replayed for its Idempotency-Key');
    return secrets.revealAgain(req.org!.id, name, secretId, version);
  });

  app.get('/v1/orgs/:orgId/secrets/:name/versions', {
    config: { auth: 'viewer', operation: 'secrets.listVersions' },
    schema: {
      tags,
      summary: 'List a secret\'s versions, newest first (metadata only)',
      description: 'Each version\'s number, key names, when and by whom it was made. Numbers run from 1 without gaps.',
      params: SecretParams,
      querystring: PageQuery,
      response: { 200: SecretVersionPage },
    },
  }, async (req) => {
    const page = await secrets.listVersions(req.org!.id, req.params.name, req.query);
    return { versions: page.items, nextCursor: page.nextCursor };
  });

  app.get('/v1/orgs/:orgId/secrets/:name/versions/:version', {
    config: { auth: 'viewer', operation: 'secrets.getVersion' },
    schema: { tags, summary: 'Get one version\'s metadata', params: SecretVersionParams, response: { 200: SecretVersion } },
  }, async (req) => secrets.getVersion(req.org!.id, req.params.name, req.params.version));

  app.post('/v1/orgs/:orgId/secrets/:name/reveal', {
    config: {
      auth: 'admin',
      operation: 'secrets.reveal',
      // The values are never kept: a retry with the same key reveals the same version again, and
      // its one event stays the first reveal's.
      idempotent: revealed.idempotent,
    },
    preValidation: emptyBodyIsEmptyObject,
    schema: {
      tags,
      summary: 'Reveal the values of the current or a given version (admin, owner; audited)',
      description: 'The only response that carries secret values (besides what a runner is handed to run: its claim, its adoption). Answered with `Cache-Control: no-store`; every reveal appends a `secret.revealed` event naming who revealed which version. With an Idempotency-Key, a retry reveals the same version again without a second event; the values are never kept (only the version number is).',
      params: SecretParams,
      headers: {
        type: 'object',
        properties: {
          'if-match': { type: 'string', description: 'Reveal only if the secret is still at this version (its ETag, a bare version, a list, or `*`); otherwise 412 and no event.' },
          'if-none-match': { type: 'string', description: 'Reveal only if the secret is not at any of these versions (weak comparison); otherwise 412.' },
        },
      },
      body: optionalBody(VersionBody),
      response: { 200: noStore(RevealedSecret), ...problems(412) },
    },
  }, async (req, reply) => {
    const answer = await secrets.reveal(req.ctx, req.org!.id, req.params.name, req.body?.version, preconditionsOf(req));
    revealed.note(req, { secretId: answer.secretId, version: answer.revealed.version });
    reply.header('cache-control', 'no-store').header('pragma', 'no-cache');
    return answer.revealed;
  });

  app.post('/v1/orgs/:orgId/secrets/:name/restore', {
    config: { auth: 'admin', operation: 'secrets.restore' },
    preValidation: emptyBodyIsEmptyObject,
    schema: {
      tags,
      summary: 'Undelete a secret, or restore an earlier version\'s values (admin, owner)',
      description: 'Without `version`: brings back a deleted secret exactly as it was (`"result": "restored"`), within SLIPWAY_SECRET_RETENTION_DAYS of its deletion; 409 `secret_not_deleted` if it is not deleted. With `version`: makes a new version holding that version\'s values (`"result": "updated"`), or none if they are the current values (`"result": "unchanged"`); honours If-Match.',
      params: SecretParams,
      headers: IfMatchHeaders,
      body: optionalBody(VersionBody),
      response: { 200: withEtag(SecretRestore), ...problems(409, 412) },
    },
  }, async (req, reply) => {
    const { name } = req.params;
    const version = req.body?.version;
    const result = version === undefined
      ? await secrets.undelete(req.ctx, req.org!.id, name, preconditionsOf(req))
      : await secrets.restoreVersion(req.ctx, req.org!.id, name, version, preconditionsOf(req));
    return tagged(reply, result);
  });
}
