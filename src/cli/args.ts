// Flag parsing shared by every command: the command's own flags plus every configuration flag
// (`--data-dir`, `--database-url`, …), so the CLI reaches the same database as `serve`.
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { CONFIG_VARIABLES, flagName, loadConfig, type Config, type ConfigKey } from '../platform/config.js';
import { unknownVariables, unknownVariableWarning, type UnknownVariable } from '../platform/unknown-variables.js';

export class UsageError extends Error {}

/**
 * A command's own definite no, exit 1: what it was asked for cannot be done as things stand (its
 * message says what to change); `code` names the reason for --json.
 */
export class Refusal extends Error {
  constructor(readonly code: string, message: string) {
    super(message);
  }
}

type FlagValues = Partial<Record<string, string | string[] | boolean | undefined>>;

/**
 * A flag's text, or undefined when it is absent. An empty one is refused rather than taken for
 * absent: it is usually a variable that was not set (`--revision "$GIT_SHA"` outside the CI).
 * `what` says what to give.
 */
export function flagText(flags: FlagValues, flag: string, what: string): string | undefined {
  const value = flags[flag];
  if (value === '') throw new UsageError(`--${flag} is empty (an unset variable?): give ${what}, or leave the flag out`);
  return typeof value === 'string' ? value : undefined;
}

/**
 * What node:util's parseArgs refused, as one line: its messages run on, over several lines, with
 * advice about `--`; the first sentence is the clear part. A value that begins with a dash (a
 * reason, a revision, a signing key's kid) goes with `=`: that is worth saying.
 */
export function commandLineError(error: unknown): UsageError {
  const message = (error as Error).message;
  const ambiguous = /^Option '(--[a-z-]+)'(?: <value>)? argument is ambiguous/.exec(message);
  if (ambiguous) return new UsageError(`${ambiguous[1]} needs a value; one that begins with a dash goes after =, as in ${ambiguous[1]}=-XYZ`);
  return new UsageError(message.split(/(?<=\.)\s/)[0]!);
}

/** A flag's text, which must be given and not empty: `what` says what it is. */
export function requiredFlagText(flags: FlagValues, flag: string, what: string): string {
  const value = flags[flag];
  if (value === '') throw new UsageError(`--${flag} is empty (an unset variable?): give ${what}`);
  if (typeof value !== 'string') throw new UsageError(`--${flag} is required: ${what}`);
  return value;
}

/**
 * A flag's whole number from `min` to `max`, `fallback` when it is absent; anything else is a usage
 * error naming the flag, its bounds and what was given (`unit` reads after "whole number").
 */
export function wholeNumberFlag(value: unknown, flag: string, bounds: { min: number; max: number; fallback: number }, unit = ''): number {
  if (value === undefined) return bounds.fallback;
  if (typeof value !== 'string' || !/^\d+$/.test(value) || Number(value) < bounds.min || Number(value) > bounds.max) {
    throw new UsageError(`--${flag} must be a whole number${unit} from ${bounds.min} to ${bounds.max}, got "${String(value)}"`);
  }
  return Number(value);
}

type FlagSpec = Record<string, { type: 'string' | 'boolean'; short?: string; multiple?: boolean }>;

const CONFIG_FLAGS: FlagSpec = Object.fromEntries((Object.keys(CONFIG_VARIABLES) as ConfigKey[]).map((k) => [flagName(k), { type: 'string' as const }]));

export interface Parsed {
  /** A flag that may be repeated (`multiple`) is read with `repeated`. */
  values: Record<string, string | boolean | undefined>;
  positionals: string[];
  config: () => Config;
  /** SLIPWAY_* variables that no setting reads (a misspelt one, say). */
  unknownVariables: UnknownVariable[];
}

/** A warning on stderr: a line of its own, or with --json a JSON line as the log's are. */
export function printWarning(json: boolean, warning: string): void {
  process.stderr.write(json ? `${JSON.stringify({ level: 'warn', msg: warning })}\n` : `slipway: warning: ${warning}\n`);
}

/**
 * A command line's flags, strictly: no positional word, no unknown flag, and no flag that takes one
 * value given twice (`--file a.json --file b.json`), which would keep the last and drop the others
 * without a word; a flag declared `multiple` is given as often as wanted.
 */
export function parseFlags(args: string[], options: NonNullable<ParseArgsConfig['options']>): { values: Record<string, string | boolean | string[] | undefined>; positionals: string[] } {
  let result;
  try {
    result = parseArgs({ args, options, allowPositionals: false, strict: true, tokens: true });
  } catch (error) {
    throw commandLineError(error);
  }
  const seen = new Set<string>();
  for (const token of result.tokens) {
    if (token.kind !== 'option' || options[token.name]?.type !== 'string' || options[token.name]?.multiple === true) continue;
    if (seen.has(token.name)) throw new UsageError(`--${token.name} is given more than once; it takes one value: give it once`);
    seen.add(token.name);
  }
  return { values: result.values as Record<string, string | boolean | string[] | undefined>, positionals: result.positionals };
}

/**
 * The command's flags and the configuration's. Warns on stderr of a key given as a flag, and of
 * each SLIPWAY_* variable that no setting reads, unless `logsUnknownVariables`: `serve` puts those
 * in its log instead, once (not once in each of its workers).
 */
export function parse(argv: string[], own: FlagSpec, env: Record<string, string | undefined>, options: { logsUnknownVariables?: boolean } = {}): Parsed {
  // No command takes positional arguments: a stray word is a mistake to report, not to ignore.
  const result = parseFlags(argv, { ...CONFIG_FLAGS, ...own, json: { type: 'boolean' }, help: { type: 'boolean', short: 'h' } });
  const values = result.values as Parsed['values'];
  for (const flag of ['master-key', 'master-key-previous']) {
    if (values[flag] === undefined) continue;
    // As with the runner's --client-secret: a key on the command line is visible to anyone who can list processes.
    printWarning(values.json === true, `--${flag} shows the key to anyone who can list processes (ps): prefer SLIPWAY_${flag.replace(/-/g, '_').toUpperCase()} or the key file`);
  }
  const unknown = unknownVariables(env);
  if (options.logsUnknownVariables !== true) for (const variable of unknown) printWarning(values.json === true, unknownVariableWarning(variable));
  const flags: Partial<Record<ConfigKey, string>> = {};
  for (const key of Object.keys(CONFIG_VARIABLES) as ConfigKey[]) {
    const value = values[flagName(key)];
    if (typeof value === 'string') flags[key] = value;
  }
  return { values, positionals: result.positionals, config: () => loadConfig(env, flags), unknownVariables: unknown };
}

export function required(values: Parsed['values'], name: string): string {
  const value = values[name];
  if (typeof value !== 'string' || value === '') throw new UsageError(`--${name} is required`);
  return value;
}

/**
 * Environments given as a repeated flag, each perhaps a comma-separated list. One given empty
 * (`--environment "$ENV"` with ENV unset) is a mistake, never "every environment": `otherwise`
 * says what to do instead.
 */
export function environmentsGiven(values: string[], name: string, otherwise: string): string[] {
  const environments = values.flatMap((e) => e.split(',')).map((e) => e.trim()).filter((e) => e !== '');
  if (environments.length === 0 || values.some((v) => v.split(',').every((e) => e.trim() === ''))) {
    throw new UsageError(`${name} is given but names no environment; name one, or ${otherwise}`);
  }
  return environments;
}

/** The values of a flag declared `multiple` (undefined when it is not given). */
export function repeated(values: Parsed['values'], name: string): string[] | undefined {
  const value: unknown = values[name];
  if (value === undefined) return undefined;
  return Array.isArray(value) ? value.map(String) : [String(value)];
}
