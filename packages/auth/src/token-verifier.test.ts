import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { exportJWK, exportSPKI, generateKeyPair, SignJWT, UnsecuredJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AuthUnavailableError } from './auth-unavailable-error.js';
import { InvalidTokenError } from './invalid-token-error.js';
import { signToken } from './sign-token.js';
import { startTestJwksServer, type TestJwksServer } from './testing/jwks-server.js';
import { createTokenVerifier } from './token-verifier.js';

const SECRET = 'a-test-secret-that-is-at-least-32-characters';
const claims = { sub: 'u1', name: 'Ada', orgs: ['org-a', 'org-b'] };

async function refusal(promise: Promise<unknown>): Promise<InvalidTokenError> {
  const error = await promise.then(
    () => undefined,
    (caught: unknown) => caught,
  );
  expect(error).toBeInstanceOf(InvalidTokenError);
  return error as InvalidTokenError;
}

describe('HS256 secret', () => {
  const verifier = createTokenVerifier({ key: { kind: 'secret', secret: SECRET } });

  it('returns the viewer a valid token names', async () => {
    const viewer = await verifier.verify(await signToken(SECRET, claims));
    expect(viewer).toMatchObject({ id: 'u1', name: 'Ada', orgs: ['org-a', 'org-b'] });
    expect(viewer.expiresAt).toBeGreaterThan(Date.now() / 1000);
  });

  it('defaults the name to the user id and orgs to none', async () => {
    const viewer = await verifier.verify(await signToken(SECRET, { sub: 'bare' }));
    expect(viewer).toMatchObject({ id: 'bare', name: 'bare', orgs: [] });
  });

  it('refuses an expired token with reason "expired"', async () => {
    const expired = await signToken(SECRET, claims, { expiresIn: Math.floor(Date.now() / 1000) - 60 });
    expect((await refusal(verifier.verify(expired))).reason).toBe('expired');
  });

  it('refuses a token signed with another secret', async () => {
    const foreign = await signToken('another-secret-that-is-also-32-characters-long', claims);
    expect((await refusal(verifier.verify(foreign))).reason).toBe('invalid');
  });

  it('refuses alg "none"', async () => {
    const unsigned = new UnsecuredJWT(claims).setSubject('u1').setExpirationTime('1h').encode();
    await refusal(verifier.verify(unsigned));
  });

  it('refuses a token without sub', async () => {
    const noSub = await new SignJWT({ orgs: ['x'] })
      .setProtectedHeader({ alg: 'HS256' })
      .setExpirationTime('1h')
      .sign(new TextEncoder().encode(SECRET));
    expect((await refusal(verifier.verify(noSub))).message).toMatch(/sub/);
  });

  it('refuses an orgs claim that is not a list of strings', async () => {
    const badOrgs = await new SignJWT({ orgs: 'org-a' })
      .setProtectedHeader({ alg: 'HS256' })
      .setSubject('u1')
      .setExpirationTime('1h')
      .sign(new TextEncoder().encode(SECRET));
    expect((await refusal(verifier.verify(badOrgs))).message).toMatch(/orgs/);
  });

  it('refuses a token without exp like an invalid one', async () => {
    const forever = await new SignJWT({ orgs: ['org-a'] })
      .setProtectedHeader({ alg: 'HS256' })
      .setSubject('u1')
      .sign(new TextEncoder().encode(SECRET));
    const error = await refusal(verifier.verify(forever));
    expect(error.reason).toBe('invalid');
    expect(error.message).toMatch(/exp/);
  });

  it('refuses garbage', async () => {
    await refusal(verifier.verify('not.a.jwt'));
    await refusal(verifier.verify(''));
  });
});

describe('issuer and audience', () => {
  const verifier = createTokenVerifier({
    key: { kind: 'secret', secret: SECRET },
    issuer: 'https://issuer.example',
    audience: 'herald',
  });

  it('accepts matching iss and aud', async () => {
    const token = await signToken(SECRET, claims, { issuer: 'https://issuer.example', audience: 'herald' });
    await expect(verifier.verify(token)).resolves.toMatchObject({ id: 'u1' });
  });

  it('refuses a wrong issuer and a missing audience', async () => {
    const wrongIssuer = await signToken(SECRET, claims, { issuer: 'https://evil.example', audience: 'herald' });
    expect((await refusal(verifier.verify(wrongIssuer))).message).toMatch(/iss/);
    const noAudience = await signToken(SECRET, claims, { issuer: 'https://issuer.example' });
    expect((await refusal(verifier.verify(noAudience))).message).toMatch(/aud/);
  });
});

describe('PEM public key (RS256)', async () => {
  const { publicKey, privateKey } = await generateKeyPair('RS256');
  const pem = await exportSPKI(publicKey);
  const verifier = createTokenVerifier({ key: { kind: 'public-key', pem } });

  it('accepts a token signed by the matching private key', async () => {
    const token = await new SignJWT(claims)
      .setProtectedHeader({ alg: 'RS256' })
      .setSubject('u1')
      .setExpirationTime('1h')
      .sign(privateKey);
    await expect(verifier.verify(token)).resolves.toMatchObject({ id: 'u1', orgs: ['org-a', 'org-b'] });
  });

  it('refuses an HS256 token signed with the public key as the secret (algorithm confusion)', async () => {
    const confused = await signToken(pem, claims);
    await refusal(verifier.verify(confused));
  });
});

describe('JWKS URL (ES256)', () => {
  let server: Server;
  let url: string;
  let sign: (kid: string) => Promise<string>;

  beforeAll(async () => {
    const { publicKey, privateKey } = await generateKeyPair('ES256');
    const jwk = { ...(await exportJWK(publicKey)), kid: 'k1', alg: 'ES256', use: 'sig' };
    sign = (kid) =>
      new SignJWT(claims)
        .setProtectedHeader({ alg: 'ES256', kid })
        .setSubject('u1')
        .setExpirationTime('1h')
        .sign(privateKey);
    server = createServer((_req, res) => {
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ keys: [jwk] }));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/jwks.json`;
  });

  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

  it('verifies with the key the JWKS publishes', async () => {
    const verifier = createTokenVerifier({ key: { kind: 'jwks', url } });
    await expect(verifier.verify(await sign('k1'))).resolves.toMatchObject({ id: 'u1' });
  });

  it('refuses a kid the JWKS does not publish', async () => {
    const verifier = createTokenVerifier({ key: { kind: 'jwks', url } });
    await refusal(verifier.verify(await sign('unknown')));
  });
});

describe('verified-token cache (injected clock)', () => {
  const startSec = Math.floor(Date.now() / 1000);
  let clockMs = startSec * 1000;
  const now = () => clockMs;

  it('serves a repeat token from the cache, but never after its exp', async () => {
    clockMs = startSec * 1000;
    const verifier = createTokenVerifier({ key: { kind: 'secret', secret: SECRET }, now });
    const token = await signToken(SECRET, claims, { expiresIn: startSec + 60 });
    await verifier.verify(token);
    expect(verifier.cachedTokens).toBe(1);
    clockMs += 59_000;
    await expect(verifier.verify(token)).resolves.toMatchObject({ id: 'u1' });
    // Past exp and jose's 5 s clock tolerance: the cached entry must not answer for it.
    clockMs = (startSec + 66) * 1000;
    expect((await refusal(verifier.verify(token))).reason).toBe('expired');
    clockMs += 3_600_000;
    expect((await refusal(verifier.verify(token))).reason).toBe('expired');
  });

  it('a forged token (same header and claims, another signature) never hits the cache', async () => {
    clockMs = startSec * 1000;
    const verifier = createTokenVerifier({ key: { kind: 'secret', secret: SECRET }, now });
    const genuine = await signToken(SECRET, claims, { expiresIn: startSec + 600 });
    await verifier.verify(genuine);
    const [header, payload, signature] = genuine.split('.') as [string, string, string];
    const flipped = `${signature.slice(0, -2)}${signature.endsWith('AA') ? 'BB' : 'AA'}`;
    await refusal(verifier.verify(`${header}.${payload}.${flipped}`));
    await refusal(verifier.verify(`${header}.${payload}.`));
    const other = await signToken('another-secret-that-is-also-32-characters-long', claims, {
      expiresIn: startSec + 600,
    });
    await refusal(verifier.verify(`${header}.${payload}.${other.split('.')[2]}`));
    await expect(verifier.verify(genuine)).resolves.toMatchObject({ id: 'u1' });
  });

  it('hands out a frozen viewer, so no request can change what the next one with the same token sees', async () => {
    const verifier = createTokenVerifier({ key: { kind: 'secret', secret: SECRET } });
    const token = await signToken(SECRET, claims);
    const viewer = await verifier.verify(token);
    expect(Object.isFrozen(viewer) && Object.isFrozen(viewer.orgs)).toBe(true);
    expect(await verifier.verify(token)).toEqual(viewer);
  });

  it('remembers no refusal, and stays within its size bound', async () => {
    clockMs = startSec * 1000;
    const verifier = createTokenVerifier({ key: { kind: 'secret', secret: SECRET }, now, cacheSize: 2 });
    await refusal(verifier.verify(await signToken('another-secret-that-is-also-32-characters-long', claims)));
    expect(verifier.cachedTokens).toBe(0);
    for (const sub of ['a', 'b', 'c']) await verifier.verify(await signToken(SECRET, { sub }));
    expect(verifier.cachedTokens).toBe(2);
  });
});

describe('JWKS outage: unavailable, not invalid', () => {
  let jwks: TestJwksServer;

  beforeAll(async () => {
    jwks = await startTestJwksServer();
  });

  afterAll(() => jwks.stop());

  async function unavailable(promise: Promise<unknown>): Promise<AuthUnavailableError> {
    const error = await promise.then(
      () => undefined,
      (caught: unknown) => caught,
    );
    expect(error).toBeInstanceOf(AuthUnavailableError);
    return error as AuthUnavailableError;
  }

  it('a JWKS answering 503 before any key was fetched is AuthUnavailableError with a retry delay', async () => {
    jwks.mode = 'error';
    try {
      const verifier = createTokenVerifier({ key: { kind: 'jwks', url: jwks.url } });
      const error = await unavailable(verifier.verify(await jwks.sign({ sub: 'u1' })));
      expect(error.code).toBe('AUTH_UNAVAILABLE');
      expect(error.retryAfterSec).toBeGreaterThan(0);
    } finally {
      jwks.mode = 'ok';
    }
  });

  it('a JWKS that refuses connections is AuthUnavailableError; once back, the same token verifies', async () => {
    let clockMs = Date.now();
    const reported: unknown[] = [];
    const verifier = createTokenVerifier({
      key: { kind: 'jwks', url: jwks.url },
      now: () => clockMs,
      onKeySourceError: (error) => reported.push(error),
    });
    const token = await jwks.sign({ sub: 'u1' });
    await jwks.stop();
    try {
      await unavailable(verifier.verify(token));
      // Within the back-off, no new fetch (and no new report): the outage is not hammered.
      await unavailable(verifier.verify(token));
      expect(reported).toHaveLength(1);
    } finally {
      await jwks.start();
    }
    clockMs += 60_000; // past the outage back-off: the next request asks the JWKS again
    await expect(verifier.verify(token)).resolves.toMatchObject({ id: 'u1' });
  });

  it('keys are cached: with the JWKS gone, new tokens still verify with the keys fetched before', async () => {
    const verifier = createTokenVerifier({ key: { kind: 'jwks', url: jwks.url }, cacheSize: 0 });
    await verifier.verify(await jwks.sign({ sub: 'u1' }));
    const fetched = jwks.requests;
    await jwks.stop();
    try {
      await expect(verifier.verify(await jwks.sign({ sub: 'u2' }))).resolves.toMatchObject({ id: 'u2' });
    } finally {
      await jwks.start();
    }
    expect(jwks.requests).toBe(fetched);
  });

  it('past their max age, the last keys keep verifying while the JWKS answers 503', async () => {
    const verifier = createTokenVerifier({ key: { kind: 'jwks', url: jwks.url }, cacheSize: 0, jwksCacheMaxAgeMs: 0 });
    await verifier.verify(await jwks.sign({ sub: 'u1' }));
    jwks.mode = 'error';
    try {
      await expect(verifier.verify(await jwks.sign({ sub: 'u3' }))).resolves.toMatchObject({ id: 'u3' });
      // A kid the last keys do not hold cannot be judged while the JWKS is down: unavailable, not invalid.
      await unavailable(verifier.verify(await jwks.sign({ sub: 'u4' }, { kid: 'rotated' })));
    } finally {
      jwks.mode = 'ok';
    }
  });

  it('an unknown kid with the JWKS up is still an invalid token, and a refused token is never cached', async () => {
    const verifier = createTokenVerifier({ key: { kind: 'jwks', url: jwks.url } });
    expect((await refusal(verifier.verify(await jwks.sign({ sub: 'u1' }, { kid: 'nope' })))).reason).toBe('invalid');
    expect(verifier.cachedTokens).toBe(0);
  });
});
