export * from './delivery-statements.js';
export * from './dispatcher-world.js';
export * from './harness.js';
export * from './outcomes.js';
export * from './test-receiver.js';
export * from './until.js';
