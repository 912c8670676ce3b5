// Process entry of the `slipway` command (bin/slipway loads this).
import { main } from './main.js';

main(process.argv.slice(2)).then(
  (code) => {
    if (code !== 0) process.exitCode = code;
  },
  (err: unknown) => {
    process.stderr.write(`slipway: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exitCode = 1;
  },
);
