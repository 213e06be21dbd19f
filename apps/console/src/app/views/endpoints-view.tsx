import { useState } from 'preact/hooks';
import { formatRate, formatTime } from '../format.js';
import type { Request } from '../graphql.js';
import {
  CREATE_ENDPOINT,
  ENDPOINTS,
  type EndpointSummary,
  EVENT_TYPES as EVENT_TYPES_QUERY,
  type EventType,
  RECENT_ATTEMPTS,
} from '../operations.js';
import { formatRoute } from '../route.js';
import { useQuery } from '../use-query.js';
import { ErrorNotice } from './error-notice.js';
import { SecretNotice } from './secret-notice.js';
import { StatusBadge } from './status-badge.js';

/** Event types an endpoint can select (docs/webhooks.md, "Event types"). */
const EVENT_TYPES = ['post.published', 'webhook.endpoint.disabled', 'webhook.delivery.dead'];

/** An organisation's endpoints with status and recent success rate, and a form to add one. */
export function EndpointsView({ request, orgId }: { request: Request; orgId: string }) {
  const endpoints = useQuery(`endpoints:${orgId}`, () =>
    request<{ webhookEndpoints: EndpointSummary[] }>(ENDPOINTS, { orgId }),
  );
  const [created, setCreated] = useState<string | undefined>(undefined);
  const list = endpoints.data?.webhookEndpoints;

  return (
    <section>
      <h1>
        Webhook endpoints <small>{orgId}</small>
      </h1>
      {endpoints.error && <ErrorNotice error={endpoints.error} />}
      {created && <SecretNotice title="Endpoint created" secret={created} onDismiss={() => setCreated(undefined)} />}
      {list && list.length === 0 && <p class="empty">No endpoints yet: add one below.</p>}
      {list && list.length > 0 && (
        <table class="endpoints">
          <thead>
            <tr>
              <th>URL</th>
              <th>Status</th>
              <th title={`2xx answers among the latest ${RECENT_ATTEMPTS} attempts`}>Success rate</th>
              <th>Health</th>
              <th>Event types</th>
              <th>Created</th>
            </tr>
          </thead>
          <tbody>
            {list.map((endpoint) => (
              <tr key={endpoint.id} data-endpoint-id={endpoint.id}>
                <td>
                  <a href={formatRoute({ orgId, endpointId: endpoint.id })}>{endpoint.url}</a>
                </td>
                <td>
                  <StatusBadge status={endpoint.status} />
                </td>
                <td class="number success-rate">{formatRate(endpoint.successRate)}</td>
                <td>{describeHealth(endpoint)}</td>
                <td>
                  {endpoint.eventTypes.join(', ')}
                  {endpoint.filter && (
                    <div>
                      filter <code class="filter">{endpoint.filter}</code>
                    </div>
                  )}
                </td>
                <td>{formatTime(endpoint.createdAt)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <CreateEndpoint
        request={request}
        orgId={orgId}
        onCreated={(secret) => {
          setCreated(secret);
          void endpoints.refresh();
        }}
      />
      <EventCatalog request={request} />
    </section>
  );
}

function CreateEndpoint(props: { request: Request; orgId: string; onCreated: (secret: string) => void }) {
  const [url, setUrl] = useState('');
  const [types, setTypes] = useState<string[]>(['post.published']);
  const [filter, setFilter] = useState('');
  const [error, setError] = useState<Error | undefined>(undefined);
  const [busy, setBusy] = useState(false);

  const submit = async (event: Event) => {
    event.preventDefault();
    setBusy(true);
    setError(undefined);
    try {
      const { createWebhookEndpoint } = await props.request<{ createWebhookEndpoint: { secret: string } }>(
        CREATE_ENDPOINT,
        { input: { orgId: props.orgId, url: url.trim(), eventTypes: types, filter: filter.trim() || null } },
      );
      setUrl('');
      setFilter('');
      props.onCreated(createWebhookEndpoint.secret);
    } catch (caught) {
      setError(caught as Error);
    } finally {
      setBusy(false);
    }
  };

  return (
    <form class="create-endpoint" onSubmit={submit}>
      <h2>Add an endpoint</h2>
      <label>
        Receiver URL
        <input
          type="url"
          required
          placeholder="https://example.com/webhooks"
          value={url}
          onInput={(event) => setUrl((event.target as HTMLInputElement).value)}
        />
      </label>
      <fieldset>
        <legend>Event types</legend>
        {EVENT_TYPES.map((type) => (
          <label key={type} class="check">
            <input
              type="checkbox"
              checked={types.includes(type)}
              onChange={(event) =>
                setTypes((current) =>
                  (event.target as HTMLInputElement).checked
                    ? [...current, type]
                    : current.filter((selected) => selected !== type),
                )
              }
            />
            {type}
          </label>
        ))}
      </fieldset>
      <label>
        Filter (optional JSON the event body must contain)
        <textarea
          rows={2}
          placeholder='{"data":{"tags":["urgent"]}}'
          value={filter}
          onInput={(event) => setFilter((event.target as HTMLTextAreaElement).value)}
        />
      </label>
      {error && <ErrorNotice error={error} />}
      <button type="submit" disabled={busy || types.length === 0}>
        Add endpoint
      </button>
    </form>
  );
}

/** The event catalog: every type with what it means and an example body (docs/webhook-events.md). */
function EventCatalog({ request }: { request: Request }) {
  const catalog = useQuery('event-types', () => request<{ webhookEventTypes: EventType[] }>(EVENT_TYPES_QUERY), false);
  return (
    <details class="event-catalog">
      <summary>Event types and example bodies</summary>
      {catalog.error && <ErrorNotice error={catalog.error} />}
      {catalog.data?.webhookEventTypes.map((type) => (
        <section key={type.name} data-event-type={type.name}>
          <h3>
            <code>{type.name}</code>
          </h3>
          <p>{type.description}</p>
          <pre>{JSON.stringify(JSON.parse(type.example), null, 2)}</pre>
        </section>
      ))}
    </details>
  );
}

/** One line on how the endpoint is doing, beyond its status. */
export function describeHealth(endpoint: EndpointSummary): string {
  if (endpoint.status === 'DISABLED') return endpoint.disabledReason ?? 'disabled';
  if (endpoint.pausedUntil && Date.parse(endpoint.pausedUntil) > Date.now()) {
    return `slowed down until ${formatTime(endpoint.pausedUntil)}`;
  }
  if (endpoint.failingSince) return `failing since ${formatTime(endpoint.failingSince)}`;
  return 'healthy';
}
