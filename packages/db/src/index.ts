export * from './author-loader.js';
export * from './create-database.js';
export type * from './database.js';
export * from './migrate.js';
export * from './posts.js';
export * from './users.js';
