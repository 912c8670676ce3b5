// What every client in the load process shares: the message channel to the
// orchestrator, a wall/CPU stopwatch for the measured phase, and latency summaries.

import { performance } from 'node:perf_hooks';
import type { LoadMessage } from './load-protocol.js';
import { percentile } from './stats.js';

export function send(message: LoadMessage): void {
  process.send?.(message);
}

export class Stopwatch {
  private readonly wall0 = performance.now();
  private readonly cpu0 = process.cpuUsage();
  /** Wall seconds and CPU % of one core since construction. */
  read(): { wallSec: number; cpuPct: number } {
    const wallSec = (performance.now() - this.wall0) / 1000;
    const cpu = process.cpuUsage(this.cpu0);
    const cpuSec = (cpu.user + cpu.system) / 1e6;
    return { wallSec, cpuPct: wallSec > 0 ? (100 * cpuSec) / wallSec : 0 };
  }
}

export function isSuccess(status: number): boolean {
  return status >= 200 && status < 300;
}

export interface LatencySummary {
  p50Ms: number;
  p99Ms: number;
  meanMs: number;
  maxMs: number;
  sumMs: number;
}

export function summarize(latencies: ArrayLike<number>): LatencySummary {
  const sorted = Float64Array.from(latencies).sort();
  let sumMs = 0;
  for (const v of sorted) sumMs += v;
  return {
    p50Ms: percentile(sorted, 50),
    p99Ms: percentile(sorted, 99),
    meanMs: sorted.length ? sumMs / sorted.length : NaN,
    maxMs: sorted.length ? sorted[sorted.length - 1]! : NaN,
    sumMs,
  };
}
