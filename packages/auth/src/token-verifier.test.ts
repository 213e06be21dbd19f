import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { exportJWK, exportSPKI, generateKeyPair, SignJWT, UnsecuredJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InvalidTokenError } from './invalid-token-error.js';
import { signToken } from './sign-token.js';
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
