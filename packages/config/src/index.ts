export * from './duration.js';
export * from './parse-env.js';
