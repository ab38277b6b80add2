/**
 * The controller: informers feed a {@link WorkQueue} of primary keys, and up to
 * `maxConcurrentReconciles` workers call `reconcile(key)` (controller-runtime
 * `controller.Controller`).
 *
 * Rules:
 * - A key is reconciled by one worker at a time; adds while it runs make it run again after.
 * - A reconcile that throws goes to the error policy ({@link ControllerOptions.errorPolicy},
 *   kube-rs `error_policy`), which maps the error to a requeue decision; what it leaves open,
 *   {@link defaultErrorPolicy} decides: a write refused by the Lease fence is requeued with
 *   backoff (result `requeue`); an apiserver asking to come back later (429, 503 with
 *   Retry-After) is requeued after the larger of the key's backoff and the Retry-After (result
 *   `requeue_after`, docs/scenarios.md S16); a 409 Conflict (an optimistic lock lost to a newer write) is requeued
 *   with backoff; none of these is a reconcile error. Anything else (or exceeding
 *   `reconcileTimeoutMs`) is logged with its key, counted in
 *   `controller_runtime_reconcile_errors_total` and re-added with per-key exponential backoff
 *   unless the policy decides otherwise; the process never dies of it. Success forgets the key's
 *   backoff. Of those errors, a {@link TerminalError} (or a policy's `terminal`) is not re-added
 *   and is counted in `controller_runtime_terminal_reconcile_errors_total`, and a programming
 *   fault ({@link isPanic}) in `controller_runtime_reconcile_panics_total`; a reconcile whose
 *   `reconcileTimeoutMs` ran out is counted in `controller_runtime_reconcile_timeouts_total`
 *   (controller-runtime's counters of the same names).
 * - A reconcile resolves a {@link ReconcileResult}: `done`, `after(ms)` (re-added after that
 *   delay), `backoff(minMs)` (re-added with the key's backoff) or `terminal`.
 * - Every `syncPeriodMs` every primary key is added again (controller-runtime SyncPeriod).
 * - Workers let the event loop turn once they have held it for {@link WORKER_TURN_MS}: a
 *   reconcile that reads only the cache resolves without I/O, so a pass over thousands of objects
 *   already as they should be would otherwise be one unbroken chain of promise callbacks, and the
 *   probes, watch events and Lease renewals would wait for all of it (goroutines in
 *   controller-runtime are preempted; promise callbacks are not).
 * - {@link Controller.run}'s `signal` stops taking keys; in-flight reconciles get `graceMs` to
 *   finish before their own signal aborts. `fence` aborts in-flight reconciles at once (a lost
 *   Lease: stop every write).
 *
 * @module
 */
import type { KubeObject } from "../kube/client.ts";
import { type ConnectionHealth, isUnreachable } from "../kube/connection.ts";
import { ApiError, FencedError, isConflict, isFenced, isThrottled } from "../kube/errors.ts";
import type { ResourceType } from "../kube/resources.ts";
import { deadline } from "../kube/deadline.ts";
import { type Clock, realClock } from "./clock.ts";
import { errorText, log, type Logger } from "./log.ts";
import { MESSAGES, OUTAGE_NOTE } from "./messages.ts";
import { controllerOf } from "./ownership.ts";
import type { Metrics } from "./metrics.ts";
import type { Predicate } from "./predicates.ts";
import { type QueuePriority, WorkQueue } from "./queue.ts";
// deno-lint-ignore no-unused-vars -- named by {@link Reflector} in the docs below
import type { Reflector } from "./reflector.ts";
import type { Store } from "./store.ts";
import type { InformerStatus } from "./health.ts";
import {
  endReconcileSpan,
  type ReconcileSpan,
  type SpanRef,
  startReconcileSpan,
  tracingEnabled,
  withReconcileSpan,
} from "./tracing.ts";

/**
 * How long (ms) the workers may hold the event loop with reconciles that resolve without waiting
 * on I/O before they let it turn (sockets, timers): 5 ms, so probes and watch events are served
 * during a pass over converged objects (docs/design/runtime.md, "Worker turn"). See
 * {@link turnIfHeld} for what the turn costs.
 */
export const WORKER_TURN_MS = 5;

/** Start of the current stretch of work without a turn of the event loop (`performance.now()`, ms). */
let heldSinceMs = 0;
/** Whether the stretch's marker timer is still pending, i.e. the event loop has not turned since. */
let markerPending = false;
/** The marker's callback: the event loop turned (timers ran), the stretch is over. */
const markTurn = () => {
  markerPending = false;
};

/**
 * Once the workers have held the event loop for {@link WORKER_TURN_MS}: a promise that resolves
 * after the event loop has had nothing ready to run for a moment (a 0 ms timer), so that sockets
 * were served meanwhile (probes, watch events, Lease answers). Otherwise `undefined`: no wait.
 *
 * What counts as held: the time since a stretch began, a stretch ending when the event loop
 * turns. Each stretch starts a 0 ms marker timer; when it has fired, the loop has turned (the
 * workers waited on I/O, as they do while writing), so reconciles that wait on the apiserver
 * never wait on a turn of their own. One marker timer per stretch costs microseconds.
 *
 * Why a timer: Deno serves sockets (the HTTP server and client tasks) only when its event loop
 * has no JavaScript ready to run; a callback or promise that is ready at once keeps them waiting.
 * `setImmediate`, `MessageChannel` and even an operation on Deno's blocking thread pool are
 * ready too soon (docs/design/runtime.md, "Worker turn", has the measurements).
 */
function turnIfHeld(): Promise<void> | undefined {
  const now = performance.now();
  if (!markerPending) {
    markerPending = true;
    heldSinceMs = now;
    setTimeout(markTurn, 0);
    return undefined;
  }
  if (now - heldSinceMs < WORKER_TURN_MS) return undefined;
  return new Promise((resolve) => setTimeout(resolve, 0));
}

/** Default workers per controller; controller-runtime default 1. */
export const DEFAULT_MAX_CONCURRENT_RECONCILES = 1;
/** Default sync period (ms); controller-runtime default 10 h. */
export const DEFAULT_SYNC_PERIOD_MS = 10 * 60 * 60 * 1000;

/**
 * What a reconcile asks for next, a closed union (kube-rs `Action`, controller-runtime `Result`);
 * make one with {@link Reconcile}:
 * - `done`: nothing more to do; the key's failure count is forgotten and it is not re-added (the
 *   next change of a watched object, or the sync period, brings it back).
 * - `after`: re-add after `ms` milliseconds (> 0; a value ≤ 0 counts as `done`).
 * - `backoff`: re-add with the key's per-key exponential backoff, no sooner than `minMs`
 *   milliseconds (0: the backoff alone).
 * - `terminal`: not re-added; after an error, the error is final (controller-runtime's
 *   `TerminalError`): only the next change of a watched object brings the key back. The key's
 *   failure count is kept.
 */
export type ReconcileResult =
  | { readonly kind: "done" }
  | { readonly kind: "after"; readonly ms: number }
  | { readonly kind: "backoff"; readonly minMs: number }
  | { readonly kind: "terminal" };

/** The constructors of {@link ReconcileResult} ({@link Reconcile}). */
export interface ReconcileConstructors {
  /** Nothing more to do. */
  readonly done: ReconcileResult;
  /** Re-add after `ms` milliseconds. */
  after(ms: number): ReconcileResult;
  /** Re-add with the key's backoff, no sooner than `minMs` milliseconds (default 0). */
  backoff(minMs?: number): ReconcileResult;
  /** Not re-added; the key's failure count is kept. */
  readonly terminal: ReconcileResult;
}

/** Constructors of {@link ReconcileResult}: `Reconcile.done`, `Reconcile.after(ms)`, ... */
export const Reconcile: ReconcileConstructors = {
  done: { kind: "done" },
  after: (ms) => ({ kind: "after", ms }),
  backoff: (minMs = 0) => ({ kind: "backoff", minMs }),
  terminal: { kind: "terminal" },
};

/**
 * An error a reconcile throws when retrying cannot help (controller-runtime's
 * `reconcile.TerminalError`): the key is not re-added (only the next change of a watched object
 * brings it back), the error is logged and counted in `controller_runtime_reconcile_errors_total`
 * and `controller_runtime_terminal_reconcile_errors_total`. {@link defaultErrorPolicy} decides
 * so; an {@link ErrorPolicy} may decide otherwise.
 */
export class TerminalError extends Error {
  /** Always `TerminalError`. */
  override name = "TerminalError";

  /**
   * A terminal error with `message` (what cannot be done and why) and, in `options.cause`, the
   * underlying error if any.
   */
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
  }
}

/**
 * Whether a value a reconcile threw is a programming fault rather than an error the reconcile
 * meant to report: a `TypeError`, `ReferenceError`, `RangeError`, `SyntaxError` or `EvalError`
 * (the faults the JavaScript engine raises, as a nil dereference or an index out of range
 * panics in Go), or a thrown value that is not an `Error` at all. These are counted in
 * `controller_runtime_reconcile_panics_total` (controller-runtime counts the panics it recovers
 * from a reconciler) and logged with their stack. The client never lets a failed `fetch`'s
 * `TypeError` through: it throws its own errors (lib/kube/errors.ts).
 */
export function isPanic(err: unknown): boolean {
  return !(err instanceof Error) || err instanceof TypeError || err instanceof ReferenceError ||
    err instanceof RangeError || err instanceof SyntaxError || err instanceof EvalError;
}

/**
 * Decides what happens to a key whose reconcile threw (kube-rs `error_policy`): an
 * {@link ErrorDecision}, or `undefined` when this policy has nothing to say about `err`, in which
 * case {@link defaultErrorPolicy} decides (fenced, throttled, conflict), and what it leaves open
 * too is a reconcile error requeued with backoff. Must not throw.
 */
export type ErrorPolicy = (
  err: unknown,
  key: string,
  ctx: ReconcileContext,
) => ErrorDecision | undefined;

/** Given to each reconcile. */
export interface ReconcileContext {
  /** Aborts on timeout, on a lost Lease, or after the shutdown grace period. */
  signal: AbortSignal;
  /** Unique id of this reconcile, for logs. */
  reconcileID: string;
  /** Logger with `controller`, `namespace`, `name`, `reconcileID` set. */
  logger: Logger;
}

/** The function a controller runs per key (`namespace/name`); resolves what to do next. */
export type ReconcileFn = (
  key: string,
  ctx: ReconcileContext,
) => Promise<ReconcileResult>;

/**
 * What the controller does with a key whose reconcile threw, as an {@link ErrorPolicy} decides
 * it: `next` is the requeue ({@link ReconcileResult}; `after` keeps the key's failure count, unlike
 * after a success; `done` forgets it), `expected` whether the error is an expected condition.
 */
export interface ErrorDecision {
  /** What happens to the key. */
  next: ReconcileResult;
  /**
   * An expected condition, not a reconcile error: logged at info with this message and fields,
   * counted under the result `requeue` (or `requeue_after` with a delay) and not in
   * `controller_runtime_reconcile_errors_total`. Absent: a reconcile error (logged, counted).
   */
  expected?: { message: string; fields?: Record<string, unknown> };
}

/**
 * The default decisions ({@link ErrorPolicy} falls back to them): a fenced write (`FencedError`:
 * this replica may not write now, docs/scenarios.md S13) and a 409 Conflict (an optimistic lock lost to a newer
 * write, e.g. a status computed from an older resourceVersion) are requeued with backoff; a
 * throttled request (429, or 503 with Retry-After) after the larger of the backoff and its
 * Retry-After (docs/scenarios.md S16); none of them is a reconcile error. A {@link TerminalError}
 * is a reconcile error that is not re-added (`terminal`). Anything else: `undefined` (an error,
 * with backoff).
 */
export function defaultErrorPolicy(err: unknown): ErrorDecision | undefined {
  if (err instanceof TerminalError) return { next: Reconcile.terminal };
  if (isFenced(err)) {
    return {
      next: Reconcile.backoff(),
      expected: {
        message: err.reason === "NotLeaseHolder"
          ? "Write refused by the apiserver: not the Lease holder; requeued"
          : "Writes fenced: the Lease renewal is stale; requeued",
        fields: { reason: err.reason, request: err.request, renewalAgeMs: err.renewalAgeMs },
      },
    };
  }
  if (isThrottled(err)) {
    return {
      next: Reconcile.backoff((err.retryAfterSeconds ?? 0) * 1000),
      expected: {
        message: "Throttled by the apiserver; requeued",
        fields: { code: err.code, request: err.request, retryAfterSeconds: err.retryAfterSeconds },
      },
    };
  }
  if (isConflict(err)) {
    return {
      next: Reconcile.backoff(),
      expected: {
        message: "Conflict with a newer version; requeued",
        fields: { request: (err as { request?: string }).request },
      },
    };
  }
  return undefined;
}

/** Options of {@link Controller}. */
export interface ControllerOptions {
  /** Name in metrics (`controller` and queue `name` labels) and logs. */
  name: string;
  /** Reconciles one key. */
  reconcile: ReconcileFn;
  /** Workers (at least 1); default {@link DEFAULT_MAX_CONCURRENT_RECONCILES}. */
  maxConcurrentReconciles?: number;
  /** Bound of one reconcile (ms); 0 = none. */
  reconcileTimeoutMs?: number;
  /** Every key of `allKeys` is added again this often (ms, ±10% jitter); 0 = never. Default {@link DEFAULT_SYNC_PERIOD_MS}. */
  syncPeriodMs?: number;
  /** Requeue decision after an error; default {@link defaultErrorPolicy}. See {@link ErrorPolicy}. */
  errorPolicy?: ErrorPolicy;
  /** Keys of every primary object (for the sync period and for a new leader's first pass). */
  allKeys?: () => string[];
  /** Where its metrics go; default none. */
  metrics?: Metrics;
  /** Time for the queue's delays and the sync period; default the real clock. */
  clock?: Clock;
  /** The work queue; default a new one with client-go's rate limits and the metric hooks. */
  queue?: WorkQueue;
  /**
   * Health of the path to the apiserver (the client's): while it is known down, a reconcile that
   * failed for want of an answer is logged once per outage (the first claims the report) and at
   * debug level after that; default none (every error logged).
   */
  health?: ConnectionHealth;
}

/**
 * Whether `err` is a failure to reach the apiserver rather than an answer from it: an
 * {@link UnreachableError} in its cause chain, or any failure while `health` says the path is
 * failing (a watch stream broken mid-way by the outage).
 */
export function unreachable(err: unknown, health?: ConnectionHealth): boolean {
  return isUnreachable(err) ||
    (health !== undefined && !health.healthy && !(err instanceof ApiError));
}

/**
 * How to log a failure that may belong to an apiserver outage (the rule of one line per outage,
 * docs/design/transport.md): `other` when `err` is not a failure to reach the apiserver
 * ({@link unreachable}; a {@link FencedError} never is), the path is healthy again, or there is
 * no `health` — log it as usual; `report` when it is, and this
 * caller claimed the outage's one report ({@link ConnectionHealth.claimReport}) — log it as a
 * warning naming the outage; `quiet` when another caller has reported the outage — log at debug.
 * @param err what the request or attempt failed with
 * @param health the health of the path the request took
 */
export function outageLogLevel(
  err: unknown,
  health: ConnectionHealth | undefined,
): "other" | "report" | "quiet" {
  // A fenced write is not the outage's (it says so elsewhere); nor is a failure that comes
  // after the path answered again.
  if (!health || health.healthy || isFenced(err) || !unreachable(err, health)) return "other";
  return health.claimReport() ? "report" : "quiet";
}

/**
 * Logs a failed attempt (a Lease renewal, a shard round, a membership renewal) by
 * {@link outageLogLevel}: a warning `message` with `error` and `fields`, plus `outage` when it is
 * the outage's one report; at debug when another caller told the outage already.
 * @param logger where to log
 * @param message the line, e.g. `Lease attempt failed`
 * @param err what the attempt failed with
 * @param health the health of the path the attempt's client took
 * @param fields further properties (e.g. `lease`)
 */
export function logAttemptFailure(
  logger: Logger,
  message: string,
  err: unknown,
  health: ConnectionHealth | undefined,
  fields: Record<string, unknown> = {},
): void {
  const level = outageLogLevel(err, health);
  const props = {
    ...fields,
    error: errorText(err),
    ...(level === "report" ? { outage: OUTAGE_NOTE } : {}),
  };
  if (level === "quiet") logger.debug(message, props);
  else logger.warn(message, props);
}

/** Runs reconcile workers over a work queue. */
export class Controller {
  /** The work queue; informer handlers add keys to it. */
  readonly queue: WorkQueue;
  /** Name given in {@link ControllerOptions}. */
  readonly name: string;
  #o: ControllerOptions;
  #clock: Clock;
  #log: Logger;
  #seq = 0;
  #fence = new AbortController();
  #active = 0;
  /**
   * With tracing on: per key waiting in the queue, the span context of the first watch event
   * that enqueued it since it was last taken (the one its queue wait counts from); taken by the
   * reconcile, which links to it.
   */
  #enqueuedBy = new Map<string, SpanRef>();

  /**
   * A controller with its queue (and its metrics series at 0); workers start with
   * {@link Controller.run}.
   * @param o see {@link ControllerOptions}
   */
  constructor(o: ControllerOptions) {
    this.#o = o;
    this.name = o.name;
    this.#clock = o.clock ?? realClock;
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
      for (const c of [m.reconcileErrors, m.terminalReconcileErrors, m.reconcilePanics]) {
        c.inc({ controller: o.name }, 0);
      }
      m.reconcileTimeouts.inc({ controller: o.name }, 0);
      for (const result of ["success", "error", "requeue", "requeue_after"]) {
        m.reconcileTotal.inc({ controller: o.name, result }, 0);
      }
      m.queueAdds.inc(labels, 0);
      m.queueRetries.inc(labels, 0);
      m.activeWorkers.set({ controller: o.name }, 0);
    }
  }

  /** Number of workers {@link Controller.run} starts: `maxConcurrentReconciles`, at least 1. */
  get workers(): number {
    return Math.max(1, this.#o.maxConcurrentReconciles ?? DEFAULT_MAX_CONCURRENT_RECONCILES);
  }

  /** Reconciles running now. */
  get activeWorkers(): number {
    return this.#active;
  }

  /**
   * Adds a key (deduplicated). `cause`: with tracing on, the span context of the watch event that
   * enqueued it (tracing.ts `enqueueSpan`); the key's next reconcile links to the first cause
   * given since the key was last taken, later ones are dropped (the queue keeps one entry per key).
   * `priority`: the queue's ({@link QueuePriority}; default `"normal"`).
   */
  enqueue(key: string, cause?: SpanRef, priority: QueuePriority = "normal"): void {
    if (cause && !this.#enqueuedBy.has(key)) this.#enqueuedBy.set(key, cause);
    this.queue.add(key, priority);
  }

  /**
   * Adds every primary key (`allKeys`) that `matches` names, e.g. the keys of a shard whose
   * objects are all in the caches now (docs/design/sharding.md). Returns how many were added.
   */
  enqueueAll(matches: (key: string) => boolean = () => true): number {
    let n = 0;
    for (const k of this.#o.allKeys?.() ?? []) {
      if (!matches(k)) continue;
      this.queue.add(k);
      n++;
    }
    return n;
  }

  /**
   * Aborts every in-flight reconcile now (self-fencing after a lost Lease); their signal's reason
   * is `reason`, by default a {@link FencedError} (reason `NotHeld`, in flight) — the one error of
   * "not allowed to write" (docs/design/leadership.md).
   */
  fence(
    reason: FencedError = new FencedError(
      "NotHeld",
      "reconcile in flight when leadership was lost",
      undefined,
      undefined,
      true,
    ),
  ): void {
    this.#fence.abort(reason);
  }

  /**
   * The decision for a reconcile that threw: a timeout is an error (backoff), a fence abort (a
   * lost Lease) an expected requeue; otherwise the policy's, or {@link defaultErrorPolicy}'s.
   */
  #decide(
    err: unknown,
    key: string,
    ctx: ReconcileContext,
    timedOut: boolean,
  ): ErrorDecision | undefined {
    if (timedOut) return undefined;
    if (this.#fence.signal.aborted) {
      return {
        next: Reconcile.backoff(),
        expected: { message: "Reconcile aborted: leadership lost; requeued" },
      };
    }
    try {
      return this.#o.errorPolicy?.(err, key, ctx) ?? defaultErrorPolicy(err);
    } catch (policyErr) {
      ctx.logger.error("Error policy failed; retrying with backoff", {
        error: errorText(policyErr),
      });
      return undefined;
    }
  }

  /** Counts one reconcile error, and whether it was terminal and whether a panic. */
  #countError(terminal: boolean, panic: boolean): void {
    const m = this.#o.metrics;
    const labels = { controller: this.name };
    m?.reconcileErrors.inc(labels);
    if (terminal) m?.terminalReconcileErrors.inc(labels);
    if (panic) m?.reconcilePanics.inc(labels);
  }

  #updateGauges(): void {
    const m = this.#o.metrics;
    if (!m) return;
    const labels = { name: this.name, controller: this.name };
    m.queueDepth.set({ ...labels, priority: "" }, this.queue.depth);
    m.unfinishedWork.set(labels, this.queue.unfinishedWorkSeconds());
    m.longestRunning.set(labels, this.queue.longestRunningSeconds());
    m.activeWorkers.set({ controller: this.name }, this.#active);
  }

  async #processOne(key: string): Promise<void> {
    const o = this.#o;
    const reconcileID = crypto.randomUUID();
    const slash = key.indexOf("/");
    const namespace = slash >= 0 ? key.slice(0, slash) : "";
    const name = slash >= 0 ? key.slice(slash + 1) : key;
    // Tracing off: no span, no context, no OpenTelemetry call (tracing.ts's contract).
    let span: ReconcileSpan | undefined;
    if (tracingEnabled()) {
      const enqueuedBy = this.#enqueuedBy.get(key);
      this.#enqueuedBy.delete(key);
      span = startReconcileSpan({
        controller: this.name,
        key,
        namespace,
        name,
        reconcileID,
        enqueuedBy,
      });
    }
    const logger = this.#log.with(
      span
        ? { namespace, name, reconcileID, traceID: span.traceID, spanID: span.spanID }
        : { namespace, name, reconcileID },
    );
    // Cleared when the reconcile ends (lib/kube/deadline.ts: an uncleared bound holds its timer
    // and signals for the whole bound).
    const timeout = o.reconcileTimeoutMs ? deadline(o.reconcileTimeoutMs) : undefined;
    const signal = AbortSignal.any(
      timeout ? [this.#fence.signal, timeout.signal] : [this.#fence.signal],
    );
    // The bound ran out before anything else aborted the reconcile (controller-runtime counts a
    // timeout only when its own deadline is what ended the context).
    const timedOut = () =>
      timeout !== undefined && signal.aborted && signal.reason === timeout.signal.reason;
    const started = performance.now();
    let result: "success" | "error" | "requeue" | "requeue_after" = "success";
    let requeueAfterMs: number | undefined;
    let errorMessage: string | undefined;
    const ctx: ReconcileContext = { signal, reconcileID, logger };
    this.#active++;
    try {
      const r = await (span
        ? withReconcileSpan(span, () => o.reconcile(key, ctx))
        : o.reconcile(key, ctx));
      if (r.kind === "after" && r.ms > 0) {
        result = "requeue_after";
        requeueAfterMs = r.ms;
        this.queue.forget(key);
        this.queue.addAfter(key, r.ms);
      } else if (r.kind === "backoff") {
        result = "requeue";
        requeueAfterMs = this.queue.addRateLimited(key, r.minMs);
      } else {
        this.queue.forget(key);
      }
    } catch (err) {
      const decision = this.#decide(err, key, ctx, timedOut());
      const next = decision?.next ?? Reconcile.backoff();
      let delayMs: number | undefined;
      if (next.kind === "after" && next.ms > 0) {
        delayMs = next.ms;
        this.queue.addAfter(key, delayMs);
      } else if (next.kind === "backoff") {
        delayMs = this.queue.addRateLimited(key, next.minMs);
      } else if (next.kind === "done" || next.kind === "after") {
        this.queue.forget(key);
      }
      if (decision?.expected) {
        requeueAfterMs = delayMs;
        result = (next.kind === "after" && next.ms > 0) ||
            (next.kind === "backoff" && next.minMs > 0)
          ? "requeue_after"
          : "requeue";
        logger.info(decision.expected.message, {
          ...decision.expected.fields,
          retryInMs: delayMs === undefined ? undefined : Math.round(delayMs),
        });
      } else {
        result = "error";
        requeueAfterMs = delayMs;
        const panic = isPanic(err);
        this.#countError(next.kind === "terminal", panic);
        // While the apiserver is known unreachable, the outage is told once (by whoever fails
        // first: this reconcile, a watch, or the connection's own report); each key's failure
        // then goes to debug, and the connection logs its recovery.
        const down = !timedOut() && unreachable(err, o.health);
        const claimed = down && o.health ? o.health.claimReport() : false;
        const fields = {
          error: timedOut()
            ? `reconcile timed out after ${o.reconcileTimeoutMs} ms`
            : errorText(err),
          retryInMs: delayMs === undefined ? undefined : Math.round(delayMs),
          retries: this.queue.numRequeues(key),
          ...(next.kind === "terminal" ? { terminal: true } : {}),
          ...(panic ? { panic: true, stack: err instanceof Error ? err.stack : undefined } : {}),
        };
        errorMessage = fields.error;
        if (!down || !o.health) logger.error("Reconciler error", fields);
        else if (claimed) logger.warn(MESSAGES.reconcileUnreachable, fields);
        else logger.debug("Reconciler error", fields);
      }
    } finally {
      const didTimeOut = timedOut();
      timeout?.clear();
      this.#active--;
      if (didTimeOut) o.metrics?.reconcileTimeouts.inc({ controller: this.name });
      o.metrics?.reconcileTime.observe(
        { controller: this.name },
        (performance.now() - started) / 1000,
      );
      o.metrics?.reconcileTotal.inc({ controller: this.name, result });
      if (span) {
        endReconcileSpan(span, {
          result,
          requeue: requeueAfterMs !== undefined,
          requeueAfterMs,
          error: errorMessage,
        });
      }
      this.queue.done(key);
    }
  }

  /**
   * Runs the workers until `signal` aborts, then stops handing out keys and waits up to `graceMs`
   * for in-flight reconciles before aborting them. Resolves when all workers have stopped.
   */
  async run(signal: AbortSignal, graceMs = 30_000): Promise<void> {
    const o = this.#o;
    const workers = this.workers;
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
    // The gauges are set when they are read, not at every reconcile (Metrics.beforeScrape).
    const stopGauges = o.metrics?.beforeScrape(() => this.#updateGauges());
    const onStop = () => this.queue.shutDown();
    signal.addEventListener("abort", onStop, { once: true });
    if (signal.aborted) onStop();
    const loops = Array.from({ length: workers }, async () => {
      while (true) {
        const key = await this.queue.get();
        if (key === undefined) return;
        await this.#processOne(key);
        const turn = turnIfHeld();
        if (turn) await turn;
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
    stopGauges?.();
    this.#updateGauges();
  }
}

/**
 * One shared cache of one resource (client-go `SharedIndexInformer`): a {@link Store} kept in
 * sync by a {@link Reflector}. Made by {@link Manager.informer}, which returns the same informer
 * for the same resource, namespace and selectors, so controllers that watch the same objects share
 * one list+watch and one cache.
 */
export interface Informer<T extends KubeObject> {
  /** Name in `/readyz` (`informer-<name>`) and logs: the resource's plural, made unique. */
  readonly name: string;
  /** What is watched. */
  readonly resource: ResourceType;
  /**
   * Namespace watched; undefined for all namespaces (or a cluster-scoped resource), and when
   * several are watched ({@link Informer.namespaces}).
   */
  readonly namespace?: string;
  /** The namespaces watched when more than one (one reflector each, one shared store). */
  readonly namespaces?: readonly string[];
  /** Label selector of the list and watch, if any (Kubernetes label selector syntax). */
  readonly labelSelector?: string;
  /** Field selector of the list and watch, if any. */
  readonly fieldSelector?: string;
  /** The cache; read it in reconciles, never write it. */
  readonly store: Store<T>;
  /** Keeps the store in sync; the manager runs it. */
  readonly reflector: InformerReflector;
}

/**
 * What the manager uses of an informer's reflector: run it, wait for its first sync, and its
 * status for `/readyz` ({@link InformerStatus}). A {@link Reflector}, or several behind one
 * (`MultiNamespaceReflector`, informers.ts).
 */
export interface InformerReflector extends InformerStatus {
  /** Lists and watches until `signal` aborts; rejects on a failure it does not retry. */
  run(signal: AbortSignal): Promise<void>;
  /** Resolves once the first list has been applied to the store. */
  waitForSync(): Promise<void>;
}

/**
 * A resource a controller owns: each change of one of its objects enqueues the key of the
 * object named by its controller ownerReference (`controller: true`), when that reference's kind
 * and API group are the primary's (controller-runtime `Owns`, kube-rs `owns`). Deletions too, so
 * a deleted owned object is re-created.
 */
export interface OwnedWatch {
  /** The owned objects' informer; its store gets store.ts's `CONTROLLER_UID_INDEX` index. */
  informer: Informer<KubeObject>;
  /** Filters of its changes (all must pass); default none. */
  predicates?: Predicate<KubeObject>[];
  /**
   * Changes (of those the predicates let through) whose keys go in the queue's high lane
   * ({@link QueuePriority}): ones that finish work under way, e.g. an owned Pod becoming Ready,
   * whose owner then reports Ready with one write instead of waiting behind every new key.
   * Decided as a predicate is (an omitted decision passes: give `create`, `update` and `delete`).
   * Default none: every change is normal.
   */
  priority?: Predicate<KubeObject>;
}

/**
 * Any other resource a controller watches, with the function that maps one of its objects to
 * the primary keys (`namespace/name`) to reconcile (controller-runtime `Watches` with
 * `EnqueueRequestsFromMapFunc`, kube-rs `watches`).
 */
export interface MappedWatch<T extends KubeObject = KubeObject> {
  /** The watched objects' informer. */
  informer: Informer<T>;
  /** Keys to enqueue for a change of `obj` (new state for updates; both states are mapped). */
  map(obj: T): string[];
  /** Filters of its changes (all must pass); default none. */
  predicates?: Predicate<T>[];
  /** Changes whose keys go in the high lane, as {@link OwnedWatch.priority}; default none. */
  priority?: Predicate<T>;
}

/**
 * A controller as declared by its user (controller-runtime's builder, kube-rs `Controller`): the
 * primary resource, what it owns and watches, and how each key is reconciled. Given to
 * {@link Manager.add}, which wires the informers' changes to the work queue and runs the workers
 * while this replica leads.
 */
export interface ControllerDefinition<P extends KubeObject> {
  /** Name in metrics (`controller` label) and logs; unique per manager. */
  name: string;
  /** The primary resource; its keys are what `reconcile` gets. */
  for: Informer<P>;
  /** Filters of primary changes (all must pass); default none: every change enqueues. */
  predicates?: Predicate<P>[];
  /** Owned resources, mapped to their owner through the controller ownerReference. */
  owns?: OwnedWatch[];
  /** Other watched resources with their mapping functions. */
  watches?: MappedWatch[];
  /** Reconciles one key; see {@link ReconcileFn}. */
  reconcile: ReconcileFn;
  /** Requeue decision after an error; default {@link defaultErrorPolicy}. See {@link ErrorPolicy}. */
  errorPolicy?: ErrorPolicy;
  /** Workers; default the manager's, else {@link DEFAULT_MAX_CONCURRENT_RECONCILES}. */
  maxConcurrentReconciles?: number;
  /** Bound of one reconcile (ms; 0 = none); default the manager's. */
  reconcileTimeoutMs?: number;
  /** Every primary key is reconciled again this often (ms); default the manager's. */
  syncPeriodMs?: number;
}

/** The API group of an apiVersion: `apps` of `apps/v1`, "" for the core `v1`. */
function groupOf(apiVersion: string): string {
  const slash = apiVersion.indexOf("/");
  return slash < 0 ? "" : apiVersion.slice(0, slash);
}

/**
 * A mapping function: the key (`namespace/name`) of the object's controller owner when that owner
 * is of `owner`'s kind and API group (any version), else none. Owners are in the object's
 * namespace (cluster-scoped owners of namespaced objects are keyed by name alone); Kubernetes
 * "Owners and dependents" forbids a namespaced owner in another namespace.
 */
export function controllerOwnerKeys(owner: ResourceType): (obj: KubeObject) => string[] {
  const group = groupOf(owner.apiVersion);
  return (obj) => {
    const ref = controllerOf(obj);
    if (!ref || ref.kind !== owner.kind || groupOf(ref.apiVersion) !== group) return [];
    return [owner.namespaced ? `${obj.metadata?.namespace}/${ref.name}` : ref.name];
  };
}
