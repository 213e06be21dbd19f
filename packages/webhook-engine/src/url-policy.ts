import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import { isIP, type LookupFunction } from 'node:net';
import ipaddr from 'ipaddr.js';

/** Longest receiver URL accepted. */
export const MAX_WEBHOOK_URL_LENGTH = 2_048;

/** Where receivers may live. */
export interface UrlPolicy {
  /**
   * Allow loopback, private (RFC 1918), unique-local (fc00::/7) and carrier-grade NAT addresses.
   * Link-local addresses (cloud metadata such as 169.254.169.254, fe80::/10) are refused regardless.
   * @default false (true in embedded mode)
   */
  allowPrivateUrls: boolean;
}

/** Thrown by the guarded DNS lookup, and returned as the reason by the checks, when a URL is refused. */
export class RefusedUrlError extends Error {
  override readonly name = 'RefusedUrlError';
  readonly code = 'ERR_WEBHOOK_URL_REFUSED';
}

/**
 * Cloud metadata services that live on private rather than link-local addresses: always refused, like
 * 169.254.169.254, even when private URLs are allowed. AWS IMDS over IPv6 (fd00:ec2::254), Alibaba
 * Cloud (100.100.100.200), Oracle Cloud's legacy 192.0.0.192, Azure's wire server (168.63.129.16).
 */
export const METADATA_ADDRESSES: ReadonlySet<string> = new Set([
  'fd00:ec2::254',
  '100.100.100.200',
  '192.0.0.192',
  '168.63.129.16',
]);

/** ipaddr.js range names allowed only with `allowPrivateUrls`. */
const PRIVATE_RANGES = new Set(['loopback', 'private', 'uniqueLocal', 'carrierGradeNat']);

/**
 * Why an IP address may not receive webhooks, or undefined when it may. Only ordinary public unicast
 * addresses pass (plus private ones when allowed); link-local, unspecified, multicast, broadcast,
 * documentation, and the IPv6 ranges that embed an IPv4 address (6to4, NAT64, Teredo) never do.
 * IPv4-mapped IPv6 addresses are judged as the IPv4 address they map.
 */
export function refusalForAddress(address: string, policy: UrlPolicy): string | undefined {
  if (!ipaddr.isValid(address)) return `${address} is not an IP address`;
  const parsed = ipaddr.process(address);
  const range = parsed.range();
  const shown = parsed.toString();
  if (METADATA_ADDRESSES.has(shown)) return `${shown} is a cloud metadata address; never allowed`;
  if (range === 'unicast') return undefined;
  if (range === 'linkLocal') return `${shown} is a link-local address (cloud metadata); never allowed`;
  if (PRIVATE_RANGES.has(range)) {
    return policy.allowPrivateUrls
      ? undefined
      : `${shown} is a ${range} address; private addresses are refused unless WEBHOOK_ALLOW_PRIVATE_URLS is true`;
  }
  return `${shown} is a special-purpose address (${range}); never allowed`;
}

/**
 * Checks the form of a receiver URL: absolute http(s), no credentials, no fragment, at most
 * {@link MAX_WEBHOOK_URL_LENGTH} characters, and an IP-literal host must be an allowed address.
 * @returns the parsed URL, or the reason it is refused
 */
export function parseWebhookUrl(raw: string, policy: UrlPolicy): { url: URL } | { refused: string } {
  if (raw.length > MAX_WEBHOOK_URL_LENGTH)
    return { refused: `URL is longer than ${MAX_WEBHOOK_URL_LENGTH} characters` };
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return { refused: 'not an absolute URL' };
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return { refused: 'only http and https URLs are allowed' };
  if (url.username || url.password) return { refused: 'URL must not contain credentials' };
  if (url.hash) return { refused: 'URL must not contain a fragment' };
  const host = hostOf(url);
  if (isIP(host)) {
    const refused = refusalForAddress(host, policy);
    if (refused) return { refused };
  }
  return { url };
}

/** The URL's host without IPv6 brackets. */
export function hostOf(url: URL): string {
  return url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
}

/**
 * The full registration check: the URL's form, and every address its host resolves to right
 * now. The same check runs again at each delivery, on the address actually connected to.
 * @returns the normalised URL, or the reason it is refused
 */
export async function checkWebhookUrl(
  raw: string,
  policy: UrlPolicy,
  resolve: (host: string) => Promise<LookupAddress[]> = resolveAll,
): Promise<{ url: string } | { refused: string }> {
  const parsed = parseWebhookUrl(raw, policy);
  if ('refused' in parsed) return parsed;
  const host = hostOf(parsed.url);
  if (!isIP(host)) {
    let addresses: LookupAddress[];
    try {
      addresses = await resolve(host);
    } catch {
      return { refused: `host ${host} does not resolve` };
    }
    if (addresses.length === 0) return { refused: `host ${host} does not resolve` };
    for (const { address } of addresses) {
      const refused = refusalForAddress(address, policy);
      if (refused) return { refused: `host ${host} resolves to ${refused}` };
    }
  }
  return { url: parsed.url.toString() };
}

function resolveAll(host: string): Promise<LookupAddress[]> {
  return new Promise((resolve, reject) => {
    dnsLookup(host, { all: true, verbatim: true }, (error, addresses) => (error ? reject(error) : resolve(addresses)));
  });
}

/**
 * A DNS lookup for the HTTP client's connections that refuses a host when any address it resolves to
 * is refused. Because the check runs inside the lookup of the very connection that is then opened, the
 * address checked is the address connected to: a DNS answer that changes between the check and the
 * connection (DNS rebinding) cannot slip a private address through. IP-literal hosts never reach a
 * lookup; `parseWebhookUrl` checks those.
 */
export function createGuardedLookup(policy: UrlPolicy): LookupFunction {
  return (hostname, options, callback) => {
    dnsLookup(hostname, { ...options, all: true }, (error, addresses) => {
      if (error) return callback(error, '', 0);
      const list = addresses as LookupAddress[];
      for (const { address } of list) {
        const refused = refusalForAddress(address, policy);
        if (refused) return callback(new RefusedUrlError(`host ${hostname} resolves to ${refused}`), '', 0);
      }
      if (list.length === 0)
        return callback(Object.assign(new Error(`host ${hostname} does not resolve`), { code: 'ENOTFOUND' }), '', 0);
      if (options.all) return (callback as unknown as (e: null, a: LookupAddress[]) => void)(null, list);
      const first = list[0]!;
      return callback(null, first.address, first.family);
    });
  };
}

/**
 * A receiver URL fit for logs: userinfo and query (where tokens hide) removed, fragment dropped. An
 * unparsable URL is reduced to a placeholder rather than logged as is.
 */
export function redactUrl(raw: string): string {
  try {
    const url = new URL(raw);
    url.username = '';
    url.password = '';
    const query = url.search ? '?…' : '';
    url.search = '';
    url.hash = '';
    return `${url.toString()}${query}`;
  } catch {
    return '(unparsable URL)';
  }
}
