// `slipway secret`: an organization's secrets through the API, as a service user (viewer to list,
// developer to change, admin or owner to reveal and restore), for a shell or a CI job: import a
// `.env` file, set or remove keys, reveal values as `.env` lines, list, delete and restore.
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import { AppError } from '../platform/errors.js';
import { formatDotenv, parseDotenv } from '../platform/dotenv.js';
import { unknownVariables, unknownVariableWarning } from '../platform/unknown-variables.js';
import { API_CLIENT_FLAGS, API_CLIENT_VARIABLES, apiClientFlagHelp, apiClientSettings, deleteResource, everyItem, patientCaller, subcommandFlags, type PatientCall } from './api-client.js';
import { printWarning, UsageError } from './args.js';
import { failed, flagTable, printFields, printJson, printTable } from './output.js';
import { SECRET_NAME_PATTERN, SecretName } from '../modules/secrets/secrets.schemas.js';
import { SECRET_USAGE } from './usage.js';

/** How long a call is tried again while the server is unavailable. */
const RETRY_MS = 60_000;

type Env = Record<string, string | undefined>;
type Flags = Partial<Record<string, string | string[] | boolean>>;

const COMMON = { ...API_CLIENT_FLAGS, json: { type: 'boolean' }, help: { type: 'boolean', short: 'h' } } as const;
const NAME = { name: { type: 'string' } } as const;

const SUBCOMMANDS = {
  list: { ...COMMON, prefix: { type: 'string' }, deleted: { type: 'boolean' } },
  show: { ...COMMON, ...NAME },
  versions: { ...COMMON, ...NAME },
  usage: { ...COMMON, ...NAME },
  import: { ...COMMON, ...NAME, 'from-file': { type: 'string' }, force: { type: 'boolean' }, 'dry-run': { type: 'boolean' } },
  set: { ...COMMON, ...NAME, set: { type: 'string', multiple: true }, unset: { type: 'string', multiple: true }, 'from-file': { type: 'string' }, force: { type: 'boolean' } },
  reveal: { ...COMMON, ...NAME, version: { type: 'string' }, format: { type: 'string' } },
  delete: { ...COMMON, ...NAME, permanent: { type: 'boolean' }, 'ignore-not-found': { type: 'boolean' }, force: { type: 'boolean' } },
  restore: { ...COMMON, ...NAME, version: { type: 'string' } },
} as const;
type Subcommand = keyof typeof SUBCOMMANDS;

export const SECRET_HELP = `usage:
${SECRET_USAGE.map((line) => `  ${line}\n`).join('')}
An organization's secrets through the API, as a service user: viewer to list and show, developer to
import, set and delete, admin or owner to reveal, restore and delete permanently. Values go to the
server and come back only from reveal (audited); nothing else prints them.

  usage    where it is used: the services and environments that name it, and the deployments
           queued, running or serving that pinned a version of it (which versions)
  import   the secret holds exactly the file's keys from now on: created if missing, a new version
           if the values differ (saying which keys it added, removed and changed), "unchanged" if
           not (as the console's .env import). Refused, with nothing sent, when it would remove a
           key that a service or an environment takes by name, unless --force. --dry-run: says
           what it would do and which keys it would add, remove and change; nothing is changed
  set      gives some keys new values and removes others (--unset), keeping the rest; creates the
           secret when it does not exist yet and nothing is removed. Refused, as import is, to
           --unset a key that a service or an environment takes by name, unless --force
  reveal   prints the values as .env lines (--format env, the default), which import and set read
           back unchanged, or as a JSON object (--format json); --json prints the API's answer.
           A value with $, \` or ~ is single-quoted, which a shell or Compose reading the file
           leaves as it is; one with a quote, a backslash or a line break is double-quoted, with
           \\$ and \\\` escaped, so that a shell sourcing the file runs and expands nothing (it
           keeps \\n and \\t as written: only a .env reader turns them back)
  delete   restorable by an admin for SLIPWAY_SECRET_RETENTION_DAYS; --permanent destroys every
           version now (admin, owner). Refused while a service or an environment takes it
           (secret_in_use: their next deployment would fail), unless --force.
           --ignore-not-found: none by that name (or, without --permanent, one deleted
           already) is no refusal (exit 0, "nothing to delete")
  restore  brings back a deleted secret, or with --version N makes version N's values current again

.env files follow dotenv's rules, but for one: KEY=value lines, \`export\` allowed, # comments,
single quotes and backquotes as written, double quotes with \\n \\r \\t \\" \\\\ \\$ \\\` escapes, a
quoted value over several lines; a # ends an unquoted value only after a space or a tab
(PASS=abc#def is abc#def, as Compose reads it). A line that cannot be read, a quote never closed, or a key given
twice, refuses the whole file with its line number. --from-file - reads standard input: prefer it
to --set for values, which anyone who can list processes (ps) sees on the command line.

Exit status: 0 done; 1 refused by the server or unreachable (tried again for ${RETRY_MS / 1000} s); 2 a usage
error. Credentials come from flags, SLIPWAY_* variables or a credentials file, in that order:

${flagTable(apiClientFlagHelp('calling').map(([flag, arg, text]) => [`--${flag} ${arg}`, flag in API_CLIENT_VARIABLES ? API_CLIENT_VARIABLES[flag as keyof typeof API_CLIENT_VARIABLES] : '', text]))}`;

interface Metadata { name: string; version: number; keys: string[]; createdAt: string; updatedAt: string; deletedAt?: string; restorableUntil?: string }
interface SecretUsage {
  name: string;
  services: Array<{ id: string; name: string; keys: string[] | null }>;
  environments: Array<{ id: string; name: string; keys: string[] | null }>;
  deployments: Array<{ id: string; state: string; service: { name: string }; environment: { name: string }; versions: number[] }>;
}
interface Change extends Metadata { result: 'created' | 'updated' | 'unchanged' | 'restored'; keyChanges?: { added: string[]; removed: string[]; changed: string[] } }

/** `; added A, removed B, changed C`: what a new version did to the keys, by name. */
function keyChangesOf(change: Change): string {
  const parts = change.keyChanges === undefined ? [] : (['added', 'removed', 'changed'] as const)
    .filter((what) => change.keyChanges![what].length > 0).map((what) => `${what} ${change.keyChanges![what].join(' ')}`);
  return parts.length > 0 ? `; ${parts.join(', ')}` : '';
}

function named(flags: Flags): string {
  const name = flags.name;
  if (typeof name !== 'string' || name === '') throw new UsageError('--name is required: the secret\'s name');
  // As the API names secrets: refused here, naming the flag, rather than by the API pointing at its path.
  if (!new RegExp(SECRET_NAME_PATTERN).test(name)) throw new UsageError(`--name must be a secret's name: ${SecretName.description}`);
  return name;
}

function versionNumber(flags: Flags): number | undefined {
  if (flags.version === undefined) return undefined;
  const text = String(flags.version);
  if (!/^[1-9]\d{0,15}$/.test(text)) throw new UsageError(`--version must be a version number (1, 2, …), got "${text}"`);
  return Number(text);
}

/** A `.env` file's values (`-`: standard input); every line it cannot read is named. */
export function readDotenvFile(file: string, read: (file: string | number) => string = (f) => fs.readFileSync(f, 'utf8')): Record<string, string> {
  let text: string;
  try {
    text = read(file === '-' ? 0 : file);
  } catch (error) {
    throw new UsageError(`--from-file ${file}: cannot read it (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`);
  }
  const { values, problems } = parseDotenv(text);
  const where = file === '-' ? 'standard input' : file;
  // Never the line's text: it may hold a value.
  if (problems.length > 0) throw new UsageError(`--from-file ${where} is not .env text, nothing was sent: ${problems.map((p) => `line ${p.line} ${p.message}`).join('; ')}`);
  if (Object.keys(values).length === 0) throw new UsageError(`--from-file ${where} holds no KEY=value line`);
  return values;
}

/** `--set K=V`… and `--from-file`, one value per key; `--unset K`…, none of them set too. */
function changes(flags: Flags): { set: Record<string, string>; unset: string[] } {
  const set = new Map<string, string>();
  const from = new Map<string, string>();
  if (typeof flags['from-file'] === 'string') {
    for (const [key, value] of Object.entries(readDotenvFile(flags['from-file']))) { set.set(key, value); from.set(key, `--from-file ${flags['from-file']}`); }
  }
  for (const pair of Array.isArray(flags.set) ? flags.set : []) {
    const at = pair.indexOf('=');
    // Only the key in the message: the rest may be a value.
    if (at <= 0) throw new UsageError(`--set must be KEY=VALUE, got one without "=" (or without a key)${at === -1 && /^[A-Za-z_]\w*$/.test(pair) ? `: "${pair}"` : ''}`);
    const key = pair.slice(0, at);
    if (set.has(key)) throw new UsageError(`--set ${key} is given twice${from.has(key) ? ` (also in ${from.get(key)})` : ''}`);
    set.set(key, pair.slice(at + 1));
  }
  const unset = Array.isArray(flags.unset) ? flags.unset : [];
  for (const key of unset) {
    if (set.has(key)) throw new UsageError(`${key} is both set and --unset`);
  }
  if (new Set(unset).size !== unset.length) throw new UsageError('--unset names a key twice');
  if (set.size === 0 && unset.length === 0) throw new UsageError('nothing to change: give --set K=V, --unset K or --from-file FILE');
  return { set: Object.fromEntries(set), unset };
}

function formatOf(flags: Flags): 'env' | 'json' {
  const format = flags.format ?? 'env';
  if (format !== 'env' && format !== 'json') throw new UsageError(`--format must be env or json, got "${String(format)}"`);
  return format;
}

export async function secretCommand(argv: string[], env: Env): Promise<number> {
  const asked = subcommandFlags(argv, SUBCOMMANDS, SECRET_HELP, 'secret');
  if (asked === null) return 0;
  const { sub, flags } = asked;
  const json = flags.json === true;
  for (const variable of unknownVariables(env)) printWarning(json, unknownVariableWarning(variable));

  // Everything the command line can get wrong is refused before a token is asked for.
  const name = sub === 'list' ? '' : named(flags);
  const change = sub === 'set' ? changes(flags) : undefined;
  const imported = sub === 'import' ? readDotenvFile(typeof flags['from-file'] === 'string' ? flags['from-file'] : missingFile()) : undefined;
  const version = sub === 'reveal' || sub === 'restore' ? versionNumber(flags) : undefined;
  const format = sub === 'reveal' ? formatOf(flags) : 'env';

  const settings = apiClientSettings(flags, env);
  const call = patientCaller(settings, { json, retryMs: RETRY_MS, unanswered: 'check with slipway secret show whether the change was made' });
  const secrets = `/v1/orgs/${encodeURIComponent(settings.orgId)}/secrets`;
  const one = `${secrets}/${encodeURIComponent(name)}`;
  const said = (change: Change, dryRun = false): number => {
    if (json) printJson(dryRun ? { ...change, dryRun } : change);
    else {
      const result = change.result === 'unchanged' ? `unchanged, still version ${change.version}` : dryRun ? `would be ${change.result} as version ${change.version}` : `${change.result}, version ${change.version}`;
      process.stdout.write(`secret ${change.name}: ${result} (keys ${change.keys.join(' ')}${keyChangesOf(change)})${dryRun ? '; a dry run: nothing was changed' : ''}\n`);
    }
    return 0;
  };

  const everyPage = <T>(path: string, query: URLSearchParams, field: string) => everyItem<T>(call, path, query, field);

  switch (sub as Subcommand) {
    case 'list': {
      const query = new URLSearchParams();
      if (typeof flags.prefix === 'string' && flags.prefix !== '') query.set('prefix', flags.prefix);
      if (flags.deleted === true) query.set('deleted', 'true');
      const all = await everyPage<Metadata>(secrets, query, 'secrets');
      if (json) printJson({ secrets: all });
      else if (flags.deleted === true) printTable(all.map((s) => ({ name: s.name, version: s.version, deleted: s.deletedAt ?? '', restorable_until: s.restorableUntil ?? '' })), ['name', 'version', 'deleted', 'restorable_until']);
      else printTable(all.map((s) => ({ name: s.name, version: s.version, keys: s.keys.join(' '), updated: s.updatedAt })), ['name', 'version', 'keys', 'updated']);
      return 0;
    }
    case 'show': {
      const secret = await call<Metadata>('GET', one);
      if (json) printJson(secret);
      else printFields({ name: secret.name, version: secret.version, keys: secret.keys.join(' '), created: secret.createdAt, updated: secret.updatedAt });
      return 0;
    }
    case 'versions': {
      const all = await everyPage<{ version: number; keys: string[]; createdAt: string; createdBy: string | null }>(`${one}/versions`, new URLSearchParams(), 'versions');
      if (json) printJson({ versions: all });
      else printTable(all.map((v) => ({ version: v.version, keys: v.keys.join(' '), created: v.createdAt, by: v.createdBy })), ['version', 'keys', 'created', 'by']);
      return 0;
    }
    case 'usage': {
      const used = await call<SecretUsage>('GET', `${one}/usage`);
      if (json) printJson(used);
      else {
        const keys = (k: string[] | null) => (k === null ? '(all keys)' : k.join(' '));
        printTable([
          ...used.services.map((s) => ({ used_by: 'service', name: s.name, keys: keys(s.keys), versions: '', state: '' })),
          ...used.environments.map((e) => ({ used_by: 'environment', name: e.name, keys: keys(e.keys), versions: '', state: '' })),
          ...used.deployments.map((d) => ({ used_by: 'deployment', name: `${d.id} (${d.service.name} in ${d.environment.name})`, keys: '', versions: d.versions.join(' '), state: d.state })),
        ], ['used_by', 'name', 'keys', 'versions', 'state']);
      }
      return 0;
    }
    case 'import': {
      const keeps = Object.keys(imported!);
      const before = await readSecret(call, one);
      const inUse = flags.force === true ? null : await inUseRefusal(call, one, before, (current) => current.keys.filter((key) => !keeps.includes(key)),
        (removed) => `the file leaves out ${removed.join(', ')} of secret ${name}, which the import would remove`, 'keep the keys in the file');
      if (inUse !== null) return failed(json, 'keys_in_use', inUse.message, undefined, { removed: inUse.removed, usedBy: inUse.usedBy });
      const dryRun = flags['dry-run'] === true;
      const retries = call.retries;
      let answer: { secrets: Change[] };
      try {
        answer = await call<{ secrets: Change[] }>('PUT', `${secrets}${dryRun ? '?dryRun=true' : ''}`, { secrets: [{ name, values: imported }] });
      } catch (error) {
        throw inTermsOfTheFile(error, String(flags['from-file']) === '-' ? 'standard input' : `--from-file ${String(flags['from-file'])}`, imported!);
      }
      return said(changeSinceRead(before, answer.secrets[0]!, call.retries > retries), dryRun);
    }
    case 'set': {
      const { set, unset } = change!;
      const before = await readSecret(call, one);
      if (unset.length > 0) {
        const inUse = flags.force === true ? null : await inUseRefusal(call, one, before, (current) => {
          const missing = unset.filter((key) => !current.keys.includes(key));
          if (missing.length > 0) printWarning(json, `secret ${name} has no key ${missing.join(', ')}: nothing to --unset there (its keys: ${current.keys.join(' ')})`);
          return unset.filter((key) => current.keys.includes(key));
        }, (removed) => `--unset would remove ${removed.join(', ')} of secret ${name}`, 'keep them');
        if (inUse !== null) return failed(json, 'keys_in_use', inUse.message, undefined, { removed: inUse.removed, usedBy: inUse.usedBy });
      }
      try {
        const retries = call.retries;
        const answer = await call<Change>('PATCH', one, { ...(Object.keys(set).length > 0 ? { set } : {}), ...(unset.length > 0 ? { unset } : {}) });
        return said(changeSinceRead(before, answer, call.retries > retries));
      } catch (error) {
        // A secret that does not exist yet is created with the keys set, when nothing was to be removed.
        if (!(error instanceof AppError && error.code === 'secret_not_found') || unset.length > 0) throw error;
      }
      const created = await call<{ secrets: Metadata[] }>('POST', secrets, { secrets: [{ name, values: set }] }, { 'idempotency-key': randomUUID() });
      return said({ ...created.secrets[0]!, result: 'created' });
    }
    case 'reveal': {
      const revealed = await call<{ name: string; version: number; values: Record<string, string> }>('POST', `${one}/reveal`, version !== undefined ? { version } : {});
      if (json) printJson(revealed);
      else if (format === 'json') printJson(revealed.values);
      else process.stdout.write(formatDotenv(revealed.values));
      return 0;
    }
    case 'delete': {
      const permanent = flags.permanent === true;
      const inUse = flags.force === true ? null : await inUseRefusal(call, one, await readSecret(call, one), () => 'all', () => `secret ${name} would be deleted`, '');
      if (inUse !== null) return failed(json, 'secret_in_use', inUse.message, undefined, { usedBy: inUse.usedBy });
      // Deleted already (and restorable) is gone too, for a delete that is not permanent.
      const deleted = await deleteResource(call, `${one}${permanent ? '?permanent=true' : ''}`, { ignoreNotFound: flags['ignore-not-found'] === true, gone: permanent ? ['secret_not_found'] : ['secret_not_found', 'secret_deleted'] });
      if (json) printJson({ name, deleted, permanent });
      else if (!deleted) process.stdout.write(`secret ${name}: not found${permanent ? '' : ' (or deleted already)'}; nothing to delete\n`);
      else process.stdout.write(permanent ? `secret ${name}: deleted permanently, every version destroyed\n` : `secret ${name}: deleted; an admin can restore it (slipway secret restore --name ${name})\n`);
      return 0;
    }
    case 'restore':
      return said(await call<Change>('POST', `${one}/restore`, version !== undefined ? { version } : {}, { 'idempotency-key': randomUUID() }));
  }
}

/**
 * A change that removes keys a service or an environment takes by name (an import's file leaving
 * them out, `set --unset`), or the whole secret (`delete`), would fail their next deployment: the
 * key is gone from the version it pins, or the secret is. Refused before anything is sent, naming
 * who takes what, unless --force; a whole-secret reference takes what keys there are, and is in
 * the way of a delete only. `removing` says what the change removes of the secret as it is now
 * ('all' for a delete); `current`: the secret as read just before (null: there is none). Null when
 * nothing is in the way.
 */
async function inUseRefusal(call: PatientCall, one: string, current: Metadata | null, removing: (current: Metadata) => string[] | 'all', doing: (removed: string[]) => string, advice: string): Promise<{ message: string; removed: string[]; usedBy: unknown[] } | null> {
  if (current === null) return null;
  const removed = removing(current);
  if (removed !== 'all' && removed.length === 0) return null;
  const used = await call<SecretUsage>('GET', `${one}/usage`);
  const takers = [...used.services.map((s) => ({ kind: 'service', ...s })), ...used.environments.map((e) => ({ kind: 'environment', ...e }))]
    .flatMap((t) => {
      // `KEY` or `KEY as NAME`; null: the whole secret.
      const keys = removed === 'all' ? t.keys ?? ['(all keys)'] : (t.keys ?? []).filter((key) => removed.includes(key.split(' as ')[0]!));
      return keys.length > 0 ? [{ [t.kind]: t.name, keys }] : [];
    });
  if (takers.length === 0) return null;
  const who = takers.map((t) => `${t.service !== undefined ? `service ${String(t.service)}` : `environment ${String(t.environment)}`} takes ${t.keys.join(', ')}`).join('; ');
  return {
    message: `${doing(removed === 'all' ? current.keys : removed)}, and ${who}: their next deployment would fail. Nothing was sent: ${advice !== '' ? `${advice}, ` : ''}change what takes ${removed === 'all' ? 'it' : 'them'} first, or give --force`,
    removed: removed === 'all' ? current.keys : removed, usedBy: takers,
  };
}

/**
 * The server's refusal of an import over a limit, said of the file rather than of the request the
 * command made of it (`/secrets/0/values`): how many keys it holds, or which key's value is long.
 */
function inTermsOfTheFile(error: unknown, where: string, values: Record<string, string>): unknown {
  if (!(error instanceof AppError) || error.code !== 'limit_exceeded') return error;
  const limit = (error.extras as { limit?: { name?: string; value?: number } }).limit;
  const fields = (error.extras as { errors?: Array<{ pointer?: string }> }).errors ?? [];
  let detail: string | null = null;
  if (limit?.name === 'SLIPWAY_MAX_KEYS_PER_SECRET') {
    detail = `${where} holds ${Object.keys(values).length} keys; the server takes at most ${limit.value} in a secret (SLIPWAY_MAX_KEYS_PER_SECRET). Nothing was changed.`;
  } else if (limit?.name === 'SLIPWAY_MAX_VALUE_CHARS') {
    const keys = fields.flatMap((f) => /^\/secrets\/0\/values\/(.+)$/.exec(f.pointer ?? '')?.[1] ?? []).map((k) => k.replace(/~1/g, '/').replace(/~0/g, '~'));
    const said = keys.map((k) => `${k} (${[...(values[k] ?? '')].length} characters)`).join(', ');
    detail = `${where}: the value of ${said || 'a key'} is longer than the server takes (${limit.value} characters, SLIPWAY_MAX_VALUE_CHARS). Nothing was changed.`;
  }
  return detail === null ? error : new AppError(error.status, error.code, error.title, detail, error.extras, error.headers);
}

/** The secret as it is now; null when there is none (or it is deleted). */
async function readSecret(call: PatientCall, one: string): Promise<Metadata | null> {
  try {
    return await call<Metadata>('GET', one);
  } catch (error) {
    if (error instanceof AppError && error.status === 404) return null;
    throw error;
  }
}

/**
 * What a change did, measured from the secret as read before it was sent. The caller tries a
 * change again when its answer is lost, and the retry finds the values already there: "unchanged"
 * then, though the first attempt made the version. When it was sent again (`retried`) and the
 * version moved since the read, this call's change made it: created or updated, with the keys it
 * added and removed (which values changed, no answer says any more). Not sent again, "unchanged"
 * is the server's word, whatever another client did meanwhile.
 */
export function changeSinceRead(before: Metadata | null, answer: Change, retried: boolean): Change {
  if (answer.result !== 'unchanged' || !retried) return answer;
  if (before === null) return { ...answer, result: 'created' };
  if (before.version === answer.version) return answer;
  const added = answer.keys.filter((key) => !before.keys.includes(key));
  const removed = before.keys.filter((key) => !answer.keys.includes(key));
  return { ...answer, result: 'updated', keyChanges: { added, removed, changed: [] } };
}

function missingFile(): never {
  throw new UsageError('--from-file FILE is required: the .env file whose keys the secret holds from now on (- for standard input)');
}
