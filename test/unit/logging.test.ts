// Structured logs: the access-log writer's lines are the lines pino itself would write for the same
// fields (every log reader sees one format), and a request's logger is only made when it is used.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { accessLogWriter, createLogger, jsonString, RequestLogger, type AccessLine } from '../../src/platform/logging.js';

function memoryLogger(level = 'info') {
  const lines: string[] = [];
  const logger = createLogger(level, { write: (line: string) => { lines.push(line); } });
  return { logger, lines };
}

describe('logging', () => {
  it('writes access-log lines exactly as pino does, whatever the fields hold', () => {
    const text = fc.string({ unit: 'binary', maxLength: 40 });
    fc.assert(fc.property(
      fc.record({
        requestId: text, method: fc.constantFrom('GET', 'POST', 'PATCH'), route: fc.option(text, { nil: null }), path: text,
        status: fc.integer({ min: 100, max: 599 }), ms: fc.double({ min: 0, max: 1e6, noNaN: true }), ip: fc.option(text, { nil: undefined }), sub: fc.option(text, { nil: undefined }),
      }),
      (line: AccessLine) => {
        const { logger, lines } = memoryLogger();
        accessLogWriter(logger)(line);
        const { requestId, ...fields } = line;
        logger.child({ requestId }).info(fields, 'request');
        assert.equal(lines.length, 2);
        const [ours, pinos] = lines.map((l) => JSON.parse(l) as Record<string, unknown>);
        // The two were written a moment apart.
        delete ours!.time;
        delete pinos!.time;
        assert.deepEqual(Object.entries(ours!), Object.entries(pinos!));
        assert.ok(lines[0]!.endsWith('}\n'));
      },
    ));
  });

  it('writes a string as the same JSON text as JSON.stringify, plain or not', () => {
    fc.assert(fc.property(fc.string({ unit: 'binary', maxLength: 60 }), (s) => jsonString(s) === JSON.stringify(s)));
    for (const s of ['', '"', '\\', '\u007f', '\u2028', 'a/b?c=d', '6613e5d8-eb33-46bc-a997-ba1cc54537c3']) assert.equal(jsonString(s), JSON.stringify(s), s);
  });

  it('stamps each line with the time in ISO 8601, to the millisecond', (t) => {
    const { logger, lines } = memoryLogger();
    t.mock.timers.enable({ apis: ['Date'], now: 0 });
    const instants = fc.sample(fc.integer({ min: 0, max: Date.UTC(9999, 11, 31, 23, 59, 59, 999) }), 300);
    // Runs inside a second and across its boundaries, where only part of the stamp is rewritten.
    const base = Date.UTC(2026, 10, 22, 5, 59, 59, 997);
    instants.push(base, base + 1, base + 2, base + 3, base + 4, base + 1003, base - 1000, base - 1000 + 9, base - 1000 + 10, base - 1000 + 100);
    for (const at of instants) {
      t.mock.timers.setTime(at);
      logger.info('tick');
      assert.equal((JSON.parse(lines.at(-1)!) as { time: string }).time, new Date(at).toISOString());
    }
  });

  it('writes no access-log line below its level', () => {
    const { logger, lines } = memoryLogger('warn');
    accessLogWriter(logger)({ requestId: 'r', method: 'GET', route: '/', path: '/', status: 200, ms: 1, ip: '127.0.0.1', sub: undefined });
    assert.deepEqual(lines, []);
  });

  it("makes a request's logger only when the request logs, with the request's bindings", () => {
    const { logger, lines } = memoryLogger();
    let children = 0;
    const counting = Object.create(logger, { child: { value: (...args: Parameters<typeof logger.child>) => { children++; return logger.child(...args); } } }) as typeof logger;
    const requestLogger = new RequestLogger(counting, { requestId: 'req-1' });
    assert.equal(requestLogger.isLevelEnabled('debug'), false);
    assert.equal(children, 0);
    requestLogger.warn({ detail: 'x' }, 'first');
    requestLogger.error('second');
    assert.equal(children, 1);
    const parsed = lines.map((l) => JSON.parse(l) as Record<string, unknown>);
    assert.deepEqual(parsed.map((l) => [l.level, l.requestId, l.msg]), [['warn', 'req-1', 'first'], ['error', 'req-1', 'second']]);
  });
});
