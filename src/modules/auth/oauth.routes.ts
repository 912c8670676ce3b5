// The authorization server's endpoints, under the path of SLIPWAY_AUTH_URL: token, discovery,
// JWKS, introspection and revocation. Form-encoded in, RFC 6749 errors out.
import { Type, type Static } from '@sinclair/typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { App } from '../../http/app-types.js';
import { unreadableAsSent } from '../../http/json-body.js';
import { publicFor } from '../../http/schemas.js';
import { enforceLimit, reportLimit, type RateLimiter } from '../../http/rate-limit.js';
import { AppError, errors } from '../../platform/errors.js';
import { oauthErrors } from './oauth-errors.js';
import type { Role } from './roles.js';
import { audienceScope, orgClaim, STANDARD_SCOPES } from './scopes.js';
import { SIGNING_ALG, type SigningKeys } from './signing-keys.js';
import { CLIENT_ID, clientRefusals, type AuthenticatedClient, type ClientCredentials, type TokenResponse, type TokenService } from './token.service.js';

const FORM = 'application/x-www-form-urlencoded';

interface FormBody {
  kind: 'form' | 'other';
  fields: Map<string, string>;
  /** The names sent more than once (with a value), in the order their second one came. */
  repeated: ReadonlySet<string>;
  /** Why a form could not be read as it was sent (compressed, or in another charset), or null. */
  unreadable: string | null;
}

/** RFC 6749 §2.3.1: each part of Basic credentials is form-url-encoded before base64. */
function formDecode(value: string): string {
  return value.includes('%') || value.includes('+') ? decodeURIComponent(value.replace(/\+/g, ' ')) : value;
}

function parseBasic(header: string | undefined): ClientCredentials | null {
  if (header === undefined) return null;
  const match = /^Basic\s+([A-Za-z0-9+/=._~-]+)\s*$/i.exec(header);
  if (!match) throw oauthErrors.invalidClient('The Authorization header is not valid HTTP Basic credentials.');
  const decoded = Buffer.from(match[1]!, 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  if (colon < 0) throw oauthErrors.invalidClient('HTTP Basic credentials must be client_id:client_secret.');
  try {
    return { clientId: formDecode(decoded.slice(0, colon)), clientSecret: formDecode(decoded.slice(colon + 1)) };
  } catch {
    throw oauthErrors.invalidClient('HTTP Basic credentials are not correctly form-url-encoded.');
  }
}

/** The parameters each endpoint reads: only these are refused when repeated. */
const CLIENT_AUTH_PARAMETERS = ['client_id', 'client_secret'];
const TOKEN_PARAMETERS: ReadonlySet<string> = new Set(['grant_type', 'scope', ...CLIENT_AUTH_PARAMETERS]);
const TOKEN_REQUEST_PARAMETERS: ReadonlySet<string> = new Set(['token', 'token_type_hint', ...CLIENT_AUTH_PARAMETERS]);

/**
 * The form of an OAuth request. A parameter this endpoint reads may come once (RFC 6749 §3.1);
 * any other is ignored however often it comes (RFC 6749 §3.2), as RFC 8707's `resource`, which a
 * client may repeat, is by a server that does not take it.
 */
function formOf(req: FastifyRequest, reads: ReadonlySet<string>): FormBody {
  const body = req.body as FormBody | undefined;
  if (body === undefined || body === null) return { kind: 'form', fields: new Map(), repeated: new Set(), unreadable: null };
  if (body.unreadable !== null) throw oauthErrors.invalidRequest(body.unreadable);
  if (body.kind !== 'form') {
    throw oauthErrors.invalidRequest(`The body must be ${FORM}${req.headers['content-type'] ? `, not ${req.headers['content-type']}` : ''}.`);
  }
  const repeated = [...body.repeated].find((name) => reads.has(name));
  if (repeated !== undefined) throw oauthErrors.invalidRequest(`The parameter '${repeated}' appears more than once.`);
  return body;
}

/**
 * client_secret_basic or client_secret_post, never both (RFC 6749 §2.3). Beside Basic, the body may
 * still name the client (client_id, which RFC 6749 §3.2.1 lets any client send to identify itself),
 * provided it names the same one.
 */
function clientCredentials(req: FastifyRequest, form: FormBody): ClientCredentials {
  const basic = parseBasic(req.headers.authorization);
  const postId = form.fields.get('client_id');
  const postSecret = form.fields.get('client_secret');
  if (basic !== null) {
    if (postSecret !== undefined) throw oauthErrors.invalidRequest('Send client credentials either as HTTP Basic or in the body, not both.');
    if (postId !== undefined && postId !== basic.clientId) throw oauthErrors.invalidRequest('The client_id in the body names another client than the HTTP Basic credentials.');
    return basic;
  }
  if (postId === undefined || postSecret === undefined) {
    throw oauthErrors.invalidClient('Client authentication is required: HTTP Basic client_id:client_secret, or client_id and client_secret in the body.');
  }
  return { clientId: postId, clientSecret: postSecret };
}

const JSON_TYPE = 'application/json; charset=utf-8';

/**
 * The token response as JSON text, written from a template (Fastify sends a string as it is). An
 * access token is a compact JWS, base64url parts joined by dots, so it needs no escaping.
 */
function tokenResponseJson(token: TokenResponse): string {
  return `{"access_token":"${token.access_token}","token_type":"Bearer","expires_in":${token.expires_in},"scope":${JSON.stringify(token.scope)}}`;
}

const TokenResponseSchema = Type.Object({
  access_token: Type.String(),
  token_type: Type.Literal('Bearer'),
  expires_in: Type.Integer({ description: 'Lifetime in seconds (SLIPWAY_TOKEN_TTL, 43200 by default).' }),
  scope: Type.String({ description: 'The granted scopes.' }),
});
const OAuthErrorSchema = Type.Object({ error: Type.String(), error_description: Type.String() }, { description: 'RFC 6749 §5.2 error' });
/** A body over SLIPWAY_BODY_LIMIT_BYTES, refused before it is read whole. */
const OAuthTooLarge = { ...OAuthErrorSchema, description: 'The body is larger than the server takes (SLIPWAY_BODY_LIMIT_BYTES): `{"error": "invalid_request"}`' };
/** A rate-limited request: RFC 6749 has no code for it; `slow_down` is the one its registry holds for token requests (RFC 8628 §3.5). */
const OAuthRateLimited = { ...OAuthErrorSchema, description: 'Rate limited: `{"error": "slow_down"}` (RFC 8628 §3.5, from the OAuth error registry; RFC 6749 has no code for it), with Retry-After' };
interface FormField {
  description: string;
  required?: boolean;
  enum?: string[];
}

/** Client authentication in the body (client_secret_post), the alternative to HTTP Basic. */
const CLIENT_POST_FIELDS: Record<string, FormField> = {
  client_id: { description: 'client_secret_post: the client id (instead of HTTP Basic; beside it, only the same client id)' },
  client_secret: { description: 'client_secret_post: the client secret (instead of HTTP Basic; never both)' },
};

/**
 * A form body, for the documentation only: the handler reads and checks the fields itself, so that
 * each failure is the RFC 6749 error it must be. The fields travel under `x-form` to the OpenAPI
 * document, which makes them the request body's schema (see http/openapi.ts).
 */
const FormSchema = (fields: Record<string, FormField>) => {
  const all = { ...fields, ...CLIENT_POST_FIELDS };
  return {
    description: `${FORM}; fields: ${Object.keys(all).join(', ')}`,
    'x-form': {
      type: 'object',
      properties: Object.fromEntries(Object.entries(all).map(([name, { description, enum: values }]) => [name, { type: 'string', description, ...(values ? { enum: values } : {}) }])),
      required: Object.entries(all).filter(([, f]) => f.required).map(([name]) => name),
    },
  };
};

/** HTTP Basic, or no HTTP authentication and the credentials in the body (client_secret_post). */
const CLIENT_AUTH: Array<Record<string, string[]>> = [{ clientBasic: [] }, {}];

/** A public signing key as the JWKS publishes it: P-256, for ES256. */
const PublicJwk = Type.Object({
  kty: Type.Literal('EC'), crv: Type.Literal('P-256'), x: Type.String(), y: Type.String(),
  kid: Type.String({ description: 'The key\'s RFC 7638 thumbprint; a token names it in its header.' }), alg: Type.Literal(SIGNING_ALG), use: Type.Literal('sig'),
}, { additionalProperties: false });

const Names = Type.Array(Type.String());
/** RFC 8414 metadata, the fields this server gives: what `discoveryDocument` returns. */
const Metadata = Type.Object({
  issuer: Type.String(),
  token_endpoint: Type.String(),
  jwks_uri: Type.String(),
  introspection_endpoint: Type.String(),
  revocation_endpoint: Type.String(),
  grant_types_supported: Names,
  response_types_supported: Names,
  subject_types_supported: Names,
  token_endpoint_auth_methods_supported: Names,
  introspection_endpoint_auth_methods_supported: Names,
  revocation_endpoint_auth_methods_supported: Names,
  scopes_supported: Names,
  claims_supported: Names,
  access_token_signing_alg_values_supported: Names,
  service_documentation: Type.String(),
}, { additionalProperties: false });

/** RFC 7662's answer: `active` alone for a token that is not (or not the caller's to know of), else its claims. */
const introspection = (orgClaimName: string) => Type.Object({
  active: Type.Boolean(),
  scope: Type.Optional(Type.String()),
  client_id: Type.Optional(Type.String()),
  sub: Type.Optional(Type.String()),
  token_type: Type.Optional(Type.Literal('Bearer')),
  exp: Type.Optional(Type.Integer()),
  iat: Type.Optional(Type.Integer()),
  nbf: Type.Optional(Type.Integer()),
  iss: Type.Optional(Type.String()),
  aud: Type.Optional(Type.Union([Type.String(), Type.Array(Type.String())])),
  jti: Type.Optional(Type.String()),
  [orgClaimName]: Type.Optional(Type.String({ description: 'The organization the token acts in.' })),
}, { additionalProperties: false });

/** How long caches may keep the key set and the metadata. */
const jwksAnswer = publicFor(60, Type.Object({ keys: Type.Array(PublicJwk) }));
const metadataAnswer = publicFor(300, Metadata);

export interface OAuthRoutesDeps {
  tokens: TokenService;
  keys: SigningKeys;
  issuer: string;
  baseUrl: string;
  idpName: string;
  projectId: string;
  /**
   * `perClient`: requests of an authenticated client (token, introspection, revocation). `failuresPerAddress`: failed client
   * authentications from one address; once it is spent, the address is refused before its
   * credentials are looked at (guessing costs a database read and a keyed hash each).
   * `revocationsPerClient`: revocations of a client, on top (an hour's budget).
   */
  limits: { perClient: RateLimiter; failuresPerAddress: RateLimiter; revocationsPerClient: RateLimiter };
}

export function oauthRoutes(app: App, deps: OAuthRoutesDeps, prefix: string): void {
  // Every body reaches the handler, so a wrong content type is an RFC 6749 error, not a 415. The
  // form has a parser of its own rather than a test inside the catch-all: Fastify remembers which
  // parser a content type took only when one is registered for it.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser(FORM, { parseAs: 'string' }, (req, body, done) => {
    // Read as it was sent, a compressed or otherwise encoded form would fail for a reason that
    // points elsewhere (a grant_type that seems missing); what the form is sent as is said instead.
    const sent = unreadableAsSent(req.headers);
    if (sent !== null) {
      const unreadable = 'coding' in sent
        ? `The body must be sent as it is: this endpoint does not decode Content-Encoding ${sent.coding}.`
        : `The body must be ${FORM} in UTF-8, not in ${sent.charset}.`;
      return done(null, { kind: 'form', fields: new Map(), repeated: new Set(), unreadable } satisfies FormBody);
    }
    const fields = new Map<string, string>();
    const repeated = new Set<string>();
    for (const [key, value] of new URLSearchParams(body as string)) {
      // RFC 6749 §3.2: "Parameters sent without a value MUST be treated as if they were omitted."
      if (value === '') continue;
      if (fields.has(key)) repeated.add(key);
      fields.set(key, value);
    }
    done(null, { kind: 'form', fields, repeated, unreadable: null } satisfies FormBody);
  });
  app.addContentTypeParser('*', { parseAs: 'string' }, (_req, _body, done) => {
    done(null, { kind: 'other', fields: new Map(), repeated: new Set(), unreadable: null } satisfies FormBody);
  });

  const tags = ['oauth'];
  const oauthConfig = { errorFormat: 'oauth' as const };
  // For the OpenAPI document: these endpoints are under the auth URL, which need not be the API's.
  const servers = [{ url: deps.issuer }];

  /**
   * Authenticates the client, unless its address has failed too often lately, then counts the
   * request against the client. Only failures count against an address: clients that share one
   * (behind a NAT, or a proxy that SLIPWAY_TRUST_PROXY does not name) do not spend each other's
   * budget by getting their tokens. Each attempt is counted before its credentials are looked at,
   * so that guesses sent together cannot all slip past the check, and given back once they pass.
   */
  const authenticate = async (req: FastifyRequest, reply: FastifyReply, creds: ClientCredentials): Promise<AuthenticatedClient> => {
    const failures = deps.limits.failuresPerAddress;
    const attempt = failures.hit(req.ip);
    if (!attempt.allowed) throw errors.rateLimited(reportLimit(attempt, reply).resetSeconds);
    let client: AuthenticatedClient;
    try {
      client = await deps.tokens.authenticate(creds);
    } catch (error) {
      if (error instanceof AppError && error.code === 'invalid_client') {
        reportLimit(attempt, reply);
        // Who tried and why, for whoever looks into a run of failures; a client id is no secret,
        // and what is not one (a secret pasted in its place, say) is not written.
        req.log.warn({ clientId: CLIENT_ID.test(creds.clientId) ? creds.clientId : undefined, reason: clientRefusals.get(error), ip: req.ip }, 'client authentication failed');
      } else {
        failures.giveBack(req.ip);
      }
      throw error;
    }
    failures.giveBack(req.ip);
    // Counted once authenticated, so that nobody else can spend a client's budget by naming it.
    enforceLimit(client.user.id, deps.limits.perClient, reply);
    return client;
  };

  /** Introspection and revocation: an authenticated client and the `token` it asks about. */
  const tokenRequest = async (req: FastifyRequest, reply: FastifyReply) => {
    const form = formOf(req, TOKEN_REQUEST_PARAMETERS);
    const caller = await authenticate(req, reply, clientCredentials(req, form));
    const token = form.fields.get('token');
    if (token === undefined) throw oauthErrors.invalidRequest('The token parameter is required.');
    return { caller, token };
  };

  app.post(`${prefix}/oauth/v2/token`, {
    config: { ...oauthConfig, operation: 'oauth.token' },
    schema: {
      tags,
      servers,
      summary: 'Token exchange: client credentials grant (HTTP Basic or client_secret_post)',
      security: CLIENT_AUTH,
      consumes: [FORM],
      body: FormSchema({
        grant_type: { description: 'The grant: only client_credentials', required: true, enum: ['client_credentials'] },
        scope: { description: 'Space-separated scopes; without it, all five the server supports (see scopes_supported in the discovery document)' },
      }),
      response: { 200: TokenResponseSchema, 400: OAuthErrorSchema, 401: OAuthErrorSchema, 413: OAuthTooLarge, 429: OAuthRateLimited },
    },
  }, async (req, reply) => {
    const form = formOf(req, TOKEN_PARAMETERS);
    const grant = form.fields.get('grant_type');
    if (grant === undefined) throw oauthErrors.invalidRequest('The grant_type parameter is required (client_credentials).');
    const creds = clientCredentials(req, form);
    if (grant !== 'client_credentials') throw oauthErrors.unsupportedGrantType(grant);
    const client = await authenticate(req, reply, creds);
    const token = await deps.tokens.clientCredentialsGrant(client.user, form.fields.get('scope'));
    await deps.tokens.markUsed(client);
    reply.header('cache-control', 'no-store').header('pragma', 'no-cache').type(JSON_TYPE);
    // Sent as text: the response schema describes that JSON, and Fastify sends a string as it is.
    return (reply as FastifyReply).send(tokenResponseJson(token));
  });

  app.post(`${prefix}/oauth/v2/introspect`, {
    config: { ...oauthConfig, operation: 'oauth.introspect' },
    schema: {
      tags,
      servers,
      summary: 'Token introspection (RFC 7662); the caller authenticates as a client',
      security: CLIENT_AUTH,
      consumes: [FORM],
      body: FormSchema({ token: { description: 'The access token', required: true }, token_type_hint: { description: 'Optional: access_token' } }),
      response: { 200: introspection(orgClaim(deps.idpName)), 400: OAuthErrorSchema, 401: OAuthErrorSchema, 413: OAuthTooLarge, 429: OAuthRateLimited },
    },
  }, async (req, reply) => {
    const { caller, token } = await tokenRequest(req, reply);
    reply.header('cache-control', 'no-store');
    const answer = await deps.tokens.introspect(caller.user, token);
    await deps.tokens.markUsed(caller);
    return answer as { active: boolean };
  });

  app.post(`${prefix}/oauth/v2/revoke`, {
    config: { ...oauthConfig, operation: 'oauth.revoke' },
    schema: {
      tags,
      servers,
      summary: 'Token revocation (RFC 7009): a client revokes its own access tokens',
      description: 'A token issued to another client is refused (400 `unauthorized_client`, RFC 7009 §2.1) and stays valid; '
        + 'a token that is not ours, expired or already revoked answers 200. To end another service user\'s access, disable it.',
      security: CLIENT_AUTH,
      consumes: [FORM],
      body: FormSchema({ token: { description: 'The access token', required: true }, token_type_hint: { description: 'Optional, ignored: every token is an access token' } }),
      response: { 200: Type.Object({}, { description: 'Revoked, or nothing to revoke' }), 400: OAuthErrorSchema, 401: OAuthErrorSchema, 413: OAuthTooLarge, 429: OAuthRateLimited },
    },
  }, async (req, reply) => {
    const { caller, token } = await tokenRequest(req, reply);
    // Each revoked token is kept, and read by every node every few seconds, until it expires.
    enforceLimit(caller.user.id, deps.limits.revocationsPerClient, reply);
    // token_type_hint is ignored (RFC 7009 §2.1 allows it): access tokens are the only kind we issue.
    // The client revokes its own token: it is the event's actor.
    const actor = { id: caller.user.id, kind: 'service_user' as const, orgId: caller.user.org_id, role: caller.user.role as Role, instanceAdmin: caller.user.instance_admin === 1 };
    await deps.tokens.revoke({ requestId: req.id, actor }, caller.user, token);
    await deps.tokens.markUsed(caller);
    reply.header('cache-control', 'no-store');
    return {};
  });

  app.get(`${prefix}/oauth/v2/keys`, {
    config: { operation: 'oauth.jwks' },
    schema: {
      tags,
      servers,
      summary: 'JSON Web Key Set: the public keys that verify access tokens',
      response: { 200: jwksAnswer.schema },
    },
  }, async (_req, reply) => {
    const set = await deps.keys.current();
    reply.header('cache-control', jwksAnswer.header);
    // As stored when each key was made (generateSigningKeyRow): P-256 keys for ES256.
    return { keys: set.publicJwks as Array<Static<typeof PublicJwk>> };
  });

  // OpenID Connect Discovery appends its segment to the issuer; RFC 8414 §3.1 puts its own between
  // the host and the issuer's path. Both serve the one document.
  const metadataRoutes = [
    { url: `${prefix}/.well-known/openid-configuration`, servers, operation: 'oauth.discovery', summary: 'OpenID Provider / OAuth authorization server metadata (OpenID Connect Discovery)' },
    { url: `/.well-known/oauth-authorization-server${prefix}`, servers: [{ url: new URL(deps.issuer).origin }], operation: 'oauth.metadata', summary: 'OAuth 2.0 authorization server metadata (RFC 8414): the same document' },
  ];
  for (const { url, servers: at, operation, summary } of metadataRoutes) {
    app.get(url, { config: { operation }, schema: { tags, servers: at, summary, response: { 200: metadataAnswer.schema } } }, async (_req, reply) => {
      reply.header('cache-control', metadataAnswer.header);
      return discoveryDocument(deps);
    });
  }
}

/**
 * RFC 8414 authorization server metadata, served at the OpenID Connect Discovery path too, where
 * OAuth clients (openid-client among them) look first. It says only what is so: Slipway is no
 * OpenID provider (no authorization endpoint, no ID tokens, no UserInfo), so the fields OpenID
 * Connect Discovery requires for those, `authorization_endpoint` and
 * `id_token_signing_alg_values_supported`, are left out rather than made up.
 */
export function discoveryDocument(deps: Pick<OAuthRoutesDeps, 'issuer' | 'idpName' | 'projectId' | 'baseUrl'>): Static<typeof Metadata> {
  const authMethods = ['client_secret_basic', 'client_secret_post'];
  return {
    issuer: deps.issuer,
    token_endpoint: `${deps.issuer}/oauth/v2/token`,
    jwks_uri: `${deps.issuer}/oauth/v2/keys`,
    introspection_endpoint: `${deps.issuer}/oauth/v2/introspect`,
    revocation_endpoint: `${deps.issuer}/oauth/v2/revoke`,
    grant_types_supported: ['client_credentials'],
    // Required by RFC 8414 §2 (and OpenID Connect Discovery §3), and empty: response types are
    // answers of an authorization endpoint, which this server has none of, and the client
    // credentials grant uses none (RFC 7591 §2.1). ["token"] would offer the implicit flow.
    response_types_supported: [],
    // Required by OpenID Connect Discovery, and true of the `sub` of the tokens issued here (and of
    // introspection): the client's own id, the same to whoever reads it.
    subject_types_supported: ['public'],
    token_endpoint_auth_methods_supported: authMethods,
    introspection_endpoint_auth_methods_supported: authMethods,
    revocation_endpoint_auth_methods_supported: authMethods,
    scopes_supported: [...STANDARD_SCOPES, audienceScope(deps.idpName, deps.projectId)],
    // The claims of the access tokens and of introspection: the only claims this server gives.
    claims_supported: ['iss', 'sub', 'aud', 'exp', 'iat', 'nbf', 'jti', 'client_id', 'scope', orgClaim(deps.idpName)],
    // How those tokens (RFC 9068 JWTs) are signed, for a resource server to pin; no RFC 8414 name,
    // and clients that do not know it pass it by.
    access_token_signing_alg_values_supported: [SIGNING_ALG],
    service_documentation: `${deps.baseUrl}/docs`,
  };
}
