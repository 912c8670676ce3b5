// A proxy in front of a test server that forwards every request and, for those `lose` picks, cuts
// the connection instead of answering: the server did what was asked, the client never heard. It
// can also let another client act just before a request is passed on.
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface LossyProxy {
  url: string;
  /** Each request as it came: method, URL and headers. */
  seen: Array<{ method: string; url: string; headers: http.IncomingHttpHeaders }>;
  close(): Promise<void>;
}

/** `meanwhile`, when given, runs before each request is passed on: another client's doing, between two of this one's requests. */
export async function lossyProxy(target: string, lose: (req: { method: string; url: string }, n: number) => boolean,
  meanwhile?: (req: { method: string; url: string }) => Promise<void>): Promise<LossyProxy> {
  const seen: LossyProxy['seen'] = [];
  const proxy = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', async () => {
      const asked = { method: req.method!, url: req.url!, headers: req.headers };
      seen.push(asked);
      await meanwhile?.(asked);
      const headers = Object.fromEntries(Object.entries(req.headers).filter(([k]) => !['host', 'connection', 'content-length'].includes(k))) as Record<string, string>;
      const upstream = await fetch(`${target}${req.url}`, { method: req.method!, headers, ...(chunks.length > 0 ? { body: Buffer.concat(chunks) } : {}) });
      const text = await upstream.text();
      if (lose(asked, seen.length)) return req.socket.destroy();
      const etag = upstream.headers.get('etag');
      res.writeHead(upstream.status, { 'content-type': upstream.headers.get('content-type') ?? 'application/json', ...(etag !== null ? { etag } : {}) }).end(text);
    });
  });
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`,
    seen,
    async close() {
      proxy.closeAllConnections();
      await new Promise<void>((resolve) => proxy.close(() => resolve()));
    },
  };
}
