// One delivery over HTTP: a POST of the event, signed as Standard Webhooks sign
// (https://www.standardwebhooks.com): `webhook-id`, `webhook-timestamp` and `webhook-signature`,
// an HMAC-SHA256 of `id.timestamp.body` under each signing secret in force. Redirects are not
// followed and the answer's body is not kept: a 2xx within the timeout is a delivery.
import { createHmac, randomBytes } from 'node:crypto';
import http from 'node:http';
import https from 'node:https';
import { literalHostRefused, publicOnlyLookup } from './webhook-address.js';
import { nowMs } from '../../platform/clock.js';

export const WEBHOOK_SECRET_PREFIX = 'whsec_';

/** A new signing secret: `whsec_` and the base64 of 32 random bytes (the Standard Webhooks form). */
export function newWebhookSecret(): string {
  return WEBHOOK_SECRET_PREFIX + randomBytes(32).toString('base64');
}

/** The `webhook-signature` header: `v1,<base64 HMAC>` for each secret, separated by spaces. */
export function signatureHeader(secrets: readonly string[], id: string, timestamp: number, body: string): string {
  return secrets.map((secret) => {
    const key = Buffer.from(secret.slice(WEBHOOK_SECRET_PREFIX.length), 'base64');
    return `v1,${createHmac('sha256', key).update(`${id}.${timestamp}.${body}`).digest('base64')}`;
  }).join(' ');
}

export interface SendResult {
  /** The HTTP status, or null when none came back. */
  status: number | null;
  /** Why it is not a delivery, or null for a 2xx. */
  error: string | null;
  durationMs: number;
}

export interface SendOptions {
  timeoutMs: number;
  allowPrivate: boolean;
  userAgent: string;
  signal?: AbortSignal;
}

const ANSWER_BYTES_READ = 64 * 1024;

export function sendWebhook(url: string, message: { id: string; body: string; secrets: readonly string[] }, options: SendOptions): Promise<SendResult> {
  const started = performance.now();
  const done = (status: number | null, error: string | null): SendResult => ({ status, error, durationMs: Math.round(performance.now() - started) });
  const target = new URL(url);
  if (literalHostRefused(target, options.allowPrivate)) {
    return Promise.resolve(done(null, 'the URL points at this machine or a private network, which webhooks do not reach (SLIPWAY_WEBHOOK_ALLOW_PRIVATE)'));
  }
  const timestamp = Math.floor(nowMs() / 1000);
  const body = Buffer.from(message.body, 'utf8');
  return new Promise<SendResult>((resolve) => {
    let settled = false;
    const finish = (status: number | null, error: string | null) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve(done(status, error));
    };
    const request = (target.protocol === 'https:' ? https : http).request(target, {
      method: 'POST',
      agent: false,
      ...(options.allowPrivate ? {} : { lookup: publicOnlyLookup() }),
      headers: {
        'content-type': 'application/json',
        'content-length': body.length,
        'user-agent': options.userAgent,
        'webhook-id': message.id,
        'webhook-timestamp': String(timestamp),
        'webhook-signature': signatureHeader(message.secrets, message.id, timestamp, message.body),
      },
      ...(options.signal ? { signal: options.signal } : {}),
    }, (response) => {
      // The status is the answer: a body that comes slowly (or never ends) changes nothing.
      const status = response.statusCode ?? null;
      if (status !== null && status >= 200 && status < 300) finish(status, null);
      else if (status !== null && status >= 300 && status < 400) finish(status, `answered ${status}: redirects are not followed, give the URL the redirect names`);
      else finish(status, `answered ${status}`);
      // Read a little of the body, so that the receiver sees its answer taken, then hang up.
      let read = 0;
      response.on('data', (chunk: Buffer) => {
        read += chunk.length;
        if (read > ANSWER_BYTES_READ) request.destroy();
      });
      response.on('error', () => undefined);
      setTimeout(() => request.destroy(), 1000).unref();
    });
    const timer = setTimeout(() => {
      finish(null, `no answer within ${options.timeoutMs / 1000} seconds`);
      request.destroy();
    }, options.timeoutMs);
    request.on('error', (error: NodeJS.ErrnoException) => {
      const reason = error.name === 'AbortError' ? 'the server stopped while delivering' : error.code === 'EADDRNOTALLOWED' ? error.message : `${error.code ?? 'error'}: ${error.message}`;
      finish(null, reason.slice(0, 500));
    });
    request.end(body);
  });
}
