// Slipway's clock: the machine's, set right by the database's on PostgreSQL. Nodes share what they
// write there, and compare it: a lease one node granted another expires, the id (and so the order)
// of a deployment one node made against another's, a runner's last report against a host timeout.
// A node whose clock was off would read all of those wrong, so every node keeps the time of the one
// clock they share (see db/database-clock.ts). SQLite is on this machine, whose clock it is.

let offsetMs = 0;

/** Milliseconds since the epoch, by the database's clock. */
export function nowMs(): number {
  return Date.now() + offsetMs;
}

export function nowDate(): Date {
  return new Date(nowMs());
}

export function nowIso(): string {
  return nowDate().toISOString();
}

/**
 * A time a client sends (RFC 3339, what the schemas' date-time format lets by) as every time
 * Slipway keeps and answers with: UTC with milliseconds (an offset, a lower-case `t`, nanoseconds
 * are converted). A leap second (`23:59:60`, which RFC 3339 allows and a Date cannot hold) is its
 * second's last millisecond before, `23:59:59.999`; undefined only for what Date.parse still
 * cannot read.
 */
export function utcIso(at: string): string | undefined {
  let time = Date.parse(at);
  if (Number.isNaN(time)) time = Date.parse(at.replace(/:60(?:\.\d+)?(?=[zZ+-]|$)/, ':59.999'));
  return Number.isNaN(time) ? undefined : new Date(time).toISOString();
}

/** How far the database's clock is ahead of this machine's (negative: behind), in milliseconds. */
export function clockOffset(): number {
  return offsetMs;
}

export function setClockOffset(ms: number): void {
  offsetMs = Math.round(ms);
}
