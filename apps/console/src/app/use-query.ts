import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import { GraphQLRequestError } from './graphql.js';

/** How often an open view asks again, so deliveries and attempts appear as the dispatcher makes them. */
export const REFRESH_INTERVAL_MS = 2_000;

export interface QueryState<T> {
  data: T | undefined;
  error: GraphQLRequestError | undefined;
  loading: boolean;
  /** Asks again now (after a mutation). */
  refresh: () => Promise<void>;
}

/**
 * Runs `load` now, whenever `key` changes, and every {@link REFRESH_INTERVAL_MS} while the tab is visible.
 * A failed refresh keeps the last data and shows the error; a slow answer never overtakes a newer one.
 */
export function useQuery<T>(key: string, load: () => Promise<T>, poll = true): QueryState<T> {
  const [data, setData] = useState<T | undefined>(undefined);
  const [error, setError] = useState<GraphQLRequestError | undefined>(undefined);
  const [loading, setLoading] = useState(true);
  const generation = useRef(0);
  const loadRef = useRef(load);
  loadRef.current = load;

  const refresh = useCallback(async () => {
    const mine = ++generation.current;
    try {
      const result = await loadRef.current();
      if (mine !== generation.current) return;
      setData(result);
      setError(undefined);
    } catch (caught) {
      if (mine !== generation.current) return;
      setError(
        caught instanceof GraphQLRequestError
          ? caught
          : new GraphQLRequestError(String(caught), 'INTERNAL_SERVER_ERROR'),
      );
    } finally {
      if (mine === generation.current) setLoading(false);
    }
  }, []);

  useEffect(() => {
    setData(undefined);
    setLoading(true);
    void refresh();
    if (!poll) return;
    const timer = setInterval(() => {
      if (document.visibilityState === 'visible') void refresh();
    }, REFRESH_INTERVAL_MS);
    return () => clearInterval(timer);
  }, [key, poll, refresh]);

  return { data, error, loading, refresh };
}
