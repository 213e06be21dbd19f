import { describe, expect, it } from 'vitest';
import { publisherLine } from './report.js';
import type { SteadyLatency } from './results.js';

const percentiles = (p50Ms: number, p99Ms: number) => ({ p50Ms, p99Ms, maxMs: p99Ms });
const latency = (publishedPerSec: number, publishFailed: number, publisher?: SteadyLatency['publisher']) =>
  ({
    eventsPerSec: 1000,
    published: 10_000 - publishFailed,
    publishFailed,
    publishedPerSec,
    fromCommit: percentiles(10, 100),
    fromSend: percentiles(12, 120),
    ...(publisher ? { publisher } : {}),
  }) satisfies SteadyLatency;
const delays = { late: percentiles(0.2, 3), call: percentiles(4, 40) };

describe('the steady trial report', () => {
  it('says the trial kept the rate when the publisher published what was asked', () => {
    const line = publisherLine(latency(998, 0, delays));
    expect(line).toContain('it kept the rate asked');
    expect(line).toContain('publishPost answered p50 4.0 / p99 40.0 / max 40.0 ms after its call');
  });

  it('names a trial publisher-bound when it published under 95 % of the rate or a call failed', () => {
    expect(publisherLine(latency(625, 0, delays))).toContain(
      'fell short of the rate asked (625 of 1,000/s, 0 calls failed): publisher-bound',
    );
    expect(publisherLine(latency(1000, 3, delays))).toContain('publisher-bound');
  });

  it('prints no publisher line for results recorded before the publisher was measured', () => {
    expect(publisherLine(latency(1000, 0))).toBeNull();
  });
});
