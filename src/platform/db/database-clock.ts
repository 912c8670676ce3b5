// Keeps this process's clock (platform/clock.ts) to the database's on PostgreSQL: asks the database
// for its time a few times, takes the answer that came back fastest, and reads the offset from the
// middle of its round trip (as NTP does), at start and every minute. A node whose own clock is off
// then still orders what it makes after what the others made before, and expires leases when they
// do; it says so in a warning, since its logs and everything else on the machine keep its own time.
import { sql } from 'kysely';
import { clockOffset, setClockOffset } from '../clock.js';
import type { Database } from './database.js';

const SAMPLES = 5;
/** An offset past this is a clock to fix (NTP), and said to be. */
export const CLOCK_WARNING_MS = 1_000;
const EVERY_MS = 60_000;

interface ClockLogger {
  warn(fields: object, message: string): void;
}

/** The database's clock minus this machine's, in milliseconds, and how sure that is (half the fastest round trip). */
export async function measureOffset(database: Database): Promise<{ offsetMs: number; uncertaintyMs: number }> {
  let best: { offsetMs: number; uncertaintyMs: number } | null = null;
  for (let i = 0; i < SAMPLES; i++) {
    const sent = Date.now();
    const { rows } = await sql<{ ms: number | string }>`select (extract(epoch from clock_timestamp()) * 1000)::float8 as ms`.execute(database.db);
    const half = (Date.now() - sent) / 2;
    const sample = { offsetMs: Number(rows[0]!.ms) - (sent + half), uncertaintyMs: half };
    if (best === null || sample.uncertaintyMs < best.uncertaintyMs) best = sample;
  }
  return best!;
}

/** Measures once now; on SQLite (this machine's clock) there is nothing to do. */
export async function syncClock(database: Database, logger: ClockLogger): Promise<void> {
  if (database.dialect !== 'postgres') return;
  const { offsetMs, uncertaintyMs } = await measureOffset(database);
  setClockOffset(offsetMs);
  if (Math.abs(offsetMs) > CLOCK_WARNING_MS) {
    logger.warn({ offsetMs: Math.round(offsetMs), uncertaintyMs: Math.round(uncertaintyMs) },
      `this machine's clock is ${(Math.abs(offsetMs) / 1000).toFixed(1)} s ${offsetMs > 0 ? 'behind' : 'ahead of'} the database's: Slipway keeps the database's time, but logs and the rest of the machine do not; set the clock right (NTP)`);
  }
}

/** `syncClock` every minute until the returned function is called; a failed measurement keeps the last offset. */
export function startClockSync(database: Database, logger: ClockLogger & { debug(fields: object, message: string): void }): () => void {
  if (database.dialect !== 'postgres') return () => {};
  const timer = setInterval(() => {
    syncClock(database, logger).catch((err: unknown) => logger.debug({ err, offsetMs: clockOffset() }, 'measuring the database\'s clock failed; keeping the last offset'));
  }, EVERY_MS);
  timer.unref();
  return () => clearInterval(timer);
}
