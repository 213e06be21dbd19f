export * from './cursor.js';
export * from './errors.js';
export * from './event-catalog.js';
export * from './event-filter.js';
export * from './ids.js';
export * from './subscriptions.js';
export * from './webhooks.js';
