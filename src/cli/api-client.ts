// What the commands that talk to Slipway's API (`runner`, `deploy`, `secret`) need to reach it as a
// service user: the base URL, the organization and client credentials, from flags, SLIPWAY_*
// variables or a credentials file (bootstrap.json, `service-user create --json`), in that order.
import fs from 'node:fs';
import type { ParseArgsConfig } from 'node:util';
import { AppError, type FieldError } from '../platform/errors.js';
import { RUNNER_VARIABLES } from '../platform/unknown-variables.js';
import { isTransientStatus, parseJson, retryAfterMs, Unavailable, untilAvailable } from '../runner-agent/http-call.js';
import { createTokenSource, requestWithToken, type ClientCredentials, type TokenSource } from '../runner-agent/token-source.js';
import { commandLineError, parseFlags, UsageError } from './args.js';

/** The flags every API client takes, as node:util's parseArgs wants them. */
export const API_CLIENT_FLAGS = {
  org: { type: 'string' },
  credentials: { type: 'string' },
  'client-id': { type: 'string' },
  'client-secret': { type: 'string' },
  'token-url': { type: 'string' },
  scope: { type: 'string' },
  url: { type: 'string' },
} as const;

/** The variable behind each of those flags that has one. */
export const API_CLIENT_VARIABLES = {
  org: RUNNER_VARIABLES.org,
  'client-id': RUNNER_VARIABLES['client-id'],
  'client-secret': RUNNER_VARIABLES['client-secret'],
  'token-url': RUNNER_VARIABLES['token-url'],
  scope: RUNNER_VARIABLES.scope,
  url: RUNNER_VARIABLES.url,
} as const;

const TOKEN_PATH = '/oauth/v2/token';

/** Each flag's argument and meaning, for help texts; `who` names the service user (`runner`). */
export function apiClientFlagHelp(who: string): Array<[keyof typeof API_CLIENT_FLAGS, string, string]> {
  return [
    ['credentials', 'FILE', 'JSON with clientId, clientSecret, tokenUrl, scope, orgId and baseUrl (service-user create --json)'],
    ['client-id', 'ID', `the ${who} service user's client id`],
    ['client-secret', 'S', 'its client secret (a flag shows in ps: prefer the variable or the file)'],
    ['scope', 'S', 'the scope string to ask for'],
    ['url', 'URL', 'the API\'s base URL (default: the token URL\'s)'],
    ['token-url', 'URL', `the token endpoint (default: URL${TOKEN_PATH})`],
    ['org', 'ORG', 'organization id or slug'],
  ];
}

export interface ApiClientSettings {
  baseUrl: string;
  orgId: string;
  credentials: ClientCredentials;
}

type Flags = Partial<Record<string, string | string[] | boolean>>;
type Env = Record<string, string | undefined>;

/** What `--credentials FILE` may provide; the shape bootstrap.json and `service-user create --json` share. */
interface CredentialsFile {
  clientId?: string;
  clientSecret?: string;
  tokenUrl?: string;
  scope?: string;
  orgId?: string;
  baseUrl?: string;
}

function readCredentialsFile(file: string, read: (file: string) => string): CredentialsFile {
  let parsed: unknown;
  try {
    const text = read(file);
    // What `service-user create --json > FILE` leaves when it fails: the shell emptied the file first.
    if (text.trim() === '') {
      throw new UsageError(`--credentials ${file} is empty: a service-user create --json > ${file} that failed (a name taken, say) leaves it so, as the shell empties the file before the command runs; create the service user again, or give it a new secret with service-user rotate-secret --json > ${file}`);
    }
    parsed = JSON.parse(text);
  } catch (error) {
    if (error instanceof UsageError) throw error;
    // Never JSON.parse's own message: it quotes the file, and the file holds the client secret.
    const code = (error as NodeJS.ErrnoException).code;
    throw new UsageError(`--credentials ${file}: ${code ? `cannot read it (${code})` : 'is not valid JSON'}`);
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) throw new UsageError(`--credentials ${file} must hold a JSON object with clientId, clientSecret, tokenUrl, scope and orgId`);
  const out: CredentialsFile = {};
  for (const key of ['clientId', 'clientSecret', 'tokenUrl', 'scope', 'orgId', 'baseUrl'] as const) {
    const value = (parsed as Record<string, unknown>)[key];
    if (typeof value === 'string' && value !== '') out[key] = value;
  }
  return out;
}

function httpUrl(value: string, what: string): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new UsageError(`${what} must be an absolute http(s) URL, got "${value}"`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new UsageError(`${what} must be an http(s) URL, got "${value}"`);
  return value.replace(/\/+$/, '');
}

/**
 * A setting from its flag, else its variable (`variables` maps flags to variables), else the
 * credentials file; empty counts as unset.
 */
export function settingReader(flags: Flags, env: Env, variables: Record<string, string>) {
  return (flag: string, fromFile?: string): string | undefined => {
    const given = flags[flag];
    const name = variables[flag];
    const value = typeof given === 'string' ? given : name === undefined ? undefined : env[name];
    return value !== undefined && value !== '' ? value : fromFile;
  };
}

/** Flags over variables over the credentials file; every problem is a UsageError naming what to set. */
export function apiClientSettings(flags: Flags, env: Env, read: (file: string) => string = (file) => fs.readFileSync(file, 'utf8')): ApiClientSettings {
  const file = typeof flags.credentials === 'string' ? readCredentialsFile(flags.credentials, read) : {};
  const setting = settingReader(flags, env, API_CLIENT_VARIABLES);
  const required = (flag: keyof typeof API_CLIENT_VARIABLES, fromFile?: string): string => {
    const value = setting(flag, fromFile);
    if (value === undefined) throw new UsageError(`--${flag} (${API_CLIENT_VARIABLES[flag]}) is required, or --credentials FILE that has it`);
    return value;
  };

  const givenUrl = setting('url', file.baseUrl);
  const givenTokenUrl = setting('token-url', file.tokenUrl);
  if (givenUrl === undefined && givenTokenUrl === undefined) throw new UsageError('--url (SLIPWAY_URL) is required: the base URL of the Slipway API');
  const url = givenUrl !== undefined ? httpUrl(givenUrl, '--url (SLIPWAY_URL)') : undefined;
  const tokenUrl = httpUrl(givenTokenUrl ?? `${url}${TOKEN_PATH}`, '--token-url (SLIPWAY_TOKEN_URL)');
  // By default the API and the authorization server are one server: the token URL names its base.
  const baseUrl = url ?? (tokenUrl.endsWith(TOKEN_PATH) ? tokenUrl.slice(0, -TOKEN_PATH.length) : tokenUrl);

  return {
    baseUrl,
    orgId: required('org', file.orgId),
    credentials: {
      tokenUrl,
      clientId: required('client-id', file.clientId),
      clientSecret: required('client-secret', file.clientSecret),
      scope: required('scope', file.scope),
    },
  };
}

/**
 * The subcommand and its flags of an API client with subcommands (`slipway secret list …`), or null
 * when it asked for help, which is then printed; a missing or unknown subcommand is a usage error
 * that lists them.
 */
export function subcommandFlags<S extends string>(
  argv: string[], subcommands: Record<S, NonNullable<ParseArgsConfig['options']>>, help: string, command: string, article = 'a',
): { sub: S; flags: Flags } | null {
  const [sub, ...rest] = argv;
  if (sub === 'help' || sub === '--help' || sub === '-h') {
    process.stdout.write(help);
    return null;
  }
  if (sub === undefined || !Object.hasOwn(subcommands, sub)) {
    // `--help` wins after a flag the command does not know, where a subcommand was expected too.
    if (argv.includes('--help') || argv.includes('-h')) {
      process.stdout.write(help);
      return null;
    }
    throw new UsageError(`${sub === undefined ? `${article} ${command} command is needed` : `unknown ${command} command "${sub}"`}: ${Object.keys(subcommands).join(', ')}; see slipway ${command} --help`);
  }
  const flags = commandFlags(rest, subcommands[sub as S], help);
  return flags === null ? null : { sub: sub as S, flags };
}

/**
 * The flags of an API client's command line, or null when it asked for help, which is then printed:
 * `--help` wins, even after a flag the command does not know.
 */
export function commandFlags(argv: string[], options: NonNullable<ParseArgsConfig['options']>, help: string): Flags | null {
  if (argv.includes('--help') || argv.includes('-h') || argv[0] === 'help') {
    process.stdout.write(help);
    return null;
  }
  return parseFlags(argv, options).values as Flags;
}

const CALL_TIMEOUT_MS = 30_000;
const IN_PROGRESS = 'idempotency_request_in_progress';

/**
 * A refusal by the server, as the CLI reports every refusal by the API's rules (see main.ts): with
 * the problem's own members besides the standard ones (`errors`, `conflicts`, `lock`, `missing`, …),
 * which say what to fix, as `--json` prints them.
 */
export function refusal(status: number, text: string): AppError {
  const parsed = parseJson(text);
  const problem = (parsed !== null && typeof parsed === 'object' && !Array.isArray(parsed) ? parsed : {}) as { code?: string; title?: string; detail?: string } & Record<string, unknown>;
  const { type: _type, title, status: _status, detail, instance: _instance, code, ...extras } = problem;
  return new AppError(status, typeof code === 'string' ? code : `http_${status}`, typeof title === 'string' ? title : 'Refused',
    typeof detail === 'string' ? detail : `the server answered ${status}`, extras as { errors?: FieldError[] });
}

/** One API call as the service user: 2xx is the answer, 4xx a refusal (AppError), the rest Unavailable. */
export function apiCaller(settings: ApiClientSettings, tokens: TokenSource, onSending: () => void) {
  return async <T>(method: string, path: string, signal: AbortSignal, body?: unknown, headers: Record<string, string> = {}): Promise<T> => {
    const { answer } = await requestWithToken(tokens, `${settings.baseUrl}${path}`, {
      method,
      headers: { accept: 'application/json', ...(body !== undefined ? { 'content-type': 'application/json' } : {}), ...headers },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    }, CALL_TIMEOUT_MS, signal, onSending);
    if (answer.status >= 200 && answer.status < 300) return parseJson(answer.text) as T;
    const code = (parseJson(answer.text) as { code?: string } | null)?.code;
    // The first try of this create still runs on the server (its answer comes to a retry), or the server is busy.
    if (isTransientStatus(answer.status) || (answer.status === 409 && code === IN_PROGRESS)) {
      throw new Unavailable(`${method} ${path} answered ${answer.status}`, retryAfterMs(answer.headers));
    }
    throw refusal(answer.status, answer.text);
  };
}

/**
 * A signal that aborts with `parent` or after `ms`, by hand: a timeout signal that only
 * AbortSignal.any refers to may be collected before it fires.
 */
export function within(parent: AbortSignal, ms: number): { signal: AbortSignal; timedOut: () => boolean; clear: () => void } {
  const controller = new AbortController();
  let expired = false;
  const onAbort = () => controller.abort(parent.reason);
  if (parent.aborted) onAbort();
  else parent.addEventListener('abort', onAbort, { once: true });
  const timer = setTimeout(() => { expired = true; controller.abort(new Error('timed out')); }, ms);
  return {
    signal: controller.signal,
    timedOut: () => expired,
    clear: () => { clearTimeout(timer); parent.removeEventListener('abort', onAbort); },
  };
}

export type PatientCall = (<T>(method: string, path: string, body?: unknown, headers?: Record<string, string>) => Promise<T>) & {
  /** How many times a call was sent again so far (the server unavailable, an answer lost). */
  readonly retries: number;
};

/**
 * Calls the API as the settings' service user, trying again while the server is unavailable for up
 * to `retryMs` (said once on stderr, unless `json`). A call still unanswered then fails, saying that
 * a GET read nothing, and `unanswered` for a change (how to find out whether it was made).
 */
export function patientCaller(settings: ApiClientSettings, options: { json: boolean; retryMs: number; unanswered: string }): PatientCall {
  const caller = apiCaller(settings, createTokenSource(settings.credentials, { who: `${settings.credentials.clientId}'s` }), () => {});
  let retries = 0;
  const call = async <T>(method: string, path: string, body?: unknown, headers?: Record<string, string>): Promise<T> => {
    const bounded = within(new AbortController().signal, options.retryMs);
    let trouble = '';
    try {
      return await untilAvailable(() => caller<T>(method, path, bounded.signal, body, headers), {
        signal: bounded.signal,
        onRetry: (error, n) => {
          retries++;
          trouble = error.message;
          if (n === 1 && !options.json) process.stderr.write(`slipway: the server is unavailable, trying again for up to ${options.retryMs / 1000} s: ${error.message}\n`);
        },
      });
    } catch (error) {
      if (bounded.timedOut()) throw new Error(`the server did not answer within ${options.retryMs / 1000} s (${trouble || 'no answer in time'}); ${method === 'GET' ? 'nothing was read' : options.unanswered}`);
      throw error;
    } finally {
      bounded.clear();
    }
  };
  return Object.defineProperty(call, 'retries', { get: () => retries }) as PatientCall;
}

const PAGE = 200;

/**
 * DELETE `path`. With `ignoreNotFound`, a 404 naming it gone (one of the `gone` codes) is no
 * refusal: there was nothing to delete, or a retry after a lost answer found it deleted, and a
 * pipeline that makes sure something is gone is done (kubectl's --ignore-not-found). True when
 * this call deleted it.
 */
export async function deleteResource(call: PatientCall, path: string, o: { ignoreNotFound: boolean; gone: readonly string[] }): Promise<boolean> {
  try {
    await call('DELETE', path);
    return true;
  } catch (error) {
    if (o.ignoreNotFound && error instanceof AppError && error.status === 404 && o.gone.includes(error.code)) return false;
    throw error;
  }
}

/** Every item of a paged list, page after page (`field`: where a page holds them). */
export async function everyItem<T>(call: PatientCall, path: string, query: URLSearchParams, field: string): Promise<T[]> {
  const all: T[] = [];
  query.set('limit', String(PAGE));
  for (let cursor: string | null = null; ;) {
    if (cursor !== null) query.set('cursor', cursor);
    const page = await call<Record<string, T[]> & { nextCursor: string | null }>('GET', `${path}?${query}`);
    all.push(...page[field]!);
    if ((cursor = page.nextCursor) === null) return all;
  }
}
