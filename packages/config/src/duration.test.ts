import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { durationMs, parseDurationMs } from './duration.js';
import { InvalidConfigError, parseEnv } from './parse-env.js';

describe('parseDurationMs', () => {
  it.each([
    ['250ms', 250],
    ['30s', 30_000],
    ['15m', 900_000],
    ['2h', 7_200_000],
    ['3d', 259_200_000],
    ['1.5s', 1_500],
    ['1200', 1_200],
  ])('reads %s as %d ms', (text, ms) => {
    expect(parseDurationMs(text)).toBe(ms);
  });

  it.each(['', '3 days', '-1s', 'abc', '5w'])('refuses %j', (text) => {
    expect(parseDurationMs(text)).toBeUndefined();
  });
});

describe('parseEnv', () => {
  const schema = z.object({ HORIZON: durationMs().default(1000), PORT: z.coerce.number().int().default(1) });

  it('treats an empty variable as unset', () => {
    expect(parseEnv(schema, { HORIZON: '', PORT: '' })).toEqual({ HORIZON: 1000, PORT: 1 });
  });

  it('names each bad variable on its own line', () => {
    let error: unknown;
    try {
      parseEnv(schema, { HORIZON: 'soon', PORT: 'x' });
    } catch (caught) {
      error = caught;
    }
    expect(error).toBeInstanceOf(InvalidConfigError);
    const lines = (error as InvalidConfigError).lines;
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatch(/^HORIZON: expected a duration/);
    expect(lines[1]).toMatch(/^PORT: /);
  });
});
