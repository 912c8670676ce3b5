// A TCP proxy between a test and PostgreSQL, to cut the connection or make it go silent the way a
// network does: nothing closed, nothing passing.
import { once } from 'node:events';
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';

/** A TCP proxy on one port: `cut` closes it and every connection through it; `open` listens again on the same port. */
export function createTcpProxy() {
  const sockets = new Set<Socket>();
  let target: { host: string; port: number } | undefined;
  let listener: Server | undefined;
  let port = 0;
  let silent = false;
  /** Chunks a client sent while the proxy was silent: statements left unanswered. */
  let unanswered = 0;
  /** Connections frozen one by one (`freezeOpen`), while new ones pass. */
  const frozen = new Set<Socket>();
  return {
    async open(host?: string, targetPort?: number): Promise<number> {
      if (host !== undefined) target = { host, port: targetPort! };
      silent = false;
      if (listener !== undefined) return port;
      // Half-open allowed: a side that ends its half is not answered with an end of the other
      // half by the proxy itself, only by the peer's through it (never while silent).
      listener = createServer({ allowHalfOpen: true }, (client) => {
        const upstream = connect(target!.port, target!.host);
        for (const s of [client, upstream]) {
          sockets.add(s);
          s.on('close', () => sockets.delete(s));
          s.on('error', () => { client.destroy(); upstream.destroy(); });
        }
        // While silent, bytes are dropped and nothing is closed: a network that went quiet.
        client.on('data', (chunk: Buffer) => {
          if (!silent && !frozen.has(client)) upstream.write(chunk);
          else unanswered += 1;
        });
        upstream.on('data', (chunk: Buffer) => { if (!silent && !frozen.has(client)) client.write(chunk); });
        // One side closing closes the other, as on a direct connection; a silent one passes nothing, its end neither.
        client.on('end', () => { if (!silent && !frozen.has(client)) upstream.end(); });
        upstream.on('end', () => { if (!silent && !frozen.has(client)) client.end(); });
      });
      listener.listen(port, '127.0.0.1');
      await once(listener, 'listening');
      port = (listener.address() as AddressInfo).port;
      return port;
    },
    /** Stops passing bytes either way, closing nothing (until `cut`). */
    silence(): void {
      silent = true;
    },
    /** How many times a client sent something that the proxy, silent or frozen, did not pass on. */
    unanswered(): number {
      return unanswered;
    },
    /** The same for the connections open now only: new ones pass (a connection whose peer froze). */
    freezeOpen(): void {
      for (const s of sockets) frozen.add(s);
    },
    async cut(): Promise<void> {
      const closing = listener;
      listener = undefined;
      for (const s of sockets) s.destroy();
      frozen.clear();
      await new Promise((resolve) => closing?.close(resolve));
    },
  };
}

export type TcpProxy = ReturnType<typeof createTcpProxy>;
