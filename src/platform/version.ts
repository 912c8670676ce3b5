// Slipway's version, from its package.json (dist/src/platform/version.js sits three levels below it).
import fs from 'node:fs';

export const VERSION = (JSON.parse(fs.readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { version: string }).version;
