// The role matrix, read from the OpenAPI document: every operation that takes a bearer token names
// the least role it admits in `x-required-role`, and this file says which roles that admits. The
// README's table is printed from here, and the security matrix test asserts the running server
// against the same answers, so the documentation and the tests cannot drift apart.
//
// Usage: node scripts/role-matrix.mjs [URL | FILE]
//   URL   a running server's base URL or its /openapi.json (default http://127.0.0.1:8080)
//   FILE  a saved openapi.json
// Prints a Markdown table: one row per operation, one column per role.

import fs from 'node:fs';
import { fileURLToPath } from 'node:url';

/** The columns of the matrix: the four ranked roles, then the runner. */
export const ROLES = ['owner', 'admin', 'developer', 'viewer', 'runner'];
const RANKED = ['viewer', 'developer', 'admin', 'owner'];
/** Every value `x-required-role` may take. */
export const ACCESS = [...RANKED, 'runner', 'member', 'instance-admin'];

const METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'];

/**
 * Whether a service user with `role` (not an instance administrator) may call an operation that
 * requires `access`. Ranked roles admit themselves and everything above; a runner is admitted
 * only by runner operations (and by `member` ones, open to anyone of the organization);
 * `instance-admin` admits no role as such, only an instance administrator.
 */
export function admits(access, role) {
  if (access === 'member') return true;
  if (access === 'instance-admin') return false;
  if (access === 'runner') return role === 'runner';
  return RANKED.includes(role) && RANKED.indexOf(role) >= RANKED.indexOf(access);
}

/** Instance administrators act as owners in every organization, and alone pass `instance-admin`. */
export function admitsInstanceAdmin(access) {
  return access === 'instance-admin' || admits(access, 'owner');
}

/** Every operation of the document, in document order: `{ method, path, operation }`. */
export function operationsOf(doc) {
  const out = [];
  for (const [path, item] of Object.entries(doc.paths ?? {})) {
    for (const method of METHODS) if (item[method]) out.push({ method: method.toUpperCase(), path, operation: item[method] });
  }
  return out;
}

/** The operations a bearer token reaches, with the role each requires. */
export function bearerOperations(doc) {
  return operationsOf(doc)
    .filter(({ operation }) => (operation.security ?? doc.security ?? []).some((requirement) => 'bearerAuth' in requirement))
    .map((entry) => ({ ...entry, requiredRole: entry.operation['x-required-role'] }));
}

export function matrixMarkdown(doc) {
  const lines = [
    `| operation | ${ROLES.join(' | ')} | what |`,
    `|---|${ROLES.map(() => ':-:').join('|')}|---|`,
  ];
  for (const { method, path, requiredRole, operation } of bearerOperations(doc)) {
    const cells = ROLES.map((role) => (admits(requiredRole, role) ? '✓' : '—'));
    let what = operation.summary ?? '';
    if (requiredRole === 'instance-admin' && !/instance admin/i.test(what)) what += ' (instance administrators only)';
    lines.push(`| \`${method} ${path}\` | ${cells.join(' | ')} | ${what.replace(/\|/g, '\\|')} |`);
  }
  lines.push('', 'Instance administrators (the bootstrap owner is one) act as owners in every organization.');
  return lines.join('\n') + '\n';
}

async function loadDocument(source) {
  if (!/^https?:\/\//.test(source)) return JSON.parse(fs.readFileSync(source, 'utf8'));
  const url = source.endsWith('.json') ? source : `${source.replace(/\/+$/, '')}/openapi.json`;
  const res = await fetch(url);
  if (!res.ok) throw new Error(`GET ${url} answered ${res.status}`);
  return res.json();
}

if (process.argv[1] && fileURLToPath(import.meta.url) === fs.realpathSync(process.argv[1])) {
  const source = process.argv[2] ?? 'http://127.0.0.1:8080';
  try {
    process.stdout.write(matrixMarkdown(await loadDocument(source)));
  } catch (error) {
    process.stderr.write(`role-matrix: ${error.message}\n`);
    process.exitCode = 1;
  }
}
