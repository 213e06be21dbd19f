import { performance } from 'node:perf_hooks';
import { LRUCache } from 'lru-cache';
import { errors, Pool } from 'undici';
import { createGuardedLookup, parseWebhookUrl, RefusedUrlError, type UrlPolicy } from './url-policy.js';

/** Idle keep-alive connections to a receiver are closed after this long. */
const KEEP_ALIVE_TIMEOUT_MS = 30_000;
/** How much of a response body is read (and thrown away) so the connection can be reused. */
const MAX_RESPONSE_BODY_BYTES = 64 * 1024;
/** How much of the receiver's answer is kept in the attempt's history (`response_body` in `webhook_attempt_log`). */
export const KEPT_RESPONSE_BODY_BYTES = 1_024;
/** Sent as `User-Agent`, so receivers can tell Herald's deliveries apart. */
export const WEBHOOK_USER_AGENT = 'Herald-Webhooks/1.0 (+https://github.com/herald)';
/** Parsed, checked URLs kept (the same few endpoint URLs come back for every delivery). */
const MAX_CACHED_URLS = 1_000;

/** The result of one delivery attempt. Every failure is a value: `deliver` never throws. */
export interface DeliveryOutcome {
  /** True for a 2xx answer, the only acknowledgement. */
  ok: boolean;
  /** The response status; null when no response arrived. */
  statusCode: number | null;
  /** From the start of the attempt until the answer (or the failure). */
  durationMs: number;
  /** Why the attempt failed, for the delivery history; null on success. */
  error: string | null;
  /** The response's `Retry-After` header, for the retry policy. */
  retryAfter: string | null;
  /** The first bytes of the answer (at most {@link KEPT_RESPONSE_BODY_BYTES}, valid UTF-8, no NUL). */
  responseBody?: string | null;
}

export interface DeliveryRequest {
  /** Connections are pooled per endpoint: one receiver's slowness never holds another's connections. */
  endpointId: string;
  url: string;
  /** The exact bytes that were signed. */
  body: string;
  /** The signed headers (`signWebhook`). */
  headers: Record<string, string>;
}

export interface DelivererOptions {
  /** Gives up on an attempt after this long, connection included (`WEBHOOK_TIMEOUT_MS`). */
  timeoutMs: number;
  /** Which addresses receivers may have; checked on the address actually connected to. */
  policy: UrlPolicy;
  /** Most connections open to one endpoint at once. @default 10 */
  connectionsPerEndpoint?: number;
}

export interface Deliverer {
  /** One POST; never follows a redirect, never throws. */
  deliver(request: DeliveryRequest): Promise<DeliveryOutcome>;
  /** Closes the keep-alive connections. */
  close(): Promise<void>;
}

/**
 * One HTTP attempt per call. Each endpoint gets its own undici `Pool` (keep-alive connections to its
 * origin): repeated deliveries to an endpoint reuse their connections, and a slow receiver only ties up
 * its own pool, even when other endpoints live on the same host. Pools unused for a while are closed.
 * Every new connection resolves the host through the guarded lookup: the address checked is the
 * address connected to (no DNS rebinding between check and connect).
 *
 * Per request it does what a raw keep-alive POST loop does and little more: the URL is parsed and
 * checked once per distinct URL (cached), the pool is found by endpoint and origin, the request goes
 * to undici's `dispatch` with one small handler (no response stream or promise of undici's), and the
 * attempt's deadline is kept in one list swept by one timer (no timer or abort signal per attempt).
 */
export function createDeliverer(options: DelivererOptions): Deliverer {
  const { timeoutMs, policy } = options;
  const lookup = createGuardedLookup(policy);
  const pools = new Map<string, { pool: Pool; usedAt: number }>();
  const urls = new LRUCache<string, { origin: string; path: string } | { refused: string }>({ max: MAX_CACHED_URLS });
  const parse = (raw: string) => {
    let parsed = urls.get(raw);
    if (!parsed) {
      const checked = parseWebhookUrl(raw, policy);
      parsed =
        'refused' in checked
          ? checked
          : { origin: checked.url.origin, path: checked.url.pathname + checked.url.search };
      urls.set(raw, parsed);
    }
    return parsed;
  };
  const poolFor = (endpointId: string, origin: string): Pool => {
    // Keyed by origin too: an endpoint whose URL changed gets a pool for its new origin.
    const key = `${endpointId} ${origin}`;
    let entry = pools.get(key);
    if (!entry) {
      const pool = new Pool(origin, {
        connections: options.connectionsPerEndpoint ?? 10,
        keepAliveTimeout: KEEP_ALIVE_TIMEOUT_MS,
        // Off: the attempt's own deadline (below) governs the whole attempt. undici's header and body
        // timers fire in the timers phase, before the poll phase reads the socket, so after a stall of
        // this process they would throw away an answer that arrived in time. (The connect timeout
        // already lets pending I/O run first.)
        headersTimeout: 0,
        bodyTimeout: 0,
        connect: { timeout: timeoutMs, lookup },
      });
      entry = { pool, usedAt: Date.now() };
      pools.set(key, entry);
    }
    entry.usedAt = Date.now();
    return entry.pool;
  };
  const sweep = setInterval(() => {
    const idleSince = Date.now() - 2 * KEEP_ALIVE_TIMEOUT_MS;
    for (const [key, entry] of pools) {
      if (entry.usedAt < idleSince) {
        pools.delete(key);
        void entry.pool.close();
      }
    }
  }, KEEP_ALIVE_TIMEOUT_MS);
  sweep.unref();

  // Attempts in flight, oldest first (every attempt gets the same timeout, so the order of starting is
  // the order of their deadlines); one timer aborts those past their deadline.
  const inFlight = new Set<Attempt>();
  let deadlineTimer: NodeJS.Timeout | undefined;
  const abort = (expired: readonly Attempt[]) => {
    for (const attempt of expired) attempt.abort(new DOMException('The attempt timed out', 'TimeoutError'));
  };
  const checkDeadlines = () => {
    deadlineTimer = undefined;
    const now = performance.now();
    const expired: Attempt[] = [];
    for (const attempt of inFlight) {
      if (attempt.deadline > now) {
        deadlineTimer = setTimeout(checkDeadlines, Math.max(1, attempt.deadline - now));
        deadlineTimer.unref();
        break;
      }
      inFlight.delete(attempt);
      expired.push(attempt);
    }
    // Aborted after the poll phase (setImmediate), not in this timer: when this process was stalled
    // (CPU starvation, a long GC or synchronous stretch) past a deadline, an answer that arrived
    // meanwhile is still unread in the socket. Aborting now would record that attempt as timed out and
    // POST the delivery again although the receiver had answered 2xx; once its status is read, the
    // abort only cuts the (bounded) body read and the outcome stays the answer's.
    if (expired.length > 0) setImmediate(abort, expired);
  };

  return {
    deliver({ endpointId, url, body, headers }) {
      const started = performance.now();
      // An IP-literal host is connected to without any lookup, so it is checked here.
      const parsed = parse(url);
      if ('refused' in parsed) {
        return Promise.resolve({
          ok: false,
          statusCode: null,
          durationMs: Math.round(performance.now() - started),
          error: `refused: ${parsed.refused}`,
          retryAfter: null,
        });
      }
      const flat: string[] = [];
      for (const name in headers) {
        // Ours is the one User-Agent sent (a caller's would make it two).
        if (name.length === 10 && name.toLowerCase() === 'user-agent') continue;
        flat.push(name, headers[name] as string);
      }
      flat.push('User-Agent', WEBHOOK_USER_AGENT);
      return new Promise<DeliveryOutcome>((resolve) => {
        const attempt = new Attempt(started, started + timeoutMs, timeoutMs, (outcome) => {
          inFlight.delete(attempt);
          resolve(outcome);
        });
        inFlight.add(attempt);
        if (!deadlineTimer) {
          deadlineTimer = setTimeout(checkDeadlines, timeoutMs);
          deadlineTimer.unref();
        }
        // `dispatch` with a handler of our own, not `request`: no response stream, promise, abort
        // signal or header object per attempt (the answer's status, Retry-After and first KiB are all
        // an attempt keeps).
        try {
          poolFor(endpointId, parsed.origin).dispatch(
            { path: parsed.path, method: 'POST', headers: flat, body },
            attempt,
          );
        } catch (error) {
          // deliver() never throws: a pool that cannot be made or a request undici refuses is an outcome.
          attempt.onError(error as Error);
        }
      });
    },
    async close() {
      clearInterval(sweep);
      if (deadlineTimer) clearTimeout(deadlineTimer);
      const all = [...pools.values()];
      pools.clear();
      await Promise.all(all.map((entry) => entry.pool.close()));
    },
  };
}

/**
 * The start of a response body: keeps its first {@link KEPT_RESPONSE_BODY_BYTES}, counts the rest
 * (reading stops at {@link MAX_RESPONSE_BODY_BYTES}).
 */
class ResponseStart {
  private kept: Uint8Array[] = [];
  private keptBytes = 0;
  /** Bytes read so far. */
  readBytes = 0;
  /** Takes a chunk; false once {@link MAX_RESPONSE_BODY_BYTES} have been read (stop reading). */
  add(chunk: Uint8Array): boolean {
    if (this.keptBytes < KEPT_RESPONSE_BODY_BYTES) {
      const slice = chunk.subarray(0, KEPT_RESPONSE_BODY_BYTES - this.keptBytes);
      this.kept.push(slice);
      this.keptBytes += slice.length;
    }
    this.readBytes += chunk.length;
    return this.readBytes < MAX_RESPONSE_BODY_BYTES;
  }
  /**
   * The kept bytes as text: a character cut by the limit is dropped (the decoder holds it back),
   * invalid bytes become U+FFFD, NUL is removed (PostgreSQL text refuses it). Null when empty.
   */
  text(): string | null {
    if (this.keptBytes === 0) return null;
    const text = new TextDecoder('utf-8').decode(Buffer.concat(this.kept), { stream: true }).replaceAll('\u0000', '');
    return text.length > 0 ? text : null;
  }
}

/**
 * Reads up to {@link MAX_RESPONSE_BODY_BYTES} of a response (so its connection can be reused) and
 * returns its first {@link KEPT_RESPONSE_BODY_BYTES} as text: a character cut by the limit is dropped
 * (the decoder holds it back), invalid bytes become U+FFFD, NUL is removed (PostgreSQL text refuses it).
 * @returns null for an empty or unreadable body
 */
export async function readResponseStart(
  body: AsyncIterable<Uint8Array> & { destroy(): unknown },
  signal: { readonly aborted: boolean },
): Promise<string | null> {
  const start = new ResponseStart();
  try {
    for await (const chunk of body) {
      if (signal.aborted) break;
      if (!start.add(chunk)) {
        body.destroy();
        break;
      }
    }
  } catch {
    // A body cut short keeps what arrived.
  }
  return start.text();
}

/**
 * One attempt, as undici's dispatch handler (its core callbacks, no adapter in between): it keeps the
 * final status, `Retry-After` of a non-2xx answer and the start of the body, and settles once with the
 * outcome. Its deadline is kept by the deliverer's sweep, which calls {@link abort}.
 */
class Attempt {
  private abortRequest: ((reason: Error) => void) | undefined;
  private reason: Error | undefined;
  private statusCode: number | null = null;
  private retryAfter: string | null = null;
  private body: ResponseStart | undefined;
  private settled = false;
  constructor(
    private readonly started: number,
    readonly deadline: number,
    private readonly timeoutMs: number,
    private readonly settle: (outcome: DeliveryOutcome) => void,
  ) {}

  /** The deadline passed: a request not yet on a connection is never sent; one in flight is cut. */
  abort(reason: Error): void {
    if (this.settled) return;
    if (this.abortRequest) {
      this.abortRequest(reason);
      return;
    }
    // Still queued in the pool: undici calls `onConnect` before writing it, and that aborts it.
    this.reason = reason;
    this.fail(reason);
  }

  onConnect(abort: (reason: Error) => void): void {
    if (this.reason) abort(this.reason);
    else this.abortRequest = abort;
  }

  onHeaders(statusCode: number, rawHeaders: Buffer[]): boolean {
    // 1xx (informational) answers precede the real one.
    if (statusCode < 200) return true;
    this.statusCode = statusCode;
    if (statusCode >= 300) this.retryAfter = headerValue(rawHeaders, 'retry-after');
    return true;
  }

  onData(chunk: Buffer): boolean {
    this.body ??= new ResponseStart();
    if (!this.body.add(chunk)) {
      // Enough read: the outcome is the answer's; the connection is closed rather than drained.
      this.succeed();
      // Aborted after this callback returns, not from inside undici's parser callback.
      const abort = this.abortRequest;
      if (abort) queueMicrotask(() => abort(new Error('response body too large; the rest is not read')));
    }
    return true;
  }

  onComplete(): void {
    this.succeed();
  }

  onError(error: Error): void {
    // Cut after the status arrived (the deadline during the body, a reset): the answer stands.
    if (this.statusCode !== null) this.succeed();
    else this.fail(error);
  }

  private succeed(): void {
    if (this.settled) return;
    this.settled = true;
    const statusCode = this.statusCode as number;
    this.settle({
      ok: statusCode >= 200 && statusCode < 300,
      statusCode,
      durationMs: Math.round(performance.now() - this.started),
      error: describeStatus(statusCode),
      retryAfter: this.retryAfter,
      responseBody: this.body?.text() ?? null,
    });
  }

  private fail(error: unknown): void {
    if (this.settled) return;
    this.settled = true;
    this.settle({
      ok: false,
      statusCode: null,
      durationMs: Math.round(performance.now() - this.started),
      error: describeError(error, this.timeoutMs),
      retryAfter: null,
    });
  }
}

/** The first value of a header in undici's raw `[name, value, …]` list (names compared case-insensitively). */
function headerValue(rawHeaders: Buffer[], name: string): string | null {
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const key = rawHeaders[i] as Buffer;
    if (key.length === name.length && key.toString('latin1').toLowerCase() === name) {
      return (rawHeaders[i + 1] as Buffer).toString('latin1');
    }
  }
  return null;
}

function describeStatus(statusCode: number): string | null {
  if (statusCode >= 200 && statusCode < 300) return null;
  if (statusCode >= 300 && statusCode < 400) return `HTTP ${statusCode}: redirects are not followed`;
  return `HTTP ${statusCode}`;
}

/** A short, operator-readable reason for a failed attempt. */
function describeError(error: unknown, timeoutMs: number): string {
  const root = rootCause(error);
  if (root instanceof RefusedUrlError) return `refused: ${root.message}`;
  if (
    root instanceof errors.HeadersTimeoutError ||
    root instanceof errors.BodyTimeoutError ||
    root instanceof errors.ConnectTimeoutError ||
    (root instanceof Error && (root.name === 'TimeoutError' || root.name === 'AbortError'))
  ) {
    return `timed out after ${timeoutMs} ms`;
  }
  if (root instanceof Error) {
    const code = (root as NodeJS.ErrnoException).code;
    return code && !root.message.includes(code) ? `${code}: ${root.message}` : root.message;
  }
  return String(root);
}

function rootCause(error: unknown): unknown {
  let current = error;
  for (let depth = 0; depth < 5 && current instanceof Error && current.cause !== undefined; depth++) {
    current = current.cause;
  }
  return current;
}
