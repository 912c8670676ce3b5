// Who is acting and on behalf of which request: passed from the HTTP layer (or the CLI) into
// every domain service call, and recorded on every event.
import type { Role } from '../modules/auth/roles.js';

export interface Actor {
  /** The service user's id, or `cli` for the operator at the command line. */
  id: string;
  kind: 'service_user' | 'cli';
  orgId: string | null;
  role: Role | null;
  instanceAdmin: boolean;
  /** Vouched for by the external issuer (SLIPWAY_EXTERNAL_ISSUER): no service user of this instance. Where it matters (the runner protocol), set. */
  external?: boolean;
}

/** Proof of holding an Idempotency-Key (see modules/idempotency). */
export interface IdempotencyClaim {
  subject: string;
  key: string;
  lockToken: string;
}

export interface RequestContext {
  requestId: string | null;
  actor: Actor;
  /**
   * The Idempotency-Key this request runs under: every transaction that records an event marks it
   * committed as well, so the request is never run again once its change is in.
   */
  idempotency?: IdempotencyClaim;
}

export const CLI_ACTOR: Actor = { id: 'cli', kind: 'cli', orgId: null, role: null, instanceAdmin: true };

/** The actor id of what Slipway does on its own (purges, lease expiry). */
export const SYSTEM_ACTOR_ID = 'system';

/**
 * Who the event log names for what Slipway does on its own (lease expiry, a webhook disabled for
 * failing): acts for no organization and with no role.
 */
export const SYSTEM_CONTEXT: RequestContext = {
  requestId: null,
  actor: { id: SYSTEM_ACTOR_ID, kind: 'cli', orgId: null, role: null, instanceAdmin: false },
};

/** Who a request is before its token is read (and stays when it has none). */
export const ANONYMOUS_ACTOR_ID = 'anonymous';

/** Actor ids that are Slipway's own, never a caller's. */
export const BUILT_IN_ACTOR_IDS: readonly string[] = [CLI_ACTOR.id, SYSTEM_ACTOR_ID, ANONYMOUS_ACTOR_ID];

export function cliContext(): RequestContext {
  return { requestId: null, actor: CLI_ACTOR };
}
