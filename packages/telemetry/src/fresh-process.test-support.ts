import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';

/** For a test's script: `await import(START)` gives start-tracing.ts, `await import(TELEMETRY)` the package. */
export const START = pathToFileURL(fileURLToPath(new URL('./start-tracing.ts', import.meta.url))).href;
export const TELEMETRY = pathToFileURL(fileURLToPath(new URL('./index.ts', import.meta.url))).href;
const TSX_LOADER = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;

/**
 * Runs `script` (an ES module body) in a fresh Node process and returns what it wrote to stdout, parsed as
 * JSON. Tracing is process-wide, and the test runner keeps async hooks on, so what tracing does to a
 * process is seen only in one of its own. The process gets only PATH and `env`, plus an
 * `OTEL_EXPORTER_OTLP_ENDPOINT` that turns tracing on (a script with a collector of its own sets it to that
 * before starting tracing) and a batch delay long enough that nothing is exported before the script asks.
 */
export function runInFreshProcess<T>(script: string, env: Record<string, string>): T {
  const output = execFileSync(process.execPath, ['--import', TSX_LOADER, '--input-type=module', '-e', script], {
    cwd: fileURLToPath(new URL('..', import.meta.url)),
    encoding: 'utf8',
    timeout: 30_000,
    env: {
      PATH: process.env.PATH ?? '',
      OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:9',
      OTEL_BSP_SCHEDULE_DELAY: '600000',
      ...env,
    },
  });
  return JSON.parse(output) as T;
}
