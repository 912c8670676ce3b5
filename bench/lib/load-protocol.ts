// The contract between the orchestrator (bench/run.ts) and the load-generator
// child process (bench/load.ts). Everything here crosses an IPC channel, so it
// is plain JSON: no functions, no class instances.

import type { BodySpec } from './bodies.js';

/** Saturate one endpoint with autocannon: fixed request, N connections, fixed duration. */
export interface ThroughputJob {
  kind: 'throughput';
  url: string;
  method: string;
  headers: Record<string, string>;
  body?: string;
  connections: number;
  warmupSeconds: number;
  durationSeconds: number;
}

/**
 * Send requests one after another (concurrency 1) and time each one. The body is
 * generated in the load process per request (so names can be unique per
 * request) before its clock starts.
 */
export interface SequenceJob {
  kind: 'sequence';
  url: string;
  method: string;
  headers: Record<string, string>;
  body: BodySpec;
  warmupRequests: number;
  requests: number;
  /** Items carried by one request (e.g. 1000 secrets), for the items/s figure. */
  itemsPerRequest?: number;
  itemsLabel?: string;
}

// Add a new job kind here (and a runner in bench/load.ts) for rows that need a
// different client, e.g. a long-polling runner for create→claim latency.
export type LoadJob = ThroughputJob | SequenceJob;

export interface LoadResult {
  /** Responses (any status) and failed requests in the measured phase. */
  requests: number;
  /** Wall time of the measured phase (throughput) or sum of request times (sequence), seconds. */
  durationSec: number;
  rps: number;
  p50Ms: number;
  p99Ms: number;
  meanMs: number;
  maxMs: number;
  statusCounts: Record<string, number>;
  non2xx: number;
  /** Connection errors / resets. */
  errors: number;
  timeouts: number;
  itemsPerSec?: number;
  itemsLabel?: string;
  /** CPU used by the load process during the measured phase, % of one core. */
  loadCpuPct: number;
  /** First failure seen (status + body snippet, or error message), for the report. */
  firstFailure?: string;
}

export type LoadMessage =
  | { type: 'phase'; phase: 'measure-start' | 'measure-end' }
  | { type: 'result'; result: LoadResult }
  | { type: 'error'; message: string };
