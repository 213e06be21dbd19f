import { describe, expect, it } from 'vitest';
import { runInFreshProcess, START, TELEMETRY } from './fresh-process.test-support.js';

interface Seen {
  /** For each draw of `Math.random` given: what `startRootSpan` returned (`none`, `records`, `does not record`). */
  spans: string[];
}

/**
 * In a fresh process (tracing is process-wide), tracing started with `sampler` and `ratio`; `Math.random`
 * answers `draws`, one per `startRootSpan` call: its first call within each is `startRootSpan`'s own draw, and
 * later ones (the SDK's id generator, which calls the same `Math.random`) get real random numbers.
 */
function rootSpans(sampler: string | undefined, ratio: string, draws: number[]): Seen {
  const script = `
    const { startTracing } = await import(${JSON.stringify(START)});
    const telemetry = await import(${JSON.stringify(TELEMETRY)});
    await startTracing({ serviceName: 'test' });
    const sdkRandom = Math.random;
    const draws = ${JSON.stringify(draws)};
    const spans = [];
    for (const draw of draws) {
      // Only startRootSpan's own draw is the one given; the SDK's ids still come from the real generator.
      let given = false;
      Math.random = () => (given ? sdkRandom() : ((given = true), draw));
      const span = telemetry.startRootSpan('root', {});
      Math.random = sdkRandom;
      spans.push(span === undefined ? 'none' : span.isRecording() ? 'records' : 'does not record');
      span?.end();
    }
    process.stdout.write(JSON.stringify({ spans }));
    process.exit(0);
  `;
  return runInFreshProcess(script, sampler ? { OTEL_TRACES_SAMPLER: sampler, OTEL_TRACES_SAMPLER_ARG: ratio } : {});
}

describe('a new trace (no caller) under a parent-based ratio sampler', () => {
  it('is decided once, by the configured ratio: a draw under it records, every draw at or over it makes no span', () => {
    // With the SDK's own trace-id ratio deciding again, about half of the chosen ones would not record.
    const chosen = Array.from({ length: 20 }, (_, i) => 0.01 + i * 0.02);
    const left = Array.from({ length: 20 }, (_, i) => 0.5 + i * 0.025);
    const seen = rootSpans('parentbased_traceidratio', '0.5', [...chosen, ...left]);
    expect(seen.spans).toEqual([...chosen.map(() => 'records'), ...left.map(() => 'none')]);
  });

  it('records every new trace at always_on (the default), and makes none at always_off or ratio 0', () => {
    const draws = [0, 0.5, 0.999];
    expect(rootSpans(undefined, '', draws).spans).toEqual(['records', 'records', 'records']);
    expect(rootSpans('parentbased_always_off', '', draws).spans).toEqual(['none', 'none', 'none']);
    expect(rootSpans('parentbased_traceidratio', '0', draws).spans).toEqual(['none', 'none', 'none']);
  });

  it("leaves the decision to the SDK's sampler when it ignores parents: its span, recording or not", () => {
    // traceidratio 0: the SDK makes a span for each, and none records.
    expect(rootSpans('traceidratio', '0', [0, 0.5]).spans).toEqual(['does not record', 'does not record']);
    expect(rootSpans('always_on', '', [0.999]).spans).toEqual(['records']);
  });

  it('reads the sampler name as the configuration check does, surrounding spaces and all', () => {
    // The SDK's own reading would not trim "traceidratio " and fall back to parentbased_always_on: all recorded.
    expect(rootSpans(' traceidratio ', '0', [0, 0.5]).spans).toEqual(['does not record', 'does not record']);
    expect(rootSpans('parentbased_traceidratio ', '0.5', [0.25, 0.75]).spans).toEqual(['records', 'none']);
  });
});
