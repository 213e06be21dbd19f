export * from './url-policy.js';
