// The rules of a service spec that a schema cannot say: a command or an image, `as` only with
// `key`, every referenced secret and key exists, and each environment variable comes from one
// place only. Services check them on save; deployments check them again when they pin the secret
// versions, since secrets may have changed in between.
import type { Executor } from '../../platform/db/database.js';
import { errors, type FieldError } from '../../platform/errors.js';
import { keyDiff } from '../secrets/secret-model.js';
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
  currentVersions(executor: Executor, orgId: string, names: string[], hold?: boolean): Promise<Map<string, SecretVersionInfo>>;
}

/** What a runner's claim needs besides: the values of exact (pinned) versions, the only read of values besides reveal. */
export interface SecretStore extends SecretVersionSource {
  /** `name@version` of each pinned version that is gone (as resolveValues would find it), none decrypted. */
  missingVersions(executor: Executor, orgId: string, refs: Array<{ secretId: string; name: string; version: number }>): Promise<string[]>;
  /** The keys of pinned versions, by secret name (as `pinned` takes them), and `name@version` of each that is gone; none decrypted. */
  pinnedKeys(executor: Executor, orgId: string, refs: Array<{ secretId: string; name: string; version: number }>): Promise<{ versions: Map<string, SecretVersionInfo>; missing: string[] }>;
  /**
   * Values of exact (secret id, version) pairs, keyed by `pinnedVersionKey` (a deployment may pin
   * two versions of one secret: a promotion's carried-over one and its environment's current
   * one); throws a problem naming every `name@version` that is gone (destroyed, purged, or its
   * secret deleted for good).
   */
  resolveValues(executor: Executor, orgId: string, refs: Array<{ secretId: string; name: string; version: number }>): Promise<Map<string, Record<string, string>>>;
}

/** `as` only with `key`, as problems at `pointer`/secrets/i/as. */
function referenceProblems(refs: readonly SecretReferenceT[], pointer: string): FieldError[] {
  const problems: FieldError[] = [];
  refs.forEach((ref, i) => {
    if (ref.as !== undefined && ref.key === undefined) problems.push({ pointer: `${pointer}/secrets/${i}/as`, message: '`as` renames one key: give `key` too' });
  });
  return problems;
}

function invalid(what: string, problems: FieldError[]): never {
  throw errors.invalidRequest(`${what} is not valid: ${problems.map((p) => `${p.pointer} ${p.message}`).join('; ')}.`, problems);
}

/** Secret references with their fields in one order (a saved one compares equal to the same one given again). */
export function normalizeReferences(refs: readonly SecretReferenceT[] | undefined, pointer: string): SecretReferenceT[] {
  const problems = referenceProblems(refs ?? [], pointer);
  if (problems.length > 0) invalid('The configuration', problems);
  return (refs ?? []).map((r) => ({ secret: r.secret, ...(r.key !== undefined ? { key: r.key } : {}), ...(r.as !== undefined ? { as: r.as } : {}) }));
}

/** Variables in the order of their names: the same variables given in another order are the same, and stored alike. */
export function byName(variables: Readonly<Record<string, string>>): Record<string, string> {
  return Object.fromEntries(Object.entries(variables).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}

/** Defaults filled in, and the structural rules checked; `pointer` is where the spec sits in the body. */
export function normalizeSpec(input: ServiceSpecInput, pointer = '/spec'): ServiceSpec {
  const problems: FieldError[] = [];
  if (input.command === undefined && input.image === undefined) problems.push({ pointer: `${pointer}/command`, message: 'a spec needs a command (argv) or an image' });
  problems.push(...referenceProblems(input.secrets ?? [], pointer));
  if (problems.length > 0) invalid('The spec', problems);
  return {
    ...(input.command !== undefined ? { command: input.command } : {}),
    ...(input.image !== undefined ? { image: input.image } : {}),
    ...(input.port !== undefined ? { port: input.port } : {}),
    ...(input.healthCheck !== undefined ? { healthCheck: { path: input.healthCheck.path, timeoutSeconds: input.healthCheck.timeoutSeconds ?? DEFAULT_HEALTH_TIMEOUT_SECONDS } } : {}),
    ...(input.minReadySeconds !== undefined ? { minReadySeconds: input.minReadySeconds } : {}),
    variables: byName(input.variables ?? {}),
    secrets: normalizeReferences(input.secrets, pointer),
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

/** Plain variables and secret references, as a service's spec and an environment hold them. */
export type Configuration = Pick<ServiceSpec, 'secrets' | 'variables'>;

/**
 * Where the variables checked are written, for the pointers of a refusal: `spec` is where the spec
 * is (`/spec` in a service's body, `` in an environment's; `/service/spec`, the named service's, for
 * a deployment); `environment` the configuration of the environment deployed into (at `/environment`),
 * and `overrides` a deployment's own variables (`/variables` in its body), each laid over the ones before.
 */
export interface SpecPlace {
  spec: string;
  environment?: Configuration | undefined;
  overrides?: Readonly<Record<string, string>> | undefined;
  /**
   * The versions the spec's own references keep, by secret name, when they are pinned already (a
   * promotion carries its source's over); the environment's are pinned to the current versions.
   */
  pinned?: ReadonlyMap<string, SecretVersionInfo> | undefined;
  /** How a refusal names `overrides` when they are not only the request's (a promotion carries its source's over). */
  overridesAre?: string | undefined;
  /**
   * The secrets are held as read until the transaction ends (PostgreSQL), for a deployment: one
   * deleted, or given a new version, once it answered is not pinned as it was before.
   */
  hold?: boolean | undefined;
}

/** The fields of a spec that say what runs and how, beside its variables and secrets. */
export const RUN_FIELDS = ['command', 'image', 'port', 'healthCheck', 'minReadySeconds'] as const;
export type RunField = (typeof RUN_FIELDS)[number];
export type Change<T> = { change: 'added' | 'removed' | 'changed'; from?: T; to?: T };

/** What became of a value that differs: added, removed or changed, with the sides it has. */
export function difference<T>(was: T | undefined, is: T | undefined): Change<T> {
  return { change: was === undefined ? 'added' : is === undefined ? 'removed' : 'changed', ...(was !== undefined ? { from: was } : {}), ...(is !== undefined ? { to: is } : {}) };
}

/** The run fields that differ between two specs (`from` null: nothing before), in RUN_FIELDS' order. */
export function runFieldChanges(from: Partial<Record<RunField, unknown>> | null, to: Partial<Record<RunField, unknown>>): Array<{ field: RunField } & Change<unknown>> {
  return RUN_FIELDS.flatMap((field) => {
    const was = from?.[field];
    const is = to[field];
    return JSON.stringify(was) === JSON.stringify(is) ? [] : [{ field, ...difference(was, is) }];
  });
}

/** A reference as events name it: its secret, and the key and the name it exports it under when it takes one. */
const referenceOf = (r: SecretReferenceT) => ({ secret: r.secret, ...(r.key !== undefined ? { key: r.key } : {}), ...(r.as !== undefined ? { as: r.as } : {}) });

/**
 * What an event of a changed configuration (a service's spec, an environment's) says of it, names
 * only, never a value: the variables and secrets it holds now, and, given what it held before, the
 * variables it added, removed and gave another value, and the secret references it added and removed.
 */
export function configurationSummary(config: Configuration, before?: Configuration) {
  const holds = { variables: Object.keys(config.variables).sort(), secrets: config.secrets.map((r) => r.secret) };
  if (before === undefined) return holds;
  const named = (refs: readonly SecretReferenceT[]) => new Map(refs.map(referenceOf).map((r) => [JSON.stringify(r), r]));
  const [was, is] = [named(before.secrets), named(config.secrets)];
  return {
    ...holds,
    variableChanges: keyDiff(before.variables, config.variables, Object.keys(config.variables).sort()),
    secretChanges: { added: [...is].filter(([k]) => !was.has(k)).map(([, r]) => r), removed: [...was].filter(([k]) => !is.has(k)).map(([, r]) => r) },
  };
}

const ENVIRONMENT = '/environment';

/** One layer of configuration, in the order they are laid over each other, with its place and how a message names it. */
interface Layer {
  pointer: string;
  plain: string;
  variables: Readonly<Record<string, string>>;
  secrets: readonly SecretReferenceT[];
  /** The versions its references are pinned to, by secret name. */
  versions: ReadonlyMap<string, SecretVersionInfo>;
}

function layersOf(config: Configuration, versions: ReadonlyMap<string, SecretVersionInfo>, place: SpecPlace): Layer[] {
  const layers: Layer[] = [{ pointer: place.spec, plain: 'a plain variable', variables: config.variables, secrets: config.secrets, versions: place.pinned ?? versions }];
  if (place.environment !== undefined) layers.push({ pointer: ENVIRONMENT, plain: 'the environment\'s variables', variables: place.environment.variables, secrets: place.environment.secrets, versions });
  if (place.overrides !== undefined) layers.push({ pointer: '', plain: place.overridesAre ?? 'the deployment\'s variables', variables: place.overrides, secrets: [], versions });
  return layers;
}

/**
 * Pins each reference to the secret's current version, after checking that every named secret
 * exists (422 `unknown_secrets`, which also names the missing keys of those that do), every named
 * key exists in its secret (422 `unknown_secret_reference`), nothing sets PORT (422
 * `reserved_variable`), and no variable would be set twice (422 `variable_conflict`), whether by
 * two references or by a reference and a plain variable. Layers go over each other in order: the
 * spec's, the environment's, a deployment's own variables; a later layer's plain variables replace
 * the earlier ones' plain variables, and clash with what references export. The pinned references
 * are the spec's, then the environment's.
 */
export function pinSecretReferences(
  config: Configuration,
  versions: ReadonlyMap<string, SecretVersionInfo>,
  place: SpecPlace = { spec: '/spec' },
): PinnedSecretReferenceT[] {
  const layers = layersOf(config, versions, place);
  const unknown: FieldError[] = [];
  const missingKeys: FieldError[] = [];
  for (const layer of layers) {
    layer.secrets.forEach((ref, i) => {
      const info = layer.versions.get(ref.secret);
      if (!info) unknown.push({ pointer: `${layer.pointer}/secrets/${i}/secret`, message: `secret "${ref.secret}" does not exist, or is deleted` });
      else if (ref.key !== undefined && !info.keys.includes(ref.key)) {
        const missingKey = { pointer: `${layer.pointer}/secrets/${i}/key`, message: `secret "${ref.secret}" (version ${info.version}) has no key "${ref.key}"; it has ${info.keys.join(', ')}` };
        unknown.push(missingKey);
        missingKeys.push(missingKey);
      }
    });
  }
  if (unknown.length > 0) {
    const missing = [...new Set(layers.flatMap((l) => l.secrets.filter((ref) => !l.versions.has(ref.secret)).map((ref) => ref.secret)))];
    throw missing.length > 0 ? errors.unknownSecrets(missing, unknown, missingKeys) : errors.unknownSecretReferences(unknown);
  }

  const reserved: FieldError[] = [];
  const setsPort = (at: string, what: string) => reserved.push({ pointer: at, message: `PORT is set by ${what}` });
  for (const layer of layers) {
    if (Object.hasOwn(layer.variables, RUNNER_PORT)) setsPort(`${layer.pointer}/variables/${RUNNER_PORT}`, layer.plain);
    layer.secrets.forEach((ref, i) => {
      const info = layer.versions.get(ref.secret)!;
      if (!exportsOf(ref, info.keys).includes(RUNNER_PORT)) return;
      // A whole secret is checked against the keys it holds now: a key added later is found at the next save or deployment.
      if (ref.key === undefined) setsPort(`${layer.pointer}/secrets/${i}`, `secret "${ref.secret}", exported whole, whose version ${info.version} holds a key PORT`);
      else setsPort(`${layer.pointer}/secrets/${i}/${ref.as !== undefined ? 'as' : 'key'}`, `secret "${ref.secret}" key "${ref.key}"`);
    });
  }
  if (reserved.length > 0) throw errors.reservedVariable(reserved);

  // A clash points at the later of the two, which for a deployment's own variable is the field of
  // its request, not the service's reference that it meets.
  const source = new Map<string, { from: string; plain: boolean }>();
  const conflicts: FieldError[] = [];
  const setBy = (name: string, here: string, at: string, plain: boolean) => {
    const earlier = source.get(name);
    // A plain variable replaces an earlier layer's plain variable (a layer's own are distinct names).
    if (earlier !== undefined && !(plain && earlier.plain)) conflicts.push({ pointer: at, message: `${name} comes from ${earlier.from} and from ${here}` });
    else source.set(name, { from: here, plain });
  };
  for (const layer of layers) {
    for (const name of Object.keys(layer.variables)) setBy(name, layer.plain, `${layer.pointer}/variables/${name}`, true);
    layer.secrets.forEach((ref, i) => {
      const here = `secret "${ref.secret}"${ref.key !== undefined ? ` key "${ref.key}"` : ''}${layer.pointer === ENVIRONMENT ? ' of the environment' : ''}`;
      for (const name of exportsOf(ref, layer.versions.get(ref.secret)!.keys)) setBy(name, here, `${layer.pointer}/secrets/${i}`, false);
    });
  }
  if (conflicts.length > 0) throw errors.variableConflict(conflicts);

  return layers.flatMap((layer) => layer.secrets.map((ref) => {
    const info = layer.versions.get(ref.secret)!;
    return Object.assign({}, ref, { secretId: info.secretId, version: info.version });
  }));
}

/** Reads the current versions of the secrets the layers name, and checks and pins their references against them (see pinSecretReferences). */
export async function pinToCurrentVersions(
  source: SecretVersionSource, executor: Executor, orgId: string, config: Configuration, place?: SpecPlace,
): Promise<PinnedSecretReferenceT[]> {
  const names = referencedSecretNames([...place?.pinned !== undefined ? [] : config.secrets, ...(place?.environment?.secrets ?? [])]);
  const versions = names.length > 0 ? await source.currentVersions(executor, orgId, names, place?.hold) : new Map<string, SecretVersionInfo>();
  return pinSecretReferences(config, versions, place);
}

/** How resolveValues keys the values of one pinned version: its secret's id and the version. */
export const pinnedVersionKey = (ref: { secretId: string; version: number }): string => `${ref.secretId}@${ref.version}`;

/** A deployment's pinned secret versions, as the secret store takes them. */
export function pinnedVersions(spec: Pick<DeploymentSpecT, 'secrets'>): Array<{ secretId: string; name: string; version: number }> {
  return spec.secrets.map((r) => ({ secretId: r.secretId, name: r.secret, version: r.version }));
}

/**
 * The environment variables a deployment's secrets export, from the values of the pinned versions
 * (keyed by pinnedVersionKey: each reference reads the version it pinned, also when another
 * reference pins another version of the same secret). A version or key that is not there (destroyed since) is a 404 problem,
 * which fails the deployment.
 */
export function secretVariables(spec: Pick<DeploymentSpecT, 'secrets'>, values: ReadonlyMap<string, Readonly<Record<string, string>>>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const ref of spec.secrets) {
    const held = values.get(pinnedVersionKey(ref));
    if (held === undefined) throw errors.notFound('secret version', `${ref.secret}@${ref.version}`);
    for (const key of ref.key !== undefined ? [ref.key] : Object.keys(held)) {
      const value = held[key];
      if (value === undefined) throw errors.notFound('secret key', `${ref.secret}@${ref.version} ${key}`);
      out[ref.key !== undefined ? ref.as ?? ref.key : key] = value;
    }
  }
  return out;
}
