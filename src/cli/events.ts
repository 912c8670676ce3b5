// `slipway events`: an organization's event log through the API, as a service user of admin's role
// or above: what happened lately, oldest first, and with --follow what happens from then on, as it
// is committed, a line an event (with --json, a JSON object a line, for a log shipper or a SIEM).
import { setTimeout as sleep } from 'node:timers/promises';
import type { Event } from '../modules/events/events.schemas.js';
import { AppError } from '../platform/errors.js';
import { unknownVariables, unknownVariableWarning } from '../platform/unknown-variables.js';
import { API_CLIENT_FLAGS, API_CLIENT_VARIABLES, apiClientFlagHelp, apiClientSettings, commandFlags, patientCaller } from './api-client.js';
import { flagText, printWarning, UsageError, wholeNumberFlag } from './args.js';
import { flagTable, printable } from './output.js';
import { EVENTS_USAGE } from './usage.js';

/** How long a call is tried again while the server is unavailable. */
const RETRY_MS = 60_000;
const LIMIT_DEFAULT = 20;
/** The API's page; --limit above it is read a page at a time. */
const PAGE_MAX = 200;
const LIMIT_MAX = 10_000;
/** --since and --until in the past: `90m`, `2h`, `7d`, or an RFC 3339 time. */
const AGO_UNITS: Record<string, number> = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 };
const TIME_HINT = 'a time: 2h, 90m, 7d or an RFC 3339 time';
/** Between two looks for events appended since, when following. */
const FOLLOW_PAUSE_MS = 2_000;
/** The API's latest filters: a server from before them refuses them, and one older still ignored them. */
const NEWER_FILTERS = ['actor', 'since', 'until'] as const;

const FLAGS = {
  ...API_CLIENT_FLAGS,
  type: { type: 'string' },
  subject: { type: 'string' },
  actor: { type: 'string' },
  limit: { type: 'string' },
  since: { type: 'string' },
  until: { type: 'string' },
  follow: { type: 'boolean' },
  json: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const;

export const EVENTS_HELP = `usage:
${EVENTS_USAGE.map((line) => `  ${line}\n`).join('')}
The organization's event log (its audit log) through the API, as a service user of admin's role or
above: the last ${LIMIT_DEFAULT} events (--limit up to ${LIMIT_MAX}), oldest first, a line each: when, the type,
what it is about, who, and its data (events never hold a secret value). --type takes a type or a
family (secret.*); --subject an id (dep_…, whk_…, a secret's id); --actor who acted, as events name
it: a service user's id (su_…), the subject of an external issuer's token, or cli. --since gives
every event from a time on (2h, 90m, 7d ago, or an RFC 3339 time such as 2026-11-02T09:00:00Z), at
most --limit (${LIMIT_MAX} by default with it); when more are left out, it says so on stderr. --until
leaves out the events from a time on (the same forms): with --since, the events between the two.
With --follow it goes on printing the events committed from then on, in commit order, until it is
stopped (Ctrl-C); --until does not go with it. With --json each event is one JSON object on a line,
as GET …/events shows it. The server filters by actor and time: with one older than this command,
--actor, --since and --until stop it with an error that says so.

Exit status: 0 done; 1 refused by the server or unreachable (tried again for ${RETRY_MS / 1000} s); 2 a usage
error; 130 or 143 stopped by a signal while following. Credentials come from flags, SLIPWAY_*
variables or a credentials file, in that order:

${flagTable(apiClientFlagHelp('calling').map(([flag, arg, text]) => [`--${flag} ${arg}`, flag in API_CLIENT_VARIABLES ? API_CLIENT_VARIABLES[flag as keyof typeof API_CLIENT_VARIABLES] : '', text]))}`;

interface EventPage {
  events: Event[];
  nextCursor: string | null;
  resumeCursor: string | null;
}

/** One event as a line: when, type, subject, actor, data. */
function eventLine(e: Event): string {
  return printable(`${e.createdAt}  ${e.type}  ${e.subject.type} ${e.subject.id}  by ${e.actor ?? '—'}  ${JSON.stringify(e.data)}`);
}

export async function eventsCommand(argv: string[], env: Record<string, string | undefined>): Promise<number> {
  const flags = commandFlags(argv, FLAGS, EVENTS_HELP);
  if (flags === null) return 0;
  const json = flags.json === true;
  const follow = flags.follow === true;
  for (const variable of unknownVariables(env)) printWarning(json, unknownVariableWarning(variable));
  const filter = new URLSearchParams();
  for (const flag of ['type', 'subject', 'actor'] as const) {
    const value = flagText(flags, flag, 'one');
    if (value !== undefined) filter.set(flag, value);
  }
  const now = Date.now();
  const since = timeOf('since', flagText(flags, 'since', TIME_HINT), now);
  const until = timeOf('until', flagText(flags, 'until', TIME_HINT), now);
  if (until !== undefined && follow) throw new UsageError('--until and --follow do not go together: --follow prints the events committed from now on, which --until would leave out; give one of them');
  if (since !== undefined && until !== undefined && until <= since) {
    throw new UsageError(`--until (${iso(until)}) must be later than --since (${iso(since)}): the events listed are those made from --since on and before --until`);
  }
  const limit = wholeNumberFlag(flags.limit, 'limit', { min: 1, max: LIMIT_MAX, fallback: since === undefined ? LIMIT_DEFAULT : LIMIT_MAX });
  const settings = apiClientSettings(flags, env);
  const call = patientCaller(settings, { json, retryMs: RETRY_MS, unanswered: '' });
  const path = `/v1/orgs/${encodeURIComponent(settings.orgId)}/events`;
  const print = (e: Event) => process.stdout.write(json ? `${JSON.stringify(e)}\n` : `${eventLine(e)}\n`);
  const given = NEWER_FILTERS.filter((name) => flags[name] !== undefined);
  const read = async (query: URLSearchParams): Promise<EventPage> => {
    const page = await call<EventPage>('GET', `${path}?${query}`).catch((error: unknown) => { throw refusedByOlderServer(error, given); });
    const ignored = ignoredFilters(query, page.events);
    if (ignored.length > 0) throw new Error(`the server listed events that ${flagList(ignored)} leave${ignored.length > 1 ? '' : 's'} out: its Slipway is older than this command's and ignores ${ignored.length > 1 ? 'those filters' : 'that filter'}. ${OLDER_SERVER_ADVICE(ignored)}`);
    return page;
  };

  // Following reads on from the newest event now, with every filter but --since: an event's time is
  // its request's, taken before its transaction commits (it may have waited for a lock), so one
  // committed from now on may be older than --since, and is news all the same. Its place is taken
  // before the list is read; what the list shows of the events committed in between is not printed again.
  const resume = follow ? (await read(new URLSearchParams([...filter, ['order', 'newest'], ['limit', '1']]))).resumeCursor : null;

  // The last `limit` of them (since `since`, before `until`), read newest first a page at a time
  // (the server filters by time) and printed oldest first.
  const range = new URLSearchParams(filter);
  if (since !== undefined) range.set('since', iso(since));
  if (until !== undefined) range.set('until', iso(until));
  const latest: Event[] = [];
  for (let next: string | null = null, first = true; first || (next !== null && latest.length <= limit); first = false) {
    const query = new URLSearchParams([...range, ['order', 'newest'], ['limit', String(Math.min(PAGE_MAX, limit - latest.length + 1))]]);
    if (next !== null) query.set('cursor', next);
    const page = await read(query);
    latest.push(...page.events);
    next = page.nextCursor;
  }
  const leftOut = latest.length > limit;
  const printed = new Set<string>();
  for (const e of latest.slice(0, limit).reverse()) {
    print(e);
    printed.add(e.id);
  }
  if (leftOut && since !== undefined) {
    process.stderr.write(`slipway: more events ${until === undefined ? 'since then' : 'in that time'} than --limit ${limit}: these are the newest; narrow with --type, --subject, --actor${until === undefined ? ' or a later --since' : ', a later --since or an earlier --until'}\n`);
  }
  if (!follow) return 0;
  let cursor = resume;
  for (;;) {
    const query = new URLSearchParams([...filter, ['limit', String(PAGE_MAX)]]);
    if (cursor !== null) query.set('cursor', cursor);
    const page = await read(query);
    for (const e of page.events) if (!printed.has(e.id)) print(e);
    cursor = page.nextCursor ?? page.resumeCursor ?? cursor;
    if (page.nextCursor === null) await sleep(FOLLOW_PAUSE_MS);
  }
}

const iso = (ms: number): string => new Date(ms).toISOString();

/** `--actor`, `--actor and --since`, `--actor, --since and --until`. */
const flagList = (names: readonly string[]): string => names.map((name) => `--${name}`).join(', ').replace(/, (?=[^,]*$)/, ' and ');

const OLDER_SERVER_ADVICE = (names: readonly string[]): string => `Upgrade the server, or leave out ${flagList(names)}.`;

/**
 * A server from before the actor and time filters refuses the query parameter it does not know
 * (400, naming it, and only the first it met): said as that, of every one of them given.
 */
function refusedByOlderServer(error: unknown, given: readonly string[]): unknown {
  if (!(error instanceof AppError)) return error;
  const fields = (error.extras as { errors?: Array<{ pointer?: string; message?: string }> }).errors ?? [];
  const unknown = fields.some((f) => NEWER_FILTERS.some((name) => f.pointer === `/query/${name}`) && /not a query parameter/.test(f.message ?? ''));
  if (!unknown) return error;
  const detail = `the server refuses ${flagList(given)} (as query parameters it does not know): its Slipway is older than this command's, and lists events by type and subject only. ${OLDER_SERVER_ADVICE(given)}`;
  return new AppError(error.status, error.code, error.title, detail, error.extras, error.headers);
}

/**
 * The actor and time filters of `query` that an event listed for it is outside of: none, but from a
 * server older still, which answered as if a query parameter it did not know had not been sent.
 */
function ignoredFilters(query: URLSearchParams, events: Event[]): string[] {
  const actor = query.get('actor');
  const at = (name: 'since' | 'until') => Date.parse(query.get(name) ?? '');
  const [since, until] = [at('since'), at('until')];
  // A comparison with NaN (a time not asked for) is false.
  const outside = {
    actor: (e: Event) => actor !== null && e.actor !== actor,
    since: (e: Event) => Date.parse(e.createdAt) < since,
    until: (e: Event) => Date.parse(e.createdAt) >= until,
  };
  return NEWER_FILTERS.filter((name) => events.some(outside[name]));
}

/** --since or --until as milliseconds since the epoch: a time ago (`2h`) or an RFC 3339 time with its offset. */
export function timeOf(flag: 'since' | 'until', value: string | undefined, now = Date.now()): number | undefined {
  if (value === undefined) return undefined;
  const ago = /^(\d{1,6})([smhd])$/.exec(value);
  if (ago !== null) return now - Number(ago[1]) * AGO_UNITS[ago[2]!]!;
  const parts = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2})(?:\.\d+)?)?(?:Z|[+-](\d{2}):(\d{2}))$/i.exec(value);
  // Each field within its range (Date.parse would take February 30 for March 2, 24:00 for the next day).
  const [year, month, day, hour, minute, second, offsetHours, offsetMinutes] = (parts ?? []).slice(1).map((p) => (p === undefined ? 0 : Number(p)));
  const valid = parts !== null && month! >= 1 && month! <= 12 && day! >= 1 && day! <= new Date(Date.UTC(year!, month!, 0)).getUTCDate()
    && hour! <= 23 && minute! <= 59 && second! <= 59 && offsetHours! <= 23 && offsetMinutes! <= 59;
  const at = valid ? Date.parse(value) : NaN;
  if (Number.isNaN(at)) throw new UsageError(`--${flag} must be a time ago (90m, 2h, 7d) or an RFC 3339 time with its offset (2026-11-02T09:00:00Z), got "${value}"`);
  return at;
}
