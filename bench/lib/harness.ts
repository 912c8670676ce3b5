// The vocabulary of the benchmark. A Row compares a subject Probe (Slipway)
// with a reference Probe measured in the same run, against a Target. Probes
// name the server they need; the context starts each server once, lazily, and
// runs load against it in a separate process.

import type { LoadJob, LoadResult } from './load-protocol.js';
import type { RunningServer, ServerId, ServerTypes } from './servers.js';

export interface Measurement extends LoadResult {
  /** CPU used by the server process during the measured phase, % of one core. */
  serverCpuPct?: number;
  /**
   * CPU used by everything else on the machine (other tenants, steal, this
   * orchestrator) during the measured phase, % of one core: a noise indicator.
   */
  otherCpuPct?: number;
}

/** One thing that gets measured: a server, a request, a load shape. */
export interface Probe {
  /** Unique; `BENCH_ONLY` may name it. */
  id: string;
  /** Shown in the table. */
  label: string;
  server: ServerId;
  /** Start/obtain the server via ctx.server(), check one request by hand, then ctx.load(). */
  run(ctx: BenchContext): Promise<Measurement>;
}

export interface Verdict {
  /** e.g. "0.62× ceiling"; empty when the target is absolute. */
  ratioText: string;
  met: boolean;
}

export interface Target {
  /** e.g. "≥ 0.50× ceiling req/s". */
  description: string;
  /**
   * Against a reference: the two are measured in alternating windows (BENCH_ROUNDS), so that a
   * machine getting faster or slower during the run moves both alike.
   */
  alternating?: boolean;
  /** Subject against reference, as the target compares them (a window pair's, or the row's). */
  ratio?(subject: Measurement, reference: Measurement): number;
  evaluate(subject: Measurement, reference: Measurement | undefined): Verdict;
}

export interface Row {
  /** Unique; `BENCH_ONLY` may name it. */
  id: string;
  title: string;
  subject: Probe;
  /** Omitted for absolute targets. */
  reference?: Probe;
  target: Target;
}

export interface BenchConfig {
  only: Set<string> | undefined;
  durationSec: number;
  warmupSec: number;
  connections: number;
  bulkRequests: number;
  bulkWarmup: number;
  bulkSize: number;
  claimRounds: number;
  claimWarmup: number;
  /** Windows per side for alternating rows (BENCH_ROUNDS); `durationSec` is split among them. */
  rounds: number;
  pin: boolean;
  serverCpu: number | undefined;
  loadCpu: number | undefined;
  keepRunDir: boolean;
}

export interface BenchContext {
  readonly config: BenchConfig;
  /** Temporary directory of this run: logs, data directories. */
  readonly runDir: string;
  /** Start (once) and return a server; a failed start is remembered and rethrown. */
  server<K extends ServerId>(id: K): Promise<ServerTypes[K]>;
  /** Run a load job in a separate process, sampling the server's CPU over the measured phase. */
  load(server: RunningServer, job: LoadJob): Promise<Measurement>;
  /** Progress line on stderr. */
  log(message: string): void;
}

/** A failure that should be reported as the row's reason, without a stack. */
export class ProbeError extends Error {}

/** Why a measurement cannot be trusted, or undefined when every response was 2xx. */
export function invalidReason(m: Measurement): string | undefined {
  const problems: string[] = [];
  if (m.requests === 0) problems.push('no responses');
  if (m.non2xx > 0) {
    const codes = Object.entries(m.statusCounts)
      .filter(([s]) => !(Number(s) >= 200 && Number(s) < 300))
      .map(([s, n]) => `${n}×${s}`)
      .join(', ');
    problems.push(`${m.non2xx} non-2xx (${codes})`);
  }
  if (m.errors > 0) problems.push(`${m.errors} connection errors`);
  if (m.timeouts > 0) problems.push(`${m.timeouts} timeouts`);
  return problems.length ? problems.join('; ') : undefined;
}

/**
 * Several measured windows of one load as one measurement: requests and time add up (so req/s is
 * over all of them), CPU figures are time-weighted, p50 is the windows' median and p99 the
 * highest window's (the windows' latencies are not kept, so these are not pooled percentiles).
 */
export function combineWindows(windows: Measurement[]): Measurement {
  if (windows.length === 1) return windows[0]!;
  const sum = (f: (m: Measurement) => number): number => windows.reduce((acc, m) => acc + f(m), 0);
  const time = sum((m) => m.durationSec);
  const weighted = (f: (m: Measurement) => number | undefined): number | undefined =>
    windows.every((m) => f(m) !== undefined) ? sum((m) => f(m)! * m.durationSec) / time : undefined;
  const median = (values: number[]): number => {
    const sorted = [...values].sort((a, b) => a - b);
    const mid = sorted.length >> 1;
    return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
  };
  const statusCounts: Record<string, number> = {};
  for (const m of windows) for (const [status, n] of Object.entries(m.statusCounts)) statusCounts[status] = (statusCounts[status] ?? 0) + n;
  const requests = sum((m) => m.requests);
  const responses = sum((m) => m.rps * m.durationSec);
  const combined: Measurement = {
    requests,
    durationSec: time,
    rps: responses / time,
    p50Ms: median(windows.map((m) => m.p50Ms)),
    p99Ms: Math.max(...windows.map((m) => m.p99Ms)),
    meanMs: sum((m) => m.meanMs * m.requests) / requests,
    maxMs: Math.max(...windows.map((m) => m.maxMs)),
    statusCounts,
    non2xx: sum((m) => m.non2xx),
    errors: sum((m) => m.errors),
    timeouts: sum((m) => m.timeouts),
    loadCpuPct: weighted((m) => m.loadCpuPct)!,
  };
  const server = weighted((m) => m.serverCpuPct);
  const other = weighted((m) => m.otherCpuPct);
  const firstFailure = windows.find((m) => m.firstFailure !== undefined)?.firstFailure;
  // Bulk windows: items over all of their time, as req/s is.
  const items = weighted((m) => m.itemsPerSec);
  if (items !== undefined) {
    combined.itemsPerSec = items;
    if (windows[0]!.itemsLabel !== undefined) combined.itemsLabel = windows[0]!.itemsLabel;
  }
  if (server !== undefined) combined.serverCpuPct = server;
  if (other !== undefined) combined.otherCpuPct = other;
  if (firstFailure !== undefined) combined.firstFailure = firstFailure;
  return combined;
}

// ---------------------------------------------------------------------------
// Targets

function times(x: number): string {
  return `${x.toFixed(2)}×`;
}

/** Subject req/s ≥ factor × reference req/s. */
export function throughputAtLeast(factor: number, referenceName: string): Target {
  const ratioOf = (subject: Measurement, reference: Measurement): number => subject.rps / reference.rps;
  return {
    description: `≥ ${times(factor)} ${referenceName} req/s`,
    alternating: true,
    ratio: ratioOf,
    evaluate(subject, reference) {
      const ratio = reference ? ratioOf(subject, reference) : NaN;
      return { ratioText: `${times(ratio)} ${referenceName}`, met: ratio >= factor };
    },
  };
}

/** Subject p50 ≤ factor × reference p50. */
export function p50AtMost(factor: number, referenceName: string): Target {
  const ratioOf = (subject: Measurement, reference: Measurement): number => subject.p50Ms / reference.p50Ms;
  return {
    description: `p50 ≤ ${times(factor)} ${referenceName} p50`,
    alternating: true,
    ratio: ratioOf,
    evaluate(subject, reference) {
      const ratio = reference ? ratioOf(subject, reference) : NaN;
      return { ratioText: `${times(ratio)} ${referenceName}`, met: ratio <= factor };
    },
  };
}

/** Absolute: subject p99 ≤ ms (no reference). */
export function p99AtMostMs(ms: number): Target {
  return {
    description: `p99 ≤ ${ms} ms`,
    evaluate(subject) {
      return { ratioText: '', met: subject.p99Ms <= ms };
    },
  };
}
