export * from './channels.js';
export * from './errors.js';
