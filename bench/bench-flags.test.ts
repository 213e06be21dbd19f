import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';

// `pnpm bench` refuses a command line it would misread, in one line and before it starts anything: a
// mistyped flag used to run the defaults, and a bad number became NaN inside a run of several minutes.

function bench(...flags: string[]) {
  const run = spawnSync(process.execPath, ['--import', 'tsx', 'bench/src/main.ts', ...flags], {
    cwd: new URL('..', import.meta.url),
    encoding: 'utf8',
    timeout: 60_000,
  });
  return { status: run.status, stderr: run.stderr.trim().split('\n') };
}

describe('pnpm bench flags', () => {
  it('refuses an unknown flag in one line', () => {
    const run = bench('--scenarios', 'http', '--sockts', '10');
    expect(run.status).toBe(2);
    expect(run.stderr).toEqual([
      'pnpm bench: unknown flag --sockts (the flags are listed at the top of bench/src/main.ts)',
    ]);
  });

  it.each([
    ['--trials', 'abc'],
    ['--sockets', '1000,lots'],
    ['--trials', '-5'],
    ['--tracing-repeats', 'twice'],
  ])('refuses %s %s: not a number', (flag, value) => {
    const run = bench('--scenarios', 'http', flag, value);
    expect(run.status).toBe(2);
    expect(run.stderr).toHaveLength(1);
    expect(run.stderr[0]).toMatch(/^pnpm bench: --[a-z-]+ takes a number, got /);
  });

  it.each([
    ['--tracing-paths', 'http,grpc', 'pnpm bench: --tracing-paths takes a list of http, fanout, webhooks, got "grpc"'],
    ['--tracing-repeats', '0', 'pnpm bench: --tracing-repeats takes a whole number of at least 1, got "0"'],
    [
      '--tracing-fanout-trials',
      '1.5',
      'pnpm bench: --tracing-fanout-trials takes a whole number of at least 1, got "1.5"',
    ],
  ])('refuses %s %s in one line', (flag, value, line) => {
    const run = bench('--scenarios', 'tracing', flag, value);
    expect(run.status).toBe(2);
    expect(run.stderr).toEqual([line]);
  });
});

describe('tracing-micro settings', () => {
  it.each(['0,lots', '1.5', '0,,0.01'])(
    'refuses TRACING_MICRO_RATIOS=%s in one line, before starting anything',
    (ratios) => {
      const run = spawnSync(process.execPath, ['--import', 'tsx', 'bench/micro/tracing-micro.ts', '10'], {
        cwd: new URL('..', import.meta.url),
        encoding: 'utf8',
        timeout: 60_000,
        env: { ...process.env, TRACING_MICRO_RATIOS: ratios },
      });
      expect(run.status).toBe(2);
      expect(run.stderr.trim().split('\n')).toEqual([
        expect.stringMatching(/^tracing-micro: TRACING_MICRO_RATIOS takes ratios from 0 to 1, got "(lots|1\.5|)"$/),
      ]);
    },
  );
});
