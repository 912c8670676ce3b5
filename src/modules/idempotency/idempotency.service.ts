// Idempotency keys (Stripe's model, and the IETF httpapi Idempotency-Key draft): the first request
// with a key inserts a row, which is the lock; it runs, and its response is kept for 24 hours.
// A retry with the same request gets that response again, byte for byte; the same key with a
// different request is refused; a retry while the first is still running is told to wait. Every
// bit of state is in the database, so retries may land on any node, before or after a restart.
import { createHmac, randomUUID } from 'node:crypto';
import { open, seal } from '../../platform/crypto/aead.js';
import type { IdempotencyClaim } from '../../platform/context.js';
import type { Db } from '../../platform/db/database.js';
import { errors, type AppError } from '../../platform/errors.js';
import { eventsRepo } from '../events/events.repo.js';
import { idempotencyRepo, type IdempotencyRow } from './idempotency.repo.js';
import { nowMs, nowIso, nowDate } from '../../platform/clock.js';

/** The instance key (see instance.service.ts) that seals stored response bodies. */
export const IDEMPOTENCY_SEAL_KEY = 'idempotency-key';
/** How long a key is remembered. */
export const RETENTION_MS = 24 * 3_600_000;
/**
 * A first attempt whose hold on its key was last renewed this long ago is taken to have died with
 * its node. A running request renews it every third of that (see `hold`).
 */
export const LOCK_TIMEOUT_MS = 60_000;
/** The longest a running request keeps renewing its hold. */
const MAX_HOLD_MS = 15 * 60_000;

export interface IdempotentRequest {
  /** The caller: keys of two callers never meet. */
  subject: string;
  key: string;
  method: string;
  /** As requested, query included. */
  path: string;
  /** The parsed, validated body. */
  body: unknown;
  /** If-Match and If-None-Match as sent: a request on another precondition is another request. */
  preconditions?: { ifMatch?: string | undefined; ifNoneMatch?: string | undefined };
  /** This attempt's request id, kept while it holds the key (its events carry it too). */
  requestId: string;
}

export interface StoredResponse {
  status: number;
  headers: Record<string, string>;
  body: Buffer;
}

/** Proof of holding a key, needed to record its outcome. */
export type Claim = IdempotencyClaim;

export type Admission = { kind: 'execute'; claim: Claim } | { kind: 'replay'; response: StoredResponse };

/** Key order and whitespace do not make two bodies different requests. */
export function canonicalJson(value: unknown): string {
  const sorted = (v: unknown): unknown => {
    if (Array.isArray(v)) return v.map(sorted);
    if (v !== null && typeof v === 'object') {
      return Object.fromEntries(Object.keys(v).sort().map((k) => [k, sorted((v as Record<string, unknown>)[k])]));
    }
    return v;
  };
  return JSON.stringify(sorted(value)) ?? 'null';
}

/**
 * Keyed (HMAC-SHA-256 under the instance's idempotency key), not a plain hash: a request body may
 * hold secret values, and a plain hash of a weak value could be guessed from a database dump.
 */
export function requestFingerprint(key: Buffer, request: Pick<IdempotentRequest, 'method' | 'path' | 'body' | 'preconditions'>): string {
  const hmac = createHmac('sha256', key).update(`${request.method} ${request.path}\n`);
  // Only when there are any, so that a request without them keeps the fingerprint it always had.
  const { ifMatch, ifNoneMatch } = request.preconditions ?? {};
  if (ifMatch !== undefined || ifNoneMatch !== undefined) hmac.update(`preconditions ${JSON.stringify([ifMatch ?? null, ifNoneMatch ?? null])}\n`);
  return hmac.update(canonicalJson(request.body)).digest('hex');
}

// The sealed body is bound to its row: moved to another caller's key, it does not open.
const associatedData = (subject: string, key: string) => `slipway/idempotency/${JSON.stringify([subject, key])}`;

export function createIdempotencyService(deps: { db: Db; sealKey: Buffer; lockTimeoutMs?: number }) {
  const { db, sealKey } = deps;
  const lockTimeoutMs = deps.lockTimeoutMs ?? LOCK_TIMEOUT_MS;

  function freshRow(request: IdempotentRequest, fingerprint: string, now: Date): IdempotencyRow {
    const at = now.toISOString();
    return {
      subject: request.subject, idempotency_key: request.key, method: request.method, path: request.path, fingerprint,
      state: 'in_progress', lock_token: randomUUID(), locked_at: at,
      status: null, headers: null, body_sealed: null, created_at: at, completed_at: null,
      request_id: request.requestId, committed_at: null,
    };
  }

  /** The holder of an in-progress key stopped renewing its hold: it died with its node. */
  function isAbandoned(row: IdempotencyRow, now: Date): boolean {
    return row.state === 'in_progress' && Date.parse(row.locked_at) <= now.getTime() - lockTimeoutMs;
  }

  /**
   * Free for a new request: expired, or held by an attempt that died before it changed anything.
   * One that died after committing its change keeps the key: running it again would do it twice.
   */
  function isFree(row: IdempotencyRow, now: Date): boolean {
    if (Date.parse(row.created_at) <= now.getTime() - RETENTION_MS) return true;
    return isAbandoned(row, now) && row.committed_at === null;
  }

  /** The answer to a retry of an attempt that committed and died before its response was kept. */
  async function lostResponse(row: IdempotencyRow): Promise<AppError> {
    // Its events were written after it took the key (a minute's leeway for the clock stepping
    // back), and at the latest when its change committed (their time, recorded with the commit).
    const changed = row.request_id === null || row.committed_at === null ? []
      : await eventsRepo.subjectsOfRequest(db, row.subject, row.request_id, Date.parse(row.created_at) - 60_000, row.committed_at);
    return errors.idempotencyResponseLost(row.request_id, changed);
  }

  function replayOf(row: IdempotencyRow): StoredResponse {
    return {
      status: row.status!,
      headers: JSON.parse(row.headers!) as Record<string, string>,
      body: open(sealKey, row.body_sealed!, associatedData(row.subject, row.idempotency_key)),
    };
  }

  /**
   * Whether a kept fingerprint is this request's. No body and `{}` are one request (where a route
   * takes a body at all, every field of one it may go without is optional: a bare POST
   * …/rotate-secret, then the same with `{}`); each is fingerprinted as it always was, so that
   * nodes of an older Slipway, during a rolling upgrade, take the keys of newer ones as ever.
   */
  function sameRequest(kept: string, request: IdempotentRequest, fingerprint: string): boolean {
    if (kept === fingerprint) return true;
    const empty = request.body === undefined || request.body === null || canonicalJson(request.body) === '{}';
    return empty && [undefined, {}].some((body) => requestFingerprint(sealKey, { ...request, body }) === kept);
  }

  return {
    /** Decides whether this request runs (and holds the key until `finish`) or replays the first response. */
    async admit(request: IdempotentRequest): Promise<Admission> {
      const fingerprint = requestFingerprint(sealKey, request);
      // Each pass either decides or loses a race that changed the row; a few passes always suffice
      // unless the key is being hammered, which is exactly the in-progress case.
      for (let attempt = 0; attempt < 3; attempt++) {
        const now = nowDate();
        const row = freshRow(request, fingerprint, now);
        const claim = { subject: row.subject, key: row.idempotency_key, lockToken: row.lock_token };
        if (await idempotencyRepo.insertIfAbsent(db, row)) return { kind: 'execute', claim };
        const existing = await idempotencyRepo.find(db, request.subject, request.key);
        if (existing === undefined) continue; // released or pruned since: insert again
        if (isFree(existing, now)) {
          if (await idempotencyRepo.takeOver(db, existing, row)) return { kind: 'execute', claim };
          continue;
        }
        if (!sameRequest(existing.fingerprint, request, fingerprint)) throw errors.idempotencyKeyReused(`${existing.method} ${existing.path}`);
        if (existing.state === 'in_progress') throw isAbandoned(existing, now) ? await lostResponse(existing) : errors.idempotencyRequestInProgress();
        return { kind: 'replay', response: replayOf(existing) };
      }
      throw errors.idempotencyRequestInProgress();
    },

    /**
     * Records the outcome. A 4xx was processed (the request itself is wrong, or met a conflict
     * with the state of things) and is kept like a success. The key is freed for a retry instead
     * after a 5xx (not the request's fault) and after a 409 that asks to be retried (`retryAfter`:
     * raced by another request, see errors.raced; the retry must run again), unless the request
     * had committed a change before it failed (say, a PostgreSQL connection lost during its
     * COMMIT, which went through): its retries are then told that its response was lost. False
     * when the claim was lost (taken over after the lock timeout).
     */
    async finish(claim: Claim, response: StoredResponse, opts: { retryAfter: boolean }): Promise<boolean> {
      // Not kept: a failure on our side, a conflict to retry, and a refusal of the caller itself
      // (its token expired or revoked, its role lowered while a long poll waited: nothing was done,
      // and a retry with a new token must run, not be told the old token's fate).
      if (response.status >= 500 || response.status === 401 || response.status === 403 || (response.status === 409 && opts.retryAfter)) {
        return await idempotencyRepo.release(db, claim.subject, claim.key, claim.lockToken)
          || idempotencyRepo.relinquish(db, claim.subject, claim.key, claim.lockToken);
      }
      return idempotencyRepo.complete(db, claim.subject, claim.key, claim.lockToken, {
        status: response.status,
        headers: JSON.stringify(response.headers),
        body_sealed: seal(sealKey, response.body, associatedData(claim.subject, claim.key)),
        completed_at: nowIso(),
      });
    },

    /**
     * Keeps the hold of a request that runs fresh, so that no retry takes its key over while it
     * is still running (however long it waits for a lock, say); returns the function that stops.
     */
    hold(claim: Claim): () => void {
      const until = nowMs() + MAX_HOLD_MS;
      const timer = setInterval(() => {
        // A request still running after this long is stuck, not slow: let a retry have the key.
        if (nowMs() > until) return clearInterval(timer);
        idempotencyRepo.renew(db, claim.subject, claim.key, claim.lockToken, nowIso()).catch(() => undefined);
      }, lockTimeoutMs / 3);
      timer.unref();
      return () => clearInterval(timer);
    },

    /** Frees a key whose response cannot be kept, so that a retry can run. */
    async abandon(claim: Claim): Promise<boolean> {
      return idempotencyRepo.release(db, claim.subject, claim.key, claim.lockToken);
    },

    /** Deletes expired keys (they are already ignored; this only reclaims the space). */
    async prune(): Promise<number> {
      return idempotencyRepo.deleteCreatedBefore(db, new Date(nowMs() - RETENTION_MS).toISOString());
    },
  };
}

export type IdempotencyService = ReturnType<typeof createIdempotencyService>;
