export * from './duration.js';
export * from './encryption-keys.js';
export * from './lifecycle.js';
export * from './log-output.js';
export * from './parse-env.js';
export * from './redis-url.js';
export * from './shutdown-signals.js';
export * from './source-maps.js';
