// The runner's side of the runner protocol (runner.protocol.ts): claim, heartbeat, logs and
// complete over HTTP, with the bearer token from the token source. Every call retries what may
// pass (no connection, timeouts, 429, 5xx: a server restarting is the common case) until it gets
// an answer or its signal aborts, and throws Refused for a definite no, which for a deployment
// the runner holds means: stop working on it (`refused.mustStop`).
import { randomUUID } from 'node:crypto';
import { IDEMPOTENCY_HEADER } from '../modules/idempotency/idempotency.schemas.js';
import {
  mustStop, runnerUrl, RUNNER_ROUTES, type AbandonRequestT, type AdoptRequestT, type AdoptResponseT, type AppendLogsRequestT, type AppendLogsResponseT, type ClaimResponseT,
  type CompleteRequestT, type HeartbeatResponseT, type LeaseT, type ReleaseRequestT, type ReleaseResponseT, type ServingRequestT, type ServingResponseT,
} from '../modules/runner/runner.protocol.js';
import type { Deployment } from '../modules/deployments/deployments.schemas.js';
import { isTransientStatus, parseJson, Refused, retryAfterMs, untilAvailable, Unavailable } from './http-call.js';
import { requestWithToken, type TokenSource } from './token-source.js';

export interface ProtocolClientOptions {
  /** The API's base URL (`{base_url}`), without a trailing slash. */
  baseUrl: string;
  /** Organization id or slug. */
  orgId: string;
  tokens: TokenSource;
  /** Told about each failed try before the pause that follows it. */
  onRetry?: (call: keyof typeof RUNNER_ROUTES, error: Unavailable, attempt: number, delayMs: number) => void;
  /** How long tokens just issued may be refused before that is a refusal (FRESH_TOKEN_REFUSED_GRACE_MS). */
  freshTokenGraceMs?: number;
}

/** What the runner asks for on each claim. */
export interface ClaimOptions {
  environments?: string[];
  waitSeconds: number;
  /** This runner process's id (protocol step 5). */
  host?: string;
  /** What it says of itself (protocol step 6), to a server that takes it. */
  hostname?: string;
  version?: string;
}

/** A claim's answer, and until when (performance.now()) its lease holds at the least (see runner.protocol.ts). */
export type Claimed = ClaimResponseT & { heldUntil: number };

/** A heartbeat's answer, and until when (performance.now()) the lease it renewed holds at the least. */
export type Renewed = HeartbeatResponseT & { heldUntil: number };

/**
 * Until when the lease in an answer holds at the least, by this runner's clock: what it had left
 * when the server took the request up, from when the request was sent (`sentAt`); `otherwise` from
 * a server too old to say.
 */
function heldUntil(lease: LeaseT, sentAt: number, otherwise: number): number {
  return lease.expiresInMs !== undefined ? sentAt + lease.expiresInMs : otherwise;
}

const CALL_TIMEOUT_MS = 30_000;
const HEARTBEAT_TRY_FLOOR_MS = 5_000;
/** The problem code of a request whose Idempotency-Key is held by a first try still running (or taken for running). */
const IN_PROGRESS = 'idempotency_request_in_progress';
/** A long poll answers within its wait; this much more is the server being slow, not waiting. */
const CLAIM_GRACE_MS = 15_000;
/**
 * A token just issued and refused all the same is the server between two signing keys: after a
 * rotation each node follows within a minute, and meanwhile one may sign with a key it or another
 * node already refuses. That is asked again, for this long, before it counts as a refusal.
 */
export const FRESH_TOKEN_REFUSED_GRACE_MS = 120_000;
const FRESH_TOKEN_RETRY_MS = 2_000;

export function createProtocolClient(options: ProtocolClientOptions) {
  const { tokens } = options;
  /**
   * Since when each call has had fresh tokens refused, and when last (none: its last one was
   * taken). Per call: the serving reports that go through meanwhile say nothing about the claims
   * that do not. A run of refusals ends when one is not followed by another within a few retries.
   */
  const freshRefused = new Map<keyof typeof RUNNER_ROUTES, { since: number; last: number }>();

  /**
   * `keyGivenUp`: a 409 saying the request under its Idempotency-Key is still in progress is a
   * refusal (the caller drops the key) rather than a reason to ask again with it. `sent` hears when
   * each try goes out (performance.now()).
   */
  async function call<T>(route: keyof typeof RUNNER_ROUTES, id: string, body: unknown, signal: AbortSignal, extra: {
    timeoutMs?: number; headers?: Record<string, string>; keyGivenUp?: boolean; longestPauseMs?: number; sent?: (at: number) => void;
  } = {}): Promise<T | null> {
    const url = options.baseUrl + runnerUrl(route, options.orgId, id);
    const attempt = async (): Promise<T | null> => {
      extra.sent?.(performance.now());
      const { answer, token } = await requestWithToken(tokens, url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json', ...extra.headers },
        body: JSON.stringify(body),
      }, extra.timeoutMs ?? CALL_TIMEOUT_MS, signal);
      if (answer.status !== 401) freshRefused.delete(route);
      if (answer.status >= 200 && answer.status < 300) return parseJson(answer.text) as T | null;
      const problem = (parseJson(answer.text) ?? {}) as { code?: string; detail?: string };
      const detail = problem.detail ?? `HTTP ${answer.status}`;
      if (answer.status === 401) {
        tokens.invalidate(token);
        const now = Date.now();
        const run = freshRefused.get(route);
        // A run left over from long ago (its retries stopped, or it counted as a refusal) is not this one.
        const since = run !== undefined && now - run.last <= 5 * FRESH_TOKEN_RETRY_MS ? run.since : now;
        freshRefused.set(route, { since, last: now });
        if (now - since < (options.freshTokenGraceMs ?? FRESH_TOKEN_REFUSED_GRACE_MS)) {
          throw new Unavailable(`${route} refused a token just issued (${detail}): the server may be between two signing keys`, FRESH_TOKEN_RETRY_MS);
        }
      }
      // A 409 with Retry-After says to ask again: another request raced this one (a database
      // deadlock, say: nothing was done), or a retried log append's first try is still running
      // on the server (its answer comes to the retry). A code the runner must act on wins.
      const retryLater = answer.status === 409 && answer.headers.get('retry-after') !== null && !mustStop(problem.code)
        && !(extra.keyGivenUp === true && problem.code === IN_PROGRESS);
      if (isTransientStatus(answer.status) || retryLater) {
        throw new Unavailable(`${route} answered ${answer.status}: ${detail}`, retryAfterMs(answer.headers));
      }
      throw new Refused(answer.status, problem.code ?? `http_${answer.status}`, `${route} was refused (${answer.status}): ${detail}`);
    };
    return untilAvailable(attempt, {
      signal, onRetry: (error, n, delayMs) => options.onRetry?.(route, error, n, delayMs), ...(extra.longestPauseMs !== undefined ? { longestPauseMs: extra.longestPauseMs } : {}),
    });
  }

  /** The answer of a call that always has a body; a 2xx without one is the server misbehaving. */
  function expect<T>(route: string, value: T | null): T {
    if (value === null) throw new Refused(502, 'empty_answer', `${route} answered without a body`);
    return value;
  }

  return {
    /**
     * Long poll: a deployment with its lease and what to run, or null when none came within the
     * wait. Under an Idempotency-Key: a retry after an answer that got lost (a connection cut, a
     * server restarting) is handed the same deployment, rather than leaving it to wait out its
     * lease. Null too when that deployment is no longer this claim's (its lease ran out meanwhile,
     * or the first answer was lost with its server), and when the first claim is still held on the
     * server: a long poll that may be waiting on a node that died, whose hold would only run out
     * after the server's lock timeout. The next claim, under a new key, goes on at once; a
     * deployment the lost claim took comes back when its lease runs out.
     */
    async claim(claim: ClaimOptions, signal: AbortSignal): Promise<Claimed | null> {
      const { environments, waitSeconds, host, hostname, version } = claim;
      const body = {
        ...(environments !== undefined ? { environments } : {}), waitSeconds, ...(host !== undefined ? { host } : {}),
        ...(hostname !== undefined ? { hostname } : {}), ...(version !== undefined ? { version } : {}),
      };
      const headers = { [IDEMPOTENCY_HEADER]: randomUUID() };
      let sentAt = performance.now();
      try {
        const claimed = await call<ClaimResponseT>('claim', '', body, signal, {
          timeoutMs: claim.waitSeconds * 1000 + CLAIM_GRACE_MS, headers, keyGivenUp: true, sent: (at) => { sentAt = at; },
        });
        return claimed === null ? null : { ...claimed, heldUntil: heldUntil(claimed.lease, sentAt, performance.now() + claimed.lease.durationSeconds * 1000) };
      } catch (error) {
        if (error instanceof Refused && (error.mustStop || error.code === 'idempotency_response_lost' || error.code === IN_PROGRESS)) return null;
        throw error;
      }
    },

    /**
     * Each try waits `timeoutMs` at most (the heartbeat's interval, and never under 5 s, which a
     * loaded server may take): a node that took the connection and went silent (stopped, paused,
     * cut off) must not hold the renewal past the lease, which a try on another node would have kept.
     * Nor does a Retry-After longer than that hold the next try back: the lease runs out all the same,
     * and another node (behind the same address) may take the next try.
     */
    async heartbeat(id: string, leaseToken: string, signal: AbortSignal, timeoutMs = CALL_TIMEOUT_MS): Promise<Renewed> {
      const perTry = Math.min(Math.max(timeoutMs, HEARTBEAT_TRY_FLOOR_MS), CALL_TIMEOUT_MS);
      let sentAt = performance.now();
      const renewed = expect('heartbeat', await call<HeartbeatResponseT>('heartbeat', id, { leaseToken }, signal, {
        timeoutMs: perTry, longestPauseMs: timeoutMs, sent: (at) => { sentAt = at; },
      }));
      return { ...renewed, heldUntil: heldUntil(renewed.lease, sentAt, sentAt + renewed.lease.durationSeconds * 1000) };
    },

    /** Lines are stored once even when a retry follows an answer that got lost: the key makes the retry a replay. */
    async appendLogs(id: string, body: AppendLogsRequestT, signal: AbortSignal): Promise<AppendLogsResponseT> {
      const headers = { [IDEMPOTENCY_HEADER]: randomUUID() };
      return expect('logs', await call<AppendLogsResponseT>('logs', id, body, signal, { headers }));
    },

    /** Safe to retry as it stands: the same completion under the same lease answers the same deployment. */
    async complete(id: string, body: CompleteRequestT, signal: AbortSignal): Promise<Deployment> {
      return expect('complete', await call<Deployment>('complete', id, body, signal));
    },

    /**
     * Gives back a deployment this runner cannot finish (it is stopping): re-queued at once. Under
     * an Idempotency-Key, so that a retry after a lost answer gets that answer, not `lease_lost`.
     */
    async abandon(id: string, body: AbandonRequestT, signal: AbortSignal): Promise<Deployment> {
      const headers = { [IDEMPOTENCY_HEADER]: randomUUID() };
      return expect('abandon', await call<Deployment>('abandon', id, body, signal, { headers }));
    },

    /** Which of these deployments still serve, and (with `host`) are still this runner's (see runner.protocol.ts, steps 4 and 5). */
    async serving(body: ServingRequestT, signal: AbortSignal): Promise<string[]> {
      return expect('serving', await call<ServingResponseT>('serving', '', body, signal)).serving;
    },

    /** Serving deployments whose runner went away, now this runner's to start again (step 5). */
    async adopt(body: AdoptRequestT, signal: AbortSignal): Promise<AdoptResponseT> {
      return expect('adopt', await call<AdoptResponseT>('adopt', '', body, signal));
    },

    /** Lets go of deployments whose processes this runner stopped: another runner may adopt them at once. */
    async release(body: ReleaseRequestT, signal: AbortSignal): Promise<string[]> {
      return expect('release', await call<ReleaseResponseT>('release', '', body, signal)).released;
    },
  };
}

export type ProtocolClient = ReturnType<typeof createProtocolClient>;
