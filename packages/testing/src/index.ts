export * from './postgres.js';
export * from './redis-topologies.js';
