export * from './duration.js';
export * from './encryption-keys.js';
export * from './parse-env.js';
export * from './redis-url.js';
