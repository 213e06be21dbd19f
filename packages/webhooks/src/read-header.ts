import { WebhookVerificationError } from './webhook-verification-error.js';

/** What `verifyWebhook` accepts as headers: a WHATWG `Headers` or node's `IncomingHttpHeaders`-like record. */
export type WebhookHeaders = Headers | Record<string, string | string[] | undefined>;

/**
 * The single value of a header, looked up case-insensitively; `undefined` when absent or empty.
 * @throws WebhookVerificationError `malformed_header` when the header is repeated: a record holding
 *   an array of several values, or a WHATWG `Headers` joining several values with `, ` (only the
 *   signature header may legitimately contain commas, and its parser refuses a repeated `t`).
 */
export function readHeader(headers: WebhookHeaders, name: string): string | undefined {
  const value = isWhatwgHeaders(headers) ? headers.get(name) : findInRecord(headers, name);
  if (Array.isArray(value) && value.length > 1) {
    throw new WebhookVerificationError('malformed_header', `${name} is repeated`);
  }
  const single = Array.isArray(value) ? value[0] : value;
  return single?.trim() || undefined;
}

function isWhatwgHeaders(headers: WebhookHeaders): headers is Headers {
  return typeof (headers as Headers).get === 'function';
}

function findInRecord(
  headers: Record<string, string | string[] | undefined>,
  name: string,
): string | string[] | undefined {
  const lower = name.toLowerCase();
  // node:http already lower-cases names; other records (tests, frameworks) may not.
  if (Object.hasOwn(headers, lower)) return headers[lower];
  for (const key of Object.keys(headers)) {
    if (key.toLowerCase() === lower) return headers[key];
  }
  return undefined;
}
