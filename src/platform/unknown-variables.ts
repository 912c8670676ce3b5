// SLIPWAY_* variables that no setting reads. Unnoticed, a misspelt one is worse than ignored: a
// server started with SLIPWAY_DATABSE_URL makes a new, empty instance on SQLite beside the real one.
// Every command warns of them; none refuses, as other tools' variables may share the prefix.
import { CONFIG_VARIABLES } from './config.js';

/** The reference runner's settings (`slipway runner`, an API client), by the flag each stands for. */
export const RUNNER_VARIABLES = {
  org: 'SLIPWAY_ORG',
  environment: 'SLIPWAY_ENVIRONMENTS',
  'client-id': 'SLIPWAY_CLIENT_ID',
  'client-secret': 'SLIPWAY_CLIENT_SECRET',
  'token-url': 'SLIPWAY_TOKEN_URL',
  scope: 'SLIPWAY_SCOPE',
  url: 'SLIPWAY_URL',
  concurrency: 'SLIPWAY_RUNNER_CONCURRENCY',
  'reconcile-seconds': 'SLIPWAY_RUNNER_RECONCILE_SECONDS',
  'log-level': 'SLIPWAY_LOG_LEVEL',
} as const;

/** Read by the repository's own test scripts, not by Slipway: SLIPWAY_DIST and SLIPWAY_TEST_*. */
const TEST_VARIABLE = /^SLIPWAY_(DIST$|TEST_)/;

const KNOWN = [...new Set<string>([...Object.values(CONFIG_VARIABLES), ...Object.values(RUNNER_VARIABLES)])];

export interface UnknownVariable {
  name: string;
  /** The known name it is most likely a misspelling of, when one is close. */
  closest: string | null;
}

/** The SLIPWAY_* variables of `env` that nothing reads, in name order. */
export function unknownVariables(env: Record<string, string | undefined>): UnknownVariable[] {
  return Object.keys(env)
    .filter((name) => name.startsWith('SLIPWAY_') && env[name] !== undefined && !KNOWN.includes(name) && !TEST_VARIABLE.test(name))
    .sort()
    .map((name) => ({ name, closest: closestKnown(name) }));
}

/** One line: the variable, that it is ignored, and what it may have meant. */
export function unknownVariableWarning(variable: UnknownVariable): string {
  return `${variable.name} is not a Slipway setting and is ignored${variable.closest === null ? '' : `; did you mean ${variable.closest}?`}`;
}

/**
 * The known name fewest edits away (a letter added, dropped, changed, or two swapped), if the
 * edits are few for the name's length: about one in four letters after the prefix, at most 3.
 */
function closestKnown(name: string): string | null {
  const allowed = Math.min(3, Math.max(1, Math.floor((name.length - 'SLIPWAY_'.length) / 4)));
  let best: string | null = null;
  let bestDistance = allowed + 1;
  for (const known of KNOWN) {
    const distance = editDistance(name, known);
    if (distance < bestDistance) {
      best = known;
      bestDistance = distance;
    }
  }
  return best;
}

/** Edits from `a` to `b`, a swap of two neighbouring letters counting as one (optimal string alignment). */
function editDistance(a: string, b: string): number {
  const rows = Array.from({ length: a.length + 1 }, (_, i) => Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)));
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let d = Math.min(rows[i - 1]![j]! + 1, rows[i]![j - 1]! + 1, rows[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d = Math.min(d, rows[i - 2]![j - 2]! + 1);
      rows[i]![j] = d;
    }
  }
  return rows[a.length]![b.length]!;
}
