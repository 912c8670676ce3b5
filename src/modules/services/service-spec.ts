// The rules of a service spec that a schema cannot say: a command or an image, `as` only with
// `key`, every referenced secret and key exists, and each environment variable comes from one
// place only. Services check them on save; deployments check them again when they pin the secret
// versions, since secrets may have changed in between.
import type { Executor } from '../../platform/db/database.js';
import { errors, type FieldError } from '../../platform/errors.js';
import { DEFAULT_HEALTH_TIMEOUT_SECONDS, type DeploymentSpecT, type PinnedSecretReferenceT, type SecretReferenceT, type ServiceSpec, type ServiceSpecInput } from './services.schemas.js';

/** What the secret store tells us about a secret's current version. */
export interface SecretVersionInfo {
  secretId: string;
  version: number;
  keys: string[];
}

/** The one capability services and deployments need from the secret store to check and pin references. */
export interface SecretVersionSource {
  /** Current version and keys per name, of the names whose secret exists (a deleted one does not). */
  currentVersions(executor: Executor, orgId: string, names: string[]): Promise<Map<string, SecretVersionInfo>>;
}

/** What a runner's claim needs besides: the values of exact (pinned) versions, the only read of values besides reveal. */
export interface SecretStore extends SecretVersionSource {
  /** `name@version` of each pinned version that is gone (as resolveValues would find it), none decrypted. */
  missingVersions(executor: Executor, orgId: string, refs: Array<{ secretId: string; name: string; version: number }>): Promise<string[]>;
  /**
   * Values per secret id, of exact (secret id, version) pairs; throws a problem naming every
   * `name@version` that is gone (destroyed, purged, or its secret deleted for good).
   */
  resolveValues(executor: Executor, orgId: string, refs: Array<{ secretId: string; name: string; version: number }>): Promise<Map<string, Record<string, string>>>;
}

/** Defaults filled in, and the structural rules checked; `pointer` is where the spec sits in the body. */
export function normalizeSpec(input: ServiceSpecInput, pointer = '/spec'): ServiceSpec {
  const problems: FieldError[] = [];
  if (input.command === undefined && input.image === undefined) problems.push({ pointer: `${pointer}/command`, message: 'a spec needs a command (argv) or an image' });
  (input.secrets ?? []).forEach((ref, i) => {
    if (ref.as !== undefined && ref.key === undefined) problems.push({ pointer: `${pointer}/secrets/${i}/as`, message: '`as` renames one key: give `key` too' });
  });
  if (problems.length > 0) throw errors.invalidRequest(`The spec is not valid: ${problems.map((p) => `${p.pointer} ${p.message}`).join('; ')}.`, problems);
  return {
    ...(input.command !== undefined ? { command: input.command } : {}),
    ...(input.image !== undefined ? { image: input.image } : {}),
    ...(input.port !== undefined ? { port: input.port } : {}),
    ...(input.healthCheck !== undefined ? { healthCheck: { path: input.healthCheck.path, timeoutSeconds: input.healthCheck.timeoutSeconds ?? DEFAULT_HEALTH_TIMEOUT_SECONDS } } : {}),
    variables: input.variables ?? {},
    secrets: (input.secrets ?? []).map((r) => ({ secret: r.secret, ...(r.key !== undefined ? { key: r.key } : {}), ...(r.as !== undefined ? { as: r.as } : {}) })),
  };
}

function referencedSecretNames(refs: readonly SecretReferenceT[]): string[] {
  return [...new Set(refs.map((r) => r.secret))];
}

/**
 * The variable a runner sets itself, to the port it picks for the process, over any other value: a
 * spec or deployment that sets it would be ignored without a word (a spec's `port` is how a
 * service asks runners that do not pick one).
 */
const RUNNER_PORT = 'PORT';

/** The variables each reference exports, given the keys its secret holds. */
function exportsOf(ref: SecretReferenceT, keys: readonly string[]): string[] {
  return ref.key !== undefined ? [ref.as ?? ref.key] : [...keys];
}

/**
 * Where the variables checked are written, for the pointers of a refusal: `spec` is where the spec
 * is (`/spec` in a service's body; `/service/spec`, the named service's, for a deployment), and
 * `overrides` a deployment's own variables (`/variables` in its body), laid over the spec's.
 */
export interface SpecPlace {
  spec: string;
  overrides?: Readonly<Record<string, string>> | undefined;
}

/**
 * Pins each reference to the secret's current version, after checking that every named secret
 * exists (422 `unknown_secrets`, which also names the missing keys of those that do), every named
 * key exists in its secret (422 `unknown_secret_reference`), nothing sets PORT (422
 * `reserved_variable`), and no variable would be set twice (422 `variable_conflict`), whether by
 * two references or by a reference and a plain variable (a deployment's own variables replace the
 * spec's plain ones, and clash with what references export).
 */
export function pinSecretReferences(
  refs: readonly SecretReferenceT[],
  variables: Readonly<Record<string, string>>,
  versions: ReadonlyMap<string, SecretVersionInfo>,
  place: SpecPlace = { spec: '/spec' },
): PinnedSecretReferenceT[] {
  const pointer = place.spec;
  const unknown: FieldError[] = [];
  const missingKeys: FieldError[] = [];
  refs.forEach((ref, i) => {
    const info = versions.get(ref.secret);
    if (!info) unknown.push({ pointer: `${pointer}/secrets/${i}/secret`, message: `secret "${ref.secret}" does not exist, or is deleted` });
    else if (ref.key !== undefined && !info.keys.includes(ref.key)) {
      const missingKey = { pointer: `${pointer}/secrets/${i}/key`, message: `secret "${ref.secret}" (version ${info.version}) has no key "${ref.key}"; it has ${info.keys.join(', ')}` };
      unknown.push(missingKey);
      missingKeys.push(missingKey);
    }
  });
  if (unknown.length > 0) {
    const missing = referencedSecretNames(refs).filter((name) => !versions.has(name));
    throw missing.length > 0 ? errors.unknownSecrets(missing, unknown, missingKeys) : errors.unknownSecretReferences(unknown);
  }

  const reserved: FieldError[] = [];
  const setsPort = (at: string, what: string) => reserved.push({ pointer: at, message: `PORT is set by ${what}` });
  if (Object.hasOwn(variables, RUNNER_PORT)) setsPort(`${pointer}/variables/${RUNNER_PORT}`, 'a plain variable');
  refs.forEach((ref, i) => {
    const info = versions.get(ref.secret)!;
    if (!exportsOf(ref, info.keys).includes(RUNNER_PORT)) return;
    // A whole secret is checked against the keys it holds now: a key added later is found at the next save or deployment.
    if (ref.key === undefined) setsPort(`${pointer}/secrets/${i}`, `secret "${ref.secret}", exported whole, whose version ${info.version} holds a key PORT`);
    else setsPort(`${pointer}/secrets/${i}/${ref.as !== undefined ? 'as' : 'key'}`, `secret "${ref.secret}" key "${ref.key}"`);
  });
  if (place.overrides !== undefined && Object.hasOwn(place.overrides, RUNNER_PORT)) setsPort(`/variables/${RUNNER_PORT}`, 'the deployment\'s variables');
  if (reserved.length > 0) throw errors.reservedVariable(reserved);

  // In the order they are laid over each other: plain variables, each reference, then a deployment's
  // own variables. A clash points at the later of the two, which for a deployment's own variable
  // is the field of its request, not the service's reference that it meets.
  const source = new Map<string, string>(Object.keys(variables).map((name) => [name, 'a plain variable']));
  const conflicts: FieldError[] = [];
  const setBy = (name: string, here: string, at: string) => {
    const earlier = source.get(name);
    if (earlier !== undefined) conflicts.push({ pointer: at, message: `${name} comes from ${earlier} and from ${here}` });
    else source.set(name, here);
  };
  refs.forEach((ref, i) => {
    const here = `secret "${ref.secret}"${ref.key !== undefined ? ` key "${ref.key}"` : ''}`;
    for (const name of exportsOf(ref, versions.get(ref.secret)!.keys)) setBy(name, here, `${pointer}/secrets/${i}`);
  });
  for (const name of Object.keys(place.overrides ?? {})) {
    if (!Object.hasOwn(variables, name)) setBy(name, 'the deployment\'s variables', `/variables/${name}`);
  }
  if (conflicts.length > 0) throw errors.variableConflict(conflicts);

  return refs.map((ref) => {
    const info = versions.get(ref.secret)!;
    return Object.assign({}, ref, { secretId: info.secretId, version: info.version });
  });
}

/** Reads the current versions of the secrets the spec names, and checks and pins its references against them (see pinSecretReferences). */
export async function pinToCurrentVersions(
  source: SecretVersionSource, executor: Executor, orgId: string, spec: Pick<ServiceSpec, 'secrets' | 'variables'>, place?: SpecPlace,
): Promise<PinnedSecretReferenceT[]> {
  const names = referencedSecretNames(spec.secrets);
  const versions = names.length > 0 ? await source.currentVersions(executor, orgId, names) : new Map<string, SecretVersionInfo>();
  return pinSecretReferences(spec.secrets, spec.variables, versions, place);
}

/** A deployment's pinned secret versions, as the secret store takes them. */
export function pinnedVersions(spec: Pick<DeploymentSpecT, 'secrets'>): Array<{ secretId: string; name: string; version: number }> {
  return spec.secrets.map((r) => ({ secretId: r.secretId, name: r.secret, version: r.version }));
}

/**
 * The environment variables a deployment's secrets export, from the values of the pinned versions
 * (keyed by secret id). A version or key that is not there (destroyed since) is a 404 problem,
 * which fails the deployment.
 */
export function secretVariables(spec: Pick<DeploymentSpecT, 'secrets'>, values: ReadonlyMap<string, Readonly<Record<string, string>>>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const ref of spec.secrets) {
    const held = values.get(ref.secretId);
    if (held === undefined) throw errors.notFound('secret version', `${ref.secret}@${ref.version}`);
    for (const key of ref.key !== undefined ? [ref.key] : Object.keys(held)) {
      const value = held[key];
      if (value === undefined) throw errors.notFound('secret key', `${ref.secret}@${ref.version} ${key}`);
      out[ref.key !== undefined ? ref.as ?? ref.key : key] = value;
    }
  }
  return out;
}
