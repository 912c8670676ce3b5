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
  /** When set, every request is built from it instead of `url`'s path and `body`. */
  template?: RequestTemplate;
  connections: number;
  warmupSeconds: number;
  durationSeconds: number;
  /**
   * Where the template's `{{n}}` counter starts: a later window of the same load continues where
   * the one before stopped (its `templateRequests`), so no request repeats an earlier one.
   */
  counterStart?: number;
}

/**
 * A request that differs per request, for writes that must really change something each time
 * (an identical PATCH makes no new version and is cheaper). In `path` and `body`, `{{n}}` is a
 * counter unique within the job (warm-up included) and `{{slot}}` is n mod `slots`, so a few
 * rows take turns instead of one hot row.
 */
export interface RequestTemplate {
  path: string;
  body?: string;
  slots: number;
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

/**
 * Create→claim latency with a runner already waiting. Each round: the runner's claim is sent and
 * left waiting for `settleMs`, the owner creates a deployment, and the time from sending the
 * create to the end of the claim's answer is recorded; then the runner completes the deployment
 * so that the next one of the same service and environment can be claimed.
 */
export interface ClaimLatencyJob {
  kind: 'claimLatency';
  baseUrl: string;
  orgId: string;
  /** Bearer token of a developer (or higher): creates the deployments. */
  ownerToken: string;
  /** Bearer token of a `runner` service user: claims and completes them. */
  runnerToken: string;
  service: string;
  environment: string;
  warmupRounds: number;
  rounds: number;
  /** How long the claim waits on its own before the create is sent, so that it is really waiting. */
  settleMs: number;
}

// Add a new job kind here (and a runner in bench/load.ts) for rows that need a
// different client.
export type LoadJob = ThroughputJob | SequenceJob | ClaimLatencyJob;

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
  /** Throughput jobs with a template: the counter after the job (warm-up included). */
  templateRequests?: number;
}

export type LoadMessage =
  | { type: 'phase'; phase: 'measure-start' | 'measure-end' }
  | { type: 'result'; result: LoadResult }
  | { type: 'error'; message: string };
