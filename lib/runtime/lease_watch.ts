/**
 * A candidate's watch on its Lease (docs/design/leadership.md, "Hand-over without polling"): a
 * standby learns that the Lease was released, or when it will run out, from the watch event, and
 * tries to acquire it then instead of at its next retry. The retry period stays the bound: the
 * watch only wakes the candidate's wait early, so a watch that is down, slow or silent costs
 * latency, never an attempt.
 *
 * The watch is `GET .../namespaces/<ns>/leases?watch=true&fieldSelector=metadata.name=<name>`
 * (RBAC verb `watch` on `coordination.k8s.io` leases; without a name, every Lease of the
 * namespace: the sharded elector's, lib/runtime/shard_elector.ts), opened without a
 * resourceVersion, so that every (re)opening first delivers the current Leases as ADDED events
 * ("Get State and Start at Most Recent", Kubernetes API concepts). Each watch is ended by the
 * server after {@link LEASE_WATCH_TIMEOUT_SECONDS}, or by the client after
 * {@link DEFAULT_WATCH_IDLE_TIMEOUT_MS} without a byte, and reopened; after a failure it is
 * reopened a retry period later, except after a 403 (the `watch` verb not granted): then the
 * candidate only polls, as without the watch.
 *
 * @module
 */
import type { Lease } from "kubernetes-types/coordination/v1.d.ts";
import type { KubeClient } from "../kube/client.ts";
import { LEASES } from "../kube/resources.ts";
import { ApiError } from "../kube/errors.ts";
import { WatchRestartError } from "../kube/watch.ts";
import { type Clock, sleepOn } from "./clock.ts";
import { linkedStop } from "./abort.ts";
import { DEFAULT_WATCH_IDLE_TIMEOUT_MS, QUIET_RECONNECT_HEADERS_MS } from "./reflector.ts";

/** Server-side bound of one Lease watch (s): a quiet Lease is read again at least this often. */
export const LEASE_WATCH_TIMEOUT_SECONDS = 60;

/** Options of {@link LeaseWatch}. */
export interface LeaseWatchOptions {
  /** The Lease's client (no write fence). */
  client: KubeClient;
  /** Namespace of the Lease. */
  namespace: string;
  /**
   * Name of the Lease; without it, every Lease of the namespace is watched (the sharded elector's
   * shard and membership Leases: one watch instead of one per Lease).
   */
  name?: string;
  /** Clock of the waits (ms). */
  clock: Clock;
  /**
   * The retry period (ms): the least time between two openings of the watch when the previous
   * one failed or ended at once.
   */
  retryPeriodMs: number;
  /**
   * Called with every Lease the watch delivers (`undefined`: the Lease was deleted) and its name.
   * Returns when to try to acquire it (ms on `clock`; now or earlier: at once), or `undefined` for
   * no wake-up. Each answer replaces the previous one (as does {@link LeaseWatch.wakeAt}).
   */
  onLease: (lease: Lease | undefined, name: string) => number | undefined;
  /**
   * Called when a watch fails (for logs); it is reopened a retry period later, unless the failure
   * was a 403 (then not at all).
   */
  onError?: (err: unknown) => void;
}

/**
 * Watches one Lease and keeps the time a candidate should next try to acquire it; the
 * candidate's wait between attempts is {@link LeaseWatch.sleep}.
 */
export class LeaseWatch {
  #o: LeaseWatchOptions;
  /** When to try next, as the last event asked (ms on the clock); undefined: not asked. */
  #wakeAtMs?: number;
  /** Re-arms the timer of the wait in progress, if any. */
  #rearm?: () => void;
  #stop = new AbortController();
  #started = false;

  /** A watch that opens nothing before {@link LeaseWatch.start}. */
  constructor(o: LeaseWatchOptions) {
    this.#o = o;
  }

  /** Whether {@link LeaseWatch.start} was called. */
  get started(): boolean {
    return this.#started;
  }

  /** Opens the watch, and reopens it until {@link LeaseWatch.stop} or `signal` aborts. */
  start(signal: AbortSignal): void {
    if (this.#started) return;
    this.#started = true;
    // Not AbortSignal.any: the stop must not depend on a dependent signal staying alive (abort.ts).
    const link = linkedStop(signal);
    this.#stop.signal.addEventListener("abort", () => link.controller.abort(), { once: true });
    this.#run(link.signal).catch((err) => this.#o.onError?.(err)).finally(link.unlink);
  }

  /** Ends the watch (the candidate leads or stops). */
  stop(): void {
    this.#stop.abort();
  }

  /**
   * Sets when the wait in progress, or the next one, ends early (ms on the clock; `undefined`:
   * not early), replacing the last answer of `onLease`: for a caller that learns the next due
   * time by its own reads too.
   */
  wakeAt(ms: number | undefined): void {
    this.#wakeAtMs = ms;
    this.#rearm?.();
  }

  /**
   * Resolves after `ms` on the clock, or earlier at the time a watch event asked for (also one
   * that arrives during the wait, or arrived before it and is due); rejects with the signal's
   * reason when it aborts. A wake-up that ended a wait is used up.
   */
  sleep(ms: number, signal: AbortSignal): Promise<void> {
    const clock = this.#o.clock;
    const endMs = clock.now() + ms;
    return new Promise((resolve, reject) => {
      if (signal.aborted) return reject(signal.reason);
      let timer: unknown;
      const finish = (err?: unknown) => {
        clock.clearTimer(timer);
        this.#rearm = undefined;
        signal.removeEventListener("abort", onAbort);
        if (err !== undefined) return reject(err);
        if (this.#wakeAtMs !== undefined && this.#wakeAtMs <= clock.now()) {
          this.#wakeAtMs = undefined;
        }
        resolve();
      };
      const onAbort = () => finish(signal.reason);
      const arm = () => {
        clock.clearTimer(timer);
        const untilMs = Math.min(endMs, this.#wakeAtMs ?? Infinity);
        if (untilMs <= clock.now()) return finish(); // due: no timer (an injected clock may not run one)
        timer = clock.setTimer(() => finish(), untilMs - clock.now());
      };
      this.#rearm = arm;
      signal.addEventListener("abort", onAbort, { once: true });
      arm();
    });
  }

  /**
   * Watches until `signal` aborts. Each pass is bounded by the server's timeout and the client's
   * idle bound; one that failed, or ended sooner than a retry period after it began, is followed
   * by the next only a retry period after its start.
   */
  async #run(signal: AbortSignal): Promise<void> {
    const o = this.#o;
    while (!signal.aborted) {
      const startedMs = o.clock.now();
      let failed = false;
      try {
        for await (
          const ev of o.client.watch<Lease>(LEASES, {
            namespace: o.namespace,
            ...(o.name !== undefined ? { fieldSelector: `metadata.name=${o.name}` } : {}),
            allowWatchBookmarks: true,
            timeoutSeconds: LEASE_WATCH_TIMEOUT_SECONDS,
            idleTimeoutMs: DEFAULT_WATCH_IDLE_TIMEOUT_MS,
            // A Lease nobody renews is rightly quiet: silence is not a failure of the path.
            idleIsFailure: false,
            headersTimeoutMs: QUIET_RECONNECT_HEADERS_MS,
            signal,
          })
        ) {
          // A batch already decoded may go on after the stop: nothing more is observed then.
          if (signal.aborted) return;
          if (ev.type === "BOOKMARK") continue;
          this.wakeAt(
            o.onLease(
              ev.type === "DELETED" ? undefined : ev.object,
              ev.object.metadata?.name ?? "",
            ),
          );
        }
      } catch (err) {
        if (signal.aborted) return;
        // Ended by the client on purpose (a stalled path, new credentials): not a failure.
        if (!(err instanceof WatchRestartError)) {
          failed = true;
          o.onError?.(err);
        }
        // Not allowed (RBAC without the `watch` verb, e.g. an upgrade that kept the old Role):
        // told once, and the candidate goes on polling.
        if (err instanceof ApiError && err.code === 403) return;
      }
      const waitMs = o.retryPeriodMs - (o.clock.now() - startedMs);
      if (failed || waitMs > 0) {
        try {
          await sleepOn(o.clock, failed ? o.retryPeriodMs : waitMs, signal);
        } catch {
          return;
        }
      }
    }
  }
}
