// The cross-cutting security cases, for every operation the running server documents: no token
// (401), another organization (404), every role the operation does not admit (403), and every role
// it does admit gets past authorization. The operations and their required roles come from
// /openapi.json, so routes added later are covered without touching this file.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import type { Role } from '../../src/modules/auth/roles.js';
import { createEnvironment, createService, deploy } from '../support/deployments.js';
import { startServer, type Actor, type HttpResult, type TestServer } from '../support/harness.js';
import { problemMismatch } from '../support/problems.js';
import { fillPath, loadRoleMatrix } from '../support/role-matrix.js';

describe('security matrix (every operation of /openapi.json)', () => {
  let server: TestServer;
  before(async () => { server = await startServer(); });
  after(async () => { await server.close(); });

  it('documents every route of the API that the server answers, so that the matrix below misses none', async () => {
    // Fastify's own list of what it routes (a tree, one path segment a line), read back into paths.
    const routed = new Set<string>();
    const stack: string[] = [];
    for (const line of server.slipway.server.printRoutes({ commonPrefix: false }).split('\n')) {
      const at = line.indexOf('── ');
      if (at < 0) continue;
      const depth = (at - 1) / 4;
      const [, segment, methods] = /^(.*) \(([^)]*)\)$/.exec(line.slice(at + 3)) ?? [];
      stack.length = depth;
      stack.push(segment ?? line.slice(at + 3));
      const path = stack.join('');
      if (!path.startsWith('/v1/') || methods === undefined) continue;
      for (const method of methods.split(', ')) if (method !== 'HEAD') routed.add(`${method} ${path.replace(/:(\w+)/g, '{$1}')}`);
    }
    const doc = (await server.http().get('/openapi.json')).body;
    const documented = new Set<string>();
    for (const [path, item] of Object.entries<Record<string, unknown>>(doc.paths)) {
      if (path.startsWith('/v1/')) for (const method of Object.keys(item)) documented.add(`${method.toUpperCase()} ${path}`);
    }
    assert.ok(routed.size >= 40, `${routed.size} routes read from the router`);
    assert.deepEqual([...routed].filter((r) => !documented.has(r)), [], 'routed but not documented');
    assert.deepEqual([...documented].filter((r) => !routed.has(r)), [], 'documented but not routed');
  });

  it('is the table the README shows, cell for cell', async () => {
    const matrix = await loadRoleMatrix();
    const readme = fs.readFileSync(fileURLToPath(new URL('../../../README.md', import.meta.url)), 'utf8');
    const table = matrix.matrixMarkdown((await server.http().get('/openapi.json')).body);
    assert.ok(readme.includes(table), `the README's role table differs from what node scripts/role-matrix.mjs prints now:\n${table}`);
  });

  it('refuses without a token, hides other organizations, and admits exactly the documented roles', async () => {
    const matrix = await loadRoleMatrix();
    const doc = (await server.http().get('/openapi.json')).body;
    const failures: string[] = [];
    const check = (ok: boolean, message: string) => { if (!ok) failures.push(message); };
    const expectProblem = (res: HttpResult, status: number, code: string | undefined, label: string): boolean => {
      const mismatch = problemMismatch(res, status, code, label);
      if (mismatch) failures.push(mismatch);
      return mismatch === null;
    };

    // Every API operation takes a bearer token: a /v1 route registered without `auth` would be public by mistake.
    for (const { method, path, operation } of matrix.operationsOf(doc)) {
      if (!path.startsWith('/v1/')) continue;
      const bearer = (operation.security ?? []).some((r: Record<string, unknown>) => 'bearerAuth' in r);
      check(bearer, `${method} ${path} does not require a bearer token`);
    }
    // The authorization server's own endpoints authenticate clients instead (RFC 6749 errors).
    for (const { method, path, operation } of matrix.operationsOf(doc)) {
      if (!(operation.security ?? []).some((r: Record<string, unknown>) => 'clientBasic' in r)) continue;
      // A well-formed request in every other respect, so only the missing credentials can be wrong.
      const form = new URLSearchParams({ grant_type: 'client_credentials', token: 'x' }).toString();
      const res = await server.http().request(method, path, { raw: form, contentType: 'application/x-www-form-urlencoded' });
      check(res.status === 401 && /^Basic\b/.test(res.headers.get('www-authenticate') ?? '') && res.body?.error === 'invalid_client',
        `${method} ${path} without client credentials: ${res.status} ${res.text.slice(0, 200)}`);
    }
    const operations = matrix.bearerOperations(doc);
    assert.ok(operations.length >= 10, `only ${operations.length} bearer operations documented`);

    const target = await server.createOrg('matrix-target');
    const other = await server.createOrg('matrix-other');
    const outsider = await server.actor(other.id, 'owner');
    const members = new Map<Role, Actor>();
    for (const role of matrix.ROLES) members.set(role, await server.actor(target.id, role));
    // A queued deployment: deleting the organization, which the instance administrator may, is
    // refused (409), and the table goes on with the organization it needs.
    const owner = members.get('owner')!;
    const [env, svc] = [await createEnvironment(owner.http, target.id), await createService(owner.http, target.id)];
    await deploy(owner.http, target.id, { service: svc.name, environment: env.name });

    for (const { method, path, requiredRole } of operations) {
      const label = `${method} ${path} [${requiredRole}]`;
      if (!matrix.ACCESS.includes(requiredRole)) {
        failures.push(`${label}: x-required-role must be one of ${matrix.ACCESS.join(', ')}`);
        continue;
      }
      const url = fillPath(path, target.slug);
      // Bodies are a JSON array, which no operation accepts: an admitted caller gets validation's 400,
      // which comes after authorization, so the matrix changes nothing and never waits on a long poll.
      const probe = ['POST', 'PUT', 'PATCH'].includes(method) ? { raw: '[]', contentType: 'application/json' } : {};
      // Revoking the token it is sent with takes no body to refuse: an admitted caller ends its token.
      // Each such call gets a token of its own, so that the actors' last the whole table.
      const endsToken = method === 'DELETE' && path === '/v1/token';
      const tokenOf = async (actor: Actor) => endsToken ? server.token(actor) : actor.token;
      const call = (token: string | undefined) => server.http(token).request(method, url, probe);

      const anonymous = await call(undefined);
      if (expectProblem(anonymous, 401, undefined, `${label} without a token`)) {
        check(/^Bearer\b/.test(anonymous.headers.get('www-authenticate') ?? ''), `${label} without a token: WWW-Authenticate is not a Bearer challenge`);
      }

      const forged = await call('not-a-token');
      expectProblem(forged, 401, 'invalid_token', `${label} with a malformed token`);

      if (path.startsWith('/v1/orgs/{orgId}')) {
        const res = await call(outsider.token);
        expectProblem(res, 404, 'organization_not_found', `${label} by an owner of another organization`);
      }

      for (const [role, actor] of members) {
        const res = await call(await tokenOf(actor));
        if (matrix.admits(requiredRole, role)) check(passedAuthorization(res), `${label} refused the admitted role ${role}: ${res.status} ${res.text.slice(0, 200)}`);
        else expectProblem(res, 403, 'forbidden', `${label} as ${role}`);
      }
      // Instance administrators act as owners everywhere, and alone pass `instance-admin`.
      const admin = await call(await tokenOf(server.owner));
      if (matrix.admitsInstanceAdmin(requiredRole)) check(passedAuthorization(admin), `${label} refused an instance administrator: ${admin.status} ${admin.text.slice(0, 200)}`);
      else expectProblem(admin, 403, 'forbidden', `${label} as an instance administrator`);
    }

    assert.deepEqual(failures, []);
    assert.deepEqual(server.undeclared, []);
  });
});

/** Got past the auth hook: the answer may still be a 400 or a 404 for the placeholder resource. */
function passedAuthorization(res: HttpResult): boolean {
  if (res.status === 401 || res.status === 403) return false;
  return !(res.status === 404 && (res.body as { code?: string } | null)?.code === 'organization_not_found');
}
