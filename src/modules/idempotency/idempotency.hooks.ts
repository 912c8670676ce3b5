// Idempotency-Key on every POST of the API, as route hooks: after authentication (the key belongs
// to the caller) and validation, before the handler. Requests without the header pay one header
// lookup and one WeakMap lookup: the hooks are callback-style, so they answer at once instead of
// through a promise and a microtask turn. Other routes pay nothing.
import type { FastifyReply, FastifyRequest, HookHandlerDoneFunction, RouteOptions } from 'fastify';
import type { App } from '../../http/app-types.js';
import { errors } from '../../platform/errors.js';
import { IDEMPOTENCY_HEADER, isIdempotentRoute, REPLAYED_HEADER, type ReplayedByReference } from './idempotency.schemas.js';
import type { Claim, IdempotencyService } from './idempotency.service.js';

/** Response headers a replay repeats; the rest (request id, rate limits) belong to each request. */
const REPLAYED_HEADERS = ['content-type', 'location', 'etag', 'cache-control', 'pragma'] as const;

/** The route's rule for keeping an answer with this status by reference: for its 2xx answers only. */
function referenceFor(byReference: ReplayedByReference | undefined, status: number): ReplayedByReference | undefined {
  return status >= 200 && status < 300 ? byReference : undefined;
}

/** The serialized response as sent (or its reference); null for a stream, which cannot be kept. */
function bytesOf(req: FastifyRequest, payload: unknown, status: number, byReference: ReplayedByReference | undefined): Buffer | null {
  const kept = referenceFor(byReference, status);
  if (kept !== undefined) return kept.reference(req);
  if (typeof payload === 'string') return Buffer.from(payload, 'utf8');
  if (Buffer.isBuffer(payload)) return payload;
  if (payload === null || payload === undefined) return Buffer.alloc(0);
  return null;
}

function replayedHeaders(reply: FastifyReply): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name of REPLAYED_HEADERS) {
    const value = reply.getHeader(name);
    if (value !== undefined) out[name] = String(value);
  }
  return out;
}

export function registerIdempotency(app: App, deps: { idempotency: IdempotencyService }): void {
  const { idempotency } = deps;
  const claims = new WeakMap<FastifyRequest, { claim: Claim; release: () => void }>();

  function admitting(byReference: ReplayedByReference | undefined) {
    return function admit(req: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction): void {
      const key = req.headers[IDEMPOTENCY_HEADER];
      // A dry run writes nothing, so there is nothing to replay: it runs every time.
      if (typeof key !== 'string' || (req.query as { dryRun?: unknown } | undefined)?.dryRun === true) return done();
      // Node joins a header sent twice into one value ("a, b"): that would be a third key.
      if ((req.raw.headersDistinct?.[IDEMPOTENCY_HEADER]?.length ?? 1) > 1) {
        throw errors.invalidRequest('Idempotency-Key is sent more than once; send one key per request.', [{ pointer: '/headers/idempotency-key', message: 'is sent more than once' }]);
      }
      admitKeyed(req, reply, key, byReference).then(() => done(), done);
    };
  }

  /** Runs the request under its key, or replays the first response (after which Fastify goes no further). */
  async function admitKeyed(req: FastifyRequest, reply: FastifyReply, key: string, byReference: ReplayedByReference | undefined): Promise<void> {
    const preconditions = { ifMatch: req.headers['if-match'], ifNoneMatch: req.headers['if-none-match'] };
    const admission = await idempotency.admit({ subject: req.principal!.subject, key, method: req.method, path: req.url, body: req.body, preconditions, requestId: req.id });
    if (admission.kind === 'execute') {
      // Renewed until the response is recorded: the request runs on when its client goes away (and
      // that client's retry is exactly what must wait for it).
      claims.set(req, { claim: admission.claim, release: idempotency.hold(admission.claim) });
      // The handler's change marks the key committed in its own transaction (see appendEvents).
      req.ctx = { ...req.ctx, idempotency: admission.claim };
      return;
    }
    const { status, headers, body } = admission.response;
    const kept = referenceFor(byReference, status);
    // Made again from what was kept before anything of the first answer is set: one the route
    // refuses now (its resource gone, the caller's role lowered) is that refusal, fresh, without
    // the first answer's Location or the mark of a replay.
    const replayed = kept === undefined ? null : await kept.replay(req, body);
    reply.code(status).headers({ ...headers, [REPLAYED_HEADER]: 'true' });
    reply.send(kept === undefined ? body : serializedAsFirst(reply, replayed));
  }

  /**
   * A made-again answer serialized as the first one was; one kept by an older Slipway whose
   * response has gained a required field since is sent as it was made, rather than failing every
   * retry with a 500 for as long as the key lives.
   */
  function serializedAsFirst(reply: FastifyReply, replayed: unknown): unknown {
    try {
      return reply.serialize(replayed);
    } catch {
      return JSON.stringify(replayed);
    }
  }

  function recording(byReference: ReplayedByReference | undefined) {
    return function record(req: FastifyRequest, reply: FastifyReply, payload: unknown, done: (err: Error | null, payload?: unknown) => void): void {
      const held = claims.get(req);
      if (held === undefined) return done(null, payload);
      claims.delete(req);
      held.release();
      recordKeyed(req, reply, held.claim, bytesOf(req, payload, reply.statusCode, byReference)).then(() => done(null, payload), done);
    };
  }

  async function recordKeyed(req: FastifyRequest, reply: FastifyReply, claim: Claim, body: Buffer | null): Promise<void> {
    try {
      if (body === null) {
        req.log.warn('a streamed response cannot be replayed; its idempotency key is freed');
        await idempotency.abandon(claim);
      } else if (!(await idempotency.finish(claim, { status: reply.statusCode, headers: replayedHeaders(reply), body }, { retryAfter: reply.getHeader('retry-after') !== undefined }))) {
        req.log.warn('the idempotency key was taken over before this request finished; its response is not kept');
      }
    } catch (err) {
      // The response still goes out; the key stays in progress until the lock timeout frees it.
      req.log.warn({ err }, 'recording the idempotent response failed');
    }
  }

  /**
   * Backstop for a response that went out without onSend having recorded it: the hold stops with
   * the response. (A request whose response never goes out keeps renewing until the hold's cap.)
   */
  function ended(req: FastifyRequest, _reply: FastifyReply, done: HookHandlerDoneFunction): void {
    claims.get(req)?.release();
    done();
  }

  app.addHook('onRoute', (route: RouteOptions) => {
    if (!isIdempotentRoute(route)) return;
    const byReference = route.config?.idempotent || undefined;
    // First among the route's own preHandlers, so nothing with an effect runs before a replay.
    route.preHandler = [admitting(byReference), ...[route.preHandler ?? []].flat()] as RouteOptions['preHandler'];
    route.onSend = [...[route.onSend ?? []].flat(), recording(byReference)] as RouteOptions['onSend'];
    route.onResponse = [...[route.onResponse ?? []].flat(), ended] as RouteOptions['onResponse'];
  });
}
