// A server socket's writes held until the poll phase is over, then sent with the others held
// meanwhile, in order, over real TCP connections.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import net from 'node:net';
import { after, before, describe, it } from 'node:test';
import { writesTogether } from '../../src/http/writes-together.js';

const nextTurn = () => new Promise((resolve) => setImmediate(resolve));

describe('writesTogether', () => {
  const hold = writesTogether();
  const accepted: net.Socket[] = [];
  let server: net.Server;
  let clients: net.Socket[];

  before(async () => {
    server = net.createServer((socket) => {
      hold(socket);
      accepted.push(socket);
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const { port } = server.address() as net.AddressInfo;
    clients = [net.connect(port, '127.0.0.1'), net.connect(port, '127.0.0.1'), net.connect(port, '127.0.0.1')];
    await Promise.all(clients.map((c) => once(c, 'connect')));
    while (accepted.length < clients.length) await nextTurn();
  });
  after(() => {
    for (const c of clients) c.destroy();
    server.close();
  });

  const received = (client: net.Socket, bytes: number) => new Promise<string>((resolve) => {
    let text = '';
    const onData = (chunk: Buffer) => {
      text += chunk.toString('utf8');
      if (text.length >= bytes) {
        client.off('data', onData);
        resolve(text);
      }
    };
    client.on('data', onData);
  });

  it('hands nothing to the socket until the turn is over, then everything held, in order', async () => {
    const [a, b] = accepted;
    const got = [received(clients[0]!, 6), received(clients[1]!, 3)];
    const finished: string[] = [];
    a!.write('one', () => finished.push('a1'));
    b!.write('two', () => finished.push('b'));
    a!.write('+1+', () => finished.push('a2'));
    // Held: still counted as waiting to be written, and no callback yet.
    assert.ok(a!.writableLength > 0 && b!.writableLength > 0);
    assert.deepEqual(finished, []);
    await nextTurn();
    assert.deepEqual(new Set(finished.slice(0, 2)), new Set(['a1', 'b']));
    assert.deepEqual(await Promise.all(got), ['one+1+', 'two']);
    assert.deepEqual(finished.slice(2), ['a2']);
  });

  it('fails a write to a socket destroyed meanwhile on that socket alone', async () => {
    const [, b, c] = accepted;
    const got = received(clients[2]!, 5);
    const errors: unknown[] = [];
    b!.on('error', (error) => errors.push(error));
    b!.write('lost', (error) => errors.push(error ?? 'no error'));
    c!.write('kept!');
    b!.destroy();
    await nextTurn();
    assert.equal(await got, 'kept!');
    assert.equal(errors.filter((e) => e instanceof Error).length >= 1, true, 'the destroyed socket\'s write fails');
  });
});
