export * from './encryption-keys.js';
export * from './own-database.js';
export * from './pg-dump.js';
export * from './postgres.js';
export * from './process-resources.js';
export * from './redis-topologies.js';
