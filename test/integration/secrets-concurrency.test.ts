// Version numbers under 50 concurrent writers to one secret: +1 per change, no gaps, no
// duplicates; with If-Match exactly one writer of a version wins and the rest get 412.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { startServer, type TestServer } from '../support/harness.js';

const base = '/v1/orgs/default/secrets';
const WRITERS = 50;

describe('concurrent updates to one secret', () => {
  let server: TestServer;
  before(async () => { server = await startServer(); });
  after(async () => {
    assert.deepEqual(server.undeclared, []);
    await server.close();
  });

  async function versionsOf(name: string): Promise<number[]> {
    const res = await server.owner.http.get(`${base}/${name}/versions?limit=200`);
    assert.equal(res.status, 200);
    return res.body.versions.map((v: any) => v.version).reverse();
  }
  const oneTo = (n: number) => Array.from({ length: n }, (_, i) => i + 1);

  it('without If-Match: 50 concurrent patches make versions 2..51, one each', async () => {
    assert.equal((await server.owner.http.post(base, { secrets: [{ name: 'hot', values: { N: 'start' } }] })).status, 201);
    const results = await Promise.all(Array.from({ length: WRITERS }, (_, i) => server.owner.http.patch(`${base}/hot`, { set: { N: `w${i}` } })));
    for (const r of results) assert.equal(r.status, 200, r.text);
    assert.deepEqual(results.map((r) => r.body.version).sort((a, b) => a - b), oneTo(WRITERS + 1).slice(1));
    assert.deepEqual(await versionsOf('hot'), oneTo(WRITERS + 1));
    // Each version holds what its writer sent.
    for (const r of results.slice(0, 5)) {
      const v = await server.owner.http.post(`${base}/hot/reveal`, { version: r.body.version });
      assert.equal(v.body.values.N, `w${results.indexOf(r)}`);
    }
  });

  it('without If-Match: 50 concurrent replaces and patches of different kinds interleave without gaps', async () => {
    assert.equal((await server.owner.http.post(base, { secrets: [{ name: 'mixed', values: { N: '0' } }] })).status, 201);
    const results = await Promise.all(Array.from({ length: WRITERS }, (_, i) => (i % 2
      ? server.owner.http.put(`${base}/mixed`, { values: { N: `r${i}` } })
      : server.owner.http.patch(`${base}/mixed`, { set: { [`K${i}`]: 'x' } }))));
    for (const r of results) assert.equal(r.status, 200, r.text);
    // Each writer sets a value or a key no other one does: every one of them makes a version.
    const made = results.filter((r) => r.body.result === 'updated').length;
    assert.equal(made, WRITERS);
    assert.deepEqual(await versionsOf('mixed'), oneTo(made + 1));
  });

  it('with If-Match on the same version: exactly one of 50 writers wins, the rest get 412', async () => {
    assert.equal((await server.owner.http.post(base, { secrets: [{ name: 'guarded-hot', values: { N: 'start' } }] })).status, 201);
    const results = await Promise.all(Array.from({ length: WRITERS }, (_, i) =>
      server.owner.http.patch(`${base}/guarded-hot`, { set: { N: `w${i}` } }, { headers: { 'if-match': '"1"' } })));
    assert.deepEqual(results.map((r) => r.status).sort(), [200, ...Array(WRITERS - 1).fill(412)]);
    assert.deepEqual(await versionsOf('guarded-hot'), [1, 2]);
  });

  it('with If-Match: 50 read-modify-write loops each land exactly once, versions 2..51', async () => {
    assert.equal((await server.owner.http.post(base, { secrets: [{ name: 'rmw', values: { BASE: 'b' } }] })).status, 201);
    let conflicts = 0;
    const writer = async (i: number): Promise<number> => {
      for (let attempt = 0; attempt < 500; attempt++) {
        const got = await server.owner.http.get(`${base}/rmw`);
        const res = await server.owner.http.patch(`${base}/rmw`, { set: { [`W${i}`]: 'x' } }, { headers: { 'if-match': got.headers.get('etag')! } });
        if (res.status === 200) return res.body.version;
        assert.equal(res.status, 412, res.text);
        conflicts++;
      }
      throw new Error(`writer ${i} never got through`);
    };
    const versions = await Promise.all(Array.from({ length: WRITERS }, (_, i) => writer(i)));
    assert.deepEqual(versions.sort((a, b) => a - b), oneTo(WRITERS + 1).slice(1));
    assert.deepEqual(await versionsOf('rmw'), oneTo(WRITERS + 1));
    assert.ok(conflicts > 0, 'the writers did overlap');
    const final = await server.owner.http.get(`${base}/rmw`);
    assert.equal(final.body.keys.length, WRITERS + 1);
  });
});
