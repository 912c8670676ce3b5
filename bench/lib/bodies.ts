// Request bodies generated per request, shared by the load process (which
// builds them) and the orchestrator (which uses them for preflight checks).
// A body generator is named in the job, so the job stays plain JSON.

export interface BulkSecretsParams {
  /** Secrets per request. */
  count: number;
  /** Unique per job; names are `${prefix}-${seq}-${i}`. Lowercase letters, digits, '-'. */
  prefix: string;
  keys: string[];
  value: string;
}

// Add new generators to this union and to makeBody (e.g. a bulk upsert where
// half of the names already exist).
export type BodySpec = { generator: 'bulkSecrets'; params: BulkSecretsParams };

export function secretName(prefix: string, seq: number, index: number): string {
  return `${prefix}-${seq}-${index}`;
}

function bulkSecrets(p: BulkSecretsParams, seq: number): string {
  const values: Record<string, string> = {};
  for (const key of p.keys) values[key] = p.value;
  const secrets = new Array<{ name: string; values: Record<string, string> }>(p.count);
  for (let i = 0; i < p.count; i++) secrets[i] = { name: secretName(p.prefix, seq, i), values };
  return JSON.stringify({ secrets });
}

/** The body of request number `seq` (0-based, warm-up requests included) of a job. */
export function makeBody(spec: BodySpec, seq: number): string {
  switch (spec.generator) {
    case 'bulkSecrets':
      return bulkSecrets(spec.params, seq);
  }
}

/** A short random tag so that names never collide across jobs and runs. */
export function randomTag(): string {
  return Math.random().toString(36).slice(2, 8).padEnd(6, '0');
}
