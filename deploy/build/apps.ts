/** One bundle the production build writes to `dist/<name>.js`. */
export interface AppEntry {
  /** Output name: `dist/<name>.js`. */
  name: string;
  /** TypeScript entry, relative to the app's folder. */
  source: string;
  /**
   * Skipped (with a line in the build log) while the source does not exist yet, instead of failing the
   * build. Only for operator CLIs that are still being written; never for `main`.
   * @default false
   */
  optional?: boolean;
}

/** A deployable app: a workspace package with entries, and the image target built from it. */
export interface AppBuild {
  /** Workspace package name; `pnpm deploy` prunes the install to its production dependencies. */
  packageName: string;
  /** Folder of the package, relative to the repository root. */
  dir: string;
  /** `main` is what the image runs; the others are operator CLIs shipped in the same image. */
  entries: readonly AppEntry[];
  /**
   * Where the operators' console (apps/console, static files) is built into, relative to the output
   * folder; the API serves it from `dist/console/`, beside `dist/main.js`.
   * @default undefined (no console)
   */
  consoleDir?: string;
}

/**
 * Every app the Dockerfile has a target for (`deploy/Dockerfile`, targets of the same names), and what
 * `deploy/build/main.ts <app> <outdir>` produces for it.
 */
export type AppName = 'api' | 'webhook-dispatcher';

export const APPS: Readonly<Record<AppName, AppBuild>> = {
  api: {
    packageName: '@herald/api',
    dir: 'apps/api',
    entries: [
      { name: 'main', source: 'src/main.ts' },
      // `node dist/migrate.js`: run migrations alone, e.g. as a pre-deploy Job.
      { name: 'migrate', source: 'src/migrate-cli.ts' },
    ],
    consoleDir: 'dist/console',
  },
  'webhook-dispatcher': {
    packageName: '@herald/webhook-dispatcher',
    dir: 'apps/webhook-dispatcher',
    entries: [
      { name: 'main', source: 'src/main.ts' },
      // `node dist/dlq.js list|replay`: the dead-letter CLI (docs/operations.md).
      { name: 'dlq', source: 'src/dlq-cli.ts', optional: true },
      // `node dist/secrets.js rotate-key`: re-encrypt webhook secrets under a new key (docs/operations.md).
      { name: 'secrets', source: 'src/secrets-cli.ts' },
    ],
  },
};

export function isAppName(name: string): name is AppName {
  return Object.hasOwn(APPS, name);
}
