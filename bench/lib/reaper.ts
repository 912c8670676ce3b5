// Last-resort cleanup, started by armCleanup() in bench/lib/proc.ts. It is told
// the pid of every child the orchestrator starts and stops; if the IPC channel
// closes while some are still registered (the orchestrator crashed or was
// SIGKILLed), it terminates them.

const pids = new Set<number>();

process.on('message', (m: { op: 'add' | 'remove'; pid: number }) => {
  if (m.op === 'add') pids.add(m.pid);
  else pids.delete(m.pid);
});

// Ctrl-C reaches the whole process group; stay alive so the orchestrator's own
// cleanup (or the disconnect below) decides.
process.on('SIGINT', () => undefined);

process.on('disconnect', () => {
  if (pids.size === 0) process.exit(0);
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGTERM');
    } catch {
      pids.delete(pid);
    }
  }
  setTimeout(() => {
    for (const pid of pids) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    process.exit(0);
  }, 3000);
});
