export * from './harness.js';
export * from './test-receiver.js';
