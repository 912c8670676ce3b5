// Builds the Fastify server: the HTTP contract shared by every route (request ids, access log,
// problems, 404/405, authentication and the organization check, rate limits, OpenAPI), then the
// feature modules' routes.
import { randomUUID } from 'node:crypto';
import { maxHeaderSize, type IncomingMessage, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { performance } from 'node:perf_hooks';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import Fastify, { LogController, type FastifyInstance, type FastifyReply, type FastifyRequest, type HookHandlerDoneFunction } from 'fastify';
import underPressure from '@fastify/under-pressure';
import FindMyWay from 'find-my-way';
import { routePrefix } from '../platform/config.js';
import { NO_METRICS, type Metrics } from '../platform/metrics.js';
import { accessLogWriter, RequestLogger, type AccessLine, type Logger } from '../platform/logging.js';
import { byDesign, errors, pointerSegment } from '../platform/errors.js';
import { parseIfMatch } from '../platform/etags.js';
import { allows, type Access } from '../modules/auth/roles.js';
import type { Principal } from '../modules/auth/principal.js';
import type { TokenVerifier } from '../modules/auth/token-verifier.js';
import type { OrgsService } from '../modules/orgs/orgs.service.js';
import type { Organization } from '../modules/orgs/orgs.schemas.js';
import type { App } from './app-types.js';
import { bearerCredentials } from './bearer.js';
import { clientErrorResponse, createErrorHandler, expectationFailedResponse, pathOf, rawProblemResponse, sendError } from './error-handler.js';
import { registerJsonParser } from './json-body.js';
import { createValidatorCompiler } from './validators.js';
import { isWriteMethod, registerOpenApi, type OpenApiOptions } from './openapi.js';
import type { RateLimiter } from './rate-limit.js';
import { endOfTurn } from './end-of-turn.js';
import { loadReadings } from './load-readings.js';
import { ANONYMOUS_ACTOR_ID } from '../platform/context.js';
import { ORG_PARAM_MAX } from './schemas.js';

export interface ServerDeps {
  logger: Logger;
  bodyLimit: number;
  /** Peers whose X-Forwarded-For gives the client's address (`req.ip`); see Config.trustProxy. */
  trustProxy: false | number | string[];
  verifier: TokenVerifier;
  orgs: OrgsService;
  apiLimiter: RateLimiter;
  /** Mean event-loop delay, ms, past which requests are refused with 503 (0: never). */
  maxEventLoopDelayMs: number;
  openapi: OpenApiOptions;
  /** Ready when the database answers; false, or why not. */
  ready: () => Promise<boolean | string>;
  /** What each response counts in (SLIPWAY_METRICS_ADDRESS); none by default. */
  metrics?: Metrics;
  /** Tests pass this to fail on a status a route did not declare. */
  onUndeclaredStatus?: (route: string, status: number) => void;
}

/**
 * One access-log line per request, written when the response has gone out (Fastify's own
 * "incoming"/"completed" pair is two lines and logs the whole request object).
 */
class AccessLog extends LogController {
  constructor(private readonly write: (line: AccessLine) => void, private readonly completed: (req: FastifyRequest) => void, private readonly metrics: Metrics) {
    super({ requestIdLogLabel: 'requestId' });
  }

  override incomingRequest(): void {}

  /** The responses that finished, whose lines are written. */
  readonly #finished = new WeakSet<ServerResponse>();

  override requestCompleted(error: Error | null | undefined, req: FastifyRequest, reply: FastifyReply): void {
    this.#finished.add(reply.raw);
    this.completed(req);
    this.record(error, req, reply, reply.statusCode);
  }

  /**
   * A response closed. One that did not finish (the client closed the connection first: a runner's
   * long poll given up, a client's timeout, a body never sent in full) is never reported finished:
   * its line is written here, with nginx's 499 ("client closed request"), whatever the server was
   * about to answer.
   */
  responseClosed(req: FastifyRequest, reply: FastifyReply): void {
    if (this.#finished.has(reply.raw)) return;
    this.record(null, req, reply, CLIENT_CLOSED_REQUEST);
  }

  private record(error: Error | null | undefined, req: FastifyRequest, reply: FastifyReply, status: number): void {
    const elapsed = reply.elapsedTime;
    const route = req.routeOptions.url;
    this.metrics.request(req.method, route, status, elapsed / 1000);
    const line = {
      requestId: req.id,
      method: req.method,
      route: route ?? null,
      path: pathOf(req.url),
      status,
      ms: Math.round(elapsed * 10) / 10,
      ip: req.ip,
      sub: req.principal?.subject,
    };
    if (error === null || error === undefined) return this.write(line);
    const { requestId: _bound, ...fields } = line; // the request's logger carries it
    req.log.error({ ...fields, err: { message: error.message } }, 'request failed');
  }
}

/** nginx's status for a request whose client went away before its response was complete; no response carries it. */
const CLIENT_CLOSED_REQUEST = 499;
const MAX_PATH_PARAMETER = 512;
/** At shutdown, how long a connection that has sent part of a request's headers has to send the rest. */
const UNFINISHED_REQUEST_GRACE_MS = 1_000;
const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;
/** The event-loop delay is sampled every second: a retry after two finds a fresh reading. */
const OVERLOAD_SAMPLE_MS = 1_000;
const OVERLOAD_RETRY_SECONDS = 2;
/** Refusals for overload this far apart are two episodes, each said in the log. */
const OVERLOAD_EPISODE_GAP_MS = 10_000;
const ANONYMOUS = { id: ANONYMOUS_ACTOR_ID, kind: 'service_user' as const, orgId: null, role: null, instanceAdmin: false };
/** RFC 6750 §2.1 b64token. */
const TOKEN68 = /^[A-Za-z0-9._~+/-]+=*$/;

function checkRole(access: Access, principal: Principal): void {
  if (!allows(access, principal.role, principal.instanceAdmin)) throw errors.roleTooLow(access, principal.role);
}

function admitToOrg(req: FastifyRequest, access: Access, principal: Principal, orgParam: string, org: Organization | null): void {
  if (org === null || (org.id !== principal.orgId && !principal.instanceAdmin)) throw errors.notFound('organization', orgParam);
  req.org = org;
  return checkRole(access, principal);
}

/** Headers that hold one value: sent twice, Node keeps the first (or joins them), where a proxy in front may have read the last. */
const ONE_VALUE_HEADERS = ['host', 'authorization', 'content-type', 'x-request-id'] as const;

/** Refuses a request without Host (HTTP/1.1 requires one) or with a one-value header sent twice (RFC 9110 §5.3). */
function assertHeadersOnce(req: FastifyRequest): void {
  const raw = req.raw;
  if (raw.headers.host === undefined && raw.httpVersion === '1.1') {
    throw errors.invalidRequest('An HTTP/1.1 request must have a Host header; send one.', [{ pointer: '/headers/host', message: 'is required' }]);
  }
  // Each header once (the common case): as many names as header lines.
  let names = 0;
  for (const _name in raw.headers) names++;
  if (names * 2 === raw.rawHeaders.length) return;
  const distinct = raw.headersDistinct;
  for (const name of ONE_VALUE_HEADERS) {
    if ((distinct[name]?.length ?? 0) > 1) {
      throw errors.invalidRequest(`The ${name} header is sent more than once; it holds one value: send it once.`, [{ pointer: `/headers/${name}`, message: 'is sent more than once' }]);
    }
  }
}

function trustNearest(hops: number): (address: string, hop: number) => boolean {
  return (_address, hop) => hop < hops;
}

/** Refuses a query with a percent-encoding that is not UTF-8, naming the parameter when its name can be read. */
function assertQueryEncoding(query: string): void {
  const decodes = (text: string) => {
    try {
      decodeURIComponent(text);
      return true;
    } catch {
      return false;
    }
  };
  if (decodes(query)) return;
  for (const pair of query.split('&')) {
    if (decodes(pair)) continue;
    const at = pair.indexOf('=');
    const name = at < 0 ? pair : pair.slice(0, at);
    throw errors.malformedQuery(decodes(name) ? decodeURIComponent(name.replace(/\+/g, ' ')) : null);
  }
  throw errors.malformedQuery(null);
}

export async function buildServer(deps: ServerDeps, registerRoutes: (app: App) => Promise<void> | void): Promise<App> {
  // Requests under way on each connection (from their headers to their response): at shutdown, a
  // connection with none that has begun to send one is not left to hold the process (see preClose).
  const underWay = new WeakMap<Socket, number>();
  const accessLog = new AccessLog(accessLogWriter(deps.logger), (req) => {
    const socket = req.raw.socket;
    const n = underWay.get(socket);
    // A request the router refused never counted itself in (no onRequest): it does not count out.
    if (n !== undefined && n > 0) underWay.set(socket, n - 1);
  }, deps.metrics ?? NO_METRICS);
  const app = Fastify({
    loggerInstance: deps.logger,
    // One access-log line per request, written by our onResponse hook.
    logController: accessLog,
    childLoggerFactory: (logger, bindings) => new RequestLogger(logger as Logger, bindings) as unknown as Logger,
    bodyLimit: deps.bodyLimit,
    // A hop count is the function Fastify would make of it (its types take no number).
    trustProxy: typeof deps.trustProxy === 'number' ? trustNearest(deps.trustProxy) : deps.trustProxy,
    requestIdHeader: false,
    // A caller's X-Request-Id is kept when it is a sane token, so it can follow a call across services.
    genReqId: (req) => {
      const given = req.headers['x-request-id'];
      return typeof given === 'string' && REQUEST_ID.test(given) ? given : randomUUID();
    },
    // Secret, service and environment names are at most 128 characters: a parameter can be longer
    // than Fastify's default of 100 and, percent-encoded, longer still.
    routerOptions: { maxParamLength: MAX_PATH_PARAMETER },
    // What the router itself refuses (a parameter past that length, a malformed escape) is a
    // problem like every other refusal, with the request id the onRequest hook would have set.
    frameworkErrors: (error, req, reply) => {
      reply.header('x-request-id', req.id);
      // Fastify does not follow these responses to their end: the access-log line is ours to write.
      reply.raw.once('finish', () => accessLog.requestCompleted(null, req, reply));
      const problem = error.code === 'FST_ERR_MAX_PARAM_LENGTH' ? errors.pathSegmentTooLong(MAX_PATH_PARAMETER) : errors.malformedPath(pathOf(req.url));
      return sendError(problem, req, reply);
    },
    // Fastify's answers to these are plain JSON, not problems; ours come from the hook and handler below.
    return503OnClosing: false,
    clientErrorHandler: (error: Error & { code?: string }, socket) => {
      // A connection reset leaves nobody to answer.
      if (error.code === 'ECONNRESET' || socket.destroyed) return;
      const requestId = randomUUID();
      const { status, raw } = clientErrorResponse(error, requestId, maxHeaderSize);
      // Only the parser's code: the raw packet Fastify's own handler logs (at trace) can hold a
      // bearer token and a body of secret values.
      deps.logger.debug({ requestId, status, code: error.code }, 'malformed request refused');
      if (socket.writable) socket.write(raw);
      socket.destroy();
    },
    forceCloseConnections: 'idle',
    // Node answers a request without Host with a bare 400 before any hook sees it; ours says why (below).
    http: { requireHostHeader: false },
  }).withTypeProvider<TypeBoxTypeProvider>() as unknown as App;

  app.decorate('publicBaseUrl', deps.openapi.baseUrl.replace(/\/+$/, ''));
  // The health checks and the API reference are the API's, under the base URL's path as it is.
  const apiPrefix = routePrefix(deps.openapi.baseUrl);
  const docs = `${apiPrefix}/docs`;
  app.setValidatorCompiler(createValidatorCompiler());
  app.decorateRequest('principal', null);
  app.decorateRequest('org', null);
  // A method, not a per-request closure: only a long poll calls it, and every request would pay for one.
  app.decorateRequest('reauthenticate', async function reauthenticate(this: FastifyRequest): Promise<void> {
    const access = this.routeOptions.config?.auth;
    const token = bearerCredentials(this.headers.authorization ?? '');
    if (access === undefined || token === null) throw errors.missingToken();
    const now = await deps.verifier.verify(token);
    if (now.subject !== this.principal?.subject) throw errors.invalidToken('The access token no longer names the same caller.');
    // An external issuer's organization may have been linked elsewhere meanwhile.
    if (this.org !== null && now.orgId !== this.org.id && !now.instanceAdmin) throw errors.notFound('organization', this.org.slug);
    checkRole(access, now);
  });
  app.decorateRequest('ctx', null as never);
  app.removeContentTypeParser('text/plain');
  registerJsonParser(app);

  app.setErrorHandler(createErrorHandler(deps.bodyLimit));

  // 404 for paths we do not have, 405 (with Allow) for paths we have under other methods, and
  // OPTIONS (RFC 9110 §9.3.7) answered with Allow on every path we have.
  const shadow = FindMyWay();
  const noop = () => {};
  app.addHook('onRoute', (route) => {
    if (route.url === '*' || route.url.startsWith(docs)) return;
    for (const method of [route.method].flat()) if (method !== 'HEAD') {
      try { shadow.on(method as 'GET', route.url, noop); } catch { /* already known */ }
    }
  });
  app.setNotFoundHandler((req, reply) => {
    const path = pathOf(req.url);
    const allowed = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'].filter((m) => m !== req.method && shadow.find(m as 'GET', path) !== null);
    // Fastify answers HEAD wherever it answers GET.
    if (allowed[0] === 'GET') allowed.splice(1, 0, 'HEAD');
    if (allowed.length > 0) allowed.push('OPTIONS');
    if (req.method === 'OPTIONS' && allowed.length > 0) return reply.code(204).header('allow', allowed.join(', ')).send();
    return sendError(allowed.length ? errors.methodNotAllowed(req.method, path, allowed) : errors.routeNotFound(req.method, path, `${app.publicBaseUrl}/openapi.json`), req, reply);
  });

  // Once closing, a response in flight ends its connection: a keep-alive client would otherwise hold
  // the server open until its keep-alive timeout, past the shutdown grace period. A request that
  // arrives meanwhile (on a connection that was busy) is refused with 503: a load balancer retries
  // it on another node.
  let closing = false;
  /** Where the API's routes begin: the public base URL's path, then /v1/ (`/api/v1/` under `http://h/api`). */
  const apiRoot = `${new URL(app.publicBaseUrl).pathname.replace(/\/+$/, '')}/v1/`;

  app.addHook('onRequest', (req, reply, done) => {
    const socket = req.raw.socket;
    underWay.set(socket, (underWay.get(socket) ?? 0) + 1);
    // A response that closes unfinished is never reported finished: its access-log line is written here.
    reply.raw.once('close', () => accessLog.responseClosed(req, reply));
    reply.header('x-request-id', req.id);
    req.ctx = { requestId: req.id, actor: ANONYMOUS };
    if (closing) throw byDesign(errors.unavailable('This server is shutting down; retry (on another node, or on this one once it is back).'));
    if (req.url.includes('%00')) throw errors.nulCharacter('The URL');
    assertHeadersOnce(req);
    // A fragment is the client's own: sent, the path and the query would each read it differently.
    if (req.url.includes('#')) {
      throw errors.invalidRequest('The request target has a fragment (`#…`), which a client keeps to itself and never sends: remove it, or write a # that belongs to a name as %23.', [{ pointer: '', message: 'has a fragment' }]);
    }
    // The query parser reads a malformed escape as it is (`?service=caf%E9` would look for "caf%E9"),
    // where the router refuses one in the path: the query's is refused the same way.
    const query = req.url.indexOf('?');
    if (query >= 0 && req.url.includes('%', query)) assertQueryEncoding(req.url.slice(query + 1));
    const headers = req.headers;
    // No body (neither a length nor chunks): a Content-Type describes nothing (`curl -d ''`, clients
    // that always send a form type) and is dropped, so an operation that takes no body goes on.
    if (headers['content-type'] !== undefined && headers['transfer-encoding'] === undefined && (headers['content-length'] === undefined || headers['content-length'] === '0')) {
      delete headers['content-type'];
    }
    // An empty path segment (a trailing slash, `//`) names nothing under the API: no id is empty.
    const path = pathOf(req.url);
    if ((path.endsWith('/') || path.includes('//')) && path.startsWith(apiRoot)) {
      throw errors.routeNotFound(req.method, path, `${app.publicBaseUrl}/openapi.json`, 'an empty path segment (a trailing slash, or two slashes together) names nothing; remove it');
    }
    done();
  });

  // Overloaded (the event loop lags behind by more than the setting, on average over the last
  // second): refuse new requests with 503 and Retry-After rather than let every request queue
  // until its client times out. Liveness keeps answering; readiness says 503, so a load balancer
  // sends traffic elsewhere until the node catches up. Readings taken while the server starts, or
  // right after it was stopped for a while, measure no load (load-readings.ts).
  if (deps.maxEventLoopDelayMs > 0) {
    const readings = loadReadings(OVERLOAD_SAMPLE_MS);
    let lastRefusal = -Infinity;
    app.addHook('onListen', (done) => { readings.listening(); done(); });
    const sampling = setInterval(() => readings.sample(), OVERLOAD_SAMPLE_MS);
    sampling.unref();
    app.addHook('onClose', (_app, done) => { clearInterval(sampling); done(); });
    await app.register(underPressure, {
      maxEventLoopDelay: deps.maxEventLoopDelayMs,
      sampleInterval: OVERLOAD_SAMPLE_MS,
      pressureHandler: (_req, _reply, _type, value) => {
        if (!readings.measureLoad()) return undefined;
        const now = performance.now();
        // A reading with no sample in it: the loop did not turn once in the whole second.
        const lag = value === undefined || !Number.isFinite(value) ? `more than ${OVERLOAD_SAMPLE_MS} ms` : `${Math.round(value)} ms`;
        // Said once as the refusals begin, not once per refusal: each is in the access log and the metrics.
        if (now - lastRefusal > OVERLOAD_EPISODE_GAP_MS) deps.logger.warn({ lag, maxEventLoopDelayMs: deps.maxEventLoopDelayMs }, `overloaded: refusing new requests with 503 while the event loop lags ${lag} behind`);
        lastRefusal = now;
        return Promise.reject(byDesign(errors.unavailable(
          `The server is overloaded (its event loop lags ${lag} behind, above SLIPWAY_MAX_EVENT_LOOP_DELAY_MS); retry later.`, OVERLOAD_RETRY_SECONDS)));
      },
    });
  }

  /**
   * Admits a verified caller: its rate limit, the organization of the path (anything but the
   * caller's own is a 404, never a 403), the route's role. Waits only for an organization this node
   * does not remember.
   */
  const admit = (req: FastifyRequest, reply: FastifyReply, access: Access, principal: Principal): Promise<void> | void => {
    req.principal = principal;
    req.ctx = {
      requestId: req.id,
      actor: { id: principal.subject, kind: 'service_user', orgId: principal.orgId, role: principal.role, instanceAdmin: principal.instanceAdmin },
    };
    const decision = deps.apiLimiter.hit(principal.subject);
    reply.headers(decision.headers);
    if (!decision.allowed) throw errors.rateLimited(decision.resetSeconds);
    const orgParam = (req.params as { orgId?: string }).orgId;
    if (orgParam === undefined) return checkRole(access, principal);
    // Refused as its schema would (admission runs before validation), not looked up as a name.
    if (orgParam.length > ORG_PARAM_MAX) {
      throw errors.invalidRequest(`The request is not valid: /params/orgId must NOT have more than ${ORG_PARAM_MAX} characters.`, [{ pointer: '/params/orgId', message: `must NOT have more than ${ORG_PARAM_MAX} characters` }]);
    }
    const org = deps.orgs.known(orgParam);
    if (org !== undefined) return admitToOrg(req, access, principal, orgParam, org);
    return deps.orgs.find(orgParam).then((found) => admitToOrg(req, access, principal, orgParam, found));
  };

  // Authentication is a hook of the routes that declare `auth`, so public routes pay nothing for it.
  // A callback hook rather than an async one: a token this node has seen, with its subject and
  // organization remembered, is admitted without a promise or a microtask (the common case).
  app.addHook('onRoute', (route) => {
    const access = route.config?.auth;
    if (access === undefined) return;
    const authenticate = (req: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction): void => {
      const header = req.headers.authorization;
      if (header === undefined) throw errors.missingToken();
      const token = bearerCredentials(header);
      const malformed = () => errors.invalidToken('The Authorization header must be "Bearer <access token>".');
      if (token === null) {
        // Another scheme (Basic, say) is no bearer token at all; the scheme is not repeated, in case a token was sent without one.
        if (!/^bearer(\s|$)/i.test(header)) throw errors.missingToken('This API takes an access token as `Authorization: Bearer <token>`; the Authorization header sent uses another scheme.');
        throw malformed();
      }
      // A token this node has verified before is well-formed: only a new one needs the format check.
      const principal = deps.verifier.known(token);
      if (principal === undefined && !TOKEN68.test(token)) throw malformed();
      const admitted = principal === undefined
        ? deps.verifier.verify(token).then((verified) => admit(req, reply, access, verified))
        : admit(req, reply, access, principal);
      if (admitted instanceof Promise) admitted.then(() => done(), done);
      else done();
    };
    route.onRequest = [route.onRequest ?? []].flat().concat(authenticate);
  });

  // API reads answer together: a read's handler result waits for the end of the event loop's turn
  // (the check phase, once the poll phase has handled what arrived), and the reads answered in
  // that turn are written one right after another. Written one at a time, between other
  // requests' work, each response's write(2) has to wake its client afresh; in a burst, most find
  // it awake, and under concurrent load a read costs about a fifth less (bench/RESULTS.md). An idle
  // server adds nothing: the check phase follows the poll phase at once. Writes already answer
  // together, when their group commit completes; a handler that sent its reply itself is not held.
  const turnEnds = endOfTurn();
  app.addHook('onRoute', (route) => {
    if (route.config?.auth === undefined || ![route.method].flat().includes('GET')) return;
    const handler = route.handler;
    route.handler = async function (this: FastifyInstance, req: FastifyRequest, reply: FastifyReply) {
      const value: unknown = await handler.call(this, req, reply);
      if (value !== reply) await turnEnds();
      return value;
    };
  });

  // An API operation takes only the query parameters it declares: a misspelt one (`?limt=5`) is a
  // 400 that names it, as an unknown body field is, not a request answered as if it had not been sent.
  app.addHook('onRoute', (route) => {
    if (route.config?.auth === undefined) return;
    const schema = (route.schema ??= {}) as { querystring?: Record<string, unknown> };
    if (schema.querystring !== undefined && schema.querystring.type !== 'object') throw new Error(`${route.url}: a query schema must be one object (Type.Composite, not Type.Intersect), to refuse what it does not name`);
    schema.querystring = { type: 'object', properties: {}, ...schema.querystring, additionalProperties: false };
  });

  // An operation that takes no body refuses one rather than ignore it: `{"permanent": true}` sent to
  // a DELETE would otherwise be answered 204 for a restorable delete. An empty object says nothing
  // and passes, for clients that always send one.
  app.addHook('onRoute', (route) => {
    const schema = route.schema as { body?: unknown; querystring?: { properties?: Record<string, unknown> } } | undefined;
    if (route.config?.auth === undefined || !isWriteMethod(route.method) || schema?.body !== undefined) return;
    const options = Object.keys(schema?.querystring?.properties ?? {});
    const takesNone = (body: unknown) => errors.invalidRequest(
      `This operation takes no request body${options.length > 0 ? `; its options are query parameters (${options.join(', ')})` : ''}. Send it without one.`,
      // The fields of an object are named, as any unknown field is; anything else is the body itself.
      body !== null && typeof body === 'object' && !Array.isArray(body)
        ? Object.keys(body).map((key) => ({ pointer: `/${pointerSegment(key)}`, message: 'is not a known field' }))
        : [{ pointer: '', message: 'is not taken by this operation' }]);
    const noBody = (req: FastifyRequest, _reply: FastifyReply, done: HookHandlerDoneFunction): void => {
      const body = req.body;
      if (body !== undefined && !(body !== null && typeof body === 'object' && !Array.isArray(body) && Object.keys(body).length === 0)) throw takesNone(body);
      done();
    };
    route.preValidation = [route.preValidation ?? []].flat().concat(noBody);
  });
  // A read takes no body either; Fastify does not read one, so its headers say whether one came.
  app.addHook('onRoute', (route) => {
    const methods = [route.method].flat();
    if (route.config?.auth === undefined || !(methods.includes('GET') || methods.includes('HEAD'))) return;
    const noBody = (req: FastifyRequest, _reply: FastifyReply, done: HookHandlerDoneFunction): void => {
      const length = req.headers['content-length'];
      if (req.headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0')) {
        throw errors.invalidRequest('A read takes no request body; its options are query parameters. Send it without one.', [{ pointer: '', message: 'is not taken by this operation' }]);
      }
      done();
    };
    route.preValidation = [route.preValidation ?? []].flat().concat(noBody);
  });

  // A write to a resource without ETags cannot honour a precondition on one (RFC 9110 §13.1): it is
  // refused rather than ignored, so a client that relies on it never overwrites by surprise.
  app.addHook('onRoute', (route) => {
    const headers = (route.schema as { headers?: { properties?: Record<string, unknown> } } | undefined)?.headers?.properties;
    if (route.config?.auth === undefined || headers?.['if-match'] !== undefined || !isWriteMethod(route.method)) return;
    const noPreconditions = (req: FastifyRequest, _reply: FastifyReply, done: HookHandlerDoneFunction): void => {
      const ifMatch = req.headers['if-match'];
      if (ifMatch !== undefined && ifMatch.trim() !== '*') {
        throw errors.preconditionFailed('This resource has no ETag, so no If-Match but "*" can hold; send the request without If-Match.');
      }
      const ifNoneMatch = req.headers['if-none-match'];
      if (ifNoneMatch?.trim() === '*') {
        throw errors.preconditionFailed('If-None-Match: * asks for a write only where nothing exists yet, and this resource exists; send the request without it.');
      }
      // Its tags match nothing here, so the write goes on; one that is no entity tag is a 400, as on any other write.
      parseIfMatch(ifNoneMatch, { header: 'if-none-match', weak: true });
      done();
    };
    route.preValidation = [route.preValidation ?? []].flat().concat(noPreconditions);
  });

  // Node answers an Expect other than 100-continue with a bare 417, before any hook sees the request;
  // with a listener it leaves the answer to us: a problem, like every other refusal.
  app.server.on('checkExpectation', (req: IncomingMessage, res: ServerResponse) => {
    const given = req.headers['x-request-id'];
    const requestId = typeof given === 'string' && REQUEST_ID.test(given) ? given : randomUUID();
    const { status, headers, body } = expectationFailedResponse(String(req.headers.expect ?? ''), req.url ?? '/', requestId);
    deps.logger.debug({ requestId, status, expect: req.headers.expect }, 'unmet expectation refused');
    res.writeHead(status, headers).end(body);
  });

  // Node closes a CONNECT's connection without a word when nothing listens for it: this is no proxy,
  // and says so (its target names a host, not a path, so the problem has no `instance`).
  app.server.on('connect', (req: IncomingMessage, socket: Duplex) => {
    const requestId = randomUUID();
    deps.logger.debug({ requestId, status: 404 }, 'CONNECT refused');
    socket.end(rawProblemResponse(errors.routeNotFound('CONNECT', req.url ?? '', `${app.publicBaseUrl}/openapi.json`, 'this server is not a proxy'), requestId));
  });

  // A connection that has not sent a byte yet is neither idle nor busy to Node: closing the server
  // would wait for its header timeout (a minute) before the process could end. At shutdown such
  // connections are ended at once; idle keep-alive ones Fastify ends itself, busy ones finish.
  const sockets = new Set<Socket>();
  app.server.on('connection', (socket: Socket) => {
    sockets.add(socket);
    // Read now, the peer's address is kept: a request whose client has gone (a 499) still logs its `ip`.
    void socket.remoteAddress;
    socket.once('close', () => sockets.delete(socket));
  });
  app.addHook('preClose', async () => {
    closing = true;
    for (const socket of sockets) if (socket.bytesRead === 0) socket.destroy();
    // One that has sent part of a request's headers is given a moment to finish them (its request
    // then gets the 503 above), and is ended after that: Node counts it neither idle nor busy, and
    // a client that never finishes would hold the shutdown until its grace period ran out.
    const idle = (socket: Socket) => (underWay.get(socket) ?? 0) <= 0;
    const unfinished = [...sockets].filter(idle);
    if (unfinished.length > 0) {
      setTimeout(() => { for (const socket of unfinished) if (idle(socket)) socket.destroy(); }, UNFINISHED_REQUEST_GRACE_MS).unref();
    }
  });

  // Callback-style hooks: the response path is the hottest code there is.
  const report = deps.onUndeclaredStatus;
  app.addHook('onSend', (req, reply, payload, done) => {
    if (closing) reply.header('connection', 'close');
    if (report) checkDeclared(req, reply.statusCode, docs, report);
    done(null, payload);
  });

  await registerOpenApi(app, deps.openapi);

  app.get(`${apiPrefix}/healthz`, { config: { operation: 'health.live', pressureHandler: () => undefined }, schema: { tags: ['health'], summary: 'Liveness: the process answers', response: { 200: { type: 'object', properties: { status: { type: 'string' } } } } } },
    async () => ({ status: 'ok' }));
  app.get(`${apiPrefix}/readyz`, { config: { operation: 'health.ready' }, schema: { tags: ['health'], summary: 'Readiness: the database answers', response: { 200: { type: 'object', properties: { status: { type: 'string' } } } } } },
    async () => {
      const ready = await deps.ready().catch(() => false);
      if (ready !== true) throw errors.unavailable(typeof ready === 'string' ? ready : 'The database does not answer.', 5);
      return { status: 'ready' };
    });

  await registerRoutes(app);
  return app;
}

function checkDeclared(req: FastifyRequest, status: number, docs: string, report: (route: string, status: number) => void): void {
  const url = req.routeOptions.url;
  if (url === undefined || url.startsWith(docs) || (req.routeOptions.schema as { hide?: boolean } | undefined)?.hide) return;
  const declared = (req.routeOptions.schema as { response?: Record<string, unknown> } | undefined)?.response;
  if (!declared) {
    report(`${req.method} ${url}`, status);
    return;
  }
  // OpenAPI spells status ranges `5XX`.
  if (!(String(status) in declared) && !(`${String(status)[0]}XX` in declared) && !('default' in declared)) report(`${req.method} ${url}`, status);
}
