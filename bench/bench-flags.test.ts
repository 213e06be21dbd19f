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

  it('refuses an unknown scenario in one line naming the scenarios, without a stack trace', () => {
    const run = bench('--scenarios', 'http,nope');
    expect(run.status).toBe(2);
    expect(run.stderr).toEqual([
      expect.stringMatching(/^pnpm bench: --scenarios takes a list of raw, embedded, .*\bhttp\b.*, got "nope"$/),
    ]);
  });

  it.each([
    [
      '--http-targets raw,nginx',
      'pnpm bench: --http-targets takes a list of raw, herald, herald-start, herald-yoga-path, yoga, herald-pglite, got "nginx"',
    ],
    [
      '--http-operations posts,delete',
      'pnpm bench: --http-operations takes a list of posts, me, createPost, publishPost, got "delete"',
    ],
    ['--embedded-db foo', 'pnpm bench: --embedded-db takes one of postgres, pglite, got "foo"'],
    ['--webhook-two no', 'pnpm bench: --webhook-two takes one of true, false, got "no"'],
    ['--webhook-dispatchers docker', 'pnpm bench: --webhook-dispatchers takes one of image, source, got "docker"'],
    ['--noisy-storm-priority low', 'pnpm bench: --noisy-storm-priority takes one of nice, idle, got "low"'],
  ])('refuses %s in one line naming the allowed values', (flags, line) => {
    const run = bench('--scenarios', 'http', ...flags.split(' '));
    expect(run.status).toBe(2);
    expect(run.stderr).toEqual([line]);
  });

  it.each([
    ['--trials 0.5', 'pnpm bench: --trials takes a whole number of at least 1, got "0.5"'],
    ['--workers 0', 'pnpm bench: --workers takes a whole number of at least 1, got "0"'],
    ['--sockets 1000,0', 'pnpm bench: --sockets takes a whole number of at least 1, got "0"'],
    ['--webhook-warm-up 2.5', 'pnpm bench: --webhook-warm-up takes a whole number, got "2.5"'],
    ['--trial-ms 0', 'pnpm bench: --trial-ms takes a number above 0, got "0"'],
  ])('refuses %s: a count must be a whole number, a duration above 0', (flags, line) => {
    const run = bench('--scenarios', 'http', ...flags.split(' '));
    expect(run.status).toBe(2);
    expect(run.stderr).toEqual([line]);
  });

  it('takes the zeros that mean "none" and every documented HTTP target (stopping at a later refusal)', () => {
    const run = bench(
      ...'--scenarios webhooks,http --webhook-warm-up 0 --webhook-steady-rate 0 --resume-latency-events 0'.split(' '),
      ...'--warmup-ms 0 --http-warmup-ms 0 --http-targets raw,herald,herald-yoga-path,yoga'.split(' '),
      ...'--webhook-steady-compare-notify maybe'.split(' '),
    );
    expect(run.status).toBe(2);
    expect(run.stderr).toEqual([
      'pnpm bench: --webhook-steady-compare-notify takes one of true, first, false, got "maybe"',
    ]);
  });

  it.each([
    [
      '--scenarios http extra',
      'pnpm bench: stray argument "extra" (a value goes right after its flag; only --compare takes two)',
    ],
    ['--quick http', 'pnpm bench: stray argument "http" (a value goes right after its flag; only --compare takes two)'],
    ['--quick=yes', 'pnpm bench: --quick takes no value, got "yes"'],
    ['--scenarios http --webhook-steady-only', 'pnpm bench: --webhook-steady-only takes a value'],
  ])('refuses %s: a word outside a flag, a switch given a value, a flag left without one', (flags, line) => {
    const run = bench(...flags.split(' '));
    expect(run.status).toBe(2);
    expect(run.stderr).toEqual([line]);
  });

  it.each([
    ['--compare bench/results/results.json', /^pnpm bench: --compare takes two results files: /],
    [
      '--compare missing-old.json missing-new.json',
      /^pnpm bench: --compare could not read ".*missing-old\.json": ENOENT/,
    ],
    ['--render missing.json', /^pnpm bench: --render could not read ".*missing\.json": ENOENT/],
  ])('refuses %s in one line, without a stack trace', (flags, line) => {
    const run = bench(...flags.split(' '));
    expect(run.status).toBe(2);
    expect(run.stderr).toEqual([expect.stringMatching(line)]);
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
