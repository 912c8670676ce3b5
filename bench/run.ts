// `npm run bench`: start every server a selected row needs (each in its own
// process), load each from a separate load-generator process, and print one
// table comparing Slipway with references measured in this same run.
//
// Environment:
//   BENCH_ONLY=orgs,token,ceiling  rows (by row id) and/or single probes (by probe id)
//   BENCH_DURATION=8 BENCH_WARMUP=2 BENCH_CONNECTIONS=10      throughput rows
//   BENCH_ROUNDS=4       windows a row and its reference alternate in
//   BENCH_BULK_REQUESTS=40 BENCH_BULK_WARMUP=5 BENCH_BULK_SIZE=1000   bulk rows
//   BENCH_CLAIM_ROUNDS=200 BENCH_CLAIM_WARMUP=10                      claim-latency row
//   BENCH_PIN=auto|0|1   pin servers to CPU 0 and the load generator to CPU 1 (taskset)
//   BENCH_KEEP=1         keep the run directory (logs, databases) even on success
//   BENCH_SLIPWAY_X=…    passed to Slipway as SLIPWAY_X (e.g. BENCH_SLIPWAY_DATABASE_URL)

import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createContext, type LoadRun, type RunContext } from './lib/context.js';
import { type BenchConfig, combineWindows, invalidReason, type Measurement, type Probe, ProbeError, type Row } from './lib/harness.js';
import type { ThroughputJob } from './lib/load-protocol.js';
import { armCleanup, disarmReaper, REPO_ROOT, setPinning, stopAll, tasksetAvailable } from './lib/proc.js';
import { type Column, formatMs, formatPct, formatRate, renderTable } from './lib/table.js';
import { ceiling, floorBulkCreate, oidcToken } from './references.js';
import { ROWS } from './rows.js';

/** Probes that can be run alone with BENCH_ONLY even if no selected row uses them. */
const STANDALONE: Probe[] = [ceiling, oidcToken, floorBulkCreate];

type Outcome = { ok: true; m: Measurement } | { ok: false; reason: string };

/** What an alternating row measured: its own reference windows (combined) and each round's ratio. */
/** What an alternating row measured: its own windows of each side (a probe may serve several rows). */
interface Pairing {
  reference: Outcome;
  subject: Outcome;
  ratios: number[];
}

type Side = 'reference' | 'subject';

/** A later window starts with this much warm-up (new connections), not the first window's full one. */
const REWARM_SECONDS = 0.5;

function numberEnv(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isFinite(value) || value < 0) {
    console.error(`${name} must be a non-negative number, got "${raw}"`);
    process.exit(2);
  }
  return value;
}

function readConfig(): BenchConfig {
  const only = process.env.BENCH_ONLY?.split(',').map((s) => s.trim()).filter(Boolean);
  const cores = os.cpus().length;
  const pinSetting = (process.env.BENCH_PIN ?? 'auto').toLowerCase();
  const pin = pinSetting === 'auto' ? cores >= 2 && tasksetAvailable() : pinSetting === '1' || pinSetting === 'true';
  if (pin && !tasksetAvailable()) {
    console.error('BENCH_PIN=1 but taskset is not on PATH');
    process.exit(2);
  }
  return {
    only: only?.length ? new Set(only) : undefined,
    durationSec: numberEnv('BENCH_DURATION', 8),
    warmupSec: numberEnv('BENCH_WARMUP', 2),
    connections: Math.max(1, Math.round(numberEnv('BENCH_CONNECTIONS', 10))),
    bulkRequests: Math.max(1, Math.round(numberEnv('BENCH_BULK_REQUESTS', 40))),
    bulkWarmup: Math.round(numberEnv('BENCH_BULK_WARMUP', 5)),
    bulkSize: Math.max(1, Math.round(numberEnv('BENCH_BULK_SIZE', 1000))),
    claimRounds: Math.max(1, Math.round(numberEnv('BENCH_CLAIM_ROUNDS', 200))),
    claimWarmup: Math.round(numberEnv('BENCH_CLAIM_WARMUP', 10)),
    rounds: Math.max(1, Math.round(numberEnv('BENCH_ROUNDS', 4))),
    pin,
    serverCpu: pin ? 0 : undefined,
    loadCpu: pin ? 1 : undefined,
    keepRunDir: ['1', 'true'].includes((process.env.BENCH_KEEP ?? '').toLowerCase()),
  };
}

/** Which rows and which extra probes to run, in order. */
function selectPlan(config: BenchConfig): { rows: Row[]; probes: Probe[] } {
  if (!config.only) return { rows: ROWS, probes: [] };
  const known = new Set([...ROWS.map((r) => r.id), ...ROWS.flatMap((r) => [r.subject.id, r.reference?.id ?? '']), ...STANDALONE.map((p) => p.id)]);
  const unknown = [...config.only].filter((id) => !known.has(id));
  if (unknown.length) {
    console.error(`BENCH_ONLY: unknown ${unknown.join(', ')}; known: ${[...known].filter(Boolean).join(', ')}`);
    process.exit(2);
  }
  const rows = ROWS.filter((r) => config.only!.has(r.id));
  const allProbes = [...STANDALONE, ...ROWS.flatMap((r) => (r.reference ? [r.reference, r.subject] : [r.subject]))];
  const probes = [...new Map(allProbes.filter((p) => config.only!.has(p.id)).map((p) => [p.id, p])).values()];
  return { rows, probes };
}

function cpuModel(): string {
  const fromOs = os.cpus()[0]?.model?.trim();
  if (fromOs) return fromOs;
  try {
    const line = fs.readFileSync('/proc/cpuinfo', 'utf8').split('\n').find((l) => l.startsWith('model name'));
    return line?.split(':')[1]?.trim() ?? 'unknown';
  } catch {
    return 'unknown';
  }
}

/** Read-only: which commit is being measured. */
function slipwayRevision(): string {
  try {
    return execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'ignore'] }).toString().trim();
  } catch {
    return 'no commit';
  }
}

function printHeader(config: BenchConfig, runDir: string): void {
  const lines = [
    'Slipway benchmark',
    `  date      ${new Date().toISOString()}`,
    `  machine   ${cpuModel()}, ${os.cpus().length} cores, ${Math.round(os.totalmem() / 2 ** 30)} GiB, ${os.type()} ${os.release()}`,
    `  node      ${process.version}; load average at start ${os.loadavg().map((l) => l.toFixed(2)).join(' ')}`,
    `  slipway   ${slipwayRevision()} (working tree as built in dist/)`,
    `  pinning   ${config.pin ? `servers on CPU ${config.serverCpu}, load generator on CPU ${config.loadCpu} (taskset)` : 'off'}`,
    `  load      throughput rows: ${config.connections} connections, ${config.warmupSec} s warm-up + ${config.durationSec} s measured; ` +
      `bulk rows: ${config.bulkSize} secrets/request, ${config.bulkWarmup} warm-up + ${config.bulkRequests} measured requests, one at a time; ` +
      `claim latency: ${config.claimWarmup} warm-up + ${config.claimRounds} measured rounds`,
    `  rounds    rows alternate with their reference in ${config.rounds} window(s): throughput rows of ${+(config.durationSec / config.rounds).toFixed(2)} s each, ` +
      `bulk rows of ${Math.ceil(config.bulkRequests / config.rounds)} requests each (after ${Math.min(config.bulkWarmup, 1)} of warm-up)`,
    `  run dir   ${runDir}`,
    '',
  ];
  process.stdout.write(lines.join('\n') + '\n');
}

function reasonOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

async function main(): Promise<number> {
  const config = readConfig();
  const plan = selectPlan(config);
  setPinning(config.pin);
  const runDir = fs.mkdtempSync(path.join(os.tmpdir(), 'slipway-bench-'));
  armCleanup();

  let interrupted = false;
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      interrupted = true;
      process.stderr.write(`\n${signal}: stopping child processes…\n`);
      void stopAll(2000, true).finally(() => process.exit(130));
    });
  }

  printHeader(config, runDir);
  const ctx = createContext(config, runDir);
  const outcomes = new Map<string, Outcome>();

  async function measure(probe: Probe): Promise<Outcome> {
    const done = outcomes.get(probe.id);
    if (done) return done;
    if (interrupted) return { ok: false, reason: 'interrupted' };
    process.stderr.write(`measuring ${probe.label}\n`);
    let outcome: Outcome;
    try {
      outcome = { ok: true, m: await probe.run(ctx) };
      const exit = ctx.serverExit(probe.server);
      if (exit) throw new ProbeError(`during the measurement, ${exit}`);
      const m = outcome.m;
      ctx.log(`${formatRate(m.rps)} req/s, p50 ${formatMs(m.p50Ms)} ms, p99 ${formatMs(m.p99Ms)} ms${m.non2xx ? `, ${m.non2xx} non-2xx` : ''}`);
    } catch (err) {
      outcome = { ok: false, reason: reasonOf(err) };
      ctx.log(`FAILED: ${outcome.reason.split('\n')[0]}`);
    }
    outcomes.set(probe.id, outcome);
    return outcome;
  }

  /** Every window measured per probe by alternating rows: a reference's ref line pools those of all its rows. */
  const windows = new Map<string, Measurement[]>();
  const pairings = new Map<string, Pairing>();
  const windowCtx: RunContext = {
    ...ctx,
    config: { ...config, durationSec: config.durationSec / config.rounds, bulkRequests: Math.max(1, Math.ceil(config.bulkRequests / config.rounds)) },
  };
  /** A later bulk window: a request of warm-up, after the other side's window left this server idle. */
  const bulkWindowCtx: RunContext = { ...windowCtx, config: { ...windowCtx.config, bulkWarmup: Math.min(config.bulkWarmup, 1) } };

  /**
   * One window of a probe: the probe itself the first time (the prologue), its load again after
   * that. A bulk (sequence) window is the whole probe again: its set-up makes the names that its
   * requests need.
   */
  async function window(probe: Probe, previous: LoadRun | undefined): Promise<LoadRun> {
    let run: LoadRun | undefined;
    if (previous === undefined || previous.job.kind === 'sequence') {
      await probe.run(previous === undefined ? windowCtx : bulkWindowCtx);
      run = ctx.lastLoad();
      if (run?.job.kind !== 'throughput' && run?.job.kind !== 'sequence') throw new ProbeError('an alternating row needs a throughput or bulk load on both sides');
    } else {
      const job = previous.job as ThroughputJob;
      const next = previous.result.templateRequests;
      await ctx.load(previous.server, { ...job, warmupSeconds: Math.min(job.warmupSeconds, REWARM_SECONDS), ...(next !== undefined ? { counterStart: next } : {}) });
      run = ctx.lastLoad()!;
    }
    const exit = ctx.serverExit(probe.server);
    if (exit) throw new ProbeError(`during the measurement, ${exit}`);
    if (previous !== undefined) windows.set(probe.id, [...(windows.get(probe.id) ?? []), run.result]);
    return run;
  }

  /**
   * A row against its reference (throughput, or a bulk row's latency): reference and subject take turns for
   * BENCH_ROUNDS windows, and the ratio is over all of them. The ratio of two measurements minutes
   * apart mostly measured how the shared machine's speed had moved in between.
   *
   * Each side first runs its probe once, unmeasured (the prologue: setup, preflight, the full
   * warm-up), so that every measured window has the same shape: a new load process, a short
   * warm-up, the window. A window measured at the end of a longer run of one load process came out
   * about a fifth slower for Slipway and not for the ceiling (while one keep-alive connection
   * kept the server's CPU per request flat over 160,000 requests): a trait of the load generator.
   */
  async function measureAlternating(row: Row, reference: Probe): Promise<void> {
    if (interrupted) return;
    process.stderr.write(`measuring ${reference.label} and ${row.subject.label}, taking turns over ${config.rounds} window(s)\n`);
    const probes = { reference, subject: row.subject };
    const last: Record<Side, LoadRun | undefined> = { reference: undefined, subject: undefined };
    const sides: Record<Side, Measurement[]> = { reference: [], subject: [] };
    let failure: { side: Side; reason: string } | undefined;
    /** One turn of a side: its prologue the first time, a measured window after that; false once it failed. */
    const turn = async (side: Side): Promise<boolean> => {
      const measured = last[side] !== undefined;
      try {
        last[side] = await window(probes[side], last[side]);
      } catch (err) {
        failure = { side, reason: reasonOf(err) };
        return false;
      }
      if (measured) sides[side].push(last[side].result);
      return true;
    };
    const ratios: number[] = [];
    if ((await turn('reference')) && (await turn('subject'))) {
      for (let i = 0; i < config.rounds && !interrupted; i++) {
        if (!(await turn('reference')) || !(await turn('subject'))) break;
        const [ref, subject] = [last.reference!.result, last.subject!.result];
        const ratio = row.target.ratio!(subject, ref);
        ratios.push(ratio);
        const shown = (m: Measurement): string => (last.reference!.job.kind === 'sequence' ? `p50 ${formatMs(m.p50Ms)} ms` : `${formatRate(m.rps)} req/s`);
        ctx.log(`window ${i + 1}: ${shown(ref)} reference, ${shown(subject)} subject: ${ratio.toFixed(2)}×`);
      }
    }
    const outcome = (side: Side, measured: Measurement[]): Outcome => {
      if (failure?.side === side) return { ok: false, reason: failure.reason };
      if (failure?.side === 'reference' && side === 'subject') return { ok: false, reason: `not measured: its reference failed (${failure.reason.split('\n')[0]})` };
      if (measured.length === 0) return { ok: false, reason: 'interrupted' };
      return { ok: true, m: combineWindows(measured) };
    };
    if (failure) ctx.log(`FAILED: ${failure.reason.split('\n')[0]}`);
    const pairing: Pairing = { reference: outcome('reference', sides.reference), subject: outcome('subject', sides.subject), ratios };
    pairings.set(row.id, pairing);
    // A probe's own line (a ref line, say): every window of it so far, from whichever rows measured
    // it, as the reference of one row or the subject of another.
    for (const [probe, own] of [[reference, pairing.reference], [row.subject, pairing.subject]] as const) {
      const all = windows.get(probe.id);
      if (all?.length) outcomes.set(probe.id, { ok: true, m: combineWindows(all) });
      else if (!outcomes.get(probe.id)?.ok) outcomes.set(probe.id, own);
    }
  }

  try {
    for (const row of plan.rows) {
      if (row.reference && row.target.alternating && row.target.ratio) {
        await measureAlternating(row, row.reference);
        continue;
      }
      if (row.reference) await measure(row.reference);
      await measure(row.subject);
    }
    for (const probe of plan.probes) await measure(probe);
  } finally {
    if (!interrupted) {
      process.stderr.write('stopping servers\n');
      await stopAll();
    }
  }

  return report(plan, outcomes, pairings, config, runDir);
}

function report(plan: { rows: Row[]; probes: Probe[] }, outcomes: Map<string, Outcome>, pairings: Map<string, Pairing>, config: BenchConfig, runDir: string): number {
  const columns: Column[] = [
    { title: 'row', align: 'left' },
    { title: 'measurement', align: 'left' },
    { title: 'req/s', align: 'right' },
    { title: 'p50 ms', align: 'right' },
    { title: 'p99 ms', align: 'right' },
    { title: 'items/s', align: 'right' },
    { title: 'non-2xx', align: 'right' },
    { title: 'cpu srv/load/other', align: 'right' },
    { title: 'ratio', align: 'left' },
    { title: 'target', align: 'left' },
    { title: 'result', align: 'left' },
  ];
  const notes: string[] = [];
  const note = (text: string): string => {
    notes.push(text);
    return `[${notes.length}]`;
  };
  let healthy = true;

  const numbers = (o: Outcome | undefined): string[] => {
    if (!o?.ok) return ['-', '-', '-', '-', '-', '-'];
    const m = o.m;
    return [
      formatRate(m.rps),
      formatMs(m.p50Ms),
      formatMs(m.p99Ms),
      m.itemsPerSec !== undefined ? `${formatRate(m.itemsPerSec)} ${m.itemsLabel?.replace(/\/s$/, '') ?? ''}`.trim() : '',
      `${m.non2xx}${m.errors + m.timeouts ? ` +${m.errors + m.timeouts} err` : ''}`,
      `${formatPct(m.serverCpuPct)}/${formatPct(m.loadCpuPct)}/${formatPct(m.otherCpuPct)}`,
    ];
  };

  const probeStatus = (probe: Probe, o: Outcome | undefined): string => {
    if (!o) return 'not run';
    if (!o.ok) {
      healthy = false;
      return `FAILED ${note(`${probe.label}: ${o.reason}`)}`;
    }
    const invalid = invalidReason(o.m);
    if (invalid) {
      healthy = false;
      return `INVALID ${note(`${probe.label}: ${invalid}${o.m.firstFailure ? `; first: ${o.m.firstFailure}` : ''}`)}`;
    }
    return 'ok';
  };

  // References first (each measured once), then the rows.
  const isReference = (p: Probe): boolean => STANDALONE.includes(p) || ROWS.some((r) => r.reference?.id === p.id);
  const references = [
    ...new Map([...plan.rows.flatMap((r) => (r.reference ? [r.reference] : [])), ...plan.probes.filter(isReference)].map((p) => [p.id, p])).values(),
  ];
  const referenceIds = new Set(references.map((p) => p.id));
  const lines: string[][] = [];
  const referenceStatus = new Map<string, string>();
  for (const probe of references) {
    const status = probeStatus(probe, outcomes.get(probe.id));
    referenceStatus.set(probe.id, status);
    lines.push(['ref', probe.label, ...numbers(outcomes.get(probe.id)), 'reference', '', status]);
  }

  plan.rows.forEach((row) => {
    const index = ROWS.indexOf(row) + 1;
    const subject = pairings.get(row.id)?.subject ?? outcomes.get(row.subject.id);
    const reference = pairings.get(row.id)?.reference ?? (row.reference ? outcomes.get(row.reference.id) : undefined);
    let ratio = '';
    let result = probeStatus(row.subject, subject);
    if (result === 'ok' && subject?.ok) {
      if (row.reference && !reference?.ok) {
        result = 'NO REFERENCE (reference failed)';
      } else if (row.reference && reference?.ok && invalidReason(reference.m)) {
        result = 'NO REFERENCE (reference invalid)';
      } else {
        const verdict = row.target.evaluate(subject.m, reference?.ok ? reference.m : undefined);
        ratio = verdict.ratioText;
        result = verdict.met ? 'MET' : 'NOT MET';
      }
    }
    lines.push([`${index}`, row.subject.label, ...numbers(subject), ratio, row.target.description, result]);
  });
  // Standalone non-reference probes (BENCH_ONLY=slipway-orgs, say).
  for (const probe of plan.probes.filter((p) => !referenceIds.has(p.id))) {
    lines.push(['-', probe.label, ...numbers(outcomes.get(probe.id)), '', '', probeStatus(probe, outcomes.get(probe.id))]);
  }

  const separators = references.length > 0 && lines.length > references.length ? [references.length - 1] : [];
  const out = [renderTable(columns, lines, separators), ''];
  out.push(
    'req/s: responses per second (throughput rows: 2xx and non-2xx over the measured window; bulk rows: requests / summed latency; claim latency: claims / summed create→claim time).',
    'items/s: secrets written per second in bulk rows.',
    'cpu srv/load/other: CPU of the server, of the load generator and of everything else on the machine (noise) during the measured phase, % of one core.',
    'ratio: subject req/s ÷ reference req/s for throughput targets, subject p50 ÷ reference p50 for latency targets; both measured in this run.',
    `Rows and their reference take turns, ${config.rounds} window(s) each after an unmeasured prologue; a row's ratio is over its own windows and the reference windows between them, and a ref line pools the windows of every row that uses it. p50: the windows' median; p99: the highest window's.`,
  );
  const perRound = plan.rows.filter((row) => (pairings.get(row.id)?.ratios.length ?? 0) > 1);
  if (perRound.length) {
    out.push('', 'Ratio in each window pair:');
    for (const row of perRound) out.push(`  ${ROWS.indexOf(row) + 1}  ${pairings.get(row.id)!.ratios.map((r) => `${r.toFixed(2)}×`).join('  ')}`);
  }
  if (notes.length) {
    out.push('', 'Notes:');
    notes.forEach((n, i) => out.push(`  [${i + 1}] ${n.split('\n').join('\n      ')}`));
  }
  const keep = config.keepRunDir || !healthy;
  out.push('', keep ? `Logs and data kept in ${runDir}` : `Run directory removed (BENCH_KEEP=1 keeps logs and data).`);
  process.stdout.write(out.join('\n') + '\n');
  if (!keep) fs.rmSync(runDir, { recursive: true, force: true });
  return healthy ? 0 : 1;
}

main().then(
  (code) => {
    disarmReaper();
    process.exitCode = code;
  },
  async (err: unknown) => {
    process.stderr.write(`bench: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    await stopAll(2000);
    disarmReaper();
    process.exitCode = 1;
  },
);
