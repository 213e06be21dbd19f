/**
 * The soak's ledger: pure arithmetic over what the run recorded (every frame each subscriber got, every
 * body each receiver verified) and what PostgreSQL holds at the end (the committed publishes, each
 * endpoint's deliveries). No I/O here, so a crafted input can prove that an unbalanced run is caught.
 */

/** A committed `post.published` event, in outbox order within its organisation. */
export interface CommittedEvent {
  eventId: string;
  postId: string;
  orgId: string;
  /** The outbox's sequence number. */
  seq: number;
  tags: string[];
}

export interface SubscriberFrame {
  postId: string;
  /** The cursor's history epoch and position ('' and -1 without a cursor). */
  epoch: string;
  position: number;
  at: number;
}

export interface SubscriberRecord {
  name: string;
  orgId: string;
  tags?: string[];
  frames: SubscriberFrame[];
  /** For each CURSOR_EXPIRED, how many frames had arrived before it. */
  expiries: number[];
  reconciled: string[];
}

export type DeliveryStatus = 'PENDING' | 'SUCCEEDED' | 'DEAD' | 'SKIPPED';

export interface EndpointRecord {
  name: string;
  behaviour: string;
  endpointId: string;
  orgId: string;
  /** Every delivery row of the endpoint. */
  deliveries: { eventId: string; status: DeliveryStatus }[];
  /** A FIFO endpoint: the first sightings of its events must come in outbox order. */
  ordered?: boolean;
  /** Each verified event at the receiver and its copies, in the order each was first seen. */
  received: { eventId: string; postId: string; copies: number }[];
  invalid: number;
  invalidSamples: string[];
}

export interface LedgerInput {
  events: CommittedEvent[];
  /** Every post PostgreSQL holds as PUBLISHED. */
  publishedPosts: string[];
  /** Posts whose publishPost answered without errors. */
  acknowledged: string[];
  subscribers: SubscriberRecord[];
  endpoints: EndpointRecord[];
  /** `post.published` outbox events still waiting for their fan-out (a pending-queue row) after the drain. */
  undispatched: string[];
  /** Deliveries still leased for an attempt well past the attempt's bound. */
  leasedPastBound: string[];
}

export interface Violation {
  kind:
    | 'publish-acknowledged-not-committed'
    | 'publish-without-event'
    | 'subscriber-missing'
    | 'subscriber-duplicate'
    | 'subscriber-order'
    | 'subscriber-unexpected'
    | 'subscriber-lost-across-cursor-expired'
    | 'cursor-disagreement'
    | 'endpoint-no-delivery'
    | 'endpoint-duplicate-rows'
    | 'endpoint-unexpected-delivery'
    | 'endpoint-succeeded-not-received'
    | 'endpoint-out-of-order'
    | 'receiver-unexpected-event'
    | 'receiver-invalid-body'
    | 'outbox-undispatched'
    | 'delivery-lease-stuck';
  where: string;
  /** The event (`evt_…`) or post id concerned, when there is one. */
  id?: string;
  detail: string;
}

export interface SubscriberTally {
  name: string;
  orgId: string;
  tags?: string[];
  expected: number;
  received: number;
  /** Missed live but learned through reconciliation after CURSOR_EXPIRED (counted apart). */
  reconciled: number;
  cursorExpired: number;
  missing: number;
  duplicates: number;
}

export interface EndpointTally {
  name: string;
  behaviour: string;
  selected: number;
  succeeded: number;
  dead: number;
  scheduled: number;
  skipped: number;
  /** Selected events without a delivery row. */
  unaccounted: number;
  receivedDistinct: number;
  receivedDuplicates: number;
  invalid: number;
  /** A FIFO endpoint: events first seen out of outbox order (absent for an unordered endpoint). */
  outOfOrder?: number;
  balanced: boolean;
}

export interface LedgerResult {
  balanced: boolean;
  committed: number;
  subscribers: SubscriberTally[];
  endpoints: EndpointTally[];
  violations: Violation[];
}

/** Violations listed in full; beyond this many of one kind, only counted. */
const LISTED_PER_KIND = 50;

export function checkLedger(input: LedgerInput): LedgerResult {
  const violations: Violation[] = [];
  const byPost = new Map<string, CommittedEvent>();
  const byEvent = new Map<string, CommittedEvent>();
  const byOrg = new Map<string, CommittedEvent[]>();
  for (const event of input.events) {
    byPost.set(event.postId, event);
    byEvent.set(event.eventId, event);
    const list = byOrg.get(event.orgId) ?? [];
    list.push(event);
    byOrg.set(event.orgId, list);
  }
  for (const list of byOrg.values()) list.sort((a, b) => a.seq - b.seq);

  const published = new Set(input.publishedPosts);
  for (const postId of input.acknowledged)
    if (!published.has(postId))
      violations.push({
        kind: 'publish-acknowledged-not-committed',
        where: 'posts',
        id: postId,
        detail: 'publishPost answered, but the post is not PUBLISHED',
      });
  for (const postId of published)
    if (!byPost.has(postId))
      violations.push({
        kind: 'publish-without-event',
        where: 'webhook_outbox',
        id: postId,
        detail: 'PUBLISHED without a post.published event',
      });

  // One position per post and history epoch, as every subscriber of the organisation saw it.
  const positions = new Map<string, number>();
  for (const subscriber of input.subscribers) {
    for (const frame of subscriber.frames) {
      if (frame.position < 0) continue;
      const key = `${frame.epoch} ${frame.postId}`;
      const known = positions.get(key);
      if (known === undefined) positions.set(key, frame.position);
      else if (known !== frame.position)
        violations.push({
          kind: 'cursor-disagreement',
          where: subscriber.name,
          id: frame.postId,
          detail: `position ${frame.position} in epoch ${frame.epoch}, another subscriber got ${known}`,
        });
    }
  }

  const subscribers = input.subscribers.map((subscriber) => {
    const tally: SubscriberTally = {
      name: subscriber.name,
      orgId: subscriber.orgId,
      tags: subscriber.tags,
      expected: 0,
      received: 0,
      reconciled: 0,
      cursorExpired: subscriber.expiries.length,
      missing: 0,
      duplicates: 0,
    };
    const matches = (event: CommittedEvent) =>
      event.orgId === subscriber.orgId && (!subscriber.tags || subscriber.tags.some((tag) => event.tags.includes(tag)));
    const seen = new Set<string>();
    subscriber.frames.forEach((frame, index) => {
      const event = byPost.get(frame.postId);
      if (!event || !matches(event)) {
        violations.push({
          kind: 'subscriber-unexpected',
          where: subscriber.name,
          id: frame.postId,
          detail: event ? `post of ${event.orgId} with tags [${event.tags}]` : 'not a committed publish',
        });
      }
      if (seen.has(frame.postId)) {
        tally.duplicates++;
        violations.push({
          kind: 'subscriber-duplicate',
          where: subscriber.name,
          id: frame.postId,
          detail: `frame ${index}`,
        });
      }
      seen.add(frame.postId);
      const previous = subscriber.frames[index - 1];
      if (previous && previous.epoch === frame.epoch && frame.position >= 0 && frame.position <= previous.position) {
        violations.push({
          kind: 'subscriber-order',
          where: subscriber.name,
          id: frame.postId,
          detail: `position ${frame.position} after ${previous.position} (${previous.postId})`,
        });
      }
    });
    tally.received = seen.size;
    const first = subscriber.frames[0];
    const firstEvent = first ? byPost.get(first.postId) : undefined;
    if (!first || !firstEvent) return tally;
    // The window opens at the first event received: a later one (by its position in that epoch when any
    // subscriber got it, else by outbox order) must arrive.
    const inWindow = (event: CommittedEvent) => {
      const position = positions.get(`${first.epoch} ${event.postId}`);
      if (position !== undefined && first.position >= 0) return position >= first.position;
      return event.seq >= firstEvent.seq;
    };
    // Outbox order bounds of each CURSOR_EXPIRED gap: the last frame before it, the first after.
    const gaps = subscriber.expiries.map((before) => ({
      from: byPost.get(subscriber.frames[before - 1]?.postId ?? '')?.seq ?? Number.NEGATIVE_INFINITY,
      to: byPost.get(subscriber.frames[before]?.postId ?? '')?.seq ?? Number.POSITIVE_INFINITY,
    }));
    const reconciled = new Set(subscriber.reconciled);
    for (const event of byOrg.get(subscriber.orgId) ?? []) {
      if (!matches(event) || !inWindow(event)) continue;
      tally.expected++;
      if (seen.has(event.postId)) continue;
      if (reconciled.has(event.postId) && subscriber.expiries.length > 0) {
        tally.reconciled++;
        continue;
      }
      tally.missing++;
      const gap = gaps.find(({ from, to }) => event.seq > from && event.seq < to);
      violations.push({
        kind: gap ? 'subscriber-lost-across-cursor-expired' : 'subscriber-missing',
        where: subscriber.name,
        id: event.postId,
        detail: `${event.eventId} (outbox seq ${event.seq}, tags [${event.tags}]) never arrived`,
      });
    }
    return tally;
  });

  const endpoints = input.endpoints.map((endpoint) => {
    const selected = byOrg.get(endpoint.orgId) ?? [];
    const rows = new Map<string, DeliveryStatus[]>();
    for (const delivery of endpoint.deliveries) {
      const list = rows.get(delivery.eventId) ?? [];
      list.push(delivery.status);
      rows.set(delivery.eventId, list);
    }
    const received = new Map(endpoint.received.map((arrival) => [arrival.eventId, arrival]));
    const tally: EndpointTally = {
      name: endpoint.name,
      behaviour: endpoint.behaviour,
      selected: selected.length,
      succeeded: 0,
      dead: 0,
      scheduled: 0,
      skipped: 0,
      unaccounted: 0,
      receivedDistinct: endpoint.received.length,
      receivedDuplicates: endpoint.received.reduce((total, arrival) => total + arrival.copies - 1, 0),
      invalid: endpoint.invalid,
      balanced: false,
    };
    for (const event of selected) {
      const statuses = rows.get(event.eventId);
      if (!statuses) {
        tally.unaccounted++;
        violations.push({
          kind: 'endpoint-no-delivery',
          where: endpoint.name,
          id: event.eventId,
          detail: `post ${event.postId}: no delivery row`,
        });
        continue;
      }
      if (statuses.length > 1)
        violations.push({
          kind: 'endpoint-duplicate-rows',
          where: endpoint.name,
          id: event.eventId,
          detail: `${statuses.length} delivery rows: ${statuses.join(', ')}`,
        });
      const status = statuses[0]!;
      if (status === 'SUCCEEDED') tally.succeeded++;
      else if (status === 'DEAD') tally.dead++;
      else if (status === 'PENDING') tally.scheduled++;
      else tally.skipped++;
      if (status === 'SUCCEEDED' && !received.has(event.eventId))
        violations.push({
          kind: 'endpoint-succeeded-not-received',
          where: endpoint.name,
          id: event.eventId,
          detail: `post ${event.postId}: SUCCEEDED, but no verified body reached the receiver`,
        });
    }
    const selectedIds = new Set(selected.map((event) => event.eventId));
    for (const eventId of rows.keys()) {
      if (!selectedIds.has(eventId))
        violations.push({
          kind: 'endpoint-unexpected-delivery',
          where: endpoint.name,
          id: eventId,
          detail: byEvent.has(eventId) ? `an event of ${byEvent.get(eventId)!.orgId}` : 'not a committed publish',
        });
    }
    for (const arrival of endpoint.received) {
      const event = byEvent.get(arrival.eventId);
      if (!selectedIds.has(arrival.eventId) || event?.postId !== arrival.postId)
        violations.push({
          kind: 'receiver-unexpected-event',
          where: endpoint.name,
          id: arrival.eventId,
          detail: `post ${arrival.postId} arrived, ${event ? `the event is of post ${event.postId} in ${event.orgId}` : 'not a committed publish'}`,
        });
    }
    if (endpoint.ordered) {
      // A FIFO endpoint: each event first seen after every event of the organisation recorded before it
      // (copies after a crash may come again, in order; only first sightings are ordered).
      let last: CommittedEvent | undefined;
      for (const arrival of endpoint.received) {
        const event = byEvent.get(arrival.eventId);
        if (!event) continue;
        if (last && event.seq < last.seq) {
          tally.outOfOrder = (tally.outOfOrder ?? 0) + 1;
          violations.push({
            kind: 'endpoint-out-of-order',
            where: endpoint.name,
            id: event.eventId,
            detail: `outbox seq ${event.seq} first seen after seq ${last.seq} (${last.eventId})`,
          });
        } else last = event;
      }
      tally.outOfOrder ??= 0;
    }
    if (endpoint.invalid > 0)
      violations.push({
        kind: 'receiver-invalid-body',
        where: endpoint.name,
        detail: `${endpoint.invalid} bodies failed verification: ${endpoint.invalidSamples.join('; ')}`,
      });
    tally.balanced =
      tally.succeeded + tally.dead + tally.scheduled + tally.skipped === tally.selected &&
      tally.unaccounted === 0 &&
      !tally.outOfOrder;
    return tally;
  });

  for (const eventId of input.undispatched)
    violations.push({
      kind: 'outbox-undispatched',
      where: 'webhook_outbox',
      id: eventId,
      detail: 'not dispatched after the drain',
    });
  for (const deliveryId of input.leasedPastBound)
    violations.push({
      kind: 'delivery-lease-stuck',
      where: 'webhook_deliveries',
      id: deliveryId,
      detail: 'attempt lease held past its bound',
    });

  return {
    balanced: violations.length === 0,
    committed: input.events.length,
    subscribers,
    endpoints,
    violations,
  };
}

/** The violations as lines for the terminal: every kind counted, the first {@link LISTED_PER_KIND} of each listed. */
export function describeViolations(violations: readonly Violation[]): string[] {
  const byKind = new Map<string, Violation[]>();
  for (const violation of violations) {
    const list = byKind.get(violation.kind) ?? [];
    list.push(violation);
    byKind.set(violation.kind, list);
  }
  const lines: string[] = [];
  for (const [kind, list] of byKind) {
    lines.push(`${kind}: ${list.length}`);
    for (const violation of list.slice(0, LISTED_PER_KIND))
      lines.push(`  ${violation.where}${violation.id ? ` ${violation.id}` : ''}: ${violation.detail}`);
    if (list.length > LISTED_PER_KIND) lines.push(`  … ${list.length - LISTED_PER_KIND} more`);
  }
  return lines;
}
