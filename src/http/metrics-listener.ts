// The metrics listener (SLIPWAY_METRICS_ADDRESS): GET /metrics in Prometheus' text format, on an
// address of its own, so that it can be reached by the scraper and by nothing else. It carries no
// credentials, values or names, and asks for none.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from '../platform/logging.js';

export interface MetricsSource {
  contentType: string;
  text(): Promise<string>;
}

export interface MetricsListener {
  /** Where it listens, as `host:port`. */
  address: string;
  close(): Promise<void>;
}

export async function listenForMetrics(where: { host: string; port: number }, source: MetricsSource, logger: Logger): Promise<MetricsListener> {
  const server = http.createServer((req, res) => {
    const path = (req.url ?? '').split('?')[0];
    if (path !== '/metrics') {
      res.writeHead(404, { 'content-type': 'text/plain; charset=utf-8' }).end('Not found: the metrics are at /metrics.\n');
      return;
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET, HEAD', 'content-type': 'text/plain; charset=utf-8' }).end('Method not allowed: GET /metrics.\n');
      return;
    }
    source.text().then((text) => {
      res.writeHead(200, { 'content-type': source.contentType, 'cache-control': 'no-store' }).end(req.method === 'HEAD' ? undefined : text);
    }, (err: unknown) => {
      logger.warn({ err }, 'collecting the metrics failed');
      res.writeHead(503, { 'content-type': 'text/plain; charset=utf-8', 'retry-after': '5' }).end('The metrics could not be collected; try again.\n');
    });
  });
  // A scraper's connection stays open between scrapes; at shutdown it must not hold the process.
  server.keepAliveTimeout = 65_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host: where.host, port: where.port }, () => {
      server.off('error', reject);
      server.on('error', (err) => logger.warn({ err }, 'the metrics listener failed'));
      resolve();
    });
  });
  const bound = server.address() as AddressInfo;
  return {
    address: `${bound.family === 'IPv6' ? `[${bound.address}]` : bound.address}:${bound.port}`,
    close: () => new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    }),
  };
}
