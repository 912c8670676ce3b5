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

/**
 * A bulk upsert whose first `existing` names were created beforehand (see upsertSetupBody) with
 * other values, so that they come back `updated` and the rest `created`.
 */
export interface BulkUpsertParams extends BulkSecretsParams {
  existing: number;
}

export type BulkSecretsBody = { generator: 'bulkSecrets'; params: BulkSecretsParams };
export type BulkUpsertBody = { generator: 'bulkUpsert'; params: BulkUpsertParams };

// Add new generators to this union and to makeBody.
export type BodySpec = BulkSecretsBody | BulkUpsertBody;

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

/**
 * The bulk create that makes the existing part of upsert request `seq`: the same names, values
 * that differ from the upsert's.
 */
export function upsertSetupBody(p: BulkUpsertParams, seq: number): string {
  return bulkSecrets({ ...p, count: p.existing, value: `${p.value}-before` }, seq);
}

/** The body of request number `seq` (0-based, warm-up requests included) of a job. */
export function makeBody(spec: BodySpec, seq: number): string {
  switch (spec.generator) {
    case 'bulkSecrets':
    case 'bulkUpsert':
      // An upsert body is a bulk-create body; only the setup before it differs.
      return bulkSecrets(spec.params, seq);
  }
}

/** `{{n}}` → n and `{{slot}}` → n mod slots (see RequestTemplate). */
export function fillTemplate(text: string, n: number, slots: number): string {
  return text.replaceAll('{{n}}', String(n)).replaceAll('{{slot}}', String(n % slots));
}

/** A short random tag so that names never collide across jobs and runs. */
export function randomTag(): string {
  return Math.random().toString(36).slice(2, 8).padEnd(6, '0');
}
