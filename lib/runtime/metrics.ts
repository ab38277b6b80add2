/**
 * Prometheus metrics (prom-client) under the names controller-runtime and client-go export, so
 * existing dashboards work: `controller_runtime_reconcile_*`, `workqueue_*`,
 * `rest_client_requests_total`, `leader_election_master_status`, plus process metrics, and the
 * runtime's own under a prefix its user sets ({@link MetricsOptions.prefix}, default `appservice`):
 * `<prefix>_reflector_*` (lists, relists, watch errors, watches open) and
 * `<prefix>_leader_election_changes_total`.
 *
 * @module
 */
import client from "prom-client";
import perfHooks from "node:perf_hooks";
import { BoundedDelayHistogram } from "./eventloop.ts";

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

/** Options of {@link Metrics}. */
export interface MetricsOptions {
  /**
   * Prefix of the metrics that are the runtime's own (not controller-runtime's or client-go's
   * names): `<prefix>_reflector_*` and `<prefix>_leader_election_changes_total`; default
   * {@link DEFAULT_METRICS_PREFIX}. A Prometheus metric name prefix: `[a-zA-Z_:][a-zA-Z0-9_:]*`.
   */
  prefix?: string;
}

/** All metrics of one process, on their own registry. */
export class Metrics {
  /** The registry served on `/metrics`. */
  readonly registry: client.Registry;
  /** `controller_runtime_reconcile_total{controller,result}`: reconciles by result (success, error, requeue, requeue_after). */
  readonly reconcileTotal: client.Counter<"controller" | "result">;
  /** `controller_runtime_reconcile_errors_total{controller}`: reconciles that threw or timed out. */
  readonly reconcileErrors: client.Counter<"controller">;
  /** `controller_runtime_reconcile_time_seconds{controller}`: duration of one reconcile (s). */
  readonly reconcileTime: client.Histogram<"controller">;
  /** `controller_runtime_max_concurrent_reconciles{controller}`: workers of the controller. */
  readonly maxConcurrentReconciles: client.Gauge<"controller">;
  /** `controller_runtime_active_workers{controller}`: reconciles running now. */
  readonly activeWorkers: client.Gauge<"controller">;
  /** `workqueue_depth{name,controller}`: keys waiting. */
  readonly queueDepth: client.Gauge<"name" | "controller">;
  /** `workqueue_adds_total{name,controller}`: adds (duplicates included). */
  readonly queueAdds: client.Counter<"name" | "controller">;
  /** `workqueue_queue_duration_seconds{name,controller}`: time from add to a worker taking the key (s). */
  readonly queueDuration: client.Histogram<"name" | "controller">;
  /** `workqueue_work_duration_seconds{name,controller}`: time a worker held the key (s). */
  readonly workDuration: client.Histogram<"name" | "controller">;
  /** `workqueue_retries_total{name,controller}`: rate-limited (backoff) re-adds. */
  readonly queueRetries: client.Counter<"name" | "controller">;
  /** `workqueue_unfinished_work_seconds{name,controller}`: summed age of the reconciles in flight (s). */
  readonly unfinishedWork: client.Gauge<"name" | "controller">;
  /** `workqueue_longest_running_processor_seconds{name,controller}`: age of the oldest reconcile in flight (s). */
  readonly longestRunning: client.Gauge<"name" | "controller">;
  /** `rest_client_requests_total{code,method,host}`: apiserver requests by answer; fed by a client's `onRequest`. */
  readonly restRequests: client.Counter<"code" | "method" | "host">;
  /** `leader_election_master_status{name}`: 1 while this process holds the Lease `name`, else 0. */
  readonly leaderStatus: client.Gauge<"name">;
  /** `<prefix>_reflector_relists_total{resource}`: relists after 410 Gone. */
  readonly reflectorRelists: client.Counter<"resource">;
  /** `<prefix>_reflector_lists_total{resource}`: complete lists applied (initial and relists). */
  readonly reflectorLists: client.Counter<"resource">;
  /**
   * `<prefix>_leader_election_changes_total{name,change}`: this process's leadership changes of
   * the Lease `name`, `change` one of `acquired`, `lost` (renewal failed) and `released`.
   */
  readonly leaderChanges: client.Counter<"name" | "change">;
  /** `<prefix>_reflector_watch_errors_total{resource}`: failed lists and watches. */
  readonly reflectorWatchErrors: client.Counter<"resource">;
  /**
   * `<prefix>_reflector_watches_open{resource}`: watches the apiserver has accepted and that
   * have not ended, summed over the reflectors of a resource; each reflector's series exists (at
   * 0) from its creation. Equal to the number of reflectors when every one is watching.
   */
  readonly reflectorWatchesOpen: client.Gauge<"resource">;

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
    const registers = [this.registry = new client.Registry()];
    const buckets = [
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
    const qBuckets = [1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1, 10];
    this.reconcileTotal = new client.Counter({
      name: "controller_runtime_reconcile_total",
      help: "Total number of reconciliations per controller",
      labelNames: ["controller", "result"],
      registers,
    });
    this.reconcileErrors = new client.Counter({
      name: "controller_runtime_reconcile_errors_total",
      help: "Total number of reconciliation errors per controller",
      labelNames: ["controller"],
      registers,
    });
    this.reconcileTime = new client.Histogram({
      name: "controller_runtime_reconcile_time_seconds",
      help: "Length of time per reconciliation per controller",
      labelNames: ["controller"],
      buckets,
      registers,
    });
    this.maxConcurrentReconciles = new client.Gauge({
      name: "controller_runtime_max_concurrent_reconciles",
      help: "Maximum number of concurrent reconciles per controller",
      labelNames: ["controller"],
      registers,
    });
    this.activeWorkers = new client.Gauge({
      name: "controller_runtime_active_workers",
      help: "Number of currently used workers per controller",
      labelNames: ["controller"],
      registers,
    });
    const q = ["name", "controller"] as const;
    this.queueDepth = new client.Gauge({
      name: "workqueue_depth",
      help: "Current depth of workqueue",
      labelNames: q,
      registers,
    });
    this.queueAdds = new client.Counter({
      name: "workqueue_adds_total",
      help: "Total number of adds handled by workqueue",
      labelNames: q,
      registers,
    });
    this.queueDuration = new client.Histogram({
      name: "workqueue_queue_duration_seconds",
      help: "How long in seconds an item stays in workqueue before being requested",
      labelNames: q,
      buckets: qBuckets,
      registers,
    });
    this.workDuration = new client.Histogram({
      name: "workqueue_work_duration_seconds",
      help: "How long in seconds processing an item from workqueue takes",
      labelNames: q,
      buckets: qBuckets,
      registers,
    });
    this.queueRetries = new client.Counter({
      name: "workqueue_retries_total",
      help: "Total number of retries handled by workqueue",
      labelNames: q,
      registers,
    });
    this.unfinishedWork = new client.Gauge({
      name: "workqueue_unfinished_work_seconds",
      help: "How many seconds of work has been done that is in progress and hasn't been observed " +
        "by work_duration",
      labelNames: q,
      registers,
    });
    this.longestRunning = new client.Gauge({
      name: "workqueue_longest_running_processor_seconds",
      help: "How many seconds has the longest running processor for workqueue been running",
      labelNames: q,
      registers,
    });
    this.restRequests = new client.Counter({
      name: "rest_client_requests_total",
      help: "Number of HTTP requests, partitioned by status code, method, and host",
      labelNames: ["code", "method", "host"],
      registers,
    });
    this.leaderStatus = new client.Gauge({
      name: "leader_election_master_status",
      help: "Gauge of if the reporting system is master of the relevant lease, 0 indicates " +
        "backup, 1 indicates master. 'name' is the string used to identify the lease",
      labelNames: ["name"],
      registers,
    });
    this.reflectorRelists = new client.Counter({
      name: `${prefix}_reflector_relists_total`,
      help: "Relists after 410 Gone, per resource",
      labelNames: ["resource"],
      registers,
    });
    this.reflectorWatchErrors = new client.Counter({
      name: `${prefix}_reflector_watch_errors_total`,
      help: "List or watch failures retried with backoff, per resource",
      labelNames: ["resource"],
      registers,
    });
    this.reflectorLists = new client.Counter({
      name: `${prefix}_reflector_lists_total`,
      help: "Complete lists applied to the cache (initial and relists), per resource",
      labelNames: ["resource"],
      registers,
    });
    this.leaderChanges = new client.Counter({
      name: `${prefix}_leader_election_changes_total`,
      help: "Leadership changes of this process per Lease: acquired, lost or released",
      labelNames: ["name", "change"],
      registers,
    });
    this.reflectorWatchesOpen = new client.Gauge({
      name: `${prefix}_reflector_watches_open`,
      help: "Watches accepted by the apiserver and not yet ended, per resource",
      labelNames: ["resource"],
      registers,
    });
    // prom-client's nodejs_eventloop_lag_* metrics read a perf_hooks.monitorEventLoopDelay()
    // histogram; Deno's is unbounded (docs/design/manager.md, eventloop.ts). Hand prom-client the
    // bounded one instead (sampling every 100 ms, whatever resolution it asks for), for this call
    // only: the metric names and help texts stay prom-client's.
    const original = perfHooks.monitorEventLoopDelay;
    (perfHooks as { monitorEventLoopDelay: unknown }).monitorEventLoopDelay = () =>
      new BoundedDelayHistogram();
    try {
      client.collectDefaultMetrics({ register: this.registry });
    } finally {
      (perfHooks as { monitorEventLoopDelay: unknown }).monitorEventLoopDelay = original;
    }
    if (!procSelfReadable()) {
      for (const name of PROC_SELF_METRICS) this.registry.removeSingleMetric(name);
    }
    // prom-client reads process_resident_memory_bytes from /proc/self/status, which Deno opens
    // only with --allow-all (not granted by `deno task start`): it would always read 0. Deno's
    // own memoryUsage().rss needs no permission; the original collect still runs first, so the
    // virtual-memory and heap gauges it also fills keep working where /proc is readable.
    const resident = this.registry.getSingleMetric("process_resident_memory_bytes") as
      | (client.Gauge & { collect?: () => void })
      | undefined;
    if (resident) {
      const collect = resident.collect;
      resident.collect = function (this: client.Gauge) {
        collect?.call(this);
        this.set(Deno.memoryUsage().rss);
      };
    }
  }

  /** The exposition text for `/metrics`. */
  text(): Promise<string> {
    return this.registry.metrics();
  }
}
