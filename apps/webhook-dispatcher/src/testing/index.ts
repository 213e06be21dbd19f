export * from './test-receiver.js';
