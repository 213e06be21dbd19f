import { createRequire } from 'node:module';
import { defineConfig } from 'vitest/config';

// graphql 16 ships both index.js (CommonJS) and index.mjs. Node loads the CommonJS one for libraries
// (Pothos, Yoga); Vite would hand our sources the .mjs one, and graphql refuses to mix the two
// ("Cannot use GraphQLScalarType from another module or realm"). Point every import at the one Node uses.
const graphqlEntry = createRequire(new URL('./apps/api/package.json', import.meta.url)).resolve('graphql');

export default defineConfig({
  resolve: { alias: [{ find: /^graphql$/, replacement: graphqlEntry }] },
  test: {
    include: ['apps/*/src/**/*.test.ts', 'packages/*/src/**/*.test.ts', 'test/**/*.test.ts', 'bench/**/*.test.ts'],
    globalSetup: ['packages/testing/src/global-setup.ts'],
    // Generous: many tests start real processes (tsx, PGlite, nginx), and CI's two cores are shared.
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // Tests start real servers and processes; two cores run two files at a time without starving them.
    maxWorkers: 2,
  },
});
