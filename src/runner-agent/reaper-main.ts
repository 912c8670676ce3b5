// The reaper: a small process the runner starts beside the services it deploys, so that they do
// not outlive it. The runner writes `+PGID` for each process group it starts and `-PGID` for each
// it has stopped, one per line, to the reaper's standard input. When that input ends, the runner is
// gone: its own shutdown has stopped its services already (and sent `-` for them), but a runner
// that was killed (SIGKILL, the OOM killer) or crashed stopped nothing. The reaper then stops every
// group still listed (SIGTERM, SIGKILL after the grace period) and exits. It has its own process
// group and ignores the signals a terminal or a service manager sends to the runner's, so Ctrl-C
// reaches the runner (which stops its services itself) and not the reaper.
import { setTimeout as sleep } from 'node:timers/promises';

export const STOP_GRACE_MS = 5_000;
const POLL_MS = 100;
const PRUNE_EVERY_MS = 30_000;

const groups = new Set<number>();

function signal(pgid: number, sig: NodeJS.Signals | 0): boolean {
  try {
    process.kill(-pgid, sig);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function apply(line: string): void {
  const pgid = Number(line.slice(1));
  if (!Number.isSafeInteger(pgid) || pgid <= 1) return;
  if (line[0] === '+') groups.add(pgid);
  else if (line[0] === '-') groups.delete(pgid);
}

async function stopAll(): Promise<void> {
  const live = [...groups].filter((g) => signal(g, 'SIGTERM'));
  const deadline = Date.now() + STOP_GRACE_MS;
  let left = live;
  while (left.length > 0 && Date.now() < deadline) {
    await sleep(POLL_MS);
    left = left.filter((g) => signal(g, 0));
  }
  for (const g of left) signal(g, 'SIGKILL');
}

for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGPIPE'] as const) process.on(sig, () => {});

// A group whose processes have all exited is dropped, so that its number, once reused, is never signalled.
setInterval(() => {
  for (const g of groups) if (!signal(g, 0)) groups.delete(g);
}, PRUNE_EVERY_MS).unref();

let pending = '';
process.stdin.setEncoding('utf8');
process.stdin.on('data', (chunk: string) => {
  const lines = (pending + chunk).split('\n');
  pending = lines.pop()!;
  for (const line of lines) apply(line);
});
let ended = false;
const end = () => {
  if (ended) return;
  ended = true;
  void stopAll().finally(() => process.exit(0));
};
process.stdin.on('end', end);
process.stdin.on('close', end);
process.stdin.on('error', end);
