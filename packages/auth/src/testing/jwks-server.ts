import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { exportJWK, generateKeyPair, SignJWT } from 'jose';

/** A JWKS endpoint on 127.0.0.1 that tests can break (503) and stop/start on the same port. */
export interface TestJwksServer {
  /** `http://127.0.0.1:<port>/jwks.json` (same port across stop/start). */
  url: string;
  /** Signs an ES256 token with the published key (`kid` k1 unless given); expires in 1 h unless `exp` is given. */
  sign(claims: Record<string, unknown> & { sub: string }, options?: { kid?: string; exp?: number }): Promise<string>;
  /** `'ok'` answers the key set; `'error'` answers 503. */
  mode: 'ok' | 'error';
  /** Key-set requests answered so far (any status). */
  readonly requests: number;
  /** Stops listening and drops open connections (connection refused from now on). */
  stop(): Promise<void>;
  /** Listens again on the same port. */
  start(): Promise<void>;
}

export async function startTestJwksServer(): Promise<TestJwksServer> {
  const { publicKey, privateKey } = await generateKeyPair('ES256');
  const jwk = { ...(await exportJWK(publicKey)), kid: 'k1', alg: 'ES256', use: 'sig' };
  let requests = 0;
  let server: Server | undefined;
  let port = 0;
  const jwks: TestJwksServer = {
    url: '',
    mode: 'ok',
    get requests() {
      return requests;
    },
    sign: (claims, options = {}) => {
      const { sub, ...rest } = claims;
      const jwt = new SignJWT(rest).setProtectedHeader({ alg: 'ES256', kid: options.kid ?? 'k1' }).setSubject(sub);
      return jwt.setExpirationTime(options.exp ?? '1h').sign(privateKey);
    },
    async start() {
      server = createServer((_request, response) => {
        requests++;
        if (jwks.mode === 'error') {
          response.writeHead(503).end('identity provider down');
          return;
        }
        response.setHeader('content-type', 'application/json');
        response.end(JSON.stringify({ keys: [jwk] }));
      });
      const listening = server;
      await new Promise<void>((resolve) => listening.listen(port, '127.0.0.1', resolve));
      port = (listening.address() as AddressInfo).port;
      jwks.url = `http://127.0.0.1:${port}/jwks.json`;
    },
    async stop() {
      const closing = server;
      if (!closing) return;
      server = undefined;
      closing.closeAllConnections();
      await new Promise<void>((resolve) => closing.close(() => resolve()));
    },
  };
  await jwks.start();
  return jwks;
}
