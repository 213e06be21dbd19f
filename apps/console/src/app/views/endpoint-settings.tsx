import { useState } from 'preact/hooks';
import type { Request } from '../graphql.js';
import { type EndpointDetail, SET_ORDERING, SET_RATE_LIMIT } from '../operations.js';

/** What the endpoint view's actions run: a change, then the notice to show (the view refreshes after). */
export type Act = (run: () => Promise<string | undefined>) => Promise<void>;

/** The endpoint's filter and rate limit, as facts of its view (inside its `<dl>`). */
export function EndpointSettingsFacts({ endpoint }: { endpoint: EndpointDetail }) {
  return (
    <>
      <dt>Filter</dt>
      <dd data-testid="filter">
        {endpoint.filter ? <code class="filter">{endpoint.filter}</code> : 'None: every event of its types'}
      </dd>
      <dt>Rate limit</dt>
      <dd data-testid="rate-limit">
        {endpoint.rateLimitPerSecond === null
          ? 'None'
          : `${endpoint.rateLimitPerSecond} ${endpoint.rateLimitPerSecond === 1 ? 'attempt' : 'attempts'} a second, across dispatchers (more wait, none fail)`}
      </dd>
    </>
  );
}

/**
 * The operator's changes to an endpoint's delivery settings: its rate limit (set or removed) and its
 * ordering. The API checks the values: a refused one shows as the view's error, nothing changed.
 */
export function EndpointSettingsActions(props: {
  endpoint: EndpointDetail;
  request: Request;
  act: Act;
  busy: boolean;
}) {
  const { endpoint, request, act, busy } = props;
  const [rate, setRate] = useState('');
  const id = endpoint.id;
  const fifo = endpoint.ordering === 'FIFO';
  return (
    <div class="actions" role="toolbar" aria-label="Delivery settings">
      <span class="inline-form">
        <input
          type="number"
          min={1}
          step={1}
          aria-label="Attempts per second"
          placeholder="Attempts/s"
          value={rate}
          onInput={(event) => setRate((event.target as HTMLInputElement).value)}
        />
        <button
          type="button"
          disabled={busy || rate.trim() === ''}
          onClick={() =>
            act(async () => {
              // The API refuses anything but a whole number in its range, in one line.
              const value = Number(rate.trim());
              await request(SET_RATE_LIMIT, { id, rate: value });
              setRate('');
              return `Rate limit set: at most ${value} attempts a second.`;
            })
          }
        >
          Set rate limit
        </button>
      </span>
      {endpoint.rateLimitPerSecond !== null && (
        <button
          type="button"
          disabled={busy}
          onClick={() =>
            act(async () => {
              await request(SET_RATE_LIMIT, { id, rate: null });
              return 'Rate limit removed.';
            })
          }
        >
          Remove rate limit
        </button>
      )}
      <button
        type="button"
        disabled={busy}
        onClick={() =>
          act(async () => {
            await request(SET_ORDERING, { id, ordering: fifo ? 'UNORDERED' : 'FIFO' });
            return fifo
              ? 'Unordered: every waiting delivery may go at once.'
              : 'FIFO: deliveries made from now on go one at a time, in event order.';
          })
        }
      >
        {fifo ? 'Switch to unordered' : 'Switch to FIFO'}
      </button>
    </div>
  );
}
