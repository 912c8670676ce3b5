// When the event loop's delay, read over the last second, measures load. Not while the server
// starts (loading code, migrations): only once a reading has been taken wholly after it began to
// listen. Not after a stall either: a process stopped (SIGSTOP, a paused VM, swapped out) finds its
// event loop late by as long as it was stopped, with nothing queued to show for it. A sample
// interval that lasted more than two, in which the process ran for less than half the time, was a
// stall; as after the start, readings count again once one has been taken wholly after it, and the
// requests that waited (the runners' heartbeats) are taken meanwhile.
import { performance } from 'node:perf_hooks';

export interface LoadClock {
  /** Monotonic wall-clock time, in ms. */
  now(): number;
  /** CPU time this process has used (every thread), in ms. */
  cpuMs(): number;
}

const processClock: LoadClock = {
  now: () => performance.now(),
  cpuMs: () => {
    const { user, system } = process.cpuUsage();
    return (user + system) / 1000;
  },
};

export interface LoadReadings {
  /** The server listens from now. */
  listening(): void;
  /** Called every `sampleMs` (late when the process was stopped or the loop was busy). */
  sample(): void;
  /** Whether a reading taken now measures load. */
  measureLoad(): boolean;
}

export function loadReadings(sampleMs: number, clock: LoadClock = processClock): LoadReadings {
  let measuresFrom = Infinity;
  let sampledAt = clock.now();
  let cpuAt = clock.cpuMs();
  return {
    listening() {
      measuresFrom = clock.now() + 2 * sampleMs;
    },
    sample() {
      const now = clock.now();
      const cpu = clock.cpuMs();
      const wall = now - sampledAt;
      if (wall > 2 * sampleMs && cpu - cpuAt < wall / 2) measuresFrom = Math.max(measuresFrom, now + 2 * sampleMs);
      sampledAt = now;
      cpuAt = cpu;
    },
    measureLoad() {
      return clock.now() >= measuresFrom;
    },
  };
}
