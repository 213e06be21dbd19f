import { findSourceMap } from 'node:module';

/**
 * Parses the source map of the module at `moduleUrl` (an app's bundle, `import.meta.url` in its main) now,
 * when the process runs with source maps on (`--enable-source-maps`, as the container images start the apps),
 * rather than when the first error's stack is formatted.
 *
 * Node reads a bundle's map at load but parses its mappings only on the first stack trace through the file:
 * for the API's bundle that is some 60,000 small arrays, about 6 MB of heap that stays, and a pause of its own.
 * The first stack usually comes with the first fault (PostgreSQL or Redis gone, errors logged), so a pod's
 * memory took a 6 MB step in the middle of an outage, which `pnpm soak` read as a slope. Parsed at start, the
 * cost is in the footprint from the first minute and the first error after a fault pays nothing for it.
 *
 * @returns whether a map was found and parsed: false with source maps off (nothing is read then) or for a
 *   module without a map.
 */
export function parseSourceMapNow(moduleUrl: string): boolean {
  return findSourceMap(moduleUrl) !== undefined;
}
