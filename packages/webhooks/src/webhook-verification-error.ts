/**
 * Why a delivery was refused:
 * - `missing_header`: an id, timestamp or signature header of the checked scheme is absent or empty;
 * - `malformed_header`: one is present but not in the documented format (or repeated, or the timestamp
 *   header disagrees with the signature's `t`);
 * - `timestamp_outside_tolerance`: the signed `t` is too old (a replay) or too far in the future;
 * - `no_matching_signature`: no `v1` entry matches any of the receiver's secrets (wrong secret,
 *   tampered body or timestamp);
 * - `invalid_body`: the signature holds but the body is not UTF-8 JSON shaped `{ id, type, created, data }`;
 * - `id_mismatch`: `X-Webhook-ID` differs from the body's `id`.
 */
export type WebhookVerificationFailureReason =
  | 'missing_header'
  | 'malformed_header'
  | 'timestamp_outside_tolerance'
  | 'no_matching_signature'
  | 'invalid_body'
  | 'id_mismatch';

/**
 * Thrown by `verifyWebhook` for every delivery that must not be trusted. The message names the
 * header or check that failed and is safe to send back to the sender: it never contains a secret or
 * an expected signature.
 */
export class WebhookVerificationError extends Error {
  override readonly name = 'WebhookVerificationError';
  readonly code = 'WEBHOOK_VERIFICATION_FAILED';

  constructor(
    readonly reason: WebhookVerificationFailureReason,
    message: string,
  ) {
    super(message);
  }
}
