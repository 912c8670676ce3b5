// Fixed-window rate limits kept in memory per node (limits are per node; put a shared limiter in
// front of a multi-node deployment if a global limit is needed). Answers carry the IETF
// RateLimit-Policy / RateLimit fields so clients can pace themselves before they hit 429.
import { LRUCache } from 'lru-cache';

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
  return {
    hit(key: string, now = Date.now()): RateLimitDecision {
      let entry = windows.get(key);
      if (entry === undefined || now - entry.start >= windowMs) {
        entry = { start: now - (now % windowMs), count: 0 };
        windows.set(key, entry);
      }
      entry.count++;
      const remaining = Math.max(0, options.limit - entry.count);
      const resetSeconds = Math.max(1, Math.ceil((entry.start + windowMs - now) / 1000));
      return {
        allowed: entry.count <= options.limit,
        remaining,
        resetSeconds,
        headers: { 'ratelimit-policy': policy, ratelimit: `"${options.name}";r=${remaining};t=${resetSeconds}` },
      };
    },
  };
}

export type RateLimiter = ReturnType<typeof createRateLimiter>;
