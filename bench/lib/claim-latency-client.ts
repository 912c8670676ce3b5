// The claim-latency client, run inside the load process: a runner waiting in a long-polling
// claim and an owner creating the deployment it should get, both here, so that the server
// process is the only thing measured. Each runs on its own keep-alive connection, as a real
// runner and a real deploy script would.

import http from 'node:http';
import { performance } from 'node:perf_hooks';
import type { CreateDeploymentInput, Deployment } from '../../src/modules/deployments/deployments.schemas.js';
import {
  type ClaimRequestT,
  type ClaimResponseT,
  type CompleteRequestT,
  runnerUrl,
} from '../../src/modules/runner/runner.protocol.js';
import { isSuccess, send, Stopwatch, summarize } from './load-kit.js';
import type { ClaimLatencyJob, LoadResult } from './load-protocol.js';

interface Answer {
  status: number;
  body: string;
  /** performance.now() when the last byte of the answer arrived. */
  endAt: number;
  failure?: string;
}

function call(agent: http.Agent, url: URL, token: string, body: unknown): Promise<Answer> {
  const payload = Buffer.from(JSON.stringify(body));
  return new Promise((resolve) => {
    const failed = (err: Error): void => resolve({ status: 0, body: '', endAt: performance.now(), failure: err.message });
    const req = http.request(
      {
        host: url.hostname,
        port: url.port,
        path: url.pathname,
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', 'content-length': String(payload.length) },
        agent,
      },
      (res) => {
        const status = res.statusCode ?? 0;
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () => {
          const endAt = performance.now();
          const text = Buffer.concat(chunks).toString('utf8');
          resolve({ status, body: text, endAt, ...(isSuccess(status) ? {} : { failure: `HTTP ${status} ${text.slice(0, 300)}` }) });
        });
        res.on('error', failed);
      },
    );
    // Longer than the claim's own wait, so that a claim that gets nothing answers 204 first.
    req.setTimeout(60_000, () => req.destroy(new Error('request timed out after 60 s')));
    req.on('error', failed);
    req.end(payload);
  });
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** One round's outcome: the create→claim time, or why the round failed (and the job stops). */
type Round = { ms: number; statuses: number[] } | { failure: string; statuses: number[]; timedOut: boolean };

export async function runClaimLatency(job: ClaimLatencyJob): Promise<LoadResult> {
  const at = (path: string): URL => new URL(path, job.baseUrl);
  const claimUrl = at(runnerUrl('claim', job.orgId));
  const createUrl = at(`/v1/orgs/${encodeURIComponent(job.orgId)}/deployments`);
  const claimBody: ClaimRequestT = { environments: [job.environment], waitSeconds: 30 };
  const createBody: CreateDeploymentInput = { service: job.service, environment: job.environment };
  const runner = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const owner = new http.Agent({ keepAlive: true, maxSockets: 1 });

  async function round(): Promise<Round> {
    const claiming = call(runner, claimUrl, job.runnerToken, claimBody);
    await sleep(job.settleMs);
    const sentAt = performance.now();
    const created = await call(owner, createUrl, job.ownerToken, createBody);
    // Nothing will come for a claim whose deployment was refused: end it instead of waiting 30 s.
    if (created.failure) runner.destroy();
    const claim = await claiming;
    const statuses = [claim.status, created.status];
    if (created.failure) return { failure: `create: ${created.failure}`, statuses, timedOut: false };
    if (claim.status === 204) return { failure: 'claim: 204, no deployment within its 30 s wait', statuses, timedOut: true };
    if (claim.failure) return { failure: `claim: ${claim.failure}`, statuses, timedOut: false };
    if (claim.endAt < sentAt) return { failure: 'claim answered before the deployment was created: something else was claimable', statuses, timedOut: false };

    const claimed = JSON.parse(claim.body) as ClaimResponseT;
    const createdId = (JSON.parse(created.body) as Deployment).id;
    // Not a slow answer but a wrong set-up: another deployment of this environment was queued.
    if (claimed.deployment.id !== createdId) throw new Error(`claimed ${claimed.deployment.id}, but created ${createdId}`);

    const complete: CompleteRequestT = { leaseToken: claimed.lease.token, outcome: 'succeeded' };
    const done = await call(runner, at(runnerUrl('complete', job.orgId, createdId)), job.runnerToken, complete);
    statuses.push(done.status);
    if (done.failure) return { failure: `complete: ${done.failure}`, statuses, timedOut: false };
    return { ms: claim.endAt - sentAt, statuses };
  }

  try {
    for (let i = 0; i < job.warmupRounds; i++) {
      const r = await round();
      if ('failure' in r) throw new Error(`warm-up round ${i + 1}: ${r.failure}`);
    }

    send({ type: 'phase', phase: 'measure-start' });
    const watch = new Stopwatch();
    const latencies: number[] = [];
    const statusCounts: Record<string, number> = {};
    let non2xx = 0;
    let errors = 0;
    let timeouts = 0;
    let firstFailure: string | undefined;
    for (let i = 0; i < job.rounds; i++) {
      const r = await round();
      for (const status of r.statuses) {
        if (status === 0) continue;
        statusCounts[status] = (statusCounts[status] ?? 0) + 1;
        if (!isSuccess(status)) non2xx++;
      }
      if ('ms' in r) {
        latencies.push(r.ms);
        continue;
      }
      // A failed round leaves a deployment behind (or a runner holding one): later rounds would
      // measure that, so stop here; the failure makes the row invalid.
      firstFailure = r.failure;
      if (r.timedOut) timeouts++;
      else if (!r.statuses.some((s) => s !== 0 && !isSuccess(s))) errors++;
      break;
    }
    const { cpuPct } = watch.read();
    send({ type: 'phase', phase: 'measure-end' });

    const { sumMs, ...summary } = summarize(latencies);
    return {
      requests: latencies.length + (firstFailure ? 1 : 0),
      // As for the other sequential rows: the summed latencies, so req/s is deployments claimed
      // per second of create→claim time (the settle pauses and completions are not counted).
      durationSec: sumMs / 1000,
      rps: latencies.length / (sumMs / 1000),
      ...summary,
      statusCounts,
      non2xx,
      errors,
      timeouts,
      loadCpuPct: cpuPct,
      ...(firstFailure ? { firstFailure } : {}),
    };
  } finally {
    runner.destroy();
    owner.destroy();
  }
}
