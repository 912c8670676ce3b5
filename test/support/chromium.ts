// Chromium for the console's browser tests: the distribution's package (`apt-get install chromium`),
// or the one SLIPWAY_TEST_CHROMIUM names. The console only speaks the API: its pages are driven
// once, on SQLite.
import fs from 'node:fs';
import { chromium, type Browser } from 'playwright-core';
import { TEST_DB } from './harness.js';

function findChromium(): string | null {
  const candidates = [process.env.SLIPWAY_TEST_CHROMIUM, '/usr/bin/chromium', '/usr/bin/chromium-browser', '/usr/bin/google-chrome'];
  return candidates.find((file): file is string => file !== undefined && file !== '' && fs.existsSync(file)) ?? null;
}

const CHROMIUM = findChromium();
const IN_CI = ['true', '1', 'yes'].includes((process.env.CI ?? '').trim().toLowerCase());

/**
 * Why `file`'s browser tests are skipped here (said on stderr when it is a missing Chromium), or
 * false. In CI, a missing Chromium fails the file instead.
 */
export function browserSkip(file: string): string | false {
  if (CHROMIUM === null && IN_CI) throw new Error(`${file}: CI must run the browser tests; install Chromium (apt-get install chromium) or set SLIPWAY_TEST_CHROMIUM`);
  const skip = TEST_DB !== 'sqlite'
    ? 'the page only speaks the API: driven once, on SQLite'
    : CHROMIUM === null ? 'NO CHROMIUM: install it (apt-get install chromium) or set SLIPWAY_TEST_CHROMIUM to run the console in a browser' : false;
  if (CHROMIUM === null && TEST_DB === 'sqlite') process.stderr.write(`\n${file}: SKIPPING the browser tests: ${skip}\n\n`);
  return skip;
}

export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM!,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
  });
}
