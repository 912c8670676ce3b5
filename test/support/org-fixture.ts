// A running server with one fresh organization that has an owner and an admin: the starting point
// of the organization, service-user and event suites. Closing checks that every status the server
// answered was one its route declared.
import assert from 'node:assert/strict';
import { startServer, type Actor, type TestServer } from './harness.js';

export interface OrgFixture {
  server: TestServer;
  orgId: string;
  slug: string;
  owner: Actor;
  admin: Actor;
  close(): Promise<void>;
}

export async function startWithOrg(): Promise<OrgFixture> {
  const server = await startServer();
  const org = await server.createOrg();
  const owner = await server.actor(org.id, 'owner');
  const admin = await server.actor(org.id, 'admin');
  return {
    server, orgId: org.id, slug: org.slug, owner, admin,
    async close() {
      assert.deepEqual(server.undeclared, []);
      await server.close();
    },
  };
}
