/**
 * The controller: informers feed a {@link WorkQueue} of primary keys, and up to
 * `maxConcurrentReconciles` workers call `reconcile(key)` (controller-runtime
 * `controller.Controller`).
 *
 * Rules:
 * - A key is reconciled by one worker at a time; adds while it runs make it run again after.
 * - A reconcile that throws goes to the error policy ({@link ControllerOptions.errorPolicy},
 *   kube-rs `error_policy`), which maps the error to a requeue decision. The default,
 *   {@link defaultErrorPolicy}: a write refused by the Lease fence is requeued with backoff
 *   (result `requeue`); an apiserver asking to come back later (429, 503 with Retry-After) is
 *   requeued after the larger of the key's backoff and the Retry-After (result `requeue_after`,
 *   S16); a 409 Conflict (an optimistic lock lost to a newer write) is requeued with backoff;
 *   none of these is a reconcile error. Anything else (or exceeding `reconcileTimeoutMs`) is
 *   logged with its key, counted in `controller_runtime_reconcile_errors_total` and re-added with
 *   per-key exponential backoff; the process never dies of it. Success forgets the key's backoff.
 * - A result `{requeueAfterMs}` re-adds the key after that delay; `{requeue: true}` with backoff.
 * - Every `syncPeriodMs` every primary key is added again (controller-runtime SyncPeriod).
 * - {@link Controller.run}'s `signal` stops taking keys; in-flight reconciles get `graceMs` to
 *   finish before their own signal aborts. `fence` aborts in-flight reconciles at once (a lost
 *   Lease: stop every write).
 *
 * @module
 */
import type { Logger } from "@logtape/logtape";
import { isConflict, isFenced, isThrottled } from "../kube/errors.ts";
import { type Clock, realClock } from "./clock.ts";
import { errorText, log } from "./log.ts";
import type { Metrics } from "./metrics.ts";
import { WorkQueue } from "./queue.ts";

/** Default workers per controller; controller-runtime default 1. */
export const DEFAULT_MAX_CONCURRENT_RECONCILES = 1;
/** Default sync period (ms); controller-runtime default 10 h. */
export const DEFAULT_SYNC_PERIOD_MS = 10 * 60 * 60 * 1000;

/** What a reconcile may ask for. */
export interface ReconcileResult {
  /** Re-add with backoff. */
  requeue?: boolean;
  /** Re-add after this many ms. */
  requeueAfterMs?: number;
}

/** Given to each reconcile. */
export interface ReconcileContext {
  /** Aborts on timeout, on a lost Lease, or after the shutdown grace period. */
  signal: AbortSignal;
  /** Unique id of this reconcile, for logs. */
  reconcileID: string;
  /** Logger with `controller`, `namespace`, `name`, `reconcileID` set. */
  logger: Logger;
}

/** The function a controller runs per key (`namespace/name`). */
export type ReconcileFn = (
  key: string,
  ctx: ReconcileContext,
) => Promise<ReconcileResult | void>;

/**
 * What the controller does with a key whose reconcile threw: the decision of an
 * {@link ErrorPolicy}.
 */
export interface ErrorDecision {
  /**
   * `error`: a reconcile error (logged at error level, counted in
   * `controller_runtime_reconcile_errors_total`); `requeue` / `requeue_after`: a normal retry,
   * counted under that result of `controller_runtime_reconcile_total` and logged at info.
   */
  result: "error" | "requeue" | "requeue_after";
  /** Requeue no sooner than this (ms); the key's backoff applies in any case. */
  minDelayMs?: number;
  /** Log message of a non-error decision. */
  message?: string;
  /** Extra log fields of a non-error decision. */
  fields?: Record<string, unknown>;
}

/** Maps a reconcile's error to a requeue decision (kube-rs `Controller::run`'s `error_policy`). */
export type ErrorPolicy = (err: unknown, key: string) => ErrorDecision;

/**
 * The default {@link ErrorPolicy}: a fenced write (`FencedError`: this replica may not write
 * now, S13) and a 409 Conflict (an optimistic lock lost to a newer write, e.g. a status computed
 * from an older resourceVersion) are requeued with backoff; a throttled request (429, or 503 with
 * Retry-After) is requeued after its Retry-After (S16); everything else is an error.
 */
export function defaultErrorPolicy(err: unknown): ErrorDecision {
  if (isFenced(err)) {
    return {
      result: "requeue",
      message: "Writes fenced: the Lease renewal is stale; requeued",
      fields: { reason: err.reason, request: err.request, renewalAgeMs: err.renewalAgeMs },
    };
  }
  if (isThrottled(err)) {
    return {
      result: "requeue_after",
      minDelayMs: (err.retryAfterSeconds ?? 0) * 1000,
      message: "Throttled by the apiserver; requeued",
      fields: { code: err.code, request: err.request, retryAfterSeconds: err.retryAfterSeconds },
    };
  }
  if (isConflict(err)) {
    return {
      result: "requeue",
      message: "Conflict with a newer version; requeued",
      fields: { request: (err as { request?: string }).request },
    };
  }
  return { result: "error" };
}

/** Options of {@link Controller}. */
export interface ControllerOptions {
  name: string;
  reconcile: ReconcileFn;
  maxConcurrentReconciles?: number;
  /** Bound of one reconcile (ms); 0 = none. */
  reconcileTimeoutMs?: number;
  syncPeriodMs?: number;
  /** Keys of every primary object (for the sync period and for a new leader's first pass). */
  allKeys?: () => string[];
  metrics?: Metrics;
  clock?: Clock;
  queue?: WorkQueue;
  /** Maps a reconcile error to a requeue decision; default {@link defaultErrorPolicy}. */
  errorPolicy?: ErrorPolicy;
}

/** Runs reconcile workers over a work queue. */
export class Controller {
  /** The work queue; informer handlers add keys to it. */
  readonly queue: WorkQueue;
  readonly name: string;
  #o: ControllerOptions;
  #clock: Clock;
  #log: Logger;
  #seq = 0;
  #policy: ErrorPolicy;
  #fence = new AbortController();
  #active = 0;

  /** @param o see {@link ControllerOptions} */
  constructor(o: ControllerOptions) {
    this.#o = o;
    this.name = o.name;
    this.#clock = o.clock ?? realClock;
    this.#policy = o.errorPolicy ?? defaultErrorPolicy;
    this.#log = log("controller").with({ controller: o.name });
    const m = o.metrics;
    const labels = { name: o.name, controller: o.name };
    this.queue = o.queue ?? new WorkQueue({
      clock: this.#clock,
      hooks: m
        ? {
          onAdd: () => m.queueAdds.inc(labels),
          onGet: (s) => m.queueDuration.observe(labels, s),
          onDone: (s) => m.workDuration.observe(labels, s),
          onRetry: () => m.queueRetries.inc(labels),
        }
        : undefined,
    });
    if (m) {
      // Every series exists from the start at 0, as in controller-runtime (which adds 0 to each
      // result and to the error counter) and client-go's workqueue metrics: otherwise
      // `workqueue_retries_total` and `..._reconcile_errors_total` are absent until the first
      // failure, and rate()/absent() based dashboards and alerts see nothing.
      m.reconcileErrors.inc({ controller: o.name }, 0);
      for (const result of ["success", "error", "requeue", "requeue_after"]) {
        m.reconcileTotal.inc({ controller: o.name, result }, 0);
      }
      m.queueAdds.inc(labels, 0);
      m.queueRetries.inc(labels, 0);
      m.activeWorkers.set({ controller: o.name }, 0);
    }
  }

  /** Reconciles running now. */
  get activeWorkers(): number {
    return this.#active;
  }

  /** Adds a key (deduplicated). */
  enqueue(key: string): void {
    this.queue.add(key);
  }

  /** Aborts every in-flight reconcile now (self-fencing after a lost Lease). */
  fence(): void {
    this.#fence.abort(new Error("leadership lost: writes stopped"));
  }

  /** The error policy's decision; a timeout is an error, a fence abort a requeue. */
  #decide(err: unknown, key: string, timedOut: boolean): ErrorDecision {
    if (timedOut) return { result: "error" };
    if (this.#fence.signal.aborted) {
      return { result: "requeue", message: "Reconcile aborted: leadership lost; requeued" };
    }
    try {
      return this.#policy(err, key);
    } catch (policyErr) {
      this.#log.error("Error policy failed", { error: errorText(policyErr) });
      return { result: "error" };
    }
  }

  #updateGauges(): void {
    const m = this.#o.metrics;
    if (!m) return;
    const labels = { name: this.name, controller: this.name };
    m.queueDepth.set(labels, this.queue.depth);
    m.unfinishedWork.set(labels, this.queue.unfinishedWorkSeconds());
    m.longestRunning.set(labels, this.queue.longestRunningSeconds());
    m.activeWorkers.set({ controller: this.name }, this.#active);
  }

  async #processOne(key: string): Promise<void> {
    const o = this.#o;
    const reconcileID = crypto.randomUUID();
    const slash = key.indexOf("/");
    const logger = this.#log.with({
      namespace: slash >= 0 ? key.slice(0, slash) : "",
      name: slash >= 0 ? key.slice(slash + 1) : key,
      reconcileID,
    });
    const signals = [this.#fence.signal];
    if (o.reconcileTimeoutMs) signals.push(AbortSignal.timeout(o.reconcileTimeoutMs));
    const signal = AbortSignal.any(signals);
    const started = performance.now();
    let result: "success" | "error" | "requeue" | "requeue_after" = "success";
    this.#active++;
    this.#updateGauges();
    try {
      const r = await o.reconcile(key, { signal, reconcileID, logger });
      if (r?.requeueAfterMs !== undefined && r.requeueAfterMs > 0) {
        result = "requeue_after";
        this.queue.forget(key);
        this.queue.addAfter(key, r.requeueAfterMs);
      } else if (r?.requeue) {
        result = "requeue";
        this.queue.addRateLimited(key);
      } else {
        this.queue.forget(key);
      }
    } catch (err) {
      const timedOut = signal.aborted && !this.#fence.signal.aborted;
      const decision = this.#decide(err, key, timedOut);
      result = decision.result;
      const delayMs = this.queue.addRateLimited(key, decision.minDelayMs ?? 0);
      if (decision.result === "error") {
        o.metrics?.reconcileErrors.inc({ controller: this.name });
        logger.error("Reconciler error", {
          error: timedOut ? `reconcile timed out after ${o.reconcileTimeoutMs} ms` : errorText(err),
          retryInMs: Math.round(delayMs),
          retries: this.queue.numRequeues(key),
        });
      } else {
        logger.info(decision.message ?? "Requeued", {
          ...decision.fields,
          retryInMs: Math.round(delayMs),
        });
      }
    } finally {
      this.#active--;
      o.metrics?.reconcileTime.observe(
        { controller: this.name },
        (performance.now() - started) / 1000,
      );
      o.metrics?.reconcileTotal.inc({ controller: this.name, result });
      this.queue.done(key);
      this.#updateGauges();
    }
  }

  /**
   * Runs the workers until `signal` aborts, then stops handing out keys and waits up to `graceMs`
   * for in-flight reconciles before aborting them. Resolves when all workers have stopped.
   */
  async run(signal: AbortSignal, graceMs = 30_000): Promise<void> {
    const o = this.#o;
    const workers = Math.max(1, o.maxConcurrentReconciles ?? DEFAULT_MAX_CONCURRENT_RECONCILES);
    o.metrics?.maxConcurrentReconciles.set({ controller: this.name }, workers);
    for (const k of o.allKeys?.() ?? []) this.queue.add(k);
    const syncMs = o.syncPeriodMs ?? DEFAULT_SYNC_PERIOD_MS;
    let syncTimer: unknown;
    const scheduleSync = () => {
      syncTimer = this.#clock.setTimer(() => {
        for (const k of o.allKeys?.() ?? []) this.queue.add(k);
        scheduleSync();
      }, syncMs * (0.9 + 0.2 * Math.random()));
    };
    if (syncMs > 0 && o.allKeys) scheduleSync();
    const gaugeTimer = setInterval(() => this.#updateGauges(), 1_000);
    const onStop = () => this.queue.shutDown();
    signal.addEventListener("abort", onStop, { once: true });
    if (signal.aborted) onStop();
    const loops = Array.from({ length: workers }, async () => {
      while (true) {
        const key = await this.queue.get();
        if (key === undefined) return;
        await this.#processOne(key);
      }
    });
    await new Promise<void>((resolve) => {
      if (signal.aborted) resolve();
      else signal.addEventListener("abort", () => resolve(), { once: true });
    });
    const drained = await this.queue.drain(graceMs);
    if (!drained) {
      this.#log.warn("In-flight reconciles did not finish within the grace period; aborting", {
        graceMs,
      });
      this.fence();
    }
    await Promise.all(loops);
    this.#clock.clearTimer(syncTimer);
    clearInterval(gaugeTimer);
    this.#updateGauges();
  }
}
