import type { App } from '../../http/app-types.js';
import { created, withLocation } from '../../http/created.js';
import { ifMatchHeaders, preconditionsOf, readAnswer, readHeaders, tagged, withEtag } from '../../http/etag-headers.js';
import { problems } from '../../http/openapi.js';
import { Type } from '@sinclair/typebox';
import { DryRunQuery, OrgParams, PageQuery } from '../../http/schemas.js';
import type { Limits } from '../../platform/config.js';
import { createEnvironmentBody, DeleteEnvironmentQuery, EnvironmentList, EnvironmentParams, EnvironmentSchema, LockEnvironmentBody, updateEnvironmentBody } from './environments.schemas.js';
import type { EnvironmentsService } from './environments.service.js';

const tags = ['environments'];
const IfMatchHeaders = ifMatchHeaders('environment');
const tagOf = <T extends object>(schema: T) => withEtag(schema, 'environment');
const HONOURS_IF_MATCH = 'Honours If-Match: read the environment, and send its ETag back, so that a change made meanwhile by someone else (a lock or an unlock included) is a 412 instead of lost.';

export function environmentsRoutes(app: App, deps: { environments: EnvironmentsService; limits: Limits }): void {
  const { environments, limits } = deps;

  app.get('/v1/orgs/:orgId/environments', {
    config: { auth: 'viewer', operation: 'environments.list' },
    schema: { tags, summary: 'List environments, oldest first', params: OrgParams, querystring: PageQuery, response: { 200: EnvironmentList } },
  }, async (req) => {
    const page = await environments.list(req.org!.id, req.query);
    return { environments: page.items, nextCursor: page.nextCursor };
  });

  app.post('/v1/orgs/:orgId/environments', {
    config: { auth: 'admin', operation: 'environments.create' },
    schema: {
      tags,
      summary: 'Create an environment',
      description: 'Names are unique in the organization. A `protected` environment accepts deployments from admins and owners only. `variables` and `secrets` are what every deployment into it gets besides its service\'s: the place for what differs between staging and production (a database URL, a secret of its own). Secret references are checked as a service\'s are (422 for an unknown secret or key, a variable exported twice, or PORT).',
      params: OrgParams,
      querystring: DryRunQuery,
      body: createEnvironmentBody(limits),
      response: { 201: tagOf(withLocation(EnvironmentSchema)), 200: { ...EnvironmentSchema, description: 'A dry run: the environment it would create; nothing was' }, ...problems(409, 422) },
    },
  }, async (req, reply) => {
    const dryRun = req.query.dryRun === true;
    const environment = await environments.create(req.ctx, req.org!.id, req.body, dryRun);
    return dryRun ? environment : created(reply, `/v1/orgs/${req.org!.id}/environments/${environment.id}`, tagged(reply, environment));
  });

  app.get('/v1/orgs/:orgId/environments/:env', {
    config: { auth: 'viewer', operation: 'environments.get' },
    schema: {
      tags,
      summary: 'Get an environment by id or name, with its ETag',
      description: 'With `If-None-Match` naming the current version (weak comparison, or `*`), a 304 without a body; with `If-Match` naming none of its versions, a 412.',
      params: EnvironmentParams,
      headers: readHeaders('environment'),
      response: { 200: tagOf(EnvironmentSchema), 304: tagOf(Type.Null({ description: 'Not modified: the environment is still at a version If-None-Match names' })), ...problems(412) },
    },
  }, async (req, reply) => readAnswer(req, reply, 'environment', await environments.get(req.org!.id, req.params.env)));

  app.patch('/v1/orgs/:orgId/environments/:env', {
    config: { auth: 'admin', operation: 'environments.update' },
    schema: {
      tags,
      summary: 'Rename an environment, change its description, protect or unprotect it, or replace its variables or secret references',
      description: `Existing deployments keep the environment name, variables and secret versions they were created with; the next deployment into it takes the new ones. A change makes the version go up by one; a patch that changes nothing makes no version and no event. ${HONOURS_IF_MATCH}`,
      params: EnvironmentParams,
      querystring: DryRunQuery,
      headers: IfMatchHeaders,
      body: updateEnvironmentBody(limits),
      response: { 200: tagOf(EnvironmentSchema), ...problems(409, 412, 422) },
    },
  }, async (req, reply) => {
    const dryRun = req.query.dryRun === true;
    const environment = await environments.update(req.ctx, req.org!.id, req.params.env, req.body, { expected: preconditionsOf(req), dryRun });
    // A dry run's version is one that does not exist: no ETag to send back as If-Match.
    return dryRun ? environment : tagged(reply, environment);
  });

  app.put('/v1/orgs/:orgId/environments/:env/lock', {
    config: { auth: 'admin', operation: 'environments.lock' },
    schema: {
      tags,
      summary: 'Lock an environment: no deployment into it until it is unlocked (a deploy freeze)',
      description: 'While it is locked, creating a deployment into it, rolling back to one of its deployments, promoting into it, deleting it and deleting a service that serves in it are refused for everyone (409 `environment_locked`, with `lock`), until an admin or owner unlocks it. What is queued or running in it when it is locked goes on (cancel it if it must not), and cancelling stays open. Locking it again with another `reason` says why anew (`environment.locked` again); with the same reason it changes nothing. Once this answers, no deployment into it is created, on any node. A lock makes the version go up by one. Honours If-Match.',
      params: EnvironmentParams,
      headers: IfMatchHeaders,
      body: LockEnvironmentBody,
      response: { 200: tagOf(EnvironmentSchema), ...problems(412) },
    },
  }, async (req, reply) => tagged(reply, await environments.lock(req.ctx, req.org!.id, req.params.env, req.body.reason, preconditionsOf(req))));

  app.delete('/v1/orgs/:orgId/environments/:env/lock', {
    config: { auth: 'admin', operation: 'environments.unlock' },
    schema: {
      tags,
      summary: 'Unlock an environment',
      description: 'Deployments into it are taken again. An environment that is not locked is answered as it is, with no event. An unlock makes the version go up by one. Honours If-Match.',
      params: EnvironmentParams,
      headers: IfMatchHeaders,
      response: { 200: tagOf(EnvironmentSchema), ...problems(412) },
    },
  }, async (req, reply) => tagged(reply, await environments.unlock(req.ctx, req.org!.id, req.params.env, preconditionsOf(req))));

  app.delete('/v1/orgs/:orgId/environments/:env', {
    config: { auth: 'admin', operation: 'environments.delete' },
    schema: {
      tags,
      summary: 'Delete an environment and its finished deployments',
      description: 'Refused (409 `environment_in_use`, listing them) while a deployment into it is queued or in progress: cancel those first. Also refused while a service serves in it (an active, succeeded deployment), unless `force=true`: the runners then stop what runs there, and the `environment.deleted` event names those deployments (`stoppedServing`). Finished deployments and their logs are deleted with it; the event log keeps their record. A locked environment is not deleted (409 `environment_locked`): unlock it first. Honours If-Match.',
      params: EnvironmentParams,
      querystring: DeleteEnvironmentQuery,
      headers: IfMatchHeaders,
      response: { 204: { type: 'null', description: 'Deleted' }, ...problems(409, 412) },
    },
  }, async (req, reply) => {
    await environments.remove(req.ctx, req.org!.id, req.params.env, { force: req.query.force === true, expected: preconditionsOf(req) });
    return reply.code(204).send();
  });
}
