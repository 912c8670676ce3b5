// Module hooks (node:module register) that write the URL of every module loaded through the ES
// module loader, a line each, to the file SLIPWAY_TEST_MODULE_LOG names: what a command loads.
import fs from 'node:fs';

type Next = (url: string, context: unknown) => Promise<unknown>;

export async function load(url: string, context: unknown, next: Next): Promise<unknown> {
  fs.appendFileSync(process.env.SLIPWAY_TEST_MODULE_LOG!, `${url}\n`);
  return next(url, context);
}
