import { MAX_WEBHOOK_FILTER_BYTES, parseWebhookEventFilter, type WebhookEventFilter } from '@herald/contracts';
import type { InvalidWebhookEventError } from '@herald/db';
import type { Context } from '../context.js';
import { BadUserInputError } from '../errors.js';

/*
 * What the webhook mutations share about the event catalog: reading an endpoint's `filter` argument,
 * and reporting an event body the catalog refused. No types are defined here (the webhook type and
 * mutation files import it, so it imports none of them).
 */

/** The description of the `filter` argument, shared by the mutations that take one. */
export const FILTER_INPUT_DESCRIPTION =
  'JSON object the event body must contain, e.g. `{"data":{"tags":["urgent"]}}` (docs/webhooks.md, "Filters"). ' +
  `At most ${MAX_WEBHOOK_FILTER_BYTES} bytes; each field must exist, with a value of its type, in every ` +
  'selected event type. null: no filter.';

/**
 * The filter in `text` for an endpoint selecting `eventTypes`; null when `text` is null or absent.
 * @throws BadUserInputError (field `filter`) naming what is wrong
 */
export function parseFilterInput(
  text: string | null | undefined,
  eventTypes: readonly string[],
): WebhookEventFilter | null {
  if (text == null) return null;
  const parsed = parseWebhookEventFilter(text, eventTypes);
  if ('error' in parsed) throw new BadUserInputError(parsed.error, 'filter');
  return parsed.filter;
}

/**
 * An event body that failed the catalog's check is a bug in Herald, not the caller's doing: logged at
 * error with what is wrong, and counted (`herald_webhook_events_invalid_total{type}`). The event is not
 * recorded; the caller decides whether its operation still stands (it does for a disable).
 */
export function reportInvalidWebhookEvent(context: Context, error: InvalidWebhookEventError): void {
  context.log.error(
    { eventId: error.eventId, eventType: error.type, problems: error.problems },
    'webhook event does not match its schema: not recorded',
  );
  context.metrics?.webhookEventsInvalid.labels(error.type).inc();
}
