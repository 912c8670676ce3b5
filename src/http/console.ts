// The web console: three static files under `{base_url}/console/`, read once at start, and the
// settings the page needs to sign in. The page does everything else through the public API, as the
// signed-in caller, so it can do exactly what that caller's role allows and nothing more.
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { App } from './app-types.js';

export interface ConsoleOptions {
  /** The API's public base URL. */
  baseUrl: string;
  /** Where the console gets tokens: Slipway's own token endpoint, or an external issuer's. */
  tokenUrl: string;
  /** The exact scope string a token must be asked for. */
  scope: string;
}

const FILES = {
  'index.html': 'text/html; charset=utf-8',
  'console.js': 'text/javascript; charset=utf-8',
  'console.css': 'text/css; charset=utf-8',
} as const;

/** Where the files are: `console/` at the package's root (this module runs from dist/src/http/). */
const SOURCE = new URL('../../../console/', import.meta.url);

interface Asset { body: Buffer; type: string; etag: string }

function asset(body: Buffer, type: string): Asset {
  return { body, type, etag: `"${createHash('sha256').update(body).digest('base64url').slice(0, 27)}"` };
}

/**
 * The page may run only its own script and style, talk only to this origin and the token
 * endpoint, and be framed by nobody (a framed console could be clicked through by another site).
 */
function contentSecurityPolicy(tokenUrl: string): string {
  return [
    "default-src 'none'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self' data:",
    `connect-src 'self' ${new URL(tokenUrl).origin}`,
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
  ].join('; ');
}

export function registerConsole(app: App, options: ConsoleOptions, prefix: string): void {
  const assets = new Map<string, Asset>();
  try {
    for (const [name, type] of Object.entries(FILES)) assets.set(name, asset(fs.readFileSync(new URL(name, SOURCE)), type));
  } catch (error) {
    // An installation that ships without the console (dist/ and node_modules only) still serves the API.
    if ((error as { code?: unknown }).code !== 'ENOENT') throw error;
    app.log.warn({ dir: fileURLToPath(SOURCE) }, 'the web console\'s files are not there: serving the API without the console');
    return;
  }
  // The `.env` reader the CLI uses too, as compiled beside this module (its source map is not served).
  const dotenv = fs.readFileSync(new URL('../platform/dotenv.js', import.meta.url), 'utf8').replace(/\n\/\/# sourceMappingURL=.*\s*$/, '\n');
  assets.set('dotenv.js', asset(Buffer.from(dotenv), FILES['console.js']));
  // Read by the page before it signs in: where tokens come from, for which scope, and where the API is.
  // The API's path is kept as configured: the page is served from under it.
  assets.set('config.json', asset(Buffer.from(JSON.stringify({
    apiBase: new URL(options.baseUrl).pathname.replace(/\/+$/, ''),
    tokenUrl: options.tokenUrl,
    scope: options.scope,
  })), 'application/json; charset=utf-8'));

  const csp = contentSecurityPolicy(options.tokenUrl);
  const send = (file: Asset, req: FastifyRequest, reply: FastifyReply) => {
    reply
      .header('content-security-policy', csp)
      .header('x-content-type-options', 'nosniff')
      .header('x-frame-options', 'DENY')
      .header('referrer-policy', 'no-referrer')
      // Revalidated on every load, so a page never runs beside an older script after an upgrade.
      .header('cache-control', 'no-cache')
      .header('etag', file.etag);
    if (req.headers['if-none-match'] === file.etag) return reply.code(304).send();
    return reply.type(file.type).send(file.body);
  };

  const hidden = { schema: { hide: true }, config: { operation: 'console.file' } };
  // A browser opened on the server's address finds the console.
  app.get(`${prefix}/`, hidden, (_req, reply) => reply.redirect(`${prefix}/console/`, 302));
  // Relative links in the page resolve against the directory: `/console` is sent there.
  app.get(`${prefix}/console`, hidden, (_req, reply) => reply.redirect(`${prefix}/console/`, 301));
  app.get(`${prefix}/console/`, hidden, (req, reply) => send(assets.get('index.html')!, req, reply));
  for (const [name, file] of assets) app.get(`${prefix}/console/${name}`, hidden, (req, reply) => send(file, req, reply));
}
