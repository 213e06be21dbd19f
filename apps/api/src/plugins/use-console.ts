import type { IncomingMessage } from 'node:http';
import { isIP } from 'node:net';
import type { Plugin } from 'graphql-yoga';
import type { ConsoleAssets } from '../console-assets.js';

export const CONSOLE_PATH = '/console';

/** The page may load only its own files and talk only to this origin's `/graphql`. */
const CONTENT_SECURITY_POLICY = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');
/** Asset names carry a content hash (apps/console's build), so they never change under one name. */
const IMMUTABLE = 'public, max-age=31536000, immutable';

export interface ConsoleOptions {
  /** The built console; undefined answers 503 with how to build it. */
  assets: ConsoleAssets | undefined;
  /**
   * A token to pre-fill the sign-in form with: only the development token, and only in development
   * embedded mode (the caller decides). It is added to the page only for requests from a loopback
   * address, so a development server listening on 0.0.0.0 does not hand it to the network.
   * @default undefined (nothing pre-filled)
   */
  devToken?: string | undefined;
}

/**
 * Serves the operators' console (apps/console, built to static files) on `GET /console/`. The page is
 * an ordinary client of `/graphql`: it has no route of its own and obeys the same authorization.
 * Only files found in the build at start are served, by name; nothing else under `/console` reaches the
 * disk.
 */
export function useConsole(options: ConsoleOptions): Plugin {
  const { assets, devToken } = options;
  return {
    onRequest({ request, url, fetchAPI, endResponse, serverContext }) {
      if (url.pathname !== CONSOLE_PATH && !url.pathname.startsWith(`${CONSOLE_PATH}/`)) return;
      const respond = (status: number, body: BodyInit | null, headers: Record<string, string> = {}) =>
        endResponse(
          new fetchAPI.Response(request.method === 'HEAD' ? null : body, {
            status,
            headers: { 'x-content-type-options': 'nosniff', 'referrer-policy': 'no-referrer', ...headers },
          }),
        );
      if (request.method !== 'GET' && request.method !== 'HEAD') {
        return respond(405, 'Method Not Allowed', { allow: 'GET, HEAD', 'content-type': 'text/plain' });
      }
      // Relative asset URLs in the page need the trailing slash.
      if (url.pathname === CONSOLE_PATH) return respond(308, null, { location: `${CONSOLE_PATH}/${url.search}` });
      if (!assets) {
        return respond(
          503,
          'The console is not built. Run `pnpm --filter @herald/console build` (pnpm install and pnpm start do).\n',
          { 'content-type': 'text/plain; charset=utf-8', 'cache-control': 'no-store' },
        );
      }
      const name = url.pathname.slice(CONSOLE_PATH.length + 1);
      if (name === '' || name === 'index.html') {
        const remote = (serverContext as { req?: IncomingMessage }).req?.socket?.remoteAddress;
        const html = devToken && isLoopback(remote) ? withDevToken(assets.index, devToken) : assets.index;
        return respond(200, html, {
          'content-type': 'text/html; charset=utf-8',
          // The page may carry the development token: never store it.
          'cache-control': 'no-store',
          'content-security-policy': CONTENT_SECURITY_POLICY,
          'x-frame-options': 'DENY',
        });
      }
      const asset = assets.files.get(name);
      if (!asset) return respond(404, 'Not Found', { 'content-type': 'text/plain', 'cache-control': 'no-store' });
      return respond(200, asset.body, { 'content-type': asset.contentType, 'cache-control': IMMUTABLE });
    },
  };
}

/** The page with `<meta name="herald-dev-token">`, which the console's sign-in form reads. */
function withDevToken(html: string, token: string): string {
  const escaped = token.replace(/[&<>"']/g, (char) => `&#${char.charCodeAt(0)};`);
  return html.replace('</head>', `  <meta name="herald-dev-token" content="${escaped}" />\n  </head>`);
}

function isLoopback(address: string | undefined): boolean {
  if (!address || !isIP(address)) return false;
  const plain = address.startsWith('::ffff:') ? address.slice('::ffff:'.length) : address;
  return plain === '::1' || plain.startsWith('127.');
}
