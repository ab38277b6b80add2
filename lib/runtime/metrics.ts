/**
 * Prometheus metrics (prom-client) under the names controller-runtime and client-go export, so
 * existing dashboards work: `controller_runtime_*` (reconciles, errors, terminal errors, panics,
 * timeouts, workers), `workqueue_*`, `rest_client_requests_total`,
 * `rest_client_request_duration_seconds`, `leader_election_master_status`, plus process metrics, and the
 * runtime's own under a prefix its user sets ({@link MetricsOptions.prefix}, default `appservice`):
 * `<prefix>_reflector_*` (lists, relists, watch errors, watches open) and
 * `<prefix>_leader_election_changes_total`.
 *
 * @module
 */
import type prom from "prom-client";
import Registry from "prom-client/lib/registry.js";
import Counter from "prom-client/lib/counter.js";
import Gauge from "prom-client/lib/gauge.js";
import Histogram from "prom-client/lib/histogram.js";
import collectDefaultMetrics from "prom-client/lib/defaultMetrics.js";
import perfHooks from "node:perf_hooks";
import { BoundedDelayHistogram } from "./eventloop.ts";

/**
 * The parts of prom-client used here, each loaded from its own module rather than from the
 * package's index, which also loads its Pushgateway (node:http, node:https, node:zlib), cluster
 * aggregation (node:cluster) and Summary (tdigest) — never used here, and measured at ~2.5 MiB of
 * RSS and 40–90 ms of start-up (docs/design/runtime.md, "Loading prom-client"). The types are the
 * package's own.
 */
const client = {
  Registry: Registry as typeof prom.Registry,
  Counter: Counter as typeof prom.Counter,
  Gauge: Gauge as typeof prom.Gauge,
  Histogram: Histogram as typeof prom.Histogram,
  collectDefaultMetrics: collectDefaultMetrics as typeof prom.collectDefaultMetrics,
};

/**
 * Process metrics prom-client reads from `/proc/self` (Linux only): `status` (VmSize, VmData),
 * `fd` and `limits`. Deno opens `/proc` only with `--allow-all` — `--allow-read` is not enough —
 * so under `deno task start`'s permissions (the binary's and the image's too) they cannot be
 * read, and prom-client would export 0 forever. Where `/proc/self` cannot be read they are not
 * exported at all: an absent series is honest, a 0 is a lie. (`process_max_fds` is already left
 * out by prom-client itself then; `process_resident_memory_bytes` comes from Deno.memoryUsage.)
 */
export const PROC_SELF_METRICS = [
  "process_virtual_memory_bytes",
  "process_heap_bytes",
  "process_open_fds",
  "process_max_fds",
] as const;

/** True when this process may read `/proc/self/status` and list `/proc/self/fd`. */
function procSelfReadable(): boolean {
  // Ask first: without read permission at all, a read would prompt on a terminal.
  if (Deno.permissions.querySync({ name: "read", path: "/proc/self" }).state !== "granted") {
    return false;
  }
  try {
    Deno.readTextFileSync("/proc/self/status");
    for (const _ of Deno.readDirSync("/proc/self/fd")) break;
    return true;
  } catch {
    return false; // NotCapable without --allow-all; no /proc off Linux
  }
}

/** Default of {@link MetricsOptions.prefix}: this operator's, so its dashboards stay valid. */
export const DEFAULT_METRICS_PREFIX = "appservice";

/**
 * Buckets (s) of `controller_runtime_reconcile_time_seconds`: controller-runtime's (5 ms to 60 s,
 * finer below 1 s).
 */
export const RECONCILE_TIME_BUCKETS: readonly number[] = [
  0.005,
  0.01,
  0.025,
  0.05,
  0.1,
  0.15,
  0.2,
  0.25,
  0.3,
  0.35,
  0.4,
  0.45,
  0.5,
  0.6,
  0.7,
  0.8,
  0.9,
  1.0,
  1.25,
  1.5,
  1.75,
  2.0,
  2.5,
  3.0,
  3.5,
  4.0,
  4.5,
  5,
  6,
  7,
  8,
  9,
  10,
  15,
  20,
  25,
  30,
  40,
  50,
  60,
];

/**
 * Buckets (s) of `workqueue_queue_duration_seconds` and `workqueue_work_duration_seconds`:
 * client-go's and controller-runtime's, powers of ten from 10 ns to 1000 s (12 buckets).
 */
export const WORKQUEUE_DURATION_BUCKETS: readonly number[] = [
  1e-8,
  1e-7,
  1e-6,
  1e-5,
  1e-4,
  1e-3,
  1e-2,
  1e-1,
  1,
  10,
  100,
  1000,
];

/**
 * Buckets (s) of `rest_client_request_duration_seconds`: controller-runtime's and
 * component-base's for client-go's request latency (5 ms to 60 s).
 */
export const REST_CLIENT_DURATION_BUCKETS: readonly number[] = [
  0.005,
  0.025,
  0.1,
  0.25,
  0.5,
  1,
  2,
  4,
  8,
  15,
  30,
  60,
];

/** Options of {@link Metrics}. */
export interface MetricsOptions {
  /**
   * Prefix of the metrics that are the runtime's own (not controller-runtime's or client-go's
   * names): `<prefix>_reflector_*` and `<prefix>_leader_election_changes_total`; default
   * {@link DEFAULT_METRICS_PREFIX}. A Prometheus metric name prefix: `[a-zA-Z_:][a-zA-Z0-9_:]*`.
   */
  prefix?: string;
}

/**
 * What {@link Metrics.recordRequest} reads of one finished apiserver request (a client's
 * `RequestInfo`).
 */
export interface RequestSample {
  /** HTTP verb, e.g. `GET`. */
  method: string;
  /** HTTP status code as a string, or `<error>` when no answer came. */
  code: string;
  /** host:port of the apiserver. */
  host: string;
  /** Seconds from sending to the answer's headers (or to the failure). */
  durationSeconds: number;
}

/** The registries a metric is registered on. */
type Registers = prom.Registry[];

/** A counter with label names `labels`, registered on `registers`. */
function counter<L extends string>(
  registers: Registers,
  name: string,
  help: string,
  labels: readonly L[],
): prom.Counter<L> {
  return new client.Counter({ name, help, labelNames: labels, registers });
}

/** A gauge with label names `labels`, registered on `registers`. */
function gauge<L extends string>(
  registers: Registers,
  name: string,
  help: string,
  labels: readonly L[],
  collect?: () => void,
): prom.Gauge<L> {
  return new client.Gauge({
    name,
    help,
    labelNames: labels,
    registers,
    ...(collect && { collect }),
  });
}

/** A histogram with label names `labels` and bucket bounds `buckets`, on `registers`. */
function histogram<L extends string>(
  registers: Registers,
  name: string,
  help: string,
  labels: readonly L[],
  buckets: readonly number[],
): prom.Histogram<L> {
  return new client.Histogram({ name, help, labelNames: labels, buckets: [...buckets], registers });
}

/**
 * controller-runtime's per-controller metrics (`controller_runtime_*`, label `controller`);
 * `collect` runs before each scrape of `controller_runtime_active_workers`.
 */
function controllerMetrics(r: Registers, collect: () => void): Pick<
  Metrics,
  | "reconcileTotal"
  | "reconcileErrors"
  | "terminalReconcileErrors"
  | "reconcilePanics"
  | "reconcileTimeouts"
  | "reconcileTime"
  | "maxConcurrentReconciles"
  | "activeWorkers"
> {
  const c = ["controller"] as const;
  return {
    reconcileTotal: counter(
      r,
      "controller_runtime_reconcile_total",
      "Total number of reconciliations per controller",
      ["controller", "result"],
    ),
    reconcileErrors: counter(
      r,
      "controller_runtime_reconcile_errors_total",
      "Total number of reconciliation errors per controller",
      c,
    ),
    terminalReconcileErrors: counter(
      r,
      "controller_runtime_terminal_reconcile_errors_total",
      "Total number of terminal reconciliation errors per controller",
      c,
    ),
    reconcilePanics: counter(
      r,
      "controller_runtime_reconcile_panics_total",
      "Total number of reconciliation panics per controller",
      c,
    ),
    reconcileTimeouts: counter(
      r,
      "controller_runtime_reconcile_timeouts_total",
      "Total number of reconciliation timeouts per controller",
      c,
    ),
    reconcileTime: histogram(
      r,
      "controller_runtime_reconcile_time_seconds",
      "Length of time per reconciliation per controller",
      c,
      RECONCILE_TIME_BUCKETS,
    ),
    maxConcurrentReconciles: gauge(
      r,
      "controller_runtime_max_concurrent_reconciles",
      "Maximum number of concurrent reconciles per controller",
      c,
    ),
    activeWorkers: gauge(
      r,
      "controller_runtime_active_workers",
      "Number of currently used workers per controller",
      c,
      collect,
    ),
  };
}

/**
 * client-go's work-queue metrics as controller-runtime registers them (`workqueue_*`); `collect`
 * runs before each scrape of the gauges (depth, unfinished work, longest running).
 */
function workqueueMetrics(r: Registers, collect: () => void): Pick<
  Metrics,
  | "queueDepth"
  | "queueAdds"
  | "queueDuration"
  | "workDuration"
  | "queueRetries"
  | "unfinishedWork"
  | "longestRunning"
> {
  const q = ["name", "controller"] as const;
  const b = WORKQUEUE_DURATION_BUCKETS;
  return {
    queueDepth: gauge(
      r,
      "workqueue_depth",
      "Current depth of workqueue by workqueue and priority",
      ["name", "controller", "priority"],
      collect,
    ),
    queueAdds: counter(r, "workqueue_adds_total", "Total number of adds handled by workqueue", q),
    queueDuration: histogram(
      r,
      "workqueue_queue_duration_seconds",
      "How long in seconds an item stays in workqueue before being requested",
      q,
      b,
    ),
    workDuration: histogram(
      r,
      "workqueue_work_duration_seconds",
      "How long in seconds processing an item from workqueue takes",
      q,
      b,
    ),
    queueRetries: counter(
      r,
      "workqueue_retries_total",
      "Total number of retries handled by workqueue",
      q,
    ),
    unfinishedWork: gauge(
      r,
      "workqueue_unfinished_work_seconds",
      "How many seconds of work has been done that is in progress and hasn't been " +
        "observed by work_duration",
      q,
      collect,
    ),
    longestRunning: gauge(
      r,
      "workqueue_longest_running_processor_seconds",
      "How many seconds has the longest running processor for workqueue been running",
      q,
      collect,
    ),
  };
}

/** client-go's REST client metrics (`rest_client_*`) and its leader-election gauge. */
function clientGoMetrics(r: Registers): Pick<
  Metrics,
  "restRequests" | "restRequestDuration" | "leaderStatus"
> {
  return {
    restRequests: counter(
      r,
      "rest_client_requests_total",
      "Number of HTTP requests, partitioned by status code, method, and host",
      ["code", "method", "host"],
    ),
    restRequestDuration: histogram(
      r,
      "rest_client_request_duration_seconds",
      "Request latency in seconds. Broken down by verb and host",
      ["verb", "host"],
      REST_CLIENT_DURATION_BUCKETS,
    ),
    leaderStatus: gauge(
      r,
      "leader_election_master_status",
      "Gauge of if the reporting system is master of the relevant lease, 0 indicates " +
        "backup, 1 indicates master. 'name' is the string used to identify the lease",
      ["name"],
    ),
  };
}

/** controller-runtime's certwatcher counters (no labels), of the metrics server's certificate. */
function certwatcherMetrics(r: Registers): Pick<
  Metrics,
  "certificateReads" | "certificateReadErrors"
> {
  return {
    certificateReads: counter(
      r,
      "certwatcher_read_certificate_total",
      "Total number of certificate reads",
      [],
    ),
    certificateReadErrors: counter(
      r,
      "certwatcher_read_certificate_errors_total",
      "Total number of certificate read errors",
      [],
    ),
  };
}

/** The sharding metrics; see {@link Metrics.shardMetrics}. */
export interface ShardMetrics {
  /** `<prefix>_shards_held`. */
  held: prom.Gauge;
  /** `<prefix>_shard_moves_total{shard,change}`. */
  moves: prom.Counter<"shard" | "change">;
  /** `<prefix>_shard_queue_depth{shard}`. */
  queueDepth: prom.Gauge<"shard">;
}

/** The runtime's own metrics, under `prefix` (reflectors and leadership changes). */
function runtimeMetrics(r: Registers, prefix: string): Pick<
  Metrics,
  | "reflectorRelists"
  | "reflectorLists"
  | "leaderChanges"
  | "reflectorWatchErrors"
  | "reflectorWatchesOpen"
> {
  const res = ["resource"] as const;
  return {
    reflectorRelists: counter(
      r,
      `${prefix}_reflector_relists_total`,
      "Relists after 410 Gone, per resource",
      res,
    ),
    reflectorWatchErrors: counter(
      r,
      `${prefix}_reflector_watch_errors_total`,
      "List or watch failures retried with backoff, per resource",
      res,
    ),
    reflectorLists: counter(
      r,
      `${prefix}_reflector_lists_total`,
      "Complete lists applied to the cache (initial and relists), per resource",
      res,
    ),
    leaderChanges: counter(
      r,
      `${prefix}_leader_election_changes_total`,
      "Leadership changes of this process per Lease: acquired, lost or released",
      ["name", "change"],
    ),
    reflectorWatchesOpen: gauge(
      r,
      `${prefix}_reflector_watches_open`,
      "Watches accepted by the apiserver and not yet ended, per resource",
      res,
    ),
  };
}

/**
 * prom-client's default process and Node.js metrics on `registry`, made true for Deno: the
 * event-loop lag from a bounded histogram, the `/proc/self` ones only where they can be read, and
 * the resident memory from Deno.
 */
function addProcessMetrics(registry: prom.Registry): void {
  // prom-client's nodejs_eventloop_lag_* metrics read a perf_hooks.monitorEventLoopDelay()
  // histogram; Deno's is unbounded (docs/design/manager.md, eventloop.ts). Hand prom-client the
  // bounded one instead (sampling every 100 ms, whatever resolution it asks for), for this call
  // only: the metric names and help texts stay prom-client's.
  const original = perfHooks.monitorEventLoopDelay;
  (perfHooks as { monitorEventLoopDelay: unknown }).monitorEventLoopDelay = () =>
    new BoundedDelayHistogram();
  try {
    client.collectDefaultMetrics({ register: registry });
  } finally {
    (perfHooks as { monitorEventLoopDelay: unknown }).monitorEventLoopDelay = original;
  }
  if (!procSelfReadable()) {
    for (const name of PROC_SELF_METRICS) registry.removeSingleMetric(name);
  }
  // prom-client reads process_resident_memory_bytes from /proc/self/status, which Deno opens
  // only with --allow-all (not granted by `deno task start`): it would always read 0. Deno's
  // own memoryUsage().rss needs no permission; the original collect still runs first, so the
  // virtual-memory and heap gauges it also fills keep working where /proc is readable.
  const resident = registry.getSingleMetric("process_resident_memory_bytes") as
    | (prom.Gauge & { collect?: () => void })
    | undefined;
  if (resident) {
    const collect = resident.collect;
    resident.collect = function (this: prom.Gauge) {
      collect?.call(this);
      this.set(Deno.memoryUsage().rss);
    };
  }
}

/**
 * All metrics of one process, on their own registry. Names, types, label names and buckets are
 * controller-runtime's (pkg/internal/controller/metrics, pkg/metrics) and client-go's where they
 * exist.
 */
export class Metrics {
  /** The registry served on `/metrics`. */
  readonly registry: prom.Registry;
  /**
   * `controller_runtime_reconcile_total{controller,result}`: reconciles by result (success,
   * error, requeue, requeue_after).
   */
  declare readonly reconcileTotal: prom.Counter<"controller" | "result">;
  /**
   * `controller_runtime_reconcile_errors_total{controller}`: reconciles that threw (or timed
   * out) with an error the error policy did not call expected; panics and terminal errors
   * included.
   */
  declare readonly reconcileErrors: prom.Counter<"controller">;
  /**
   * `controller_runtime_terminal_reconcile_errors_total{controller}`: reconcile errors that are
   * final (not requeued: a `TerminalError`, or an error policy's `terminal`).
   */
  declare readonly terminalReconcileErrors: prom.Counter<"controller">;
  /**
   * `controller_runtime_reconcile_panics_total{controller}`: reconciles that threw a programming
   * fault (a JavaScript `TypeError`, `ReferenceError`, `RangeError`, `SyntaxError` or
   * `EvalError`, or a thrown value that is not an `Error`) — what a Go reconciler's recovered
   * panic is.
   */
  declare readonly reconcilePanics: prom.Counter<"controller">;
  /**
   * `controller_runtime_reconcile_timeouts_total{controller}`: reconciles whose
   * `reconcileTimeoutMs` bound ran out (whatever they then resolved or threw).
   */
  declare readonly reconcileTimeouts: prom.Counter<"controller">;
  /** `controller_runtime_reconcile_time_seconds{controller}`: duration of one reconcile (s). */
  declare readonly reconcileTime: prom.Histogram<"controller">;
  /** `controller_runtime_max_concurrent_reconciles{controller}`: workers of the controller. */
  declare readonly maxConcurrentReconciles: prom.Gauge<"controller">;
  /** `controller_runtime_active_workers{controller}`: reconciles running now. */
  declare readonly activeWorkers: prom.Gauge<"controller">;
  /**
   * `workqueue_depth{name,controller,priority}`: keys waiting; `priority` is always "" (the queue
   * has no priorities), as controller-runtime's for a queue without them.
   */
  declare readonly queueDepth: prom.Gauge<"name" | "controller" | "priority">;
  /** `workqueue_adds_total{name,controller}`: adds (duplicates included). */
  declare readonly queueAdds: prom.Counter<"name" | "controller">;
  /** `workqueue_queue_duration_seconds{name,controller}`: time from add to a worker taking the key (s). */
  declare readonly queueDuration: prom.Histogram<"name" | "controller">;
  /** `workqueue_work_duration_seconds{name,controller}`: time a worker held the key (s). */
  declare readonly workDuration: prom.Histogram<"name" | "controller">;
  /** `workqueue_retries_total{name,controller}`: rate-limited (backoff) re-adds. */
  declare readonly queueRetries: prom.Counter<"name" | "controller">;
  /** `workqueue_unfinished_work_seconds{name,controller}`: summed age of the reconciles in flight (s). */
  declare readonly unfinishedWork: prom.Gauge<"name" | "controller">;
  /** `workqueue_longest_running_processor_seconds{name,controller}`: age of the oldest reconcile in flight (s). */
  declare readonly longestRunning: prom.Gauge<"name" | "controller">;
  /**
   * `rest_client_requests_total{code,method,host}`: apiserver requests by answer, one per
   * attempt; fed by {@link Metrics.recordRequest}.
   */
  declare readonly restRequests: prom.Counter<"code" | "method" | "host">;
  /**
   * `rest_client_request_duration_seconds{verb,host}`: seconds from sending one attempt to its
   * answer's headers (or its failure), `verb` the HTTP method; fed by
   * {@link Metrics.recordRequest}. client-go times a whole request, its retries and client-side
   * rate limit included.
   */
  declare readonly restRequestDuration: prom.Histogram<"verb" | "host">;
  /**
   * `certwatcher_read_certificate_total`: reads of the secure metrics server's
   * `--metrics-cert-dir` pair (at start and every reload check, 10 s); 0 without one.
   */
  declare readonly certificateReads: prom.Counter;
  /**
   * `certwatcher_read_certificate_errors_total`: those reads that failed (a file unreadable, or a
   * pair that does not load).
   */
  declare readonly certificateReadErrors: prom.Counter;
  /** `leader_election_master_status{name}`: 1 while this process holds the Lease `name`, else 0. */
  declare readonly leaderStatus: prom.Gauge<"name">;
  /** `<prefix>_reflector_relists_total{resource}`: relists after 410 Gone. */
  declare readonly reflectorRelists: prom.Counter<"resource">;
  /** `<prefix>_reflector_lists_total{resource}`: complete lists applied (initial and relists). */
  declare readonly reflectorLists: prom.Counter<"resource">;
  /**
   * `<prefix>_leader_election_changes_total{name,change}`: this process's leadership changes of
   * the Lease `name`, `change` one of `acquired`, `lost` (renewal failed) and `released`.
   */
  declare readonly leaderChanges: prom.Counter<"name" | "change">;
  /** `<prefix>_reflector_watch_errors_total{resource}`: failed lists and watches. */
  declare readonly reflectorWatchErrors: prom.Counter<"resource">;
  /**
   * `<prefix>_reflector_watches_open{resource}`: watches the apiserver has accepted and that
   * have not ended, summed over the reflectors of a resource; each reflector's series exists (at
   * 0) from its creation. Equal to the number of reflectors when every one is watching.
   */
  declare readonly reflectorWatchesOpen: prom.Gauge<"resource">;

  /** The prefix of the runtime's own metrics. */
  readonly prefix: string;
  #shards?: ShardMetrics;

  /**
   * The sharding metrics (docs/design/sharding.md), registered on the first call (by a manager
   * with more than one shard; with one they do not exist):
   * - `<prefix>_shards_held`: shards whose Lease this process holds now;
   * - `<prefix>_shard_moves_total{shard,change}`: `change` one of `acquired`, `released`
   *   (given back: fair share or shutdown) and `lost` (renewal past the renew deadline, or
   *   another holder seen);
   * - `<prefix>_shard_queue_depth{shard}`: keys of the shard waiting in the work queues, summed
   *   over the controllers.
   */
  shardMetrics(): ShardMetrics {
    if (this.#shards) return this.#shards;
    const r = [this.registry];
    const p = this.prefix;
    this.#shards = {
      held: gauge(r, `${p}_shards_held`, "Shards whose Lease this process holds", []),
      moves: counter(
        r,
        `${p}_shard_moves_total`,
        "Shard moves of this process: acquired, released or lost",
        ["shard", "change"],
      ),
      queueDepth: gauge(
        r,
        `${p}_shard_queue_depth`,
        "Keys of the shard waiting in the work queues",
        ["shard"],
      ),
    };
    return this.#shards;
  }

  /**
   * Creates every metric on a fresh registry, with default process metrics.
   * @param options see {@link MetricsOptions}
   * @throws Error for a prefix that is not a Prometheus metric name
   */
  constructor(options: MetricsOptions = {}) {
    const prefix = options.prefix ?? DEFAULT_METRICS_PREFIX;
    if (!/^[a-zA-Z_:][a-zA-Z0-9_:]*$/.test(prefix)) {
      throw new Error(`metrics prefix ${JSON.stringify(prefix)} is not a Prometheus metric name`);
    }
    this.prefix = prefix;
    this.registry = new client.Registry();
    const r = [this.registry];
    const collect = () => {
      for (const update of this.#beforeScrape) update();
    };
    Object.assign(
      this,
      controllerMetrics(r, collect),
      workqueueMetrics(r, collect),
      clientGoMetrics(r),
      certwatcherMetrics(r),
      runtimeMetrics(r, prefix),
    );
    addProcessMetrics(this.registry);
  }

  /** See {@link Metrics.beforeScrape}. */
  #beforeScrape = new Set<() => void>();

  /**
   * Runs `update` whenever the work-queue gauges (`workqueue_depth`,
   * `workqueue_unfinished_work_seconds`, `workqueue_longest_running_processor_seconds`) or
   * `controller_runtime_active_workers` are read (a scrape, or `get()`), so it can set them from the
   * state it keeps: they are right at every read and cost nothing between reads (client-go sets
   * the depth on every add and get, and the others every 500 ms). `update` must be cheap and must
   * not throw. Returns the function that removes it.
   */
  beforeScrape(update: () => void): () => void {
    this.#beforeScrape.add(update);
    return () => this.#beforeScrape.delete(update);
  }

  /**
   * Counts one finished apiserver request attempt in `rest_client_requests_total` and observes
   * its duration in `rest_client_request_duration_seconds`: give it to a client as its
   * `onRequest` (or call it from one).
   */
  recordRequest(r: RequestSample): void {
    this.restRequests.inc({ code: r.code, method: r.method, host: r.host });
    this.restRequestDuration.observe({ verb: r.method, host: r.host }, r.durationSeconds);
  }

  /**
   * Adds a gauge whose samples are computed at each scrape by `collect` — the state of cached
   * objects (kube-state-metrics' way: counts by label read from an informer's store when asked,
   * no bookkeeping on each event). `collect` returns `[labels, value]` pairs; a label set it
   * leaves out is not exported at that scrape.
   * @param name metric name (Prometheus syntax; the controller's own prefix, not the runtime's)
   * @param help help text
   * @param labels the label names every pair's labels carry
   * @param collect the samples of one scrape; it runs on the scrape's path, so keep it O(cache)
   * @throws Error when a metric of that name exists on the registry (prom-client)
   */
  addStateGauge<L extends string>(
    name: string,
    help: string,
    labels: readonly L[],
    collect: () => Iterable<[Record<L, string>, number]>,
  ): void {
    new client.Gauge<L>({
      name,
      help,
      labelNames: labels,
      registers: [this.registry],
      collect(this: prom.Gauge<L>) {
        this.reset();
        for (const [l, v] of collect()) this.set(l as prom.LabelValues<L>, v);
      },
    });
  }

  /** The exposition text for `/metrics`. */
  text(): Promise<string> {
    return this.registry.metrics();
  }
}
