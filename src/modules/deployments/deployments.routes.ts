import type { App } from '../../http/app-types.js';
import { created, withLocation } from '../../http/created.js';
import { problems } from '../../http/openapi.js';
import { OrgParams } from '../../http/schemas.js';
import type { Limits } from '../../platform/config.js';
import { EnvironmentParams } from '../environments/environments.schemas.js';
import {
  ActiveQuery, CancelBody, createDeploymentBody, DeploymentList, DeploymentListQuery, DeploymentParams, DeploymentSchema, LogPage, LogQuery,
  promoteBody, RollbackBody,
} from './deployments.schemas.js';
import type { DeploymentsService } from './deployments.service.js';

const tags = ['deployments'];

export function deploymentsRoutes(app: App, deps: { deployments: DeploymentsService; limits: Limits }): void {
  const { deployments } = deps;

  app.post('/v1/orgs/:orgId/deployments', {
    config: { auth: 'developer', operation: 'deployments.create' },
    schema: {
      tags,
      summary: 'Deploy a service into an environment',
      description: 'Queues a deployment of the service (id or name) into the environment (id or name). It snapshots the service\'s spec with the environment\'s `variables` and `secrets` laid over it (the environment\'s plain variables over the service\'s, its secret references besides the service\'s) and the request\'s `variables` over both, and pins each referenced secret to its current version; later changes to the service, the environment or the secrets do not change it. ' +
        'A protected environment takes deployments from admins and owners only (403 `environment_protected`). A locked environment (a deploy freeze) takes none, whoever asks: 409 `environment_locked`, whose `lock` says why, by whom and since when. A secret the spec or the environment names that no longer exists is 422 `unknown_secrets`, a key that no longer exists 422 `unknown_secret_reference`; a variable that would be set twice is 422 `variable_conflict`, its `errors` pointing at the later of the two: `/variables/NAME` when one of `variables` meets what a secret exports, `/environment/…` when the environment\'s configuration meets the service\'s, and into the service (`/service/spec/secrets/N`) when its own references now clash. PORT, the runner\'s, is 422 `reserved_variable`: in `variables`, or exported by a secret of the service or the environment that has gained a PORT key since it was saved. Over SLIPWAY_MAX_SPEC_BYTES or the variables bound, 400 `limit_exceeded` points at `/service`, `/environment` or `/variables`, whichever puts it over.',
      params: OrgParams,
      body: createDeploymentBody(deps.limits),
      response: { 201: withLocation(DeploymentSchema), ...problems(409, 422) },
    },
  }, async (req, reply) => {
    const deployment = await deployments.create(req.ctx, req.org!.id, req.body);
    return created(reply, `/v1/orgs/${req.org!.id}/deployments/${deployment.id}`, deployment);
  });

  app.get('/v1/orgs/:orgId/deployments', {
    config: { auth: 'viewer', operation: 'deployments.list' },
    schema: {
      tags,
      summary: 'List deployments, newest first, by service, environment and state',
      params: OrgParams,
      querystring: DeploymentListQuery,
      response: { 200: DeploymentList },
    },
  }, async (req) => {
    const page = await deployments.list(req.org!.id, req.query);
    return { deployments: page.items, nextCursor: page.nextCursor };
  });

  app.get('/v1/orgs/:orgId/deployments/:id', {
    config: { auth: 'viewer', operation: 'deployments.get' },
    schema: { tags, summary: 'Get a deployment', params: DeploymentParams, response: { 200: DeploymentSchema } },
  }, async (req) => deployments.get(req.org!.id, req.params.id));

  app.post('/v1/orgs/:orgId/deployments/:id/cancel', {
    config: { auth: 'developer', operation: 'deployments.cancel' },
    schema: {
      tags,
      summary: 'Cancel a queued or in-progress deployment',
      description: 'A runner working on it gets 409 `deployment_cancelled` at its next call and stops. Any other state is 409 `invalid_transition`, listing the transitions the deployment still has. In a protected environment only admins and owners cancel (403 `environment_protected`).',
      params: DeploymentParams,
      body: CancelBody,
      response: { 200: DeploymentSchema, ...problems(409) },
    },
  }, async (req) => deployments.cancel(req.ctx, req.org!.id, req.params.id, req.body?.reason));

  app.post('/v1/orgs/:orgId/deployments/:id/rollback', {
    config: { auth: 'developer', operation: 'deployments.rollback' },
    schema: {
      tags,
      summary: 'Roll back to an earlier succeeded deployment',
      description: 'Queues a new deployment with that deployment\'s snapshot: the same spec, revision and secret versions. The target must have succeeded (it may have been superseded since); otherwise 409 `not_rollbackable`. Protected environments need admin or owner; while its environment is locked (a deploy freeze), it is 409 `environment_locked` for everyone. ' +
        'A pinned secret version that no longer exists (its secret deleted permanently, or purged after its retention window; a soft-deleted secret\'s versions still resolve) is 422 `secret_versions_gone`, listing each as `name@version` in `missing`, and nothing is queued: deploy the service again instead, which pins the secrets\' current versions.',
      params: DeploymentParams,
      body: RollbackBody,
      response: { 201: withLocation(DeploymentSchema), ...problems(409, 422) },
    },
  }, async (req, reply) => {
    const deployment = await deployments.rollback(req.ctx, req.org!.id, req.params.id, req.body ?? {});
    return created(reply, `/v1/orgs/${req.org!.id}/deployments/${deployment.id}`, deployment);
  });

  app.post('/v1/orgs/:orgId/deployments/:id/promote', {
    config: { auth: 'developer', operation: 'deployments.promote' },
    schema: {
      tags,
      summary: 'Promote a succeeded deployment into another environment',
      description: 'Queues a deployment of the same service into `environment` with what the deployment being promoted took from its service: the spec and its version, the revision, the versions its service\'s secret references pinned, and its own `variables` (the request\'s laid over them). What it took from its environment is left behind: the target environment\'s `variables` and `secrets` are laid over it and pinned to their current versions, as for a deployment made there. So what was tried in one environment runs in the next, with that environment\'s configuration. ' +
        'The deployment must have succeeded (it may have been superseded since); otherwise, or when it was made by a Slipway that did not record which parts of its spec were its environment\'s, 409 `not_promotable`. Promoting into its own environment is 400 `invalid_request` (roll back to it instead). The target environment\'s protection applies (403 `environment_protected`), and so does its lock (409 `environment_locked`, for everyone). A carried-over secret version that no longer exists is 422 `secret_versions_gone`; the target environment\'s configuration is checked as for a new deployment (422 `unknown_secrets`, `unknown_secret_reference`, `variable_conflict`, `reserved_variable`; 400 `limit_exceeded`).',
      params: DeploymentParams,
      body: promoteBody(deps.limits),
      response: { 201: withLocation(DeploymentSchema), ...problems(409, 422) },
    },
  }, async (req, reply) => {
    const deployment = await deployments.promote(req.ctx, req.org!.id, req.params.id, req.body);
    return created(reply, `/v1/orgs/${req.org!.id}/deployments/${deployment.id}`, deployment);
  });

  app.get('/v1/orgs/:orgId/deployments/:id/logs', {
    config: { auth: 'viewer', operation: 'deployments.logs' },
    schema: {
      tags,
      summary: 'Read a deployment\'s log, in order, a page at a time',
      description: 'Lines carry a sequence number across attempts. To follow a running deployment, pass the returned `nextAfter` as `after` until `state` is final and `hasMore` is false.',
      params: DeploymentParams,
      querystring: LogQuery,
      response: { 200: LogPage },
    },
  }, async (req) => deployments.logs(req.org!.id, req.params.id, req.query));

  app.get('/v1/orgs/:orgId/environments/:env/active', {
    config: { auth: 'viewer', operation: 'environments.active' },
    schema: {
      tags: ['environments', ...tags],
      summary: 'What is deployed in an environment: the succeeded deployment of each service',
      description: 'One deployment per service: the latest that succeeded (older ones are `superseded`), ordered by service id, so a service deployed again while a client pages through the list keeps its place. Services never deployed here are absent.',
      params: EnvironmentParams,
      querystring: ActiveQuery,
      response: { 200: DeploymentList },
    },
  }, async (req) => {
    const page = await deployments.active(req.org!.id, req.params.env, req.query);
    return { deployments: page.items, nextCursor: page.nextCursor };
  });
}
