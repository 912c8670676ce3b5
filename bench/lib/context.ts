// The BenchContext handed to probes: lazily started, shared servers and a
// load runner that forks bench/load.ts for every job.

import path from 'node:path';
import { performance } from 'node:perf_hooks';
import type { BenchConfig, BenchContext, Measurement } from './harness.js';
import { ProbeError } from './harness.js';
import type { LoadJob, LoadMessage } from './load-protocol.js';
import { BENCH_DIST_DIR, machineBusySeconds, processCpuSeconds, startProcess, tail } from './proc.js';
import { type RunningServer, type ServerId, SERVERS, type ServerTypes } from './servers.js';

/** A load that ran: enough to run it again for another window. */
export interface LoadRun {
  server: RunningServer;
  job: LoadJob;
  result: Measurement;
}

export interface RunContext extends BenchContext {
  /** If server `id` was started and has since exited: what happened, with the end of its log. */
  serverExit(id: ServerId): string | undefined;
  /** The load that ran last, through any context derived from this one. */
  lastLoad(): LoadRun | undefined;
}

function jobBudgetMs(job: LoadJob): number {
  switch (job.kind) {
    case 'throughput':
      return (job.warmupSeconds + job.durationSeconds) * 1000 * 2 + 30_000;
    case 'sequence':
      return (job.warmupRequests + job.requests) * 5_000 + 60_000;
    case 'claimLatency':
      return (job.warmupRounds + job.rounds) * (job.settleMs + 2_000) + 60_000;
  }
}

export function createContext(config: BenchConfig, runDir: string): RunContext {
  const servers = new Map<ServerId, Promise<RunningServer>>();
  const running = new Map<ServerId, RunningServer>();
  let last: LoadRun | undefined;

  const ctx: RunContext = {
    config,
    runDir,

    log(message) {
      process.stderr.write(`  · ${message}\n`);
    },

    server<K extends ServerId>(id: K): Promise<ServerTypes[K]> {
      let started = servers.get(id);
      if (!started) {
        const spec = SERVERS[id];
        ctx.log(`starting ${spec.label}`);
        started = (spec.start as (o: { runDir: string; cpu: number | undefined }) => Promise<RunningServer>)({
          runDir,
          cpu: config.serverCpu,
        });
        started.then(
          (server) => running.set(id, server),
          () => undefined,
        );
        servers.set(id, started);
      }
      return started.then((server) => {
        const exit = ctx.serverExit(id);
        if (exit) throw new ProbeError(`earlier in the run, ${exit}`);
        return server as ServerTypes[K];
      });
    },

    lastLoad: () => last,

    serverExit(id) {
      const server = running.get(id);
      if (!server?.process.exitInfo()) return undefined;
      const log = tail(server.process.logFile);
      return `${server.process.describeExit()}${log ? `; last lines of its log:\n    ${log.split('\n').join('\n    ')}` : ''}`;
    },

    async load(server, job) {
      const proc = startProcess({
        name: 'load generator',
        args: [path.join(BENCH_DIST_DIR, 'load.js')],
        ipc: true,
        logFile: path.join(runDir, 'load.log'),
        ...(config.loadCpu !== undefined ? { cpu: config.loadCpu } : {}),
      });
      try {
        return await new Promise<Measurement>((resolve, reject) => {
          let cpu0: number | undefined;
          let busy0: number | undefined;
          let t0 = 0;
          let serverCpuPct: number | undefined;
          let busyPct: number | undefined;
          const timer = setTimeout(() => reject(new ProbeError('load generator did not finish in time')), jobBudgetMs(job));
          proc.child.on('message', (m: LoadMessage) => {
            if (m.type === 'phase' && m.phase === 'measure-start') {
              cpu0 = processCpuSeconds(server.process.pid);
              busy0 = machineBusySeconds();
              t0 = performance.now();
            } else if (m.type === 'phase' && m.phase === 'measure-end') {
              const cpu1 = processCpuSeconds(server.process.pid);
              const busy1 = machineBusySeconds();
              const wall = (performance.now() - t0) / 1000;
              if (cpu0 !== undefined && cpu1 !== undefined && wall > 0) serverCpuPct = (100 * (cpu1 - cpu0)) / wall;
              if (busy0 !== undefined && busy1 !== undefined && wall > 0) busyPct = (100 * (busy1 - busy0)) / wall;
            } else if (m.type === 'result') {
              clearTimeout(timer);
              const measurement: Measurement = { ...m.result };
              if (serverCpuPct !== undefined) measurement.serverCpuPct = serverCpuPct;
              if (busyPct !== undefined && serverCpuPct !== undefined) {
                measurement.otherCpuPct = Math.max(0, busyPct - serverCpuPct - m.result.loadCpuPct);
              }
              last = { server, job, result: measurement };
              resolve(measurement);
            } else if (m.type === 'error') {
              clearTimeout(timer);
              reject(new ProbeError(`load generator: ${m.message}`));
            }
          });
          void proc.exited.then(() => {
            clearTimeout(timer);
            reject(new ProbeError(`${proc.describeExit()}: ${tail(proc.logFile)}`));
          });
          proc.child.send(job);
        });
      } finally {
        await proc.stop(2000);
      }
    },
  };
  return ctx;
}
