import { useCallback, useEffect, useMemo, useState } from 'preact/hooks';
import { createRequest } from '../graphql.js';
import { ME, type Viewer } from '../operations.js';
import { navigate, useRoute } from '../route.js';
import { storedToken, storeToken } from '../session.js';
import { useQuery } from '../use-query.js';
import { EndpointView } from './endpoint-view.js';
import { EndpointsView } from './endpoints-view.js';
import { ErrorNotice } from './error-notice.js';
import { SignIn } from './sign-in.js';
import { UsageView } from './usage-view.js';

/** The console: sign-in until there is a token, then the organisation's endpoints and their deliveries. */
export function App() {
  const [token, setToken] = useState(storedToken);
  const [signOutReason, setSignOutReason] = useState<string | undefined>(undefined);

  const signOut = useCallback((reason?: string) => {
    storeToken(undefined);
    setToken(undefined);
    setSignOutReason(reason);
    navigate({});
  }, []);

  if (!token) {
    return (
      <SignIn
        notice={signOutReason}
        onSignIn={(newToken) => {
          storeToken(newToken);
          setToken(newToken);
          setSignOutReason(undefined);
        }}
      />
    );
  }
  return <SignedIn token={token} onSignOut={signOut} />;
}

function SignedIn({ token, onSignOut }: { token: string; onSignOut: (reason?: string) => void }) {
  const request = useMemo(
    () => createRequest(token, (message) => onSignOut(`Signed out: ${message}`)),
    [token, onSignOut],
  );
  const route = useRoute();
  const me = useQuery(`me:${token}`, () => request<{ me: Viewer | null }>(ME), false);
  const viewer = me.data?.me;

  useEffect(() => {
    if (me.error?.code === 'UNAUTHENTICATED') onSignOut(`Signed out: ${me.error.message}`);
    else if (me.data && !me.data.me) onSignOut('That token names no user.');
  }, [me.error, me.data, onSignOut]);
  useEffect(() => {
    // One organisation: go straight to it.
    if (viewer && !route.orgId && viewer.orgs.length === 1) navigate({ orgId: viewer.orgs[0] });
  }, [viewer, route.orgId]);

  return (
    <div class="shell">
      <header class="topbar">
        <a class="brand" href="#/">
          Herald <span>console</span>
        </a>
        {viewer && (
          <label class="org-picker">
            Organisation
            <select
              aria-label="Organisation"
              value={route.orgId ?? ''}
              onChange={(event) => navigate({ orgId: (event.target as HTMLSelectElement).value || undefined })}
            >
              <option value="">Choose…</option>
              {viewer.orgs.map((org) => (
                <option key={org} value={org}>
                  {org}
                </option>
              ))}
            </select>
          </label>
        )}
        <span class="spacer" />
        {viewer && (
          <span class="viewer" title={viewer.id}>
            {viewer.name}
          </span>
        )}
        <button type="button" class="quiet" onClick={() => onSignOut()}>
          Sign out
        </button>
      </header>
      <main>
        {me.error && me.error.code !== 'UNAUTHENTICATED' && <ErrorNotice error={me.error} />}
        {viewer && !route.orgId && <OrgList orgs={viewer.orgs} />}
        {viewer && route.orgId && !route.endpointId && <EndpointsView request={request} orgId={route.orgId} />}
        {viewer && route.orgId && !route.endpointId && <UsageView request={request} orgId={route.orgId} />}
        {viewer && route.orgId && route.endpointId && (
          <EndpointView request={request} route={{ ...route, orgId: route.orgId, endpointId: route.endpointId }} />
        )}
      </main>
    </div>
  );
}

function OrgList({ orgs }: { orgs: string[] }) {
  if (orgs.length === 0) return <p class="empty">Your token names no organisation (claim `orgs`).</p>;
  return (
    <section>
      <h1>Organisations</h1>
      <ul class="org-list">
        {orgs.map((org) => (
          <li key={org}>
            <a href={`#/orgs/${encodeURIComponent(org)}`}>{org}</a>
          </li>
        ))}
      </ul>
    </section>
  );
}
