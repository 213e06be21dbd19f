/**
 * Header names of a webhook delivery, exactly as docs/webhooks.md spells them. Senders set them with this
 * casing; receivers look them up case-insensitively (HTTP header names are case-insensitive, and
 * node:http lower-cases them).
 */

/** The event id; always equal to the body's `id`, so a receiver can deduplicate before parsing. */
export const WEBHOOK_ID_HEADER = 'X-Webhook-ID';
/** Unix time in seconds at which this attempt was signed; the same value as the signature's `t`. */
export const WEBHOOK_TIMESTAMP_HEADER = 'X-Webhook-Timestamp';
/** `t=<unix seconds>,v1=<hex>[,v1=<hex>…]`: Stripe's scheme, one `v1` per active signing secret. */
export const WEBHOOK_SIGNATURE_HEADER = 'X-Webhook-Signature';

/**
 * Standard Webhooks (https://www.standardwebhooks.com) header names, sent beside the `X-Webhook-*`
 * ones so that the `standardwebhooks` and `svix` libraries verify Herald's deliveries. Lower-case as
 * the specification writes them.
 */
/** The event id; the same value as `X-Webhook-ID` and the body's `id`. */
export const STANDARD_WEBHOOK_ID_HEADER = 'webhook-id';
/** Unix seconds at which this attempt was signed; the same value as `X-Webhook-Timestamp`. */
export const STANDARD_WEBHOOK_TIMESTAMP_HEADER = 'webhook-timestamp';
/** `v1,<base64>[ v1,<base64>…]`: one space-separated entry per active signing secret. */
export const STANDARD_WEBHOOK_SIGNATURE_HEADER = 'webhook-signature';
