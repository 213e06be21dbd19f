import { useState } from 'preact/hooks';
import { formatRate, formatTime } from '../format.js';
import type { Request } from '../graphql.js';
import {
  DELETE_ENDPOINT,
  DISABLE_ENDPOINT,
  ENABLE_ENDPOINT,
  ENDPOINT,
  type EndpointDetail,
  GIVE_UP_DELIVERY,
  RECENT_ATTEMPTS,
  REPLAY_DEAD,
  ROTATE_SECRET,
  SEND_TEST,
} from '../operations.js';
import { navigate, type Route } from '../route.js';
import { useQuery } from '../use-query.js';
import { DeliveryLog } from './delivery-log.js';
import { type Act, EndpointSettingsActions, EndpointSettingsFacts } from './endpoint-settings.js';
import { describeHealth } from './endpoints-view.js';
import { ErrorNotice } from './error-notice.js';
import { SecretNotice } from './secret-notice.js';
import { StatusBadge } from './status-badge.js';

type EndpointRoute = Route & { orgId: string; endpointId: string };

/** One endpoint: its health, the operator's actions, and its delivery log (or dead letters). */
export function EndpointView({ request, route }: { request: Request; route: EndpointRoute }) {
  const { endpointId, orgId } = route;
  const endpoint = useQuery(`endpoint:${endpointId}`, () =>
    request<{ webhookEndpoint: EndpointDetail | null }>(ENDPOINT, { id: endpointId }),
  );
  const [notice, setNotice] = useState<string | undefined>(undefined);
  const [secret, setSecret] = useState<string | undefined>(undefined);
  const [error, setError] = useState<Error | undefined>(undefined);
  const [busy, setBusy] = useState(false);
  const [reason, setReason] = useState('');
  /** Bumped after an action so the delivery log asks again at once. */
  const [logVersion, setLogVersion] = useState(0);

  const act = async (run: () => Promise<string | undefined>) => {
    setBusy(true);
    setError(undefined);
    setNotice(undefined);
    try {
      setNotice(await run());
      await endpoint.refresh();
      setLogVersion((version) => version + 1);
    } catch (caught) {
      setError(caught as Error);
    } finally {
      setBusy(false);
    }
  };

  const data = endpoint.data?.webhookEndpoint;
  if (endpoint.data && !data) {
    return <p class="empty">No such endpoint in {orgId} (it may have been deleted).</p>;
  }
  const id = { id: endpointId };
  return (
    <section>
      <p class="crumbs">
        <a href={`#/orgs/${encodeURIComponent(orgId)}`}>← Endpoints of {orgId}</a>
      </p>
      {endpoint.error && <ErrorNotice error={endpoint.error} />}
      {data && (
        <>
          <h1 class="endpoint-title">
            <span class="url">{data.url}</span> <StatusBadge status={data.status} />
          </h1>
          <dl class="facts">
            <dt>Success rate</dt>
            <dd data-testid="success-rate">
              {formatRate(data.successRate)} <span class="muted">of the latest {RECENT_ATTEMPTS} attempts</span>
            </dd>
            <dt>Health</dt>
            <dd data-testid="health">{describeHealth(data)}</dd>
            <dt>Event types</dt>
            <dd>{data.eventTypes.join(', ')}</dd>
            <dt>Ordering</dt>
            <dd data-testid="ordering">
              {data.ordering === 'FIFO' ? 'FIFO: one at a time, in event order' : 'Unordered'}
            </dd>
            {data.fifoHead && <FifoHead head={data.fifoHead} request={request} act={act} busy={busy} />}
            <EndpointSettingsFacts endpoint={data} />
            <dt>Created</dt>
            <dd>{formatTime(data.createdAt)}</dd>
            {data.status === 'DISABLED' && (
              <>
                <dt>Disabled at</dt>
                <dd>{formatTime(data.disabledAt)}</dd>
              </>
            )}
          </dl>
          <div class="actions" role="toolbar" aria-label="Endpoint actions">
            <button
              type="button"
              disabled={busy}
              onClick={() =>
                act(async () => {
                  const { sendTestWebhook } = await request<{ sendTestWebhook: { eventId: string } }>(SEND_TEST, id);
                  return `Test event ${sendTestWebhook.eventId} sent.`;
                })
              }
            >
              Send test event
            </button>
            {data.status === 'ENABLED' ? (
              <span class="inline-form">
                <input
                  aria-label="Reason for disabling"
                  placeholder="Reason (optional)"
                  maxLength={500}
                  value={reason}
                  onInput={(event) => setReason((event.target as HTMLInputElement).value)}
                />
                <button
                  type="button"
                  disabled={busy}
                  onClick={() =>
                    act(async () => {
                      await request(DISABLE_ENDPOINT, { id: endpointId, reason: reason.trim() || null });
                      setReason('');
                      return 'Endpoint disabled: new events are recorded as SKIPPED.';
                    })
                  }
                >
                  Disable
                </button>
              </span>
            ) : (
              <button
                type="button"
                disabled={busy}
                onClick={() =>
                  act(async () => {
                    await request(ENABLE_ENDPOINT, id);
                    return 'Endpoint enabled.';
                  })
                }
              >
                Enable
              </button>
            )}
            <button
              type="button"
              disabled={busy}
              onClick={() =>
                act(async () => {
                  const { replayDeadWebhookDeliveries: count } = await request<{ replayDeadWebhookDeliveries: number }>(
                    REPLAY_DEAD,
                    id,
                  );
                  return count === 0 ? 'No dead letters to replay.' : `Replaying ${count} dead letters.`;
                })
              }
            >
              Replay dead letters
            </button>
            <button
              type="button"
              disabled={busy}
              onClick={() =>
                act(async () => {
                  const { rotateWebhookSecret } = await request<{ rotateWebhookSecret: { secret: string } }>(
                    ROTATE_SECRET,
                    id,
                  );
                  setSecret(rotateWebhookSecret.secret);
                  return 'Secret rotated: the previous one keeps signing for 24 h.';
                })
              }
            >
              Rotate secret
            </button>
            <button
              type="button"
              class="danger"
              disabled={busy}
              onClick={() => {
                if (!confirm(`Delete ${data.url} and its delivery history?`)) return;
                void act(async () => {
                  await request(DELETE_ENDPOINT, id);
                  navigate({ orgId });
                  return undefined;
                });
              }}
            >
              Delete
            </button>
          </div>
          <EndpointSettingsActions endpoint={data} request={request} act={act} busy={busy} />
          {notice && (
            <p class="notice" role="status">
              {notice}
            </p>
          )}
          {error && <ErrorNotice error={error} />}
          {secret && <SecretNotice title="New signing secret" secret={secret} onDismiss={() => setSecret(undefined)} />}
          <DeliveryLog request={request} route={route} version={logVersion} />
        </>
      )}
    </section>
  );
}

/** The head of a FIFO endpoint's line: the delivery the others wait for, and how many do. */
function FifoHead(props: { head: NonNullable<EndpointDetail['fifoHead']>; request: Request; act: Act; busy: boolean }) {
  const { head, request, act, busy } = props;
  const { delivery, heldBack } = head;
  const last = delivery.attempts.at(-1);
  return (
    <>
      <dt>Head of the line</dt>
      <dd data-testid="fifo-head">
        <code>{delivery.eventId}</code> ({delivery.eventType}), {delivery.attempts.length}{' '}
        {delivery.attempts.length === 1 ? 'attempt' : 'attempts'}
        {last && ` (last: ${last.statusCode ?? last.error ?? 'no answer'})`}
        {delivery.nextAttemptAt && `, next at ${formatTime(delivery.nextAttemptAt)}`}
        <br />
        <span class={heldBack > 0 ? 'warning' : 'muted'}>
          holds back {heldBack} {heldBack === 1 ? 'delivery' : 'deliveries'}
        </span>{' '}
        {delivery.attempts.length > 0 && (
          <button
            type="button"
            disabled={busy}
            onClick={() => {
              if (!confirm(`Stop retrying ${delivery.eventId}? It becomes a dead letter and the next delivery goes.`))
                return;
              void act(async () => {
                await request(GIVE_UP_DELIVERY, { id: delivery.id });
                return `Gave up on ${delivery.eventId}: it is a dead letter now, and the next in line goes.`;
              });
            }}
          >
            Give up on it
          </button>
        )}
      </dd>
    </>
  );
}
