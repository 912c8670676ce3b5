// Prometheus metrics (prom-client), served on their own listener when SLIPWAY_METRICS_ADDRESS is
// set. Counters and histograms are this process's; the primary of `serve --workers N` gathers its
// workers', each series labelled with its `worker`. What the database knows (deployments waiting,
// running) is read when scraped. Labels are route templates, methods, statuses, states and worker
// numbers: never a path, an id, a name or a value.
import cluster from 'node:cluster';
import { AggregatorRegistry, collectDefaultMetrics, Counter, Gauge, Histogram, Registry, type CounterConfiguration, type MetricObjectWithValues, type MetricValue } from 'prom-client';
import { clockOffset, nowMs } from './clock.js';

export interface PendingDeployments {
  queued: number;
  inProgress: number;
  /** When the oldest queued deployment was created, or null when none waits. */
  oldestQueuedAt: string | null;
  /**
   * PostgreSQL: when the oldest transaction still open in the database that has written began; the
   * event log, and so webhooks, wait for it to end. Null when none is open (always on SQLite).
   */
  eventLogHeldSince?: string | null;
}

export interface Metrics {
  /** A response sent: the route template (undefined when no route matched), its status and time. */
  request(method: string, route: string | undefined, status: number, seconds: number): void;
  /** A webhook delivery attempt recorded. */
  webhookAttempt(delivered: boolean, seconds: number): void;
  /** A webhook disabled after failing too long. */
  webhookDisabled(): void;
  /** Reads what the database knows at each scrape (`deployments`). */
  readPendingDeployments(read: () => Promise<PendingDeployments>): void;
}

/** Metrics off: nothing is counted. */
export const NO_METRICS: Metrics = {
  request() {},
  webhookAttempt() {},
  webhookDisabled() {},
  readPendingDeployments() {},
};

/** The methods Fastify routes; anything else is counted as `other`, so labels stay few. */
const METHODS = new Set(['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']);
/** No route matched: a 404 of the router, whatever the path (paths are not labels). */
const UNMATCHED = '(unmatched)';
/** Requests take milliseconds; a runner's claim waits up to 30 s for work. */
const REQUEST_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];
/** A webhook attempt ends within its 10 s timeout. */
const DELIVERY_BUCKETS = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
/** A scrape waits this long for the database's numbers. */
const READ_WITHIN_MS = 2_000;
/**
 * The primary waits this long for each worker's answer: longer than a worker waits for the
 * database, so that a database that does not answer costs the page its deployment gauges only,
 * not every worker's series.
 */
const WORKER_ANSWER_WITHIN_MS = READ_WITHIN_MS + 1_000;
const REQUEST = 'slipway:metrics-request';
const ANSWER = 'slipway:metrics-answer';

interface RouteInstruments {
  duration: Histogram.Internal<'method' | 'route'>;
  byStatus: Map<number, Counter.Internal>;
}

export interface RecordingMetrics extends Metrics {
  registry: Registry;
}

/**
 * A registry with this process's metrics. In a worker of `serve --workers N` it also answers the
 * primary's requests for them (prom-client's cluster messages).
 */
export function createMetrics(options: { version: string }): RecordingMetrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  const counter = <L extends string>(config: CounterConfiguration<L>) => new Counter({ ...config, registers: [registry] });

  new Gauge({ name: 'slipway_info', help: 'Always 1; the version label says which Slipway runs', labelNames: ['version'], registers: [registry], aggregator: 'max' })
    .set({ version: options.version }, 1);

  new Gauge({
    name: 'slipway_clock_offset_seconds', help: 'How far the database\'s clock is ahead of this machine\'s (negative: behind), as last measured (PostgreSQL; 0 on SQLite): Slipway keeps the database\'s time, logs keep the machine\'s',
    registers: [registry], aggregator: 'max',
    collect() { this.set(clockOffset() / 1000); },
  });

  const requests = counter({ name: 'slipway_http_requests_total', help: 'HTTP responses sent, by method, route template and status', labelNames: ['method', 'route', 'status'] });
  const durations = new Histogram({
    name: 'slipway_http_request_duration_seconds', help: 'Time from a request\'s arrival to its response, by method and route template',
    labelNames: ['method', 'route'], buckets: REQUEST_BUCKETS, registers: [registry],
  });
  const attempts = counter({ name: 'slipway_webhook_deliveries_total', help: 'Webhook delivery attempts recorded, by outcome (delivered: a 2xx within the timeout)', labelNames: ['outcome'] });
  const attemptDurations = new Histogram({ name: 'slipway_webhook_delivery_duration_seconds', help: 'Time of a webhook delivery attempt', buckets: DELIVERY_BUCKETS, registers: [registry] });
  const disabled = counter({ name: 'slipway_webhooks_disabled_total', help: 'Webhooks disabled after failing for SLIPWAY_WEBHOOK_DISABLE_AFTER_SECONDS' });
  const delivered = attempts.labels('delivered');
  const failed = attempts.labels('failed');
  // Zero from the start, so that a rate over them exists before the first attempt.
  delivered.inc(0);
  failed.inc(0);

  // The children of each route's label set are looked up once, not on every request.
  const instruments = new Map<string, Map<string, RouteInstruments>>();
  function instrumentsOf(method: string, route: string): RouteInstruments {
    let routes = instruments.get(method);
    if (routes === undefined) instruments.set(method, routes = new Map());
    let found = routes.get(route);
    if (found === undefined) routes.set(route, found = { duration: durations.labels(method, route), byStatus: new Map() });
    return found;
  }

  // Read from the database when scraped, once for both gauges: a scrape collects every metric at
  // once, so the second asks while the first's read is under way. Every worker and every node reads
  // the same numbers: their `max` is the one to take, not their sum.
  let read: (() => Promise<PendingDeployments>) | null = null;
  let reading: Promise<PendingDeployments> | null = null;
  const pendingNow = (): Promise<PendingDeployments> | null => {
    if (read === null) return null;
    if (reading === null) {
      // A database that does not answer in time leaves these gauges unread; the rest is served.
      const answer = within(read(), READ_WITHIN_MS);
      reading = answer;
      const done = () => { if (reading === answer) reading = null; };
      answer.then(done, done);
    }
    return reading;
  };
  new Gauge({
    name: 'slipway_deployments', help: 'Deployments waiting for a runner (queued) and running (in_progress), in every organization; the same on every node',
    labelNames: ['state'], registers: [registry], aggregator: 'max',
    async collect() {
      const now = await pendingNow()?.catch(() => null);
      // Unread (the database did not answer): no sample rather than a stale one, and the rest is served.
      this.reset();
      if (now === null || now === undefined) return;
      this.set({ state: 'queued' }, now.queued);
      this.set({ state: 'in_progress' }, now.inProgress);
    },
  });
  /** Seconds since the time `since` picks from the database's readings (0 when it is null; NaN when unread). */
  const ageGauge = (name: string, help: string, since: (now: PendingDeployments) => string | null | undefined) => new Gauge({
    name, help, registers: [registry], aggregator: 'max',
    async collect() {
      const now = await pendingNow()?.catch(() => null);
      if (now === null || now === undefined) return this.set(Number.NaN);
      const at = since(now) ?? null;
      this.set(at === null ? 0 : Math.max(0, (nowMs() - Date.parse(at)) / 1000));
    },
  });
  ageGauge('slipway_deployment_oldest_queued_age_seconds', 'How long the oldest queued deployment has existed (0 when none waits): runners not keeping up, or none running', (now) => now.oldestQueuedAt);
  ageGauge('slipway_event_log_held_seconds', 'PostgreSQL: how long the oldest open transaction that has written to the database has been open; events are listed, and webhooks delivered, only once it ends (0 when none is open, and on SQLite)', (now) => now.eventLogHeldSince);

  if (cluster.isWorker) {
    // The primary asks, and gathers every worker's answer into one page (clusterMetrics below).
    // Counted per worker, the series of one that is started again begin at 0 as series of their
    // own, which Prometheus' rate() and increase() take as they are, where a sum would go down.
    registry.setDefaultLabels({ worker: String(cluster.worker!.id) });
    process.on('message', (message: { type?: unknown; id?: unknown } | null) => {
      if (message?.type !== REQUEST) return;
      const answer = (body: object) => { if (process.connected) process.send!({ type: ANSWER, id: message.id, ...body }); };
      registry.getMetricsAsJSON().then((metrics) => answer({ metrics }), (err: unknown) => answer({ error: String(err) }));
    });
  }

  return {
    registry,
    request(method, route, status, seconds) {
      const m = METHODS.has(method) ? method : 'other';
      const r = route === undefined || route === '' ? UNMATCHED : route;
      const found = instrumentsOf(m, r);
      found.duration.observe(seconds);
      let count = found.byStatus.get(status);
      if (count === undefined) found.byStatus.set(status, count = requests.labels(m, r, String(status)));
      count.inc();
    },
    webhookAttempt(ok, seconds) {
      (ok ? delivered : failed).inc();
      attemptDurations.observe(seconds);
    },
    webhookDisabled() {
      disabled.inc();
    },
    readPendingDeployments(reader) {
      read = reader;
    },
  };
}

/** The primary of `serve --workers N`: its workers' metrics, each series labelled with its worker. */
export function clusterMetrics(): { contentType: string; text: () => Promise<string> } {
  let next = 0;
  const asked = new Map<number, (metrics: MetricObjectWithValues<MetricValue<string>>[] | null) => void>();
  cluster.on('message', (_worker, message: { type?: unknown; id?: unknown; metrics?: MetricObjectWithValues<MetricValue<string>>[] } | null) => {
    if (message?.type === ANSWER && typeof message.id === 'number') asked.get(message.id)?.(message.metrics ?? null);
  });
  return {
    contentType: Registry.PROMETHEUS_CONTENT_TYPE,
    async text() {
      const id = next++;
      const workers = Object.values(cluster.workers ?? {}).filter((w) => w !== undefined && w.isConnected());
      const answers: MetricObjectWithValues<MetricValue<string>>[][] = [];
      // One worker that does not answer (starting, stopping, stuck) costs the page its series, not the page.
      await new Promise<void>((resolve) => {
        let waiting = workers.length;
        const timer = setTimeout(resolve, WORKER_ANSWER_WITHIN_MS);
        const settle = () => { if (--waiting <= 0) { clearTimeout(timer); resolve(); } };
        asked.set(id, (metrics) => { if (metrics !== null) answers.push(metrics); settle(); });
        if (waiting === 0) settle();
        for (const worker of workers) {
          try {
            worker!.send({ type: REQUEST, id }, (err: Error | null) => { if (err) settle(); });
          } catch {
            settle();
          }
        }
      });
      asked.delete(id);
      const registry = AggregatorRegistry.aggregate(answers);
      const workersGauge = new Gauge({ name: 'slipway_metrics_workers', help: 'Workers asked for this page, by whether they answered in time', labelNames: ['answered'], registers: [registry] });
      workersGauge.set({ answered: 'true' }, answers.length);
      workersGauge.set({ answered: 'false' }, workers.length - answers.length);
      return registry.metrics();
    },
  };
}

/** `promise`, or a rejection once `ms` have passed. */
function within<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_resolve, reject) => { timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms); });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}
