import type { DeliveryStatus, EndpointStatus } from '../operations.js';

export function StatusBadge({ status }: { status: EndpointStatus | DeliveryStatus }) {
  return <span class={`badge badge-${status.toLowerCase()}`}>{status}</span>;
}
