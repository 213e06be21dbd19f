/**
 * The keyring test processes run with in single and cluster mode (`HERALD_ENCRYPTION_KEYS`), fixed so
 * that a test, the API and the dispatchers it starts all open the same sealed secrets.
 */
const TEST_KEY = Buffer.alloc(32, 0x5a);

/** `HERALD_ENCRYPTION_KEYS` for test processes. */
export const TEST_ENCRYPTION_KEYS = `test:${TEST_KEY.toString('base64')}`;

/** The same keyring, parsed (a `SecretKeyring` of @herald/db). */
export const TEST_KEYRING: readonly [{ readonly id: string; readonly key: Buffer }] = [{ id: 'test', key: TEST_KEY }];
