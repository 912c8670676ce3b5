// Load generator, run as a child process of bench/run.ts (pinned to its own
// core when pinning is on) so that it never competes with the server under
// test inside one event loop. It receives one LoadJob over IPC, reports
// phase changes (so the orchestrator can sample the server's CPU over exactly
// the measured window) and then one LoadResult.

import http from 'node:http';
import { performance } from 'node:perf_hooks';
import autocannon from 'autocannon';
import { fillTemplate, makeBody } from './lib/bodies.js';
import { runClaimLatency } from './lib/claim-latency-client.js';
import { isSuccess, send, Stopwatch, summarize } from './lib/load-kit.js';
import type { LoadJob, LoadResult, SequenceJob, ThroughputJob } from './lib/load-protocol.js';

// ---------------------------------------------------------------------------
// throughput: autocannon

interface CannonRun {
  result: autocannon.Result;
  latencies: Float64Array;
  count: number;
  firstError?: string;
}

/** Counts the requests built from a template across the warm-up and measured runs of one job. */
interface Counter {
  n: number;
}

function cannon(job: ThroughputJob, seconds: number, collect: boolean, counter: Counter): Promise<CannonRun> {
  return new Promise((resolve, reject) => {
    // autocannon's own histogram has 1 ms resolution and keeps 2xx only; record
    // every response time ourselves for sub-millisecond percentiles.
    let latencies = new Float64Array(collect ? 1 << 16 : 0);
    let count = 0;
    let firstError: string | undefined;
    const options: autocannon.Options = {
      url: job.url,
      method: job.method,
      headers: job.headers,
      connections: job.connections,
      pipelining: 1,
      duration: seconds,
      timeout: 10,
    };
    if (job.body !== undefined) options.body = job.body;
    if (job.template) {
      // autocannon rebuilds a request that has setupRequest every time it sends one.
      const { path, body, slots } = job.template;
      options.requests = [
        {
          setupRequest(req: { path: string; body?: string }) {
            const n = counter.n++;
            req.path = fillTemplate(path, n, slots);
            if (body !== undefined) req.body = fillTemplate(body, n, slots);
            return req;
          },
        },
      ];
    }
    const instance = autocannon(options, (err, result) => {
      if (err) reject(err);
      else resolve({ result, latencies: latencies.subarray(0, count), count, ...(firstError ? { firstError } : {}) });
    });
    instance.on('reqError', (err: unknown) => {
      firstError ??= err instanceof Error ? err.message : String(err);
    });
    if (collect) {
      instance.on('response', (_client: unknown, _status: number, _bytes: number, responseTime: number) => {
        if (count === latencies.length) {
          const bigger = new Float64Array(latencies.length * 2);
          bigger.set(latencies);
          latencies = bigger;
        }
        latencies[count++] = responseTime;
      });
    }
  });
}

async function runThroughput(job: ThroughputJob): Promise<LoadResult> {
  const counter: Counter = { n: job.counterStart ?? 0 };
  if (job.warmupSeconds > 0) await cannon(job, job.warmupSeconds, false, counter);
  send({ type: 'phase', phase: 'measure-start' });
  const watch = new Stopwatch();
  const run = await cannon(job, job.durationSeconds, true, counter);
  const { cpuPct } = watch.read();
  send({ type: 'phase', phase: 'measure-end' });

  const { result } = run;
  const statusCounts: Record<string, number> = {};
  let responses = 0;
  let non2xx = 0;
  for (const [status, { count }] of Object.entries(result.statusCodeStats)) {
    statusCounts[status] = count;
    responses += count;
    if (!isSuccess(Number(status))) non2xx += count;
  }
  const { p50Ms, p99Ms, meanMs, maxMs } = summarize(run.latencies);
  const durationSec = result.duration > 0 ? result.duration : job.durationSeconds;
  const firstNon2xx = Object.keys(statusCounts).find((s) => !isSuccess(Number(s)));
  const firstFailure = run.firstError ?? (firstNon2xx ? `HTTP ${firstNon2xx}` : undefined);
  return {
    requests: responses + result.errors,
    durationSec,
    rps: responses / durationSec,
    p50Ms,
    p99Ms,
    meanMs,
    maxMs,
    statusCounts,
    non2xx,
    errors: result.errors,
    timeouts: result.timeouts,
    loadCpuPct: cpuPct,
    ...(firstFailure ? { firstFailure } : {}),
    ...(job.template ? { templateRequests: counter.n } : {}),
  };
}

// ---------------------------------------------------------------------------
// sequence: one request at a time over one keep-alive connection

interface Timed {
  status: number;
  ms: number;
  failure?: string;
}

function timedRequest(job: SequenceJob, agent: http.Agent, body: string): Promise<Timed> {
  const url = new URL(job.url);
  const payload = Buffer.from(body);
  return new Promise((resolve) => {
    const t0 = performance.now();
    const req = http.request(
      {
        host: url.hostname,
        port: url.port,
        path: url.pathname + url.search,
        method: job.method,
        headers: { ...job.headers, 'content-length': String(payload.length) },
        agent,
      },
      (res) => {
        const status = res.statusCode ?? 0;
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => {
          if (!isSuccess(status)) chunks.push(chunk);
        });
        res.on('end', () => {
          const ms = performance.now() - t0;
          if (isSuccess(status)) resolve({ status, ms });
          else resolve({ status, ms, failure: `HTTP ${status} ${Buffer.concat(chunks).toString('utf8').slice(0, 300)}` });
        });
        res.on('error', (err) => resolve({ status: 0, ms: performance.now() - t0, failure: err.message }));
      },
    );
    req.setTimeout(60_000, () => req.destroy(new Error('request timed out after 60 s')));
    req.on('error', (err) => resolve({ status: 0, ms: performance.now() - t0, failure: err.message }));
    req.end(payload);
  });
}

async function runSequence(job: SequenceJob): Promise<LoadResult> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  let seq = 0;
  for (let i = 0; i < job.warmupRequests; i++) await timedRequest(job, agent, makeBody(job.body, seq++));

  send({ type: 'phase', phase: 'measure-start' });
  const watch = new Stopwatch();
  const latencies = new Float64Array(job.requests);
  const statusCounts: Record<string, number> = {};
  let non2xx = 0;
  let errors = 0;
  let firstFailure: string | undefined;
  for (let i = 0; i < job.requests; i++) {
    const body = makeBody(job.body, seq++);
    const r = await timedRequest(job, agent, body);
    latencies[i] = r.ms;
    if (r.status === 0) errors++;
    else {
      statusCounts[r.status] = (statusCounts[r.status] ?? 0) + 1;
      if (!isSuccess(r.status)) non2xx++;
    }
    firstFailure ??= r.failure;
  }
  const { cpuPct } = watch.read();
  send({ type: 'phase', phase: 'measure-end' });
  agent.destroy();

  const { sumMs, ...summary } = summarize(latencies);
  const durationSec = sumMs / 1000;
  const result: LoadResult = {
    requests: job.requests,
    durationSec,
    rps: job.requests / durationSec,
    ...summary,
    statusCounts,
    non2xx,
    errors,
    timeouts: 0,
    loadCpuPct: cpuPct,
    ...(firstFailure ? { firstFailure } : {}),
  };
  if (job.itemsPerRequest) {
    result.itemsPerSec = (job.itemsPerRequest * job.requests) / durationSec;
    result.itemsLabel = job.itemsLabel ?? 'items';
  }
  return result;
}

// ---------------------------------------------------------------------------

async function runJob(job: LoadJob): Promise<LoadResult> {
  switch (job.kind) {
    case 'throughput':
      return runThroughput(job);
    case 'sequence':
      return runSequence(job);
    case 'claimLatency':
      return runClaimLatency(job);
  }
}

// The orchestrator going away (even if it was SIGKILLed) closes the channel.
process.on('disconnect', () => process.exit(0));
process.once('message', (job: LoadJob) => {
  runJob(job).then(
    (result) => send({ type: 'result', result }),
    (err: unknown) => send({ type: 'error', message: err instanceof Error ? (err.stack ?? err.message) : String(err) }),
  );
});
