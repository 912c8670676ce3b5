// Access tokens for the runner, from the spec's client credentials exchange. "Clients should cache
// tokens and renew them automatically": a token is reused until most of its lifetime is gone,
// renewed before it expires, and dropped at once when the API answers 401 to it (revoked, or the
// server's keys changed). Concurrent callers share one token request.
import { abortable, isTransientStatus, parseJson, Refused, request, retryAfterMs, Unavailable, type Answer } from './http-call.js';

export interface ClientCredentials {
  tokenUrl: string;
  clientId: string;
  clientSecret: string;
  /** The exact scope string (bootstrap.json, `service-user create --json`). */
  scope: string;
}

export interface TokenSource {
  /** A token with most of its life ahead; throws Refused when the credentials are refused, Unavailable when the endpoint is. */
  get(signal: AbortSignal): Promise<string>;
  /** Forgets `token` if it is the cached one, so the next get() asks for a new one. */
  invalidate(token: string): void;
}

/** Renew once this share of the lifetime has passed: a margin for clock skew and slow answers. */
const RENEW_AFTER = 0.8;
const TOKEN_REQUEST_TIMEOUT_MS = 15_000;

/** `who`: whose credentials, in refusals ("the runner's" by default). */
/** `signal`: ends a token request under way (a command interrupted); by default one runs to its end, for every caller waiting. */
export function createTokenSource(credentials: ClientCredentials, options: { now?: () => number; who?: string; signal?: AbortSignal } = {}): TokenSource {
  const now = options.now ?? Date.now;
  let cached: { token: string; renewAt: number } | undefined;
  let pending: Promise<string> | undefined;

  async function exchange(): Promise<string> {
    const asked = now();
    // RFC 6749 §2.3.1: both parts form-encoded before they are joined for HTTP Basic.
    const basic = Buffer.from(`${encodeURIComponent(credentials.clientId)}:${encodeURIComponent(credentials.clientSecret)}`).toString('base64');
    // Not tied to one caller's signal: other callers may be waiting for the same answer. A failure
    // names the token endpoint: the call that asked for the token is not the one that failed.
    const answer = await request(credentials.tokenUrl, {
      method: 'POST',
      headers: { authorization: `Basic ${basic}`, 'content-type': 'application/x-www-form-urlencoded', accept: 'application/json' },
      body: new URLSearchParams({ grant_type: 'client_credentials', scope: credentials.scope }).toString(),
    }, TOKEN_REQUEST_TIMEOUT_MS, options.signal ?? new AbortController().signal, `the token endpoint ${credentials.tokenUrl}`);
    const body = parseJson(answer.text) as { access_token?: unknown; expires_in?: unknown; error?: string; error_description?: string } | null;
    if (answer.status === 200 && typeof body?.access_token === 'string' && typeof body.expires_in === 'number') {
      cached = { token: body.access_token, renewAt: asked + body.expires_in * 1000 * RENEW_AFTER };
      return body.access_token;
    }
    const said = body?.error !== undefined ? `${body.error}${body.error_description ? `: ${body.error_description}` : ''}` : `HTTP ${answer.status}`;
    if (answer.status === 200 || isTransientStatus(answer.status)) {
      throw new Unavailable(`the token endpoint ${credentials.tokenUrl} gave no token (${said})`, retryAfterMs(answer.headers));
    }
    throw new Refused(answer.status, body?.error ?? 'token_refused', `the token endpoint ${credentials.tokenUrl} refused ${options.who ?? 'the runner\'s'} client credentials (${said})`);
  }

  return {
    async get(signal) {
      if (cached !== undefined && now() < cached.renewAt) return cached.token;
      pending ??= exchange().finally(() => { pending = undefined; });
      // The caller may stop waiting; the exchange goes on for the others.
      return abortable(pending, signal);
    },
    invalidate(token) {
      if (cached?.token === token) cached = undefined;
    },
  };
}

/**
 * One request under a token of `tokens` (`headers` gets its Authorization). A 401 to a cached token
 * may only mean that the token went stale: it is dropped, and the request made once more with a
 * fresh one. Resolves with the last answer and the token it was made with; a 401 then is a refusal
 * of a fresh token. `onSending` runs before each request goes out.
 */
export async function requestWithToken(
  tokens: TokenSource, url: string, init: RequestInit & { headers: Record<string, string> }, timeoutMs: number, signal: AbortSignal, onSending?: () => void,
): Promise<{ answer: Answer; token: string }> {
  for (let fresh = false; ; fresh = true) {
    const token = await tokens.get(signal);
    onSending?.();
    const answer = await request(url, { ...init, headers: { ...init.headers, authorization: `Bearer ${token}` } }, timeoutMs, signal);
    if (answer.status !== 401 || fresh) return { answer, token };
    tokens.invalidate(token);
  }
}
