export * from './duration.js';
export * from './parse-env.js';
export * from './redis-url.js';
