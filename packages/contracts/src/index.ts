export * from './channels.js';
export * from './errors.js';
export * from './webhooks.js';
