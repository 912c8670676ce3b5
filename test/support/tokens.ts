// Token-endpoint requests built byte by byte, and access tokens forged with the server's real
// signing key (or deliberately with the wrong key, algorithm or claims), so each API check can be
// shown to refuse exactly one defect while a correctly forged token is accepted.
import { exportJWK, exportSPKI, generateKeyPair, importJWK, SignJWT, type CryptoKey, type JWK, type JWTPayload } from 'jose';
import { hashClientSecret } from '../../src/platform/crypto/client-secret.js';
import { newId } from '../../src/platform/ids.js';
import { orgClaim } from '../../src/modules/auth/token.service.js';
import { serviceUsersRepo } from '../../src/modules/service-users/service-users.repo.js';
import type { HttpResult, TestServer } from './harness.js';

export const FORM = 'application/x-www-form-urlencoded';

/** application/x-www-form-urlencoded encoding of one value (what RFC 6749 §2.3.1 asks of Basic parts). */
export function formEncode(value: string): string {
  return encodeURIComponent(value).replace(/%20/g, '+');
}

/** Every byte percent-encoded, letters and digits too: a server that compares raw strings fails it. */
export function encodeEvery(value: string): string {
  return [...Buffer.from(value, 'utf8')].map((b) => `%${b.toString(16).toUpperCase().padStart(2, '0')}`).join('');
}

export function basic(clientId: string, clientSecret: string, encode: (s: string) => string = formEncode): string {
  return 'Basic ' + Buffer.from(`${encode(clientId)}:${encode(clientSecret)}`, 'utf8').toString('base64');
}

export interface OAuthRequest {
  /** The Authorization header, e.g. from basic(). */
  authorization?: string;
  /** Form fields (encoded with URLSearchParams), or a raw body. */
  form?: Record<string, string>;
  raw?: string;
  contentType?: string;
  /** Other request headers (X-Forwarded-For, say). */
  headers?: Record<string, string>;
}

/** POST to an authorization-server endpoint (`token`, `introspect`, `revoke`). */
export async function oauthPost(server: TestServer, endpoint: 'token' | 'introspect' | 'revoke', request: OAuthRequest): Promise<HttpResult> {
  const headers: Record<string, string> = { ...request.headers };
  if (request.authorization !== undefined) headers.authorization = request.authorization;
  const body = request.raw ?? (request.form ? new URLSearchParams(request.form).toString() : undefined);
  return server.http().request('POST', `/oauth/v2/${endpoint}`, {
    headers,
    ...(body !== undefined ? { raw: body, contentType: request.contentType ?? FORM } : {}),
  });
}

/** The spec's token request: Basic credentials, client_credentials, the given scope (all five by default). */
export function requestToken(server: TestServer, creds: { clientId: string; clientSecret: string }, scope = server.bootstrap.scope, headers: Record<string, string> = {}): Promise<HttpResult> {
  return oauthPost(server, 'token', { authorization: basic(creds.clientId, creds.clientSecret), form: { grant_type: 'client_credentials', scope }, headers });
}

/**
 * Adds a client secret of our choosing to a service user, stored exactly as the service stores
 * one. Slipway generates base64url secrets, so this is how a secret with `+ / : %` or a space
 * gets into the database to prove the RFC 6749 §2.3.1 decoding.
 */
export async function plantClientSecret(server: TestServer, serviceUserId: string, secret: string): Promise<void> {
  await serviceUsersRepo.insertSecret(server.core.db, {
    id: newId('clientSecret'), service_user_id: serviceUserId, hash: hashClientSecret(server.core.identity.pepper, secret),
    hint: 'planted', created_at: new Date().toISOString(), last_used_at: null,
  });
}

export function base64url(value: unknown): string {
  return Buffer.from(typeof value === 'string' ? value : JSON.stringify(value), 'utf8').toString('base64url');
}

/** The claims the token endpoint puts in a token for this service user, valid for ten minutes. */
export function claimsFor(server: TestServer, user: { clientId: string; orgId: string }): JWTPayload {
  const now = Math.floor(Date.now() / 1000);
  return {
    iss: server.core.issuer,
    sub: user.clientId,
    aud: [server.core.identity.projectId, user.clientId],
    iat: now,
    nbf: now,
    exp: now + 600,
    jti: newId('token'),
    client_id: user.clientId,
    scope: server.bootstrap.scope,
    [orgClaim(server.config.idpName)]: user.orgId,
  };
}

/** Signs with the server's active signing key; the header can be overridden (typ, kid, …). */
export async function signWithServerKey(server: TestServer, payload: JWTPayload, header: Record<string, unknown> = {}): Promise<string> {
  const signer = await server.core.keys.signer();
  return new SignJWT(payload).setProtectedHeader({ alg: 'ES256', typ: 'at+jwt', kid: signer.kid, ...header }).sign(signer.privateKey);
}

/** Signs with a fresh ES256 key that the server has never seen, under the server's kid by default. */
export async function signWithForeignKey(server: TestServer, payload: JWTPayload, header: Record<string, unknown> = {}): Promise<string> {
  const signer = await server.core.keys.signer();
  const { privateKey, publicKey } = await generateKeyPair('ES256', { extractable: true });
  // The attacker's key also rides in the header (`jwk`): the server must not trust it.
  return new SignJWT(payload)
    .setProtectedHeader({ alg: 'ES256', typ: 'at+jwt', kid: signer.kid, jwk: await exportJWK(publicKey), ...header })
    .sign(privateKey);
}

/** `alg: none`, no signature (RFC 7519 §6). */
export function unsecured(payload: JWTPayload, kid?: string): string {
  return `${base64url({ alg: 'none', typ: 'at+jwt', ...(kid ? { kid } : {}) })}.${base64url(payload)}.`;
}

/** The classic key-confusion attack: HS256 with the server's public key (SPKI PEM) as the HMAC secret. */
export async function hs256WithPublicKey(server: TestServer, payload: JWTPayload): Promise<string> {
  const { publicJwks } = await server.core.keys.current();
  const signer = await server.core.keys.signer();
  const jwk = publicJwks.find((k) => k.kid === signer.kid) as JWK;
  const pem = await exportSPKI((await importJWK(jwk, 'ES256', { extractable: true })) as CryptoKey);
  return new SignJWT(payload).setProtectedHeader({ alg: 'HS256', typ: 'at+jwt', kid: signer.kid }).sign(new TextEncoder().encode(pem));
}

/** The same header and signature over a changed payload. */
export function tamper(token: string, change: (payload: Record<string, unknown>) => void): string {
  const [header, payload, signature] = token.split('.');
  const claims = JSON.parse(Buffer.from(payload!, 'base64url').toString('utf8')) as Record<string, unknown>;
  change(claims);
  return `${header}.${base64url(claims)}.${signature}`;
}
