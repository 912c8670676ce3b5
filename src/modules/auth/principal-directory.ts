// What the API needs to know about a token's subject on every request (does it still exist, is it
// disabled, what is its role now) without a database read per request: cached a few seconds, and
// forgotten at once on this node when the service user changes here.
import { LRUCache } from 'lru-cache';
import type { Db } from '../../platform/db/database.js';
import type { Role } from './roles.js';

export interface SubjectState {
  orgId: string;
  role: Role;
  instanceAdmin: boolean;
  disabled: boolean;
  /** The generation of the user's tokens accepted now (each disable starts a new one). */
  tokenGeneration: number;
}

export function createPrincipalDirectory(deps: { db: Db; ttlMs?: number }) {
  const cache = new LRUCache<string, SubjectState | 'missing'>({ max: 50_000, ttl: deps.ttlMs ?? 5_000 });
  // Counts what this node forgets: a read that started before a change here finished must not put
  // the state from before the change back for the cache's lifetime.
  let forgotten = 0;
  /** What this node remembers of `subject` (null: it does not exist), or undefined when it must be read. */
  function known(subject: string): SubjectState | null | undefined {
    const hit = cache.get(subject);
    return hit === 'missing' ? null : hit;
  }

  return {
    known,
    async get(subject: string): Promise<SubjectState | null> {
      const hit = known(subject);
      if (hit !== undefined) return hit;
      const before = forgotten;
      const row = await deps.db.selectFrom('service_users').select(['org_id', 'role', 'instance_admin', 'disabled_at', 'token_generation']).where('id', '=', subject).executeTakeFirst();
      const state: SubjectState | 'missing' = row
        ? { orgId: row.org_id, role: row.role as Role, instanceAdmin: row.instance_admin === 1, disabled: row.disabled_at !== null,
          tokenGeneration: Number(row.token_generation) }
        : 'missing';
      if (forgotten === before) cache.set(subject, state);
      return state === 'missing' ? null : state;
    },
    forget(subject: string): void {
      forgotten++;
      cache.delete(subject);
    },
  };
}

export type PrincipalDirectory = ReturnType<typeof createPrincipalDirectory>;
