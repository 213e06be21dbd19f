/**
 * The dispatchers' work queue. Two implementations share this interface: a Redis stream with a consumer
 * group (cluster mode, many dispatchers) and a database table (embedded mode, no Redis). Either way
 * the queue only distributes work: the database holds every event and delivery, so an entry the queue
 * loses delays a delivery (the relay or the scheduler hands it out again) but never loses it.
 */

/**
 * One unit of work: attempt these deliveries, all of one endpoint; `lease` is the q-lease they were
 * queued under (lease-protocol.ts). One entry per endpoint per fan-out or due-scan batch, so the stream's
 * per-entry cost (XADD, read, XACK) is paid per batch rather than per delivery.
 */
export interface WorkMessage {
  kind: 'delivery';
  deliveryIds: string[];
  endpointId: string;
  lease: string;
}

/** Most deliveries named by one work entry. */
export const MAX_DELIVERIES_PER_ENTRY = 100;

/** Queued deliveries as work messages: grouped by endpoint and lease, at most {@link MAX_DELIVERIES_PER_ENTRY} each. */
export function toWorkMessages(
  queued: ReadonlyArray<{ deliveryId: string; endpointId: string; lease: string }>,
): WorkMessage[] {
  const groups = new Map<string, WorkMessage>();
  const messages: WorkMessage[] = [];
  for (const item of queued) {
    const key = `${item.endpointId} ${item.lease}`;
    let message = groups.get(key);
    if (!message || message.deliveryIds.length >= MAX_DELIVERIES_PER_ENTRY) {
      message = { kind: 'delivery', deliveryIds: [], endpointId: item.endpointId, lease: item.lease };
      groups.set(key, message);
      messages.push(message);
    }
    message.deliveryIds.push(item.deliveryId);
  }
  return messages;
}

export interface QueueEntry {
  /** The queue's id for the entry (a stream entry id, or a row id); what `ack` takes. */
  id: string;
  /** Undefined when the entry could not be read (garbled): it is acknowledged and dropped. */
  message: WorkMessage | undefined;
  /** How many times the entry has been handed to a consumer (reclaims included), when known. */
  receives?: number;
}

/** A delivery parked after its retries ran out, as operators list and replay it. */
export interface DeadLetter {
  deliveryId: string;
  eventId: string;
  eventType: string;
  orgId: string;
  endpointId: string;
  url: string;
  attempts: number;
  lastStatusCode: number | null;
  lastError: string | null;
  /** ISO 8601. */
  deadAt: string;
}

export interface WebhookQueue {
  readonly kind: 'redis' | 'database';
  /** Creates what the queue needs (stream and consumer group). Idempotent. */
  init(): Promise<void>;
  /** Appends work. */
  enqueue(messages: readonly WorkMessage[]): Promise<void>;
  /**
   * Up to `count` new entries for `consumer`, waiting up to `blockMs` when there are none. Each entry
   * stays assigned to the consumer until acknowledged or reclaimed.
   */
  read(consumer: string, count: number, blockMs: number): Promise<QueueEntry[]>;
  /**
   * Takes over up to `count` entries that some consumer (this one included) read more than `minIdleMs`
   * ago and never acknowledged: that consumer is presumed dead.
   */
  reclaim(consumer: string, minIdleMs: number, count: number): Promise<QueueEntry[]>;
  ack(ids: readonly string[]): Promise<void>;
  /** Makes a `read` that is waiting return at once (used by `stop`). */
  interrupt(): void;
  /** Writes a dead delivery to the alerting feed (the database stays its record). */
  deadLetter(letter: DeadLetter): Promise<void>;
  /**
   * Takes entries out of circulation (acknowledged, and copied to the parked stream when there is one):
   * entries received too often without being done (poison).
   */
  park(entries: readonly QueueEntry[]): Promise<void>;
  /** Entries appended but not yet read by any consumer. */
  lag(): Promise<number>;
  /** Resolves when the queue's storage answers; rejects otherwise. */
  ping(): Promise<void>;
  /**
   * `listener` runs when the queue found its storage gone and recreated it (Redis restarted without
   * persistence, or the stream was deleted): everything not yet done must be handed out again.
   */
  onReset(listener: () => void): void;
  close(): Promise<void>;
}

/**
 * Reads a message back from its flat string fields (`deliveryIds` comma-separated; an entry written
 * before entries named several deliveries has one `deliveryId`); undefined when garbled.
 */
export function decodeWorkMessage(fields: Readonly<Record<string, string>>): WorkMessage | undefined {
  if (fields.kind !== 'delivery' || !fields.endpointId || !fields.lease) return undefined;
  const ids = fields.deliveryIds ? fields.deliveryIds.split(',') : fields.deliveryId ? [fields.deliveryId] : [];
  if (ids.length === 0 || ids.some((id) => id.length === 0)) return undefined;
  return { kind: 'delivery', deliveryIds: ids, endpointId: fields.endpointId, lease: fields.lease };
}

/** The message as flat string fields (a Redis stream entry's field list, or a JSON object). */
export function encodeWorkMessage(message: WorkMessage): Record<string, string> {
  return {
    kind: message.kind,
    deliveryIds: message.deliveryIds.join(','),
    endpointId: message.endpointId,
    lease: message.lease,
  };
}
