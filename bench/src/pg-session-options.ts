/**
 * A PostgreSQL connection URL whose sessions also get `settings` (libpq's `options`, e.g.
 * `-c log_min_duration_statement=0`), after whatever `options` the URL already has (a schema's
 * `-c search_path=…` stays). Empty `settings` leave the URL as it was.
 */
export function withSessionSettings(url: string, settings: string | undefined): string {
  if (!settings?.trim()) return url;
  const withSettings = new URL(url);
  withSettings.searchParams.set('options', `${withSettings.searchParams.get('options') ?? ''} ${settings}`.trim());
  return withSettings.toString();
}
