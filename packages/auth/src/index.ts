export * from './auth-unavailable-error.js';
export * from './invalid-token-error.js';
export * from './sign-token.js';
export * from './token-verifier.js';
export * from './viewer.js';
