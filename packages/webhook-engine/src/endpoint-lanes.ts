import type { Logger } from 'pino';
import type { BatchResult } from './attempt-batch.js';
import type { ClaimedDelivery, QueuedDelivery } from './lease-protocol.js';

export interface EndpointLanesOptions {
  /** Claims, POSTs and records: the named deliveries plus, chaining, the endpoint's next due ones. */
  run(
    queued: readonly QueuedDelivery[],
    chainEndpoints: readonly string[],
    handedOver: readonly ClaimedDelivery[],
  ): Promise<BatchResult>;
  /** False once the dispatcher stops: lanes finish what they hold and end. */
  running(): boolean;
  logger: Logger;
}

export interface EndpointLanes {
  /**
   * Hands a work entry's delivery to its endpoint's lane. Resolves once a claim has included it (it
   * was attempted, or found taken, done or over the cap), so the entry can be acknowledged; rejects
   * when that claim failed (the entry stays pending and is reclaimed).
   */
  push(item: QueuedDelivery): Promise<void>;
}

interface Lane {
  waiting: Array<{ item: QueuedDelivery; done: () => void; failed: (error: unknown) => void }>;
}

/**
 * One lane per endpoint in this dispatcher: its claims run one after another, each taking the stream
 * entries that arrived meanwhile plus the endpoint's next due deliveries, up to the per-endpoint cap.
 * A busy endpoint's slots go from one batch to the next without a round through the scheduler and the
 * stream, and entries for an endpoint never compete with each other for its slots (no claim that
 * finds the cap full and throws its work back). The cap across dispatchers is the claim's.
 */
export function createEndpointLanes(options: EndpointLanesOptions): EndpointLanes {
  const lanes = new Map<string, Lane>();

  async function drive(endpointId: string, lane: Lane): Promise<void> {
    let chaining = true;
    // Claimed by the last record in the slots it freed: always attempted, even when stopping.
    let handedOver: readonly ClaimedDelivery[] = [];
    try {
      // Chains while claims find work; entries are settled batch by batch, never held by the chain.
      while (lane.waiting.length > 0 || handedOver.length > 0 || (chaining && options.running())) {
        const batch = lane.waiting.splice(0);
        const previous = handedOver;
        handedOver = [];
        try {
          const result = await options.run(
            batch.map((entry) => entry.item),
            options.running() ? [endpointId] : [],
            previous,
          );
          handedOver = result.handedOver;
          // The slots are free once the batch is recorded; its entries are done once that is durable.
          result.settled.then(
            () => {
              for (const entry of batch) entry.done();
            },
            (error: unknown) => {
              for (const entry of batch) entry.failed(error);
            },
          );
          chaining = result.attempted > 0;
        } catch (error) {
          for (const entry of batch) entry.failed(error);
          options.logger.warn({ err: error, endpointId }, 'claiming deliveries failed');
          chaining = false;
        }
      }
    } finally {
      lanes.delete(endpointId);
      // Entries that arrived as the lane ended get a lane of their own.
      if (lane.waiting.length > 0) {
        lanes.set(endpointId, lane);
        void drive(endpointId, lane);
      }
    }
  }

  return {
    push(item) {
      return new Promise<void>((done, failed) => {
        let lane = lanes.get(item.endpointId);
        const fresh = !lane;
        lane ??= { waiting: [] };
        lane.waiting.push({ item, done, failed });
        if (fresh) {
          lanes.set(item.endpointId, lane);
          // Started after the current read's entries are all in, so the first claim takes them together.
          const started = lane;
          queueMicrotask(() => void drive(item.endpointId, started));
        }
      });
    },
  };
}
