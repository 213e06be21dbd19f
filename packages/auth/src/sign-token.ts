import { SignJWT } from 'jose';

export interface TokenClaims {
  sub: string;
  name?: string;
  orgs?: string[];
  /** Platform roles, e.g. `herald:admin`. */
  roles?: string[];
}

export interface SignTokenOptions {
  /** Lifetime, in jose's notation (`'30d'`, `'2h'`) or as an absolute Unix time in seconds. @default '1h' */
  expiresIn?: string | number;
  issuer?: string;
  audience?: string;
}

/**
 * Signs an HS256 token. Herald itself never issues tokens to users; this serves the embedded-mode
 * development token and the tests.
 */
export async function signToken(secret: string, claims: TokenClaims, options: SignTokenOptions = {}): Promise<string> {
  let jwt = new SignJWT({ name: claims.name, orgs: claims.orgs, ...(claims.roles ? { roles: claims.roles } : {}) })
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setSubject(claims.sub)
    .setIssuedAt()
    .setExpirationTime(options.expiresIn ?? '1h');
  if (options.issuer) jwt = jwt.setIssuer(options.issuer);
  if (options.audience) jwt = jwt.setAudience(options.audience);
  return jwt.sign(new TextEncoder().encode(secret));
}
