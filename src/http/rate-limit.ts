// Fixed-window rate limits kept in memory per node (limits are per node; put a shared limiter in
// front of a multi-node deployment if a global limit is needed). Answers carry the IETF
// RateLimit-Policy / RateLimit fields so clients can pace themselves before they hit 429.
import type { FastifyReply } from 'fastify';
import { LRUCache } from 'lru-cache';
import { errors } from '../platform/errors.js';

export interface RateLimitDecision {
  allowed: boolean;
  remaining: number;
  resetSeconds: number;
  headers: Record<string, string>;
}

export function createRateLimiter(options: { name: string; limit: number; windowSeconds: number }) {
  const windows = new LRUCache<string, { start: number; count: number }>({ max: 100_000 });
  const windowMs = options.windowSeconds * 1000;
  const policy = `"${options.name}";q=${options.limit};w=${options.windowSeconds}`;
  const decide = (count: number, start: number, now: number, allowed: boolean): RateLimitDecision => {
    const remaining = Math.max(0, options.limit - count);
    const resetSeconds = Math.max(1, Math.ceil((start + windowMs - now) / 1000));
    return { allowed, remaining, resetSeconds, headers: { 'ratelimit-policy': policy, ratelimit: `"${options.name}";r=${remaining};t=${resetSeconds}` } };
  };
  const current = (key: string, now: number) => {
    const entry = windows.get(key);
    return entry === undefined || now - entry.start >= windowMs ? undefined : entry;
  };
  return {
    /** Counts a request of `key`: allowed while the window has counted no more than the limit. */
    hit(key: string, now = Date.now()): RateLimitDecision {
      let entry = current(key, now);
      if (entry === undefined) {
        entry = { start: now - (now % windowMs), count: 0 };
        windows.set(key, entry);
      }
      entry.count++;
      return decide(entry.count, entry.start, now, entry.count <= options.limit);
    },

    /** Takes back a request of `key` counted in this window that turned out not to count (see its callers). */
    giveBack(key: string, now = Date.now()): void {
      const entry = current(key, now);
      if (entry !== undefined && entry.count > 0) entry.count--;
    },
  };
}

export type RateLimiter = ReturnType<typeof createRateLimiter>;

/** RateLimit-Policy and RateLimit are lists: an answer reports every limit that applied to it. */
export function reportLimit(decision: RateLimitDecision, reply: FastifyReply): RateLimitDecision {
  for (const [name, value] of Object.entries(decision.headers)) {
    const earlier = reply.getHeader(name);
    reply.header(name, earlier === undefined ? value : `${String(earlier)}, ${value}`);
  }
  return decision;
}

/** Counts a request of `key` against `limiter`, reports it on the answer, and refuses it (429) past the limit. */
export function enforceLimit(key: string, limiter: RateLimiter, reply: FastifyReply): void {
  const decision = reportLimit(limiter.hit(key), reply);
  if (!decision.allowed) throw errors.rateLimited(decision.resetSeconds);
}
