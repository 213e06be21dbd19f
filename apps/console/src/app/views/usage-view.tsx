import type { Request } from '../graphql.js';
import { type OrganizationUsage, type QuotaName, USAGE } from '../operations.js';
import { useQuery } from '../use-query.js';
import { ErrorNotice } from './error-notice.js';

/** The quotas in the order the table shows them, with what "used" means for each. */
const ROWS: ReadonlyArray<{ quota: QuotaName; label: string; used: (usage: OrganizationUsage) => number }> = [
  { quota: 'operationsPerSecond', label: 'Operations per second', used: (usage) => usage.operationsPerSecond },
  { quota: 'publishesPerSecond', label: 'Publishes per second', used: (usage) => usage.publishesPerSecond },
  { quota: 'socketsPerUser', label: 'Open sockets (limit per user)', used: (usage) => usage.sockets },
  { quota: 'subscriptions', label: 'Active subscriptions', used: (usage) => usage.subscriptions },
  {
    quota: 'webhookAttemptsInFlight',
    label: 'Webhook attempts in flight',
    used: (usage) => usage.webhookAttemptsInFlight,
  },
];

/**
 * An organisation's usage against its quotas (docs/tenancy.md), refreshed with the view: what it uses
 * now, the limit it is held to (an override or the default; 0 is none) and how many times it was
 * refused or held back, so a throttled tenant is seen at a glance.
 */
export function UsageView({ request, orgId }: { request: Request; orgId: string }) {
  const usage = useQuery(`usage:${orgId}`, () => request<{ organizationUsage: OrganizationUsage }>(USAGE, { orgId }));
  const data = usage.data?.organizationUsage;
  return (
    <section class="usage">
      <h2>Usage and quotas</h2>
      {usage.error && <ErrorNotice error={usage.error} />}
      {data && (
        <table class="usage">
          <thead>
            <tr>
              <th>Quota</th>
              <th>Used now</th>
              <th>Limit</th>
              <th title="Refusals counted for the organisation (forgotten a day after its last one); webhook attempts are delayed, never refused">
                Throttled
              </th>
            </tr>
          </thead>
          <tbody>
            {ROWS.map((row) => {
              const limit = data.limits[row.quota];
              const throttled = data.throttled[row.quota];
              return (
                <tr key={row.quota} data-quota={row.quota} class={throttled > 0 ? 'throttled' : undefined}>
                  <td>{row.label}</td>
                  <td class="number used">{row.used(data)}</td>
                  <td class="number limit">{limit === 0 ? 'none' : limit}</td>
                  <td class="number refused">{throttled}</td>
                </tr>
              );
            })}
          </tbody>
        </table>
      )}
    </section>
  );
}
