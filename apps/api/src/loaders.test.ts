import type { AuthorLoader } from '@herald/db';
import { describe, expect, it } from 'vitest';
import { createLoaders } from './loaders.js';

describe('createLoaders', () => {
  it('builds no loader until a resolver asks for it, then keeps the same one for the request', () => {
    let built = 0;
    const loader = {} as AuthorLoader;
    const loaders = createLoaders(() => {
      built++;
      return loader;
    });
    expect(built).toBe(0);
    expect(loaders.author).toBe(loader);
    expect(loaders.author).toBe(loader);
    expect(built).toBe(1);
  });
});
