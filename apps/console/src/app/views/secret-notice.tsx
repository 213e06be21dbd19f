/** A signing secret, shown once: the API never returns it again. */
export function SecretNotice({ title, secret, onDismiss }: { title: string; secret: string; onDismiss: () => void }) {
  return (
    <div class="notice secret" role="status">
      <strong>{title}</strong>
      <p>Copy it now: Herald shows a signing secret only once.</p>
      <code class="secret-value" data-testid="secret">
        {secret}
      </code>
      <div class="actions">
        <button type="button" class="quiet" onClick={() => void navigator.clipboard?.writeText(secret)}>
          Copy
        </button>
        <button type="button" class="quiet" onClick={onDismiss}>
          I stored it
        </button>
      </div>
    </div>
  );
}
