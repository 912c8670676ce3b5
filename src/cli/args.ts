// Flag parsing shared by every command: the command's own flags plus every configuration flag
// (`--data-dir`, `--database-url`, …), so the CLI reaches the same database as `serve`.
import { parseArgs } from 'node:util';
import { CONFIG_VARIABLES, flagName, loadConfig, type Config, type ConfigKey } from '../platform/config.js';

export class UsageError extends Error {}

type FlagSpec = Record<string, { type: 'string' | 'boolean'; short?: string }>;

const CONFIG_FLAGS: FlagSpec = Object.fromEntries((Object.keys(CONFIG_VARIABLES) as ConfigKey[]).map((k) => [flagName(k), { type: 'string' as const }]));

export interface Parsed {
  values: Record<string, string | boolean | undefined>;
  positionals: string[];
  config: () => Config;
}

export function parse(argv: string[], own: FlagSpec, env: Record<string, string | undefined>): Parsed {
  let result;
  try {
    // No command takes positional arguments: a stray word is a mistake to report, not to ignore.
    result = parseArgs({ args: argv, options: { ...CONFIG_FLAGS, ...own, json: { type: 'boolean' }, help: { type: 'boolean', short: 'h' } }, allowPositionals: false, strict: true });
  } catch (error) {
    // node:util's messages run on with advice about `--`; the first sentence is the clear part.
    throw new UsageError((error as Error).message.split(/(?<=\.) /)[0]!);
  }
  const values = result.values as Record<string, string | boolean | undefined>;
  const flags: Partial<Record<ConfigKey, string>> = {};
  for (const key of Object.keys(CONFIG_VARIABLES) as ConfigKey[]) {
    const value = values[flagName(key)];
    if (typeof value === 'string') flags[key] = value;
  }
  return { values, positionals: result.positionals, config: () => loadConfig(env, flags) };
}

export function required(values: Parsed['values'], name: string): string {
  const value = values[name];
  if (typeof value !== 'string' || value === '') throw new UsageError(`--${name} is required`);
  return value;
}
