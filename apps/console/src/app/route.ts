import { useEffect, useState } from 'preact/hooks';
import type { DeliveryStatus } from './operations.js';

/** Where the console is, kept in the URL's hash so a view can be reloaded and linked. */
export interface Route {
  orgId?: string;
  endpointId?: string;
  /** Delivery log filter; `DEAD` is the dead-letter view. */
  status?: DeliveryStatus;
}

const STATUSES: readonly string[] = ['PENDING', 'SUCCEEDED', 'DEAD', 'SKIPPED'];

/** `#/orgs/<org>/endpoints/<id>?status=DEAD` → route; anything unrecognised is dropped. */
export function parseRoute(hash: string): Route {
  const [path = '', query = ''] = hash.replace(/^#/, '').split('?');
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  const route: Route = {};
  if (parts[0] === 'orgs' && parts[1]) route.orgId = parts[1];
  if (route.orgId && parts[2] === 'endpoints' && parts[3]) route.endpointId = parts[3];
  const status = new URLSearchParams(query).get('status');
  if (route.endpointId && status && STATUSES.includes(status)) route.status = status as DeliveryStatus;
  return route;
}

export function formatRoute(route: Route): string {
  if (!route.orgId) return '#/';
  let hash = `#/orgs/${encodeURIComponent(route.orgId)}`;
  if (route.endpointId) hash += `/endpoints/${encodeURIComponent(route.endpointId)}`;
  if (route.endpointId && route.status) hash += `?status=${route.status}`;
  return hash;
}

export function navigate(route: Route): void {
  location.hash = formatRoute(route);
}

/** The current route, following hash changes (back/forward, links). */
export function useRoute(): Route {
  const [route, setRoute] = useState(() => parseRoute(location.hash));
  useEffect(() => {
    const update = () => setRoute(parseRoute(location.hash));
    addEventListener('hashchange', update);
    return () => removeEventListener('hashchange', update);
  }, []);
  return route;
}
