// `slipway events`: an organization's event log through the API, as a service user of admin's role
// or above: what happened lately, oldest first, and with --follow what happens from then on, as it
// is committed, a line an event (with --json, a JSON object a line, for a log shipper or a SIEM).
import { setTimeout as sleep } from 'node:timers/promises';
import type { Event } from '../modules/events/events.schemas.js';
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
/** How long a transaction may run between taking its events' time and committing, at the most. */
const SINCE_MARGIN_MS = 15 * 60_000;
/** --since in the past: `90m`, `2h`, `7d`, or an RFC 3339 time. */
const SINCE_UNITS: Record<string, number> = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 };
/** Between two looks for events appended since, when following. */
const FOLLOW_PAUSE_MS = 2_000;

const FLAGS = {
  ...API_CLIENT_FLAGS,
  type: { type: 'string' },
  subject: { type: 'string' },
  limit: { type: 'string' },
  since: { type: 'string' },
  follow: { type: 'boolean' },
  json: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const;

export const EVENTS_HELP = `usage:
${EVENTS_USAGE.map((line) => `  ${line}\n`).join('')}
The organization's event log (its audit log) through the API, as a service user of admin's role or
above: the last ${LIMIT_DEFAULT} events (--limit up to ${LIMIT_MAX}), oldest first, a line each: when, the type,
what it is about, who, and its data (events never hold a secret value). --type takes a type or a
family (secret.*); --subject an id (dep_…, whk_…, a secret's id). --since gives every event from a
time on (2h, 90m, 7d ago, or an RFC 3339 time such as 2026-11-02T09:00:00Z), at most --limit
(${LIMIT_MAX} by default with it); when more are left out, it says so on stderr. With --follow it goes on printing
the events committed from then on, in commit order, until it is stopped (Ctrl-C). With --json each
event is one JSON object on a line, as GET …/events shows it.

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
  for (const variable of unknownVariables(env)) printWarning(json, unknownVariableWarning(variable));
  const filter = new URLSearchParams();
  for (const flag of ['type', 'subject'] as const) {
    const value = flagText(flags, flag, 'one');
    if (value !== undefined) filter.set(flag, value);
  }
  const since = sinceOf(flagText(flags, 'since', 'a time: 2h, 90m, 7d or an RFC 3339 time'));
  const limit = wholeNumberFlag(flags.limit, 'limit', { min: 1, max: LIMIT_MAX, fallback: since === undefined ? LIMIT_DEFAULT : LIMIT_MAX });
  const settings = apiClientSettings(flags, env);
  const call = patientCaller(settings, { json, retryMs: RETRY_MS, unanswered: '' });
  const path = `/v1/orgs/${encodeURIComponent(settings.orgId)}/events`;
  const print = (e: Event) => process.stdout.write(json ? `${JSON.stringify(e)}\n` : `${eventLine(e)}\n`);

  // The last `limit` (since `since`), read newest first a page at a time and printed oldest first;
  // the first page's resume cursor is where following starts.
  const latest: Event[] = [];
  let resume: string | null = null;
  let leftOut = false;
  for (let next: string | null = null, first = true; first || next !== null; first = false) {
    const query = new URLSearchParams([...filter, ['order', 'newest'], ['limit', String(Math.min(PAGE_MAX, limit - latest.length + 1))]]);
    if (next !== null) query.set('cursor', next);
    const page = await call<EventPage>('GET', `${path}?${query}`);
    if (first) resume = page.resumeCursor;
    const wanted = since === undefined ? page.events : page.events.filter((e) => Date.parse(e.createdAt) >= since);
    latest.push(...wanted);
    next = page.nextCursor;
    if (latest.length > limit) {
      latest.length = limit;
      leftOut = true;
      break;
    }
    // Newest first, by commit. An event's time is its request's, taken before its transaction
    // commits (it may have waited for a lock): past `since`, the events listed after one made
    // SINCE_MARGIN_MS before it committed before it too, and so were made before `since`.
    const oldest = page.events.at(-1);
    if (since !== undefined && (oldest === undefined || Date.parse(oldest.createdAt) < since - SINCE_MARGIN_MS)) break;
    if (since === undefined && latest.length === limit) {
      leftOut = next !== null;
      break;
    }
  }
  for (const e of latest.reverse()) print(e);
  if (leftOut && since !== undefined) process.stderr.write(`slipway: more events since then than --limit ${limit}: these are the newest; narrow with --type, --subject or a later --since\n`);
  if (flags.follow !== true) return 0;
  let cursor = resume;
  for (;;) {
    const query = new URLSearchParams([...filter, ['limit', String(PAGE_MAX)]]);
    if (cursor !== null) query.set('cursor', cursor);
    const page = await call<EventPage>('GET', `${path}?${query}`);
    for (const e of page.events) print(e);
    cursor = page.nextCursor ?? page.resumeCursor ?? cursor;
    if (page.nextCursor === null) await sleep(FOLLOW_PAUSE_MS);
  }
}

/** --since as milliseconds since the epoch: a time ago (`2h`) or an RFC 3339 time with its offset. */
export function sinceOf(value: string | undefined, now = Date.now()): number | undefined {
  if (value === undefined) return undefined;
  const ago = /^(\d{1,6})([smhd])$/.exec(value);
  if (ago !== null) return now - Number(ago[1]) * SINCE_UNITS[ago[2]!]!;
  const parts = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2})(?:\.\d+)?)?(?:Z|[+-](\d{2}):(\d{2}))$/i.exec(value);
  // Each field within its range (Date.parse would take February 30 for March 2, 24:00 for the next day).
  const [year, month, day, hour, minute, second, offsetHours, offsetMinutes] = (parts ?? []).slice(1).map((p) => (p === undefined ? 0 : Number(p)));
  const valid = parts !== null && month! >= 1 && month! <= 12 && day! >= 1 && day! <= new Date(Date.UTC(year!, month!, 0)).getUTCDate()
    && hour! <= 23 && minute! <= 59 && second! <= 59 && offsetHours! <= 23 && offsetMinutes! <= 59;
  const at = valid ? Date.parse(value) : NaN;
  if (Number.isNaN(at)) throw new UsageError(`--since must be a time ago (90m, 2h, 7d) or an RFC 3339 time with its offset (2026-11-02T09:00:00Z), got "${value}"`);
  return at;
}
