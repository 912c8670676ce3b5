// The deployment state graph: its states and the one table of allowed transitions, with what
// causes each. Plain data, for the schemas and the command line as much as for the server;
// deployment-state.ts moves a deployment along it.
//
//   queued ──claim──▶ in_progress ──▶ succeeded ──(a newer one succeeds)──▶ superseded
//      │                 │    ╰──────▶ failed
//      ╰──cancel──▶ cancelled ◀──cancel──╯
//   in_progress ──lease expired──▶ queued (attempt+1, up to a limit, then failed)
//
// A runner that gives its lease back (it is stopping) ends the attempt as an expiry would, at once.
import { errors } from '../../platform/errors.js';

export const DEPLOYMENT_STATES = ['queued', 'in_progress', 'succeeded', 'failed', 'cancelled', 'superseded'] as const;
export type DeploymentState = (typeof DEPLOYMENT_STATES)[number];

/** Every edge of the graph, with what causes it. */
export const TRANSITIONS: Readonly<Record<DeploymentState, Readonly<Partial<Record<DeploymentState, string>>>>> = {
  queued: { in_progress: 'a runner claims it', cancelled: 'cancel' },
  in_progress: {
    succeeded: 'the runner completes it',
    failed: 'the runner fails it, or its last allowed lease expires or is given back',
    cancelled: 'cancel',
    queued: 'its lease expires, or its runner gives it back, with attempts left (attempt + 1)',
  },
  succeeded: { superseded: 'a newer deployment of the same service and environment succeeds' },
  failed: {},
  cancelled: {},
  superseded: {},
};

/** States that hold an environment or service in use: deleting either is refused while one exists. */
export const UNFINISHED_STATES: readonly DeploymentState[] = ['queued', 'in_progress'];

/** The states that end a deployment's run (`superseded` comes later, from `succeeded`). */
export const FINISHED_STATES: readonly DeploymentState[] = ['succeeded', 'failed', 'cancelled'];

export function allowedFrom(state: DeploymentState): DeploymentState[] {
  return Object.keys(TRANSITIONS[state]) as DeploymentState[];
}

export function canTransition(from: DeploymentState, to: DeploymentState): boolean {
  return to in TRANSITIONS[from];
}

export function isDeploymentState(value: string): value is DeploymentState {
  return (DEPLOYMENT_STATES as readonly string[]).includes(value);
}

/**
 * The 409 for a move the graph does not have, listing the moves it does have from `from`; a cancel
 * of what serves says how to stop it serving (someone on call who reaches for cancel wants that).
 */
export function transitionConflict(id: string, from: DeploymentState, to: DeploymentState) {
  const hint = from === 'succeeded' && to === 'cancelled'
    ? 'It serves now: to replace it, roll back (POST …/rollback on the deployment it replaced, or slipway deployment rollback --service S --environment E) or deploy another; to stop the service, DELETE …/services/{svc}?force=true.'
    : undefined;
  return errors.invalidTransition(id, from, to, allowedFrom(from), hint);
}
