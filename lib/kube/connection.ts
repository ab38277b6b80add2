/**
 * Health of the path to one apiserver, judged from the requests that actually travel it: every
 * request reports whether an answer came (any HTTP status, or bytes of a watch stream) or not (a
 * network error, a timeout, a TLS failure, a watch stream broken or silent past its bound).
 *
 * States: `healthy` → (a request got no answer) `failing` → (a request sent since got an
 * answer) `healthy`, with a {@link Recovery} event. While failing, a probe (one small request through the
 * same client, so the same HTTP client, TLS trust and network path) goes out every
 * {@link PROBE_INTERVAL_MS} (jittered, each bounded by {@link PROBE_TIMEOUT_MS}), so that a
 * recovery is noticed even when nothing else is being sent, as on a replica whose only traffic is
 * watches. Healthy, it sends nothing.
 *
 * What a recovery means for the requests still waiting (the rule {@link KubeClient} applies):
 * the path was failing, and a request sent later got its answer, so new connections work. A
 * request sent earlier that still has no answer, or a watch that has received nothing since the
 * failures began, sits on a connection that died without FIN or RST (a stalled middlebox, a
 * network partition): waiting longer gains nothing, so it is ended and sent again. This is the
 * signal HTTP/2 PING health checks give client-go (`ReadIdleTimeout`), taken from the requests
 * themselves because Deno's fetch offers no pings and the client speaks HTTP/1.1.
 *
 * @module
 */
import { networkErrorReason } from "./errors.ts";

// Defined with the other typed errors; exported here too, where they first lived.
export { isUnreachable, UnreachableError } from "./errors.ts";

/** Time source and timers (ms); structurally the runtime's `Clock`, injected for tests. */
export interface Timers {
  /** Milliseconds since the epoch. */
  now(): number;
  /** Calls `fn` after `ms`; returns a handle for {@link Timers.clearTimer}. */
  setTimer(fn: () => void, ms: number): unknown;
  /** Cancels a timer. */
  clearTimer(handle: unknown): void;
}

/** Real time: Date.now and setTimeout. */
export const realTimers: Timers = {
  now: () => Date.now(),
  setTimer: (fn, ms) => setTimeout(fn, Math.max(0, ms)),
  clearTimer: (h) => clearTimeout(h as ReturnType<typeof setTimeout>),
};

/**
 * Interval between probes while the path is failing (ms), times a jitter factor in [1, 1.5): the
 * retry period of client-go's leader election (2 s), the cadence at which a Kubernetes client
 * already talks to an apiserver it depends on. A probe is one `GET /version` (about 1 KiB).
 */
export const PROBE_INTERVAL_MS = 2_000;
/**
 * Bound of one probe (ms). The apiserver answers `/version` from memory in about a millisecond,
 * so 3 s without an answer is a dead path, not a slow server; with {@link PROBE_INTERVAL_MS} a
 * path that comes back is noticed within about 6 s.
 */
export const PROBE_TIMEOUT_MS = 3_000;
/**
 * A path failing this long without a single answer is reported once ({@link HealthEvent}
 * `stillFailing`), e.g. as one error log line naming the last error (a TLS failure after a CA
 * rotation says `invalid peer certificate: UnknownIssuer`). Shorter episodes — a dropped
 * connection, an apiserver restart — pass quietly.
 */
export const FAILING_REPORT_MS = 10_000;

/** A recovery: the path failed from `failingSinceMs` until a request sent at `sentAtMs` got an answer. */
export interface Recovery {
  /** When the first failure of the episode happened (ms since the epoch). */
  failingSinceMs: number;
  /** When the answer that ended it came (ms). */
  recoveredAtMs: number;
  /** When the request that got that answer was sent (ms). */
  sentAtMs: number;
  /** Requests without an answer during the episode. */
  failures: number;
  /** The last failure's reason, one line. */
  lastError: string;
}

/** What {@link ConnectionHealth.onEvent} reports. */
export type HealthEvent =
  | { type: "failing"; sinceMs: number; error: string }
  | { type: "stillFailing"; sinceMs: number; failures: number; error: string }
  | { type: "recovered"; recovery: Recovery; reported: boolean };

/** Options of {@link ConnectionHealth}. */
export interface ConnectionHealthOptions {
  /** Timer source; default {@link realTimers} (injected for tests). */
  timers?: Timers;
  /** Random source in [0, 1); injected for tests. */
  random?: () => number;
  /** Interval of the `/version` probe while failing (ms); default {@link PROBE_INTERVAL_MS}. */
  probeIntervalMs?: number;
  /** Timeout of one probe (ms); default {@link PROBE_TIMEOUT_MS}. */
  probeTimeoutMs?: number;
  /** Failing this long (ms) is reported as `stillFailing`; default {@link FAILING_REPORT_MS}. */
  failingReportMs?: number;
}

/** The health of the path to one apiserver; see the module doc. Shared by clients of one apiserver. */
export class ConnectionHealth {
  #t: Timers;
  #random: () => number;
  #probeIntervalMs: number;
  #probeTimeoutMs: number;
  #failingReportMs: number;
  #failing?: {
    sinceMs: number;
    failures: number;
    lastError: string;
    /** Someone logged the episode (a claim or the `stillFailing` line): log its recovery. */
    reported: boolean;
    /** {@link ConnectionHealth.claimReport} answered true already. */
    claimed: boolean;
  };
  #probe?: (signal: AbortSignal) => Promise<void>;
  #probeTimer?: unknown;
  #reportTimer?: unknown;
  #probing = false;
  #closed = false;
  #episodes = 0;
  #listeners = new Set<(ev: HealthEvent) => void>();

  /**
   * Makes a tracker in the healthy state.
   * @param o see {@link ConnectionHealthOptions}
   */
  constructor(o: ConnectionHealthOptions = {}) {
    this.#t = o.timers ?? realTimers;
    this.#random = o.random ?? Math.random;
    this.#probeIntervalMs = o.probeIntervalMs ?? PROBE_INTERVAL_MS;
    this.#probeTimeoutMs = o.probeTimeoutMs ?? PROBE_TIMEOUT_MS;
    this.#failingReportMs = o.failingReportMs ?? FAILING_REPORT_MS;
  }

  /**
   * Failing episodes begun so far (0 at first). A request notes it when sent and passes it to
   * {@link succeeded}, so an answer to a request sent before the current episode began is told
   * apart without comparing clocks (a wall clock stepped back cannot keep the path failing).
   */
  get episodes(): number {
    return this.#episodes;
  }

  /** True while no request has failed since the last answer. */
  get healthy(): boolean {
    return this.#failing === undefined;
  }

  /** When the current failing episode began (ms since the epoch); undefined while healthy. */
  get failingSinceMs(): number | undefined {
    return this.#failing?.sinceMs;
  }

  /** Requests without an answer in the current episode (0 while healthy). */
  get failures(): number {
    return this.#failing?.failures ?? 0;
  }

  /**
   * Claims the one report of the current failing episode: true for the first caller while
   * failing (it logs one line for the outage; the episode's recovery is then reported too, see
   * `recovered`'s `reported`), false otherwise (another caller reported it — log at debug — or
   * the path is healthy). So an outage costs one warning however many requests, reconciles and
   * watches fail in it (docs/design/transport.md, "One line per apiserver outage").
   */
  claimReport(): boolean {
    const f = this.#failing;
    if (!f || f.claimed) return false;
    f.claimed = true;
    f.reported = true;
    return true;
  }

  /** The last failure's reason while failing. */
  get lastError(): string | undefined {
    return this.#failing?.lastError;
  }

  /**
   * Sets the probe: one request to the apiserver through the client whose health this is,
   * resolving when any answer came, rejecting otherwise (it reports itself through
   * {@link succeeded}/{@link failed} like every request). The first probe set wins.
   */
  setProbe(probe: (signal: AbortSignal) => Promise<void>): void {
    this.#probe ??= probe;
  }

  /** Subscribes to {@link HealthEvent}s; returns the unsubscribe function. Listeners must not throw. */
  onEvent(fn: (ev: HealthEvent) => void): () => void {
    this.#listeners.add(fn);
    return () => this.#listeners.delete(fn);
  }

  /** Calls `fn` at each recovery; returns the unsubscribe function. */
  onRecovered(fn: (r: Recovery) => void): () => void {
    return this.onEvent((ev) => {
      if (ev.type === "recovered") fn(ev.recovery);
    });
  }

  #emit(ev: HealthEvent): void {
    for (const fn of [...this.#listeners]) {
      try {
        fn(ev);
      } catch { /* a listener must not break the client */ }
    }
  }

  /**
   * A request sent at `sentAtMs` got an answer (headers of any status). Ends a failing episode
   * with a `recovered` event when the request was sent after the episode began: an answer to a
   * request sent before it (already on its way, or in the socket's buffer when the connection
   * was cut) says nothing about the path now, and ending the episode on it would make one outage
   * two, each with its own report. Cheap while healthy.
   * @param sentAtMs when the request was sent (ms since the epoch)
   * @param episodesAtSend {@link episodes} when it was sent; when given, it decides "sent before
   *   the episode began" instead of the times
   */
  succeeded(sentAtMs: number, episodesAtSend?: number): void {
    const f = this.#failing;
    if (!f) return;
    const sentBefore = episodesAtSend !== undefined
      ? episodesAtSend < this.#episodes
      : sentAtMs <= f.sinceMs;
    if (sentBefore) return;
    this.#failing = undefined;
    this.#stopTimers();
    this.#emit({
      type: "recovered",
      reported: f.reported,
      recovery: {
        failingSinceMs: f.sinceMs,
        recoveredAtMs: this.#t.now(),
        sentAtMs,
        failures: f.failures,
        lastError: f.lastError,
      },
    });
  }

  /** A request got no answer (network error, timeout, TLS failure, broken or silent stream). */
  failed(error: unknown): void {
    if (this.#closed) return;
    const why = networkErrorReason(error);
    const f = this.#failing;
    if (f) {
      f.failures++;
      f.lastError = why;
      return;
    }
    const now = this.#t.now();
    this.#episodes++;
    this.#failing = {
      sinceMs: now,
      failures: 1,
      lastError: why,
      reported: false,
      claimed: false,
    };
    this.#emit({ type: "failing", sinceMs: now, error: why });
    this.#scheduleProbe();
    this.#reportTimer = this.#t.setTimer(() => {
      this.#reportTimer = undefined;
      const g = this.#failing;
      if (!g || g.sinceMs !== now) return;
      g.reported = true;
      this.#emit({
        type: "stillFailing",
        sinceMs: g.sinceMs,
        failures: g.failures,
        error: g.lastError,
      });
    }, this.#failingReportMs);
  }

  #scheduleProbe(): void {
    if (!this.#probe || this.#closed || this.#probeTimer !== undefined || this.#probing) return;
    const delay = this.#probeIntervalMs * (1 + 0.5 * this.#random());
    this.#probeTimer = this.#t.setTimer(() => {
      this.#probeTimer = undefined;
      if (!this.#failing || this.#closed) return;
      this.#probing = true;
      this.#probe!(AbortSignal.timeout(this.#probeTimeoutMs)).catch(() => {}).finally(() => {
        this.#probing = false;
        if (this.#failing) this.#scheduleProbe();
      });
    }, delay);
  }

  #stopTimers(): void {
    if (this.#probeTimer !== undefined) this.#t.clearTimer(this.#probeTimer);
    if (this.#reportTimer !== undefined) this.#t.clearTimer(this.#reportTimer);
    this.#probeTimer = this.#reportTimer = undefined;
  }

  /** Stops probing and reporting (the clients using it are closing). */
  close(): void {
    this.#closed = true;
    this.#stopTimers();
    this.#listeners.clear();
  }
}
