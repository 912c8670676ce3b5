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

/** How far the database's clock is ahead of this machine's (negative: behind), in milliseconds. */
export function clockOffset(): number {
  return offsetMs;
}

export function setClockOffset(ms: number): void {
  offsetMs = Math.round(ms);
}
