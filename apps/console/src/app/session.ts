/**
 * The signed-in token lives in sessionStorage: it survives a reload but not the tab, and never reaches
 * another origin. The development token is offered by the API only in embedded development mode, as a
 * `<meta name="herald-dev-token">` it adds to the page (never in production).
 */

const TOKEN_KEY = 'herald-console-token';
const DEV_TOKEN_META = 'meta[name="herald-dev-token"]';

export function storedToken(): string | undefined {
  return sessionStorage.getItem(TOKEN_KEY) ?? undefined;
}

export function storeToken(token: string | undefined): void {
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.removeItem(TOKEN_KEY);
}

/** The token the API offers in development, or undefined. */
export function developmentToken(): string | undefined {
  return document.querySelector<HTMLMetaElement>(DEV_TOKEN_META)?.content || undefined;
}

/** Accepts a pasted `Bearer eyJ…` as well as the bare token. */
export function normalizeToken(input: string): string {
  return input.trim().replace(/^bearer\s+/i, '');
}
