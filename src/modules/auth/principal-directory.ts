// What the API needs to know about a token's subject on every request (does it still exist, is it
// disabled, what is its role now) without a database read per request: cached a few seconds, and
// forgotten at once on this node when the service user changes here.
import type { Db } from '../../platform/db/database.js';
import { ReadThroughCache } from '../../platform/read-through-cache.js';
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
  const ttlMs = deps.ttlMs ?? 5_000;
  const states = new ReadThroughCache<string, SubjectState>({ max: 50_000, ttlMs, load: async (subject) => {
    const row = await deps.db.selectFrom('service_users').select(['org_id', 'role', 'instance_admin', 'disabled_at', 'token_generation']).where('id', '=', subject).executeTakeFirst();
    return row && {
      orgId: row.org_id, role: row.role as Role, instanceAdmin: row.instance_admin === 1, disabled: row.disabled_at !== null,
      tokenGeneration: Number(row.token_generation),
    };
  } });

  return {
    /** What this node remembers of `subject` (null: it does not exist), or undefined when it must be read. */
    known: (subject: string) => states.known(subject),
    get: (subject: string) => states.get(subject),
    /** A fresh read, remembered from now on. */
    read: (subject: string) => states.read(subject),
    /** How old what this node remembers can be. */
    ttlMs,
    forget: (subject: string) => states.forget(subject),
  };
}

export type PrincipalDirectory = ReturnType<typeof createPrincipalDirectory>;
