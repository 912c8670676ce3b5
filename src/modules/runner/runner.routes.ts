import type { App } from '../../http/app-types.js';
import { problems } from '../../http/openapi.js';
import { noStore, OrgParams } from '../../http/schemas.js';
import {
  AbandonRequest, AdoptRequest, AdoptResponse, AppendLogsRequest, AppendLogsResponse, ClaimRequest, ClaimResponse, CompleteRequest, CompleteResponse, HeartbeatRequest,
  HeartbeatResponse, ReleaseRequest, ReleaseResponse, RUNNER_ROUTES, RunnerDeploymentParams, ServingRequest, ServingResponse,
} from './runner.protocol.js';
import { keptByReference } from '../idempotency/idempotency.schemas.js';
import { assertServingReport, type RunnerService } from './runner.service.js';
import type { RunnersService } from './runners.service.js';
import type { FastifyRequest } from 'fastify';
import type { RequestContext } from '../../platform/context.js';

const tags = ['runner'];
const FENCED = 'Carries the claim\'s `leaseToken`. A runner that no longer holds the lease gets 409 `lease_lost`; a cancelled deployment 409 `deployment_cancelled`; either way nothing changes, and the runner stops working on it.';

export function runnerRoutes(app: App, deps: { runner: RunnerService; runners: Pick<RunnersService, 'seen' | 'present' | 'stopped'>; issuer: string }): void {
  const { runner, runners } = deps;

  /** The caller, saying whether the external issuer vouches for it (then it has no service user here to be kept to environments). */
  function caller(req: FastifyRequest): RequestContext {
    return req.principal!.issuer === deps.issuer ? req.ctx : { ...req.ctx, actor: { ...req.ctx.actor, external: true } };
  }

  /** A call of a runner that names itself: it is there (see runners.service.ts). */
  async function sighted(req: FastifyRequest, body: { host?: string | undefined; environments?: string[] | undefined; hostname?: string | undefined; version?: string | undefined } | null | undefined): Promise<void> {
    if (body?.host === undefined) return;
    await runners.seen(req.ctx, req.org!.id, { host: body.host, environments: body.environments, hostname: body.hostname, version: body.version, address: req.ip ?? null });
  }

  // Which deployment each claim handed out, under which lease (null: none), for its Idempotency-Key.
  const claims = keptByReference<{ id: string; leaseToken: string } | null>((req, kept) =>
    kept === null ? Promise.resolve(undefined) : runner.claimAgain(caller(req), req.org!.id, kept.id, kept.leaseToken));

  app.post(RUNNER_ROUTES.claim, {
    config: {
      auth: 'runner',
      operation: 'runner.claim',
      // What a claim hands out carries secret values, which are never kept: only which deployment
      // under which lease. A retry whose first answer was lost gets them again (see claimAgain).
      idempotent: claims.idempotent,
    },
    schema: {
      tags,
      summary: 'Claim the oldest claimable deployment (long poll)',
      description: 'Waits up to `waitSeconds` for a queued deployment of the given environments whose service and environment have nothing in progress or queued before it, and takes it: 200 with the deployment, a lease (with its fencing token) and what to run, secret values resolved; 204 when none came in time. ' +
        'The answer carries secret values: it is `Cache-Control: no-store` and is never logged. A waiting claim is woken when a deployment is created. ' +
        'With an Idempotency-Key, a retry whose first answer was lost gets the same deployment and lease again (the values are resolved again, never kept), while that lease is held; 409 `lease_lost` or `deployment_finished` once it is not.',
      params: OrgParams,
      body: ClaimRequest,
      response: { 200: noStore(ClaimResponse), 204: noStore({ type: 'null', description: 'Nothing to claim within `waitSeconds`; claim again.' }) },
    },
  }, async (req, reply) => {
    // A runner that hangs up stops waiting, so it is not handed a deployment it will never see.
    const gone = new AbortController();
    reply.raw.on('close', () => { if (!reply.raw.writableFinished) gone.abort(); });
    // A runner disabled, deleted or revoked while it waits is not handed a deployment either. It is
    // seen once its environments are found its own: a claim refused for them records no runner.
    const claimed = await runner.claim(caller(req), req.org!.id, req.body, gone.signal, () => req.reauthenticate(), () => sighted(req, req.body));
    // Still there after a long wait (written only if the wait was long). What the claim took is
    // handed out whatever becomes of this: failing it now would leave a deployment under a lease
    // nobody was told of, until it runs out.
    await sighted(req, req.body).catch((err: unknown) => req.log.warn({ err }, 'recording that a runner is there failed'));
    reply.header('cache-control', 'no-store');
    claims.note(req, claimed === null ? null : { id: claimed.deployment.id, leaseToken: claimed.lease.token });
    if (claimed === null) return reply.code(204).send();
    return claimed;
  });

  app.post(RUNNER_ROUTES.heartbeat, {
    config: { auth: 'runner', operation: 'runner.heartbeat' },
    schema: {
      tags,
      summary: 'Renew the lease on a claimed deployment',
      description: FENCED,
      params: RunnerDeploymentParams,
      body: HeartbeatRequest,
      response: { 200: HeartbeatResponse, ...problems(409) },
    },
  }, async (req) => runner.heartbeat(req.org!.id, req.params.id, req.body.leaseToken));

  app.post(RUNNER_ROUTES.logs, {
    config: { auth: 'runner', operation: 'runner.appendLogs' },
    schema: {
      tags,
      summary: 'Append log lines to a claimed deployment',
      description: `Lines are stored in the order sent, after every line already stored, each with the next sequence number; the lease is renewed. ${FENCED}`,
      params: RunnerDeploymentParams,
      body: AppendLogsRequest,
      response: { 200: AppendLogsResponse, ...problems(409) },
    },
  }, async (req) => runner.appendLogs(req.ctx, req.org!.id, req.params.id, req.body));

  app.post(RUNNER_ROUTES.complete, {
    config: { auth: 'runner', operation: 'runner.complete' },
    schema: {
      tags,
      summary: 'Complete a claimed deployment: succeeded or failed',
      description: `A success supersedes the deployment that served before it in that environment. Repeating the same completion with the same token answers the deployment again. ${FENCED}`,
      params: RunnerDeploymentParams,
      body: CompleteRequest,
      response: { 200: CompleteResponse, ...problems(409) },
    },
  }, async (req) => runner.complete(req.ctx, req.org!.id, req.params.id, req.body.leaseToken, req.body.outcome, req.body.reason));

  app.post(RUNNER_ROUTES.abandon, {
    config: { auth: 'runner', operation: 'runner.abandon' },
    schema: {
      tags,
      summary: 'Give a claimed deployment back before completing it (a runner that stops)',
      description: 'Ends the attempt at once, as its lease running out would: the deployment is queued again with attempt + 1 for another runner '
        + '(or failed once SLIPWAY_DEPLOYMENT_MAX_ATTEMPTS are spent), its `reason` says that its runner gave it back and quotes `reason`, and a waiting claim is woken. '
        + `The runner stops what it started for it first. ${FENCED}`,
      params: RunnerDeploymentParams,
      body: AbandonRequest,
      response: { 200: CompleteResponse, ...problems(409) },
    },
  }, async (req) => runner.abandon(req.ctx, req.org!.id, req.params.id, req.body.leaseToken, req.body.reason));

  app.post(RUNNER_ROUTES.serving, {
    // A question, not a change: nothing to replay.
    config: { auth: 'runner', operation: 'runner.serving', idempotent: false },
    schema: {
      tags,
      summary: 'Which of these succeeded deployments still serve',
      description: 'A runner asks this about the deployments whose processes it runs, every few seconds. The others were superseded (by a deployment this or another runner carried out) or deleted with their service or environment: the runner stops their processes. Ids that are not deployments of this organization are simply not serving. '
        + 'With `host`, it also says that it runs them (they are not orphans); one that another runner has adopted is not answered, and its process here is to stop. '
        + 'With `processes`, it says how each process is doing: the deployment shows it as `process`, and a report of new exits appends a `deployment.process_exited` event. `processes` need `host`, and name each deployment once (otherwise 400, and nothing is recorded).',
      params: OrgParams,
      body: ServingRequest,
      response: { 200: ServingResponse },
    },
  }, async (req) => {
    assertServingReport(req.body);
    // It says nothing of itself here: what its claims said stays.
    if (req.body.host !== undefined) await runners.present(req.ctx, req.org!.id, req.body.host, req.ip ?? null);
    return { serving: await runner.serving(caller(req), req.org!.id, req.body) };
  });

  app.post(RUNNER_ROUTES.adopt, {
    // The answer carries secret values, like a claim's: never kept.
    config: { auth: 'runner', operation: 'runner.adopt', idempotent: false },
    schema: {
      tags,
      summary: 'Adopt serving deployments whose runner went away',
      description: 'An orphan is a succeeded deployment, in one of the given environments, whose runner has not reported it (with `host`) for SLIPWAY_RUNNER_HOST_TIMEOUT_SECONDS or released it. Each is handed to one runner: it is that runner\'s from now on, with what to run (secret values resolved, `Cache-Control: no-store`), and the runner starts it again. Its state does not change; each adoption appends a `deployment.adopted` event.',
      params: OrgParams,
      body: AdoptRequest,
      response: { 200: noStore(AdoptResponse) },
    },
  }, async (req, reply) => {
    const adopted = await runner.adopt(caller(req), req.org!.id, req.body, () => sighted(req, req.body));
    reply.header('cache-control', 'no-store');
    return adopted;
  });

  app.post(RUNNER_ROUTES.release, {
    // Releasing again changes nothing more: nothing to replay.
    config: { auth: 'runner', operation: 'runner.release', idempotent: false },
    schema: {
      tags,
      summary: 'Let go of serving deployments (a runner that stops)',
      description: 'A runner that stops its processes says so: those of the deployments that were its own (`host`) and serve, in environments it is kept to, become orphans at once, for another runner, or this one when it starts again, to adopt. With `stopping: true` the runner process also says it stops: the runners list shows it offline from now on (`stoppedAt`).',
      params: OrgParams,
      body: ReleaseRequest,
      response: { 200: ReleaseResponse },
    },
  }, async (req) => {
    const released = await runner.release(req.ctx, req.org!.id, req.body.deployments, req.body.host);
    if (req.body.stopping === true) await runners.stopped(req.ctx, req.org!.id, req.body.host);
    return { released };
  });
}
