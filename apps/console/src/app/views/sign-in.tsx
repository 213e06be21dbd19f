import { useState } from 'preact/hooks';
import { createRequest, type GraphQLRequestError } from '../graphql.js';
import { ME, type Viewer } from '../operations.js';
import { developmentToken, normalizeToken } from '../session.js';
import { ErrorNotice } from './error-notice.js';

/** Paste a token (a JWT the API accepts); it is checked with `me` before the console keeps it. */
export function SignIn({ notice, onSignIn }: { notice?: string; onSignIn: (token: string) => void }) {
  const devToken = developmentToken();
  const [input, setInput] = useState(devToken ?? '');
  const [error, setError] = useState<GraphQLRequestError | Error | undefined>(undefined);
  const [busy, setBusy] = useState(false);

  const submit = async (event: Event) => {
    event.preventDefault();
    const token = normalizeToken(input);
    if (!token) return setError(new Error('Paste a token first.'));
    setBusy(true);
    try {
      const { me } = await createRequest(token)<{ me: Viewer | null }>(ME);
      if (!me) throw new Error('That token names no user.');
      onSignIn(token);
    } catch (caught) {
      setError(caught as Error);
    } finally {
      setBusy(false);
    }
  };

  return (
    <div class="sign-in">
      <form onSubmit={submit}>
        <h1>
          Herald <span>console</span>
        </h1>
        <p>Webhook endpoints, deliveries and dead letters of your organisations.</p>
        {notice && <p class="notice">{notice}</p>}
        <label for="token">Access token (JWT)</label>
        <textarea
          id="token"
          rows={5}
          spellcheck={false}
          autocomplete="off"
          placeholder="eyJhbGciOi…"
          value={input}
          onInput={(event) => setInput((event.target as HTMLTextAreaElement).value)}
        />
        {devToken && <p class="hint">Pre-filled with the development token of this embedded server.</p>}
        {error && <ErrorNotice error={error} />}
        <button type="submit" disabled={busy}>
          {busy ? 'Signing in…' : 'Sign in'}
        </button>
      </form>
    </div>
  );
}
