// Process entry of the `slipway` command (bin/slipway loads this).
import { main } from './main.js';

// Output piped into a reader that stops early (`slipway org list | head -1`): stop quietly, as
// other command-line tools do, rather than crash with a stack trace.
process.stdout.on('error', (err: NodeJS.ErrnoException) => {
  if (err.code !== 'EPIPE') throw err;
  process.exit(process.exitCode ?? 0);
});

main(process.argv.slice(2)).then(
  (code) => {
    if (code !== 0) process.exitCode = code;
  },
  (err: unknown) => {
    process.stderr.write(`slipway: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exitCode = 1;
  },
);
