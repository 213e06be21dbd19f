import { Writable } from 'node:stream';
import { pino } from 'pino';
import { describe, expect, it, vi } from 'vitest';
import { createContextBuilder } from '../context.js';
import type { Logger } from '../logger.js';
import { logRequestCompleted, startRequestLog } from './use-request-logging.js';

/** A pino logger at `level` whose lines land in `lines`, and how many children it made. */
function capturingLogger(level: string) {
  const lines: Array<Record<string, unknown>> = [];
  const sink = new Writable({
    write(chunk, _encoding, done) {
      lines.push(JSON.parse(String(chunk)));
      done();
    },
  });
  const logger = pino({ level }, sink);
  const counted = { logger, lines, children: 0 };
  const child = logger.child.bind(logger);
  logger.child = ((...args: Parameters<Logger['child']>) => {
    counted.children++;
    return child(...args);
  }) as Logger['child'];
  return counted;
}

/** A request as the context builder reads it: no credentials. */
const anonymousRequest = () => ({ headers: { get: () => null } });

describe('request logs', () => {
  it('make the child logger only when something logs, and its lines carry the request id', async () => {
    const root = capturingLogger('warn');
    const entry = startRequestLog({}, 'trace-7', root.logger);
    expect(entry.requestId).toBe('trace-7');
    expect(root.children).toBe(0);
    entry.log.warn('first');
    entry.log.warn('second');
    expect(root.children).toBe(1);
    expect(root.lines.map((line) => [line.msg, line.requestId])).toEqual([
      ['first', 'trace-7'],
      ['second', 'trace-7'],
    ]);
  });

  it("give the context the request's logger on first use, and the root logger to a request without one", async () => {
    const root = capturingLogger('warn');
    const build = createContextBuilder({
      verifier: {} as never,
      db: {} as never,
      pubsub: {} as never,
      quotas: {} as never,
      logger: root.logger,
      webhooks: {} as never,
    });
    const request = anonymousRequest();
    startRequestLog(request, 'trace-8', root.logger);
    const context = await build({ request, params: { query: '{ me { id } }' } } as never);
    expect(root.children).toBe(0);
    context.log.error('from a resolver');
    const other = await build({ request: anonymousRequest(), params: { query: '{ me { id } }' } } as never);
    other.log.error('no request log');
    expect(root.children).toBe(1);
    expect(root.lines.map((line) => [line.msg, line.requestId])).toEqual([
      ['from a resolver', 'trace-8'],
      ['no request log', undefined],
    ]);
  });

  it('write one access line per answer, but one a second for 429s, counting those not logged', () => {
    vi.useFakeTimers({ toFake: ['performance'] });
    try {
      const root = capturingLogger('info');
      const answer = (status: number) =>
        logRequestCompleted(startRequestLog({}, undefined, root.logger), 'POST', '/graphql', status);
      for (let i = 0; i < 5; i++) answer(429);
      answer(200);
      answer(200);
      vi.advanceTimersByTime(999);
      answer(429);
      vi.advanceTimersByTime(1);
      answer(429);
      answer(429);
      answer(400);
      expect(root.lines.map((line) => [line.status, line.refusalsNotLogged])).toEqual([
        [429, 0],
        [200, undefined],
        [200, undefined],
        [429, 5],
        [400, undefined],
      ]);
    } finally {
      vi.useRealTimers();
    }
  });
});
