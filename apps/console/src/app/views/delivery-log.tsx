import { useEffect, useState } from 'preact/hooks';
import { formatDuration, formatTime } from '../format.js';
import type { Request } from '../graphql.js';
import {
  type Attempt,
  DELIVERIES,
  DELIVERY_PAGE_SIZE,
  type Delivery,
  type DeliveryPage,
  type DeliveryStatus,
  REPLAY_DELIVERY,
} from '../operations.js';
import { formatRoute, type Route } from '../route.js';
import { useQuery } from '../use-query.js';
import { ErrorNotice } from './error-notice.js';
import { StatusBadge } from './status-badge.js';

const FILTERS: { label: string; status?: DeliveryStatus }[] = [
  { label: 'All deliveries' },
  { label: 'Pending', status: 'PENDING' },
  { label: 'Succeeded', status: 'SUCCEEDED' },
  { label: 'Dead letters', status: 'DEAD' },
  { label: 'Skipped', status: 'SKIPPED' },
];

interface Props {
  request: Request;
  route: Route & { orgId: string; endpointId: string };
  /** Changes when the endpoint view acted, so the log asks again at once. */
  version: number;
}

/** An endpoint's deliveries, newest first, one page at a time, each with every attempt. */
export function DeliveryLog({ request, route, version }: Props) {
  const { endpointId, status } = route;
  /** Cursors of the pages before the current one; the current page starts after the last. */
  const [cursors, setCursors] = useState<(string | null)[]>([null]);
  const after = cursors[cursors.length - 1] ?? null;
  const [filters, setFilters] = useState<SearchFilters>(NO_FILTERS);
  // A new filter or endpoint starts at the newest page again.
  useEffect(() => setCursors([null]), [endpointId, status, filters]);

  const key = `deliveries:${endpointId}:${status ?? ''}:${after ?? ''}:${JSON.stringify(filters)}`;
  const page = useQuery(key, async () => {
    const data = await request<{ webhookEndpoint: { deliveries: DeliveryPage } | null }>(DELIVERIES, {
      id: endpointId,
      first: DELIVERY_PAGE_SIZE,
      after,
      status: status ?? null,
      eventType: filters.eventType || null,
      eventId: filters.eventId || null,
      createdAfter: toInstant(filters.from),
      createdBefore: toInstant(filters.to),
    });
    return data.webhookEndpoint?.deliveries;
  });
  useEffect(() => {
    if (version > 0) void page.refresh();
  }, [version]);

  const edges = page.data?.edges ?? [];
  return (
    <div class="delivery-log">
      <nav class="tabs" aria-label="Delivery filter">
        {FILTERS.map((filter) => (
          <a
            key={filter.label}
            href={formatRoute({ ...route, status: filter.status })}
            aria-current={filter.status === status ? 'page' : undefined}
          >
            {filter.label}
          </a>
        ))}
      </nav>
      <SearchForm onSearch={setFilters} />
      {page.error && <ErrorNotice error={page.error} />}
      {page.data && edges.length === 0 && (
        <p class="empty">{status === 'DEAD' ? 'No dead letters.' : 'No deliveries here yet.'}</p>
      )}
      {edges.length > 0 && (
        <table class="deliveries">
          <thead>
            <tr>
              <th>Created</th>
              <th>Event</th>
              <th>Status</th>
              <th>Attempts</th>
              <th>Last response</th>
              <th>Next attempt</th>
              <th />
            </tr>
          </thead>
          {edges.map(({ node }) => (
            <DeliveryRows key={node.id} delivery={node} request={request} onReplayed={() => void page.refresh()} />
          ))}
        </table>
      )}
      <div class="pager">
        <button
          type="button"
          class="quiet"
          disabled={cursors.length <= 1}
          onClick={() => setCursors((current) => current.slice(0, -1))}
        >
          ← Newer
        </button>
        <button
          type="button"
          class="quiet"
          disabled={!page.data?.pageInfo.hasNextPage}
          onClick={() => setCursors((current) => [...current, page.data?.pageInfo.endCursor ?? null])}
        >
          Older →
        </button>
      </div>
    </div>
  );
}

interface SearchFilters {
  eventType: string;
  eventId: string;
  /** `datetime-local` values, in the browser's time zone. */
  from: string;
  to: string;
}

const NO_FILTERS: SearchFilters = { eventType: '', eventId: '', from: '', to: '' };

/** `2026-11-23T11:40` (local time) → ISO instant, or null when empty or invalid. */
function toInstant(local: string): string | null {
  if (!local) return null;
  const time = new Date(local).getTime();
  return Number.isNaN(time) ? null : new Date(time).toISOString();
}

/** Search by event type, event id and creation time; applied on submit, not on every keystroke. */
function SearchForm({ onSearch }: { onSearch: (filters: SearchFilters) => void }) {
  const [draft, setDraft] = useState<SearchFilters>(NO_FILTERS);
  const field = (name: keyof SearchFilters) => ({
    value: draft[name],
    onInput: (event: Event) => setDraft({ ...draft, [name]: (event.target as HTMLInputElement).value }),
  });
  return (
    <form
      class="filters"
      aria-label="Search deliveries"
      onSubmit={(event) => {
        event.preventDefault();
        onSearch({ ...draft, eventType: draft.eventType.trim(), eventId: draft.eventId.trim() });
      }}
    >
      <label>
        Event type
        <input placeholder="post.published" {...field('eventType')} />
      </label>
      <label>
        Event id
        <input placeholder="evt_…" {...field('eventId')} />
      </label>
      <label>
        Created from
        <input type="datetime-local" {...field('from')} />
      </label>
      <label>
        Created before
        <input type="datetime-local" {...field('to')} />
      </label>
      <button type="submit" class="quiet">
        Search
      </button>
      <button
        type="reset"
        class="quiet"
        onClick={() => {
          setDraft(NO_FILTERS);
          onSearch(NO_FILTERS);
        }}
      >
        Clear
      </button>
    </form>
  );
}

function DeliveryRows(props: { delivery: Delivery; request: Request; onReplayed: () => void }) {
  const { delivery } = props;
  /** Until the operator toggles it, a dead letter shows its attempts and any other delivery hides them. */
  const [toggled, setToggled] = useState<boolean | undefined>(undefined);
  const open = toggled ?? delivery.status === 'DEAD';
  const [error, setError] = useState<Error | undefined>(undefined);
  const last = delivery.attempts[delivery.attempts.length - 1];

  const replay = async () => {
    setError(undefined);
    try {
      await props.request(REPLAY_DELIVERY, { id: delivery.id });
      props.onReplayed();
    } catch (caught) {
      setError(caught as Error);
    }
  };

  return (
    <tbody class="delivery" data-delivery-id={delivery.id} data-status={delivery.status}>
      <tr>
        <td>{formatTime(delivery.createdAt)}</td>
        <td>
          <div>{delivery.eventType}</div>
          <code class="muted">{delivery.eventId}</code>
        </td>
        <td>
          <StatusBadge status={delivery.status} />
        </td>
        <td class="number">{delivery.attempts.length}</td>
        <td>{last ? describeAttempt(last) : '—'}</td>
        <td>
          {delivery.status === 'PENDING' && !delivery.nextAttemptAt ? (
            // A FIFO endpoint's delivery waiting for the ones before it.
            <span class="muted">in line</span>
          ) : (
            formatTime(delivery.nextAttemptAt)
          )}
        </td>
        <td>
          <div class="row-actions">
            {delivery.attempts.length > 0 && (
              <button type="button" class="quiet" aria-expanded={open} onClick={() => setToggled(!open)}>
                {open ? 'Hide attempts' : 'Attempts'}
              </button>
            )}
            {delivery.status !== 'PENDING' && (
              <button type="button" class="quiet" onClick={replay}>
                Replay
              </button>
            )}
          </div>
        </td>
      </tr>
      {error && (
        <tr>
          <td colSpan={7}>
            <ErrorNotice error={error} />
          </td>
        </tr>
      )}
      {open && (
        <tr class="attempts-row">
          <td colSpan={7}>
            <table class="attempts">
              <thead>
                <tr>
                  <th>At</th>
                  <th>Status code</th>
                  <th>Duration</th>
                  <th>Error</th>
                  <th>Response body</th>
                </tr>
              </thead>
              <tbody>
                {delivery.attempts.map((attempt, index) => (
                  <tr key={`${attempt.at}-${index}`} class="attempt">
                    <td>{formatTime(attempt.at)}</td>
                    <td class="number status-code">{attempt.statusCode ?? '—'}</td>
                    <td class="number">{formatDuration(attempt.durationMs)}</td>
                    <td class="attempt-error">{attempt.error ?? ''}</td>
                    <td>{attempt.responseBody ? <pre class="response-body">{attempt.responseBody}</pre> : ''}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </td>
        </tr>
      )}
    </tbody>
  );
}

function describeAttempt(attempt: Attempt): string {
  if (attempt.statusCode !== null) return `HTTP ${attempt.statusCode} in ${formatDuration(attempt.durationMs)}`;
  return attempt.error ?? 'no response';
}
