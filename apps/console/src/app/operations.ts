/**
 * Every GraphQL document the console sends, with the shapes it reads back. Only public fields of the
 * schema (apps/api/schema.graphql), webhook tools included: the console is an ordinary API client.
 */

export type EndpointStatus = 'ENABLED' | 'DISABLED';
export type DeliveryStatus = 'PENDING' | 'SUCCEEDED' | 'DEAD' | 'SKIPPED';
export type EndpointOrdering = 'UNORDERED' | 'FIFO';

export interface Viewer {
  id: string;
  name: string;
  orgs: string[];
}

export interface EndpointSummary {
  id: string;
  url: string;
  eventTypes: string[];
  status: EndpointStatus;
  disabledAt: string | null;
  disabledReason: string | null;
  createdAt: string;
  /** First failed attempt of the current failure streak. */
  failingSince: string | null;
  /** The receiver asked to slow down (429/503 with Retry-After): no attempt before this. */
  pausedUntil: string | null;
  /** Share of the latest attempts that got a 2xx (0 to 1); null without attempts. */
  successRate: number | null;
  /** JSON object the event body must contain for the endpoint to get it; null: every event. */
  filter: string | null;
  /** FIFO: one delivery at a time, in event order; a failing one holds back the rest. */
  ordering: EndpointOrdering;
  /** Most attempts per second to the endpoint, across dispatchers; null: no limit. */
  rateLimitPerSecond: number | null;
}

/** One endpoint as its own view shows it. */
export interface EndpointDetail extends EndpointSummary {
  /** For a FIFO endpoint with pending deliveries: the one every later one waits for. */
  fifoHead: { heldBack: number; delivery: Delivery } | null;
}

/** An entry of the event catalog (`webhookEventTypes`). */
export interface EventType {
  name: string;
  description: string;
  /** An example body, as JSON text. */
  example: string;
}

export interface Attempt {
  at: string;
  statusCode: number | null;
  durationMs: number;
  error: string | null;
  responseBody: string | null;
}

export interface Delivery {
  id: string;
  eventId: string;
  eventType: string;
  status: DeliveryStatus;
  createdAt: string;
  nextAttemptAt: string | null;
  attempts: Attempt[];
}

export interface DeliveryPage {
  edges: { node: Delivery }[];
  pageInfo: { hasNextPage: boolean; endCursor: string | null };
}

/** How many of an endpoint's latest attempts its success rate is computed over. */
export const RECENT_ATTEMPTS = 100;
/** Delivery log page size. */
export const DELIVERY_PAGE_SIZE = 25;

const ENDPOINT_FIELDS = `
  id url eventTypes status disabledAt disabledReason createdAt failingSince pausedUntil filter
  successRate(lastAttempts: ${RECENT_ATTEMPTS}) ordering rateLimitPerSecond
`;

const DELIVERY_FIELDS = `
  id eventId eventType status createdAt nextAttemptAt
  attempts { at statusCode durationMs error responseBody }
`;

export const ME = 'query Me { me { id name orgs } }';
export const EVENT_TYPES = 'query EventTypes { webhookEventTypes { name description example } }';

export const ENDPOINTS = `query Endpoints($orgId: ID!) { webhookEndpoints(orgId: $orgId) { ${ENDPOINT_FIELDS} } }`;

export const ENDPOINT = `query Endpoint($id: ID!) {
  webhookEndpoint(id: $id) { ${ENDPOINT_FIELDS} fifoHead { heldBack delivery { ${DELIVERY_FIELDS} } } }
}`;

export const DELIVERIES = `
  query Deliveries(
    $id: ID!, $first: Int, $after: String, $status: WebhookDeliveryStatus,
    $eventType: String, $eventId: ID, $createdAfter: DateTime, $createdBefore: DateTime
  ) {
    webhookEndpoint(id: $id) {
      id
      deliveries(
        first: $first, after: $after, status: $status,
        eventType: $eventType, eventId: $eventId, createdAfter: $createdAfter, createdBefore: $createdBefore
      ) {
        edges { node { ${DELIVERY_FIELDS} } }
        pageInfo { hasNextPage endCursor }
      }
    }
  }
`;

export const CREATE_ENDPOINT = `
  mutation CreateEndpoint($input: CreateWebhookEndpointInput!) {
    createWebhookEndpoint(input: $input) { secret endpoint { id } }
  }
`;

export const DISABLE_ENDPOINT = `
  mutation Disable($id: ID!, $reason: String) { disableWebhookEndpoint(id: $id, reason: $reason) { id status } }
`;
export const ENABLE_ENDPOINT = 'mutation Enable($id: ID!) { enableWebhookEndpoint(id: $id) { id status } }';
export const DELETE_ENDPOINT = 'mutation Delete($id: ID!) { deleteWebhookEndpoint(id: $id) }';
export const ROTATE_SECRET = 'mutation Rotate($id: ID!) { rotateWebhookSecret(id: $id) { secret } }';
export const SEND_TEST = `mutation SendTest($id: ID!) { sendTestWebhook(endpointId: $id) { ${DELIVERY_FIELDS} } }`;
export const REPLAY_DEAD = 'mutation ReplayDead($id: ID!) { replayDeadWebhookDeliveries(endpointId: $id) }';
export const REPLAY_DELIVERY = `mutation Replay($id: ID!) { replayWebhookDelivery(id: $id) { ${DELIVERY_FIELDS} } }`;
export const GIVE_UP_DELIVERY = 'mutation GiveUp($id: ID!) { giveUpWebhookDelivery(id: $id) { id status } }';
export const SET_RATE_LIMIT = `
  mutation RateLimit($id: ID!, $rate: Int) { setWebhookEndpointRateLimit(id: $id, rateLimitPerSecond: $rate) { id } }
`;
export const SET_ORDERING = `
  mutation Ordering($id: ID!, $ordering: WebhookEndpointOrdering!) {
    updateWebhookEndpoint(id: $id, input: { ordering: $ordering }) { id }
  }
`;

/** One quota of an organisation: what it uses now, its limit (0: none) and how often it was refused. */
export interface OrganizationUsage {
  orgId: string;
  operationsPerSecond: number;
  publishesPerSecond: number;
  sockets: number;
  subscriptions: number;
  webhookAttemptsInFlight: number;
  throttled: Record<QuotaName, number>;
  limits: Record<QuotaName, number>;
}

export type QuotaName =
  | 'operationsPerSecond'
  | 'publishesPerSecond'
  | 'socketsPerUser'
  | 'subscriptions'
  | 'webhookAttemptsInFlight';

const QUOTA_FIELDS = 'operationsPerSecond publishesPerSecond socketsPerUser subscriptions webhookAttemptsInFlight';

export const USAGE = `query Usage($orgId: ID!) {
  organizationUsage(orgId: $orgId) {
    orgId operationsPerSecond publishesPerSecond sockets subscriptions webhookAttemptsInFlight
    throttled { ${QUOTA_FIELDS} }
    limits { ${QUOTA_FIELDS} }
  }
}`;
