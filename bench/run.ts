/**
 * `deno task bench`: appservice-operator against its controller-runtime peer (bench/peer) on one
 * local control plane, one after the other with cleanup in between, same flags for both.
 *
 * Scenarios (sizes by flags; the defaults fit 2 cores and some minutes):
 * - converge: create N AppServices (one replica each) and time until every one is Ready; the
 *   operator's apiserver requests by verb and resource (audit log, by User-Agent), writes per
 *   AppService, CPU seconds (utime+stime) of the run; a PNG of Ready count over time.
 * - steady: requests per minute while nothing changes; RSS at idle with N cached.
 * - startup: a fresh process with the N AppServices (and Pods) existing: time to /readyz OK
 *   (caches synced; the median of STARTUP_SAMPLES fresh processes), and the writes the last of
 *   them makes in its first pass (none expected: status is written only on change).
 * - failover: 3 replicas with --leader-elect; time from SIGTERM / SIGKILL of the leader until
 *   another replica holds the Lease (its acquireTime).
 * - ceiling: a minimal client (lib/kube/client.ts) doing only the writes an AppService needs
 *   (add finalizer, create Pod, patch status) as fast as the apiserver takes them.
 *
 * Exits 1 only when a converge run does not converge (or the benchmark cannot run at all).
 * Every address is 127.0.0.1; every loop and wait is bounded.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { join } from "node:path";
import type { Lease } from "kubernetes-types/coordination/v1.d.ts";
import type { KubeClient } from "../lib/kube/client.ts";
import { isNotFound } from "../lib/kube/errors.ts";
import { LEASES, PODS } from "../lib/kube/resources.ts";
import { desiredPod } from "../lib/appservice/pods.ts";
import { type AppService, FINALIZER } from "../lib/appservice/schema.ts";
import {
  cacheDir,
  type ClusterInfo,
  readClusterInfo,
  startCluster,
  stopCluster,
} from "../tests/cluster/cluster.ts";
import { REPO } from "../tests/e2e/harness.ts";
import {
  AuditLog,
  countByVerbResource,
  countWrites,
  meanWriteServerMs,
  parseTime,
} from "./lib/audit.ts";
import {
  AS_RESOURCE,
  benchClient,
  createAppServices,
  createNamespace,
  dropNamespace,
  installCrd,
  ReadyTracker,
  sleep,
  waitUntil,
} from "./lib/kube.ts";
import {
  AGENT_PREFIX,
  buildPeer,
  isLeaderByMetrics,
  type OperatorKind,
  type OperatorProcess,
  type OperatorSettings,
  startOperatorProcess,
  warmOurs,
} from "./lib/operators.ts";
import { renderChart, type Rgb } from "./lib/plot.ts";
import {
  fetchMemoryReport,
  goMemstats,
  type ImportCost,
  importCosts,
  type MemorySample,
  rssSplit,
  storeCosts,
} from "./lib/memory.ts";
import type { StoreProbeResult } from "./memory_probe.ts";
import { intFlag, listFlag } from "./lib/flags.ts";
import { fmt, loadAverage, machineLine, ratio, table, writeSection } from "./lib/report.ts";

/** User-Agent of the benchmark's own requests. */
const BENCH_AGENT = "appservice-bench/";
/** User-Agent of the ceiling client. */
const CEILING_AGENT = "appservice-ceiling/";
/** The converge plot of the largest size, committed and shown in BENCHMARKS.md and README.md. */
const DOCS_PLOT = "docs/converge.png";
/** Processes per import probe of the memory scenario (the table shows the median). */
const IMPORT_PROBE_RUNS = 5;
/** Fresh processes whose start-up is timed per operator and size (the table: their median). */
const STARTUP_SAMPLES = 3;
/** Pods per kwok Node the benchmark plans with (allocatable is 110). */
const PODS_PER_NODE = 100;
const COLORS: Record<OperatorKind, Rgb> = { ours: [31, 119, 180], peer: [230, 110, 0] };
const LABEL: Record<OperatorKind, string> = {
  ours: "ours (appservice-operator, Deno)",
  peer: "peer (controller-runtime v0.24.1, Go)",
};

/** Parsed command line. */
export interface BenchOptions {
  sizes: number[];
  operators: OperatorKind[];
  scenarios: Set<string>;
  repeats: number;
  steadySeconds: number;
  settleSeconds: number;
  maxConcurrentReconciles: number;
  createConcurrency: number;
  ceilingConcurrency: number[];
  convergeTimeoutSeconds: number;
  failoverRuns: number;
  clusterDir: string;
  /** Extra `deno run` flags for ours (experiments, e.g. V8 flags), after deno task start's. */
  oursDenoFlags: string[];
  reuseCluster: boolean;
  keepCluster: boolean;
  resultsDir: string;
  markdown: boolean;
  /** Re-render BENCHMARKS.md and the plots from this results JSON instead of running. */
  fromJson?: string;
}

const USAGE = `usage: deno task bench [flags]
  --sizes 100,1000               AppServices per converge run (one replica each)
  --operators ours,peer          which implementations to run
  --scenarios converge,failover,ceiling,memory
                                 converge includes steady state, memory and start-up;
                                 memory adds the breakdowns of ours (dependencies imported,
                                 heap bytes per cached object)
  --repeats 2                    converge runs per operator and size, alternating order; the
                                 first also measures steady state, memory and start-up; the
                                 table shows medians
  --steady-seconds 120           length of the steady-state window
  --settle-seconds 5             wait after converge before the steady window
  --max-concurrent-reconciles 4  the same for both operators
  --create-concurrency 16        in-flight creates of the benchmark client
  --ceiling-concurrency 16       in-flight writes of the ceiling client; a list (4,16,64)
                                 runs each level and takes the best as the ceiling
  --converge-timeout-seconds 900 a run that does not converge within this fails (exit 1)
  --failover-runs 2              repetitions of each failover case (the table shows the mean)
  --ours-deno-flags "FLAGS"      extra deno run flags for ours, after deno task start's
                                 (experiments, e.g. "--v8-flags=--max-semi-space-size=2")
  --cluster-dir DIR              default <cache>/bench-cluster
  --reuse-cluster                use the cluster already running in --cluster-dir
  --keep-cluster                 leave the cluster running at the end
  --results DIR                  default bench/results
  --no-markdown                  do not rewrite BENCHMARKS.md
  --from-json FILE               only re-render BENCHMARKS.md and the plots from a results JSON`;

/** Parses argv. @throws Error for malformed flags. */
export function parseBenchArgs(args: string[]): BenchOptions {
  const { values } = parseArgs({
    args,
    options: {
      sizes: { type: "string", default: "100,1000" },
      operators: { type: "string", default: "ours,peer" },
      scenarios: { type: "string", default: "converge,failover,ceiling,memory" },
      repeats: { type: "string", default: "2" },
      "steady-seconds": { type: "string", default: "120" },
      "settle-seconds": { type: "string", default: "5" },
      "max-concurrent-reconciles": { type: "string", default: "4" },
      "create-concurrency": { type: "string", default: "16" },
      "ceiling-concurrency": { type: "string", default: "16" },
      "converge-timeout-seconds": { type: "string", default: "900" },
      "failover-runs": { type: "string", default: "2" },
      "cluster-dir": { type: "string", default: join(cacheDir(), "bench-cluster") },
      "ours-deno-flags": { type: "string", default: "" },
      "reuse-cluster": { type: "boolean", default: false },
      "keep-cluster": { type: "boolean", default: false },
      results: { type: "string", default: join(REPO, "bench", "results") },
      "no-markdown": { type: "boolean", default: false },
      "from-json": { type: "string" },
      help: { type: "boolean", short: "h", default: false },
    },
    strict: true,
  });
  if (values.help) {
    console.log(USAGE);
    Deno.exit(0);
  }
  const sizes = values.sizes.split(",").filter(Boolean).map((s) => intFlag("sizes", s, 1, 20_000));
  const operators = listFlag<OperatorKind>("operators", values.operators, ["ours", "peer"]);
  const scenarios = new Set(
    listFlag("scenarios", values.scenarios, ["converge", "failover", "ceiling", "memory"]),
  );
  return {
    sizes,
    operators,
    scenarios,
    repeats: intFlag("repeats", values.repeats, 1, 20),
    steadySeconds: intFlag("steady-seconds", values["steady-seconds"], 0, 3600),
    settleSeconds: intFlag("settle-seconds", values["settle-seconds"], 0, 600),
    maxConcurrentReconciles: intFlag(
      "max-concurrent-reconciles",
      values["max-concurrent-reconciles"],
      1,
      64,
    ),
    createConcurrency: intFlag("create-concurrency", values["create-concurrency"], 1, 256),
    ceilingConcurrency: values["ceiling-concurrency"].split(",").filter(Boolean).map((v) =>
      intFlag("ceiling-concurrency", v, 1, 256)
    ),
    convergeTimeoutSeconds: intFlag(
      "converge-timeout-seconds",
      values["converge-timeout-seconds"],
      10,
      7200,
    ),
    failoverRuns: intFlag("failover-runs", values["failover-runs"], 0, 20),
    clusterDir: values["cluster-dir"],
    oursDenoFlags: values["ours-deno-flags"].split(/\s+/).filter(Boolean),
    reuseCluster: values["reuse-cluster"],
    keepCluster: values["keep-cluster"],
    resultsDir: values.results,
    markdown: !values["no-markdown"],
    fromJson: values["from-json"],
  };
}

/** One converge run (with its steady state, memory and restart). */
export interface ConvergeResult {
  operator: OperatorKind;
  n: number;
  /** 0 for the full run (with steady state, memory, start-up), then converge-only repeats. */
  repeat: number;
  ok: boolean;
  error?: string;
  loadAverageAtStart: number[];
  /** ms from spawn to /readyz with nothing to cache. */
  startupEmptyMs?: number;
  convergeSeconds?: number;
  /** [ms since the first create, Ready count]. */
  timeline: [number, number][];
  /** Requests of the operator from the first create to convergence plus settle. */
  convergeRequests?: Record<string, number>;
  convergeRequestsTotal?: number;
  convergeWrites?: number;
  writesPerAppService?: number;
  cpuSecondsConverge?: number;
  /** Mean apiserver time of the operator's writes during converge (audit timestamps), ms. */
  meanWriteServerMs?: number;
  /** Seconds from the first create to the first, half and all Ready. */
  firstReadySeconds?: number;
  halfReadySeconds?: number;
  steady?: {
    seconds: number;
    requests: Record<string, number>;
    requestsPerMinute: number;
    writesPerMinute: number;
  };
  rssIdleBytes?: number;
  /** Where the memory is, at idle after converging (see bench/lib/memory.ts). */
  memoryIdle?: MemorySample;
  restart?: {
    /** ms from spawn to /readyz with N AppServices and their Pods existing: median of the samples. */
    startupMs: number;
    /** Every sample (ms), in order: {@link STARTUP_SAMPLES} fresh processes, the last one kept. */
    startupSamplesMs?: number[];
    requests: Record<string, number>;
    writes: number;
    rssBytes?: number;
    cpuSeconds?: number;
    /** RSS the moment /readyz first answered OK (the initial lists just applied). */
    rssAtReadyBytes?: number;
    /** Where the memory is after the first pass (see bench/lib/memory.ts). */
    memory?: MemorySample;
  };
}

/** One ceiling run. */
export interface CeilingResult {
  n: number;
  concurrency: number;
  writes: number;
  seconds: number;
  writesPerSecond: number;
  appServicesPerSecond: number;
}

/** One failover measurement. */
export interface FailoverResult {
  operator: OperatorKind;
  signal: "SIGTERM" | "SIGKILL";
  ok: boolean;
  error?: string;
  /** ms from the signal to the new holder's acquireTime. */
  toNewLeaderMs?: number;
  /** ms from the signal until the benchmark saw the new holder (50 ms polling). */
  observedMs?: number;
}

/** Everything one run produced. */
export interface BenchResults {
  startedAt: string;
  command: string;
  machine: string;
  options: Omit<BenchOptions, "scenarios"> & { scenarios: string[] };
  versions: Record<string, string>;
  converge: ConvergeResult[];
  ceiling: CeilingResult[];
  failover: FailoverResult[];
  plots: string[];
  notes: string[];
  /** Scenario memory: what each dependency costs ours when imported. */
  importCosts?: ImportCost[];
  /** Scenario memory: heap bytes per cached object, by kind and way of caching. */
  storeCosts?: { kind: string; results: StoreProbeResult[] }[];
}

function log(msg: string, fields: Record<string, unknown> = {}): void {
  const extra = Object.entries(fields).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join(" ");
  console.error(`[bench ${new Date().toISOString().slice(11, 19)}] ${msg} ${extra}`.trimEnd());
}

/**
 * Where `op`'s memory is now: the RSS split, then (ours) the debug report before and after a
 * forced full GC, or (peer) the Go runtime's memstats. Read after the RSS figure of the table.
 */
async function memorySample(op: OperatorProcess): Promise<MemorySample> {
  const s: MemorySample = { split: rssSplit(op.pid) };
  if (op.debugPort) {
    s.report = await fetchMemoryReport(op.debugPort, false);
    s.reportAfterGc = await fetchMemoryReport(op.debugPort, true);
    s.rssAfterGcBytes = rssSplit(op.pid)?.rssBytes;
  } else {
    s.go = goMemstats(await op.metrics().catch(() => ""));
  }
  return s;
}

/** Objects kept from the largest converge of ours for the per-object probe (bounded). */
const PROBE_OBJECTS = 2_000;

/** Writes up to {@link PROBE_OBJECTS} AppServices and Pods of `ns`, as listed, for the probe. */
async function saveProbeObjects(admin: KubeClient, ns: string, dir: string): Promise<void> {
  for (const [kind, rt] of [["appservices", AS_RESOURCE], ["pods", PODS]] as const) {
    const items: unknown[] = [];
    await admin.listPages(rt, { namespace: ns, limit: 500 }, (page) => {
      for (const it of page.items ?? []) if (items.length < PROBE_OBJECTS) items.push(it);
    });
    await Deno.writeTextFile(join(dir, `objects-${kind}.json`), JSON.stringify(items));
  }
}

function settingsFor(o: BenchOptions, info: ClusterInfo): OperatorSettings {
  return { kubeconfig: info.kubeconfig, maxConcurrentReconciles: o.maxConcurrentReconciles };
}

async function convergeRun(
  kind: OperatorKind,
  n: number,
  repeat: number,
  o: BenchOptions,
  info: ClusterInfo,
  admin: KubeClient,
  audit: AuditLog,
): Promise<ConvergeResult> {
  const ns = `bench-${kind}-${n}-${repeat}`;
  const full = repeat === 0;
  const res: ConvergeResult = {
    operator: kind,
    n,
    repeat,
    ok: false,
    timeline: [],
    loadAverageAtStart: loadAverage(),
  };
  const agent = AGENT_PREFIX[kind];
  const logDir = join(o.resultsDir, "logs");
  await createNamespace(admin, ns);
  const tracker = new ReadyTracker(admin, ns);
  let op: OperatorProcess | undefined;
  try {
    await tracker.synced();
    op = await startOperatorProcess(kind, settingsFor(o, info), {
      cacheDir: cacheDir(),
      logDir,
      label: `converge-${n}-${repeat}`,
      denoFlags: o.oursDenoFlags,
    });
    res.startupEmptyMs = Math.round(await op.waitReady(120_000));
    await sleep(1_000);
    log("converge: creating", { operator: kind, n, repeat });
    const cpu0 = op.sample()?.cpuSeconds ?? 0;
    const t0 = Date.now();
    tracker.markStart();
    await createAppServices(admin, ns, n, o.createConcurrency);
    const ok = await tracker.waitReady(n, o.convergeTimeoutSeconds * 1000);
    const t1 = Date.now();
    const cpu1 = op.sample()?.cpuSeconds ?? NaN;
    res.timeline = [...tracker.timeline];
    if (!ok) {
      res.error = `${tracker.ready}/${n} Ready after ${o.convergeTimeoutSeconds} s`;
      log("converge: FAILED", { operator: kind, n, error: res.error });
      return res;
    }
    res.convergeSeconds = (t1 - t0) / 1000;
    res.cpuSecondsConverge = Number((cpu1 - cpu0).toFixed(2));
    log("converge: all Ready", { operator: kind, n, seconds: res.convergeSeconds });
    await sleep(o.settleSeconds * 1000);
    const t2 = Date.now();
    await audit.poll();
    const conv = audit.between(agent, t0, t2);
    res.convergeRequests = countByVerbResource(conv);
    res.convergeRequestsTotal = conv.length;
    res.convergeWrites = countWrites(conv);
    res.writesPerAppService = Number((res.convergeWrites / n).toFixed(2));
    res.meanWriteServerMs = Number(meanWriteServerMs(conv).toFixed(2));
    const at = (count: number) => res.timeline.find(([, c]) => c >= count)?.[0];
    res.firstReadySeconds = (at(1) ?? NaN) / 1000;
    res.halfReadySeconds = (at(Math.ceil(n / 2)) ?? NaN) / 1000;
    if (!full) {
      res.ok = true;
      return res;
    }

    if (o.steadySeconds > 0) {
      log("steady: measuring", { operator: kind, n, seconds: o.steadySeconds });
      const s0 = Date.now();
      await sleep(o.steadySeconds * 1000);
      const s1 = Date.now();
      res.rssIdleBytes = op.sample()?.rssBytes;
      await audit.poll();
      const steady = audit.between(agent, s0, s1);
      const minutes = (s1 - s0) / 60_000;
      res.steady = {
        seconds: (s1 - s0) / 1000,
        requests: countByVerbResource(steady),
        requestsPerMinute: Number((steady.length / minutes).toFixed(2)),
        writesPerMinute: Number((countWrites(steady) / minutes).toFixed(2)),
      };
    } else {
      res.rssIdleBytes = op.sample()?.rssBytes;
    }
    res.memoryIdle = await memorySample(op);
    if (o.scenarios.has("memory") && kind === "ours" && n === Math.max(...o.sizes)) {
      await saveProbeObjects(admin, ns, o.resultsDir).catch((err) =>
        log("saving objects for the memory probe failed", { error: String(err) })
      );
    }

    // Start-up with N existing: fresh processes. One sample moves by a fifth from run to run on
    // a busy 2-core machine, so the table shows the median of several; the last process stays
    // for the first pass (its writes and memory).
    await op.stop("SIGTERM");
    op = undefined;
    const restart = (label: string) =>
      startOperatorProcess(kind, settingsFor(o, info), {
        cacheDir: cacheDir(),
        logDir,
        label,
        denoFlags: o.oursDenoFlags,
      });
    const startupSamplesMs: number[] = [];
    for (let i = 1; i < STARTUP_SAMPLES; i++) {
      await sleep(1_000);
      const quick = await restart(`restart-${n}-sample-${i}`);
      try {
        startupSamplesMs.push(Math.round(await quick.waitReady(120_000)));
      } finally {
        await quick.stop("SIGTERM");
      }
    }
    await sleep(1_000);
    const r0 = Date.now();
    op = await restart(`restart-${n}`);
    startupSamplesMs.push(Math.round(await op.waitReady(120_000)));
    const startupMs = median(startupSamplesMs);
    const rssAtReadyBytes = op.sample()?.rssBytes;
    // Let the first pass over every AppService finish, then count what it wrote.
    await sleep(Math.max(10, o.settleSeconds * 2) * 1000);
    const sample = op.sample();
    await audit.poll();
    const rr = audit.between(agent, r0, Date.now());
    res.restart = {
      startupMs: Math.round(startupMs),
      startupSamplesMs,
      requests: countByVerbResource(rr),
      writes: countWrites(rr),
      rssBytes: sample?.rssBytes,
      cpuSeconds: sample?.cpuSeconds,
      rssAtReadyBytes,
      memory: await memorySample(op),
    };
    res.ok = true;
    log("startup: ready", { operator: kind, n, ms: res.restart.startupMs });
    return res;
  } catch (err) {
    res.error = err instanceof Error ? err.message : String(err);
    log("converge: error", { operator: kind, n, error: res.error });
    return res;
  } finally {
    tracker.stop();
    if (op) await op.stop("SIGTERM");
    log("cleanup", { namespace: ns });
    await dropNamespace(admin, ns, o.createConcurrency).catch((err) =>
      log("cleanup failed", { namespace: ns, error: String(err) })
    );
  }
}

async function ceilingRun(
  n: number,
  concurrency: number,
  o: BenchOptions,
  info: ClusterInfo,
  admin: KubeClient,
): Promise<CeilingResult> {
  const ns = `bench-ceiling-${n}-${concurrency}`;
  const c = benchClient(info.kubeconfig, `${CEILING_AGENT}0.1.0`);
  await createNamespace(admin, ns);
  try {
    const created = await createAppServices(admin, ns, n, o.createConcurrency);
    // Warm the client's connection (TLS, HTTP/2) outside the timed part.
    await c.list(AS_RESOURCE, { namespace: ns, limit: 1 });
    await sleep(1_000);
    log("ceiling: writing", { n, concurrency });
    const t0 = performance.now();
    let next = 0;
    const worker = async () => {
      while (next < created.length) {
        const as = created[next++];
        const name = as.metadata.name!;
        // The writes one AppService needs: finalizer, Pod, status (as the operator writes them).
        const withFinalizer = await c.patch<AppService>(AS_RESOURCE, name, [
          { op: "test", path: "/metadata/resourceVersion", value: as.metadata.resourceVersion },
          { op: "add", path: "/metadata/finalizers", value: [FINALIZER] },
        ], { namespace: ns, type: "json", fieldManager: "appservice-ceiling" });
        await c.create(PODS, desiredPod(withFinalizer, 0), { fieldManager: "appservice-ceiling" });
        const now = new Date().toISOString();
        await c.patch(AS_RESOURCE, name, {
          status: {
            ready: true,
            replicas: 1,
            readyReplicas: 1,
            replicasSummary: "1/1",
            observedGeneration: 1,
            lastReconciliation: now,
            conditions: [{
              type: "Ready",
              status: "True",
              reason: "AllReplicasReady",
              message: "1/1 Pods ready",
              lastTransitionTime: now,
              observedGeneration: 1,
            }],
            podStatuses: [{ name: `${name}-0`, phase: "Running", ready: true, restartCount: 0 }],
          },
        }, { namespace: ns, subresource: "status", type: "merge", fieldManager: "ceiling" });
      }
    };
    await Promise.all(Array.from({ length: Math.min(concurrency, n) }, worker));
    const seconds = (performance.now() - t0) / 1000;
    const writes = 3 * n;
    log("ceiling: done", { n, seconds: Number(seconds.toFixed(2)) });
    return {
      n,
      concurrency,
      writes,
      seconds: Number(seconds.toFixed(3)),
      writesPerSecond: Number((writes / seconds).toFixed(1)),
      appServicesPerSecond: Number((n / seconds).toFixed(1)),
    };
  } finally {
    c.close();
    await dropNamespace(admin, ns, o.createConcurrency).catch((err) =>
      log("cleanup failed", { namespace: ns, error: String(err) })
    );
  }
}

async function failoverRun(
  kind: OperatorKind,
  signal: "SIGTERM" | "SIGKILL",
  run: number,
  o: BenchOptions,
  info: ClusterInfo,
  admin: KubeClient,
): Promise<FailoverResult> {
  const ns = "bench-failover";
  const leaseName = `bench-${kind}-${signal.toLowerCase()}-${run}`;
  const res: FailoverResult = { operator: kind, signal, ok: false };
  const settings: OperatorSettings = {
    ...settingsFor(o, info),
    watchNamespace: ns,
    leaderElect: true,
    leaderElectionNamespace: ns,
    leaderElectionId: leaseName,
    leaseDurationSeconds: 15,
    renewDeadlineSeconds: 10,
    retryPeriodSeconds: 2,
  };
  const replicas: OperatorProcess[] = [];
  try {
    for (let i = 0; i < 3; i++) {
      replicas.push(
        await startOperatorProcess(kind, settings, {
          cacheDir: cacheDir(),
          logDir: join(o.resultsDir, "logs"),
          label: `failover-${signal.toLowerCase()}-${run}-${i}`,
        }),
      );
    }
    for (const r of replicas) await r.waitReady(120_000);
    let leader: OperatorProcess | undefined;
    await waitUntil(
      `a ${kind} leader`,
      async () => {
        for (const r of replicas) {
          if (isLeaderByMetrics(await r.metrics())) leader = r;
        }
        return leader !== undefined;
      },
      60_000,
      200,
    );
    await sleep(3_000); // a few renewals
    const before = await admin.get<Lease>(LEASES, leaseName, { namespace: ns });
    const holder = before.spec?.holderIdentity ?? "";
    const tSig = Date.now();
    log("failover: signalling the leader", { operator: kind, signal, holder });
    if (signal === "SIGKILL") await leader!.stop("SIGKILL");
    else {
      leader!.stop("SIGTERM").catch(() => {});
    }
    let after: Lease | undefined;
    await waitUntil(
      "a new Lease holder",
      async () => {
        const l = await admin.get<Lease>(LEASES, leaseName, { namespace: ns });
        const h = l.spec?.holderIdentity ?? "";
        if (h && h !== holder) after = l;
        return after !== undefined;
      },
      90_000,
      50,
    );
    res.observedMs = Date.now() - tSig;
    res.toNewLeaderMs = parseTime(after!.spec?.acquireTime) - tSig;
    res.ok = true;
    log("failover: new leader", { operator: kind, signal, ms: res.toNewLeaderMs });
  } catch (err) {
    res.error = err instanceof Error ? err.message : String(err);
    log("failover: error", { operator: kind, signal, error: res.error });
  } finally {
    await Promise.all(replicas.map((r) => r.stop("SIGTERM")));
    await admin.delete(LEASES, leaseName, { namespace: ns }).catch((err) => {
      if (!isNotFound(err)) throw err;
    });
  }
  return res;
}

async function versions(): Promise<Record<string, string>> {
  const out: Record<string, string> = { deno: Deno.version.deno, v8: Deno.version.v8 };
  try {
    const mod = await Deno.readTextFile(join(REPO, "bench", "peer", "go.mod"));
    for (
      const m of mod.matchAll(/^\s*(sigs\.k8s\.io\/controller-runtime|k8s\.io\/client-go) (\S+)/gm)
    ) {
      out[m[1]] = m[2];
    }
    const go = mod.match(/^go (\S+)/m);
    if (go) out["go (go.mod)"] = go[1];
  } catch { /* no go.mod */ }
  out.kubernetes = "v1.36.3 (tests/cluster)";
  return out;
}

function plotConverge(results: ConvergeResult[], n: number, dir: string): string | undefined {
  const runs = results.filter((r) => r.n === n && r.timeline.length > 0)
    .sort((x, y) => x.operator.localeCompare(y.operator) || x.repeat - y.repeat);
  if (runs.length === 0) return undefined;
  const png = renderChart({
    title: `Ready AppServices over time, N = ${n}`,
    xLabel: "seconds since the first create",
    yLabel: "Ready AppServices",
    series: runs.map((r) => ({
      name: runs.some((x) => x.repeat > 0)
        ? `${LABEL[r.operator]}, run ${r.repeat + 1}`
        : LABEL[r.operator],
      // Later repeats in lighter shades of the operator's colour.
      color: COLORS[r.operator].map((v) =>
        Math.round(v + (255 - v) * Math.min(0.6, 0.3 * r.repeat))
      ) as Rgb,
      points: r.timeline.map(([ms, c]) => [ms / 1000, c] as [number, number]),
    })),
  });
  const file = join(dir, `converge-${n}.png`);
  Deno.writeFileSync(file, png);
  return file;
}

/** Renders the converge plot of the largest size into {@link DOCS_PLOT}. */
async function writeDocsPlot(r: BenchResults): Promise<void> {
  const n = Math.max(...r.options.sizes);
  const dir = await Deno.makeTempDir({ prefix: "bench-plot-" });
  try {
    const file = plotConverge(r.converge, n, dir);
    if (!file) return;
    await Deno.mkdir(join(REPO, "docs"), { recursive: true });
    await Deno.copyFile(file, join(REPO, DOCS_PLOT));
  } finally {
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
}

function mib(b: number | undefined): number | undefined {
  return b === undefined ? undefined : b / (1024 * 1024);
}

/** The memory tables of BENCHMARKS.md (see bench/lib/memory.ts for how each figure is taken). */
export function memoryMarkdown(r: BenchResults): string {
  const full = (kind: OperatorKind, n: number) =>
    r.converge.find((c) => c.operator === kind && c.n === n && c.repeat === 0);
  const cols: { label: string; ours?: MemorySample; peer?: MemorySample }[] = [];
  for (const n of r.options.sizes) {
    cols.push({
      label: `N=${n} converged`,
      ours: full("ours", n)?.memoryIdle,
      peer: full("peer", n)?.memoryIdle,
    });
    cols.push({
      label: `N=${n} restarted`,
      ours: full("ours", n)?.restart?.memory,
      peer: full("peer", n)?.restart?.memory,
    });
  }
  const m = (b: number | undefined) => fmt(mib(b), 1);
  const space = (s: MemorySample | undefined, name: string) => {
    const sp = s?.report?.spaces.find((x) => x.name === name);
    return sp ? `${m(sp.committedBytes)} / ${m(sp.usedBytes)}` : "–";
  };
  const heapPhysical = (s: MemorySample | undefined) => s?.report?.heap.total_physical_size;
  const oursRows: (string | number)[][] = [
    ["RSS", ...cols.map((c) => m(c.ours?.split?.rssBytes))],
    [
      "· file-backed (the deno executable's code paged in)",
      ...cols.map((c) => m(c.ours?.split?.fileBytes)),
    ],
    ["· anonymous", ...cols.map((c) => m(c.ours?.split?.anonBytes))],
    ["V8 heap committed, all spaces", ...cols.map((c) => m(c.ours?.report?.heap.total_heap_size))],
    [
      "· new space (young generation): committed / used",
      ...cols.map((c) => space(c.ours, "new_space")),
    ],
    ["· old space: committed / used", ...cols.map((c) => space(c.ours, "old_space"))],
    [
      "· large object space: committed / used",
      ...cols.map((c) => space(c.ours, "large_object_space")),
    ],
    ["· code space: committed / used", ...cols.map((c) => space(c.ours, "code_space"))],
    [
      "· trusted space (bytecode and metadata): committed / used",
      ...cols.map((c) => space(c.ours, "trusted_space")),
    ],
    [
      "V8 external memory (array buffers, external strings)",
      ...cols.map((c) => m(c.ours?.report?.heap.external_memory)),
    ],
    [
      "V8 malloced memory (outside the heap)",
      ...cols.map((c) => m(c.ours?.report?.heap.malloced_memory)),
    ],
    [
      "Anonymous RSS outside the V8 heap (Rust runtime, TLS, allocator, stacks)",
      ...cols.map((c) => {
        const anon = c.ours?.split?.anonBytes, heap = heapPhysical(c.ours);
        return anon !== undefined && heap !== undefined ? m(anon - heap) : "–";
      }),
    ],
    [
      "Module code: machine code + metadata / bytecode + metadata / script source",
      ...cols.map((c) => {
        const code = c.ours?.report?.code;
        return code
          ? `${m(code.code_and_metadata_size)} / ${m(code.bytecode_and_metadata_size)} / ${
            m(code.external_script_source_size)
          }`
          : "–";
      }),
    ],
    [
      "Heap used after a forced full GC (live objects)",
      ...cols.map((c) => m(c.ours?.reportAfterGc?.heap.used_heap_size)),
    ],
    [
      "Heap committed after the forced full GC",
      ...cols.map((c) => m(c.ours?.reportAfterGc?.heap.total_heap_size)),
    ],
    ["RSS right after the forced full GC", ...cols.map((c) => m(c.ours?.rssAfterGcBytes))],
  ];
  const go = (s: MemorySample | undefined, k: string) => m(s?.go?.[k]);
  const peerRows: (string | number)[][] = [
    ["RSS", ...cols.map((c) => m(c.peer?.split?.rssBytes))],
    [
      "· file-backed (the executable's code paged in)",
      ...cols.map((c) => m(c.peer?.split?.fileBytes)),
    ],
    ["· anonymous", ...cols.map((c) => m(c.peer?.split?.anonBytes))],
    [
      "Go heap in use (go_memstats_heap_inuse_bytes)",
      ...cols.map((c) => go(c.peer, "go_memstats_heap_inuse_bytes")),
    ],
    [
      "Go heap objects allocated (go_memstats_heap_alloc_bytes)",
      ...cols.map((c) => go(c.peer, "go_memstats_heap_alloc_bytes")),
    ],
    [
      "Go heap idle, not returned to the OS (idle − released)",
      ...cols.map((c) => {
        const idle = c.peer?.go?.go_memstats_heap_idle_bytes;
        const rel = c.peer?.go?.go_memstats_heap_released_bytes;
        return idle !== undefined && rel !== undefined ? m(idle - rel) : "–";
      }),
    ],
    ["Go stacks in use", ...cols.map((c) => go(c.peer, "go_memstats_stack_inuse_bytes"))],
    [
      "Go runtime total obtained from the OS (go_memstats_sys_bytes)",
      ...cols.map((c) => go(c.peer, "go_memstats_sys_bytes")),
    ],
  ];
  const head = ["MiB", ...cols.map((c) => c.label)];
  const parts: string[] = [
    "### Where the memory goes",
    "",
    "Ours, from its debug memory report (lib/runtime/memory_debug.ts: `Deno.memoryUsage()`, " +
    "`node:v8` heap, space and code statistics; served only because the benchmark sets " +
    "`APPSERVICE_DEBUG_MEMORY_ADDRESS`, and read after the RSS of the table above) and " +
    '`/proc/<pid>/status` (RssAnon; RssFile + RssShmem). "converged": at idle after the steady ' +
    'window; "restarted": a fresh process with the N AppServices and their Pods existing, after ' +
    "its first pass. The forced GC rows come last, after every other figure was read.",
    "",
    table(head, oursRows),
    "",
    "Peer, from `/proc/<pid>/status` and the Go runtime's own `/metrics`:",
    "",
    table(head, peerRows),
  ];
  const atReady = r.options.sizes.map((n) => {
    const a = full("ours", n)?.restart, b = full("peer", n)?.restart;
    return `N=${n}: ours ${fmt(mib(a?.rssAtReadyBytes), 1)} → ${fmt(mib(a?.rssBytes), 1)}, peer ${
      fmt(mib(b?.rssAtReadyBytes), 1)
    } → ${fmt(mib(b?.rssBytes), 1)}`;
  });
  parts.push(
    "",
    `RSS MiB of the restarted process the moment /readyz first answered (initial lists just ` +
      `applied) → after its first pass: ${atReady.join("; ")}.`,
  );
  if (r.importCosts?.length) {
    const bare = r.importCosts.find((c) => c.specifier === "")?.rssBytes ?? 0;
    parts.push(
      "",
      `What each dependency costs when imported (\`deno run\` with \`deno task start\`'s flags, ` +
        `bench/memory_probe.ts; median of ${IMPORT_PROBE_RUNS} processes each; \"loaded\": ` +
        "reached from main.ts by code imports, i.e. loaded at run time, as `deno info` shows " +
        "the module graph):",
      "",
      table(
        [
          "imported",
          "RSS MiB",
          "over bare",
          "heap used MiB",
          "import ms",
          "loaded by the operator",
        ],
        r.importCosts.map((c) => [
          c.label,
          fmt(mib(c.rssBytes), 1),
          c.specifier === "" ? "–" : fmt(mib(c.rssBytes - bare), 1),
          fmt(mib(c.heapUsedBytes), 1),
          fmt(c.importMs, 0),
          c.inOperator ? "yes" : "no",
        ]),
      ),
    );
  }
  if (r.storeCosts?.length) {
    const rows = r.storeCosts.flatMap((k) =>
      k.results.map((
        x,
      ) => [k.kind, x.objects, x.variant, x.jsonBytesPerObject, x.heapBytesPerObject])
    );
    parts.push(
      "",
      "The store per object: AppServices and Pods of the largest converge as the apiserver " +
        "lists them, cached in a lib/runtime/store.ts Store in a process of their own " +
        "(`--v8-flags=--expose-gc`; heap used after a full GC with the objects cached, minus " +
        "the same before, per object):",
      "",
      table(["objects", "count", "cached", "JSON bytes per object", "heap bytes per object"], rows),
    );
  }
  return parts.join("\n");
}

/** The BENCHMARKS.md section of this benchmark. */
export function markdown(r: BenchResults): string {
  // Steady state, memory and start-up: the full run; converge measures: median of the repeats.
  const get = (kind: OperatorKind, n: number) =>
    r.converge.find((c) => c.operator === kind && c.n === n && c.repeat === 0);
  const runsOf = (kind: OperatorKind, n: number) =>
    r.converge.filter((c) => c.operator === kind && c.n === n && c.ok);
  const med = (kind: OperatorKind, n: number, f: (c: ConvergeResult) => number | undefined) => {
    const xs = runsOf(kind, n).map(f).filter((x): x is number => typeof x === "number")
      .filter(Number.isFinite);
    return xs.length ? median(xs) : undefined;
  };
  const rows: (string | number)[][] = [];
  const row = (
    label: string,
    a: number | undefined,
    b: number | undefined,
    digits = 1,
  ) => {
    const known = (x: number | undefined) => typeof x === "number" && Number.isFinite(x);
    if (known(a) || known(b)) rows.push([label, fmt(a, digits), fmt(b, digits), ratio(a, b)]);
  };
  for (const n of r.options.sizes) {
    const a = get("ours", n), b = get("peer", n);
    // The ceiling is the best of the concurrency levels tried.
    const ceil = r.ceiling.filter((c) => c.n === n)
      .sort((x, y) => y.writesPerSecond - x.writesPerSecond)[0];
    const both = (label: string, f: (c: ConvergeResult) => number | undefined, digits = 1) =>
      row(label, med("ours", n, f), med("peer", n, f), digits);
    both(`Converge N=${n}: seconds to all Ready`, (c) => c.convergeSeconds);
    both(`Converge N=${n}: seconds to half Ready`, (c) => c.halfReadySeconds);
    both(`Converge N=${n}: apiserver requests`, (c) => c.convergeRequestsTotal, 0);
    both(`Converge N=${n}: writes per AppService`, (c) => c.writesPerAppService, 2);
    both(`Converge N=${n}: CPU seconds (user+system)`, (c) => c.cpuSecondsConverge, 2);
    both(`Converge N=${n}: mean apiserver ms per write (audit)`, (c) => c.meanWriteServerMs);
    if (ceil) {
      both(
        `Converge N=${n}: AppServices/s as % of the ceiling's`,
        (c) =>
          c.convergeSeconds
            ? (100 * (n / c.convergeSeconds)) / ceil.appServicesPerSecond
            : undefined,
      );
      both(
        `Converge N=${n}: writes/s as % of the ceiling's`,
        (c) =>
          c.convergeSeconds && c.convergeWrites !== undefined
            ? (100 * (c.convergeWrites / c.convergeSeconds)) / ceil.writesPerSecond
            : undefined,
      );
    }
    row(
      `Steady N=${n}: requests per minute`,
      a?.steady?.requestsPerMinute,
      b?.steady?.requestsPerMinute,
      2,
    );
    row(`Idle N=${n}: RSS MiB (after steady state)`, mib(a?.rssIdleBytes), mib(b?.rssIdleBytes));
    row(
      `Start-up with N=${n} existing: seconds to /readyz (median of ${STARTUP_SAMPLES})`,
      (a?.restart?.startupMs ?? NaN) / 1000,
      (b?.restart?.startupMs ?? NaN) / 1000,
      2,
    );
    row(
      `Start-up with N=${n} existing: writes in the first pass`,
      a?.restart?.writes,
      b?.restart?.writes,
      0,
    );
    row(
      `Start-up with N=${n} existing: RSS MiB after the first pass`,
      mib(a?.restart?.rssBytes),
      mib(b?.restart?.rssBytes),
    );
    both(
      `Start-up with 0 existing (before the N=${n} runs): seconds to /readyz`,
      (c) => c.startupEmptyMs === undefined ? undefined : c.startupEmptyMs / 1000,
      2,
    );
  }
  const fo = (kind: OperatorKind, sig: string) => {
    const xs = r.failover.filter((f) => f.operator === kind && f.signal === sig && f.ok);
    if (xs.length === 0) return undefined;
    return xs.reduce((s, f) => s + f.toNewLeaderMs!, 0) / xs.length / 1000;
  };
  for (const sig of ["SIGTERM", "SIGKILL"]) {
    if (r.failover.some((f) => f.signal === sig)) {
      row(
        `Failover after ${sig} of the leader: seconds to a new leader`,
        fo("ours", sig),
        fo("peer", sig),
        2,
      );
    }
  }
  const samples = (kind: OperatorKind, sig: string) =>
    r.failover.filter((f) => f.operator === kind && f.signal === sig)
      .map((f) => (f.ok ? fmt(f.toNewLeaderMs! / 1000, 2) : "failed")).join(", ");
  const failoverLine = r.failover.length > 0
    ? "Failover samples (seconds from the signal to the new holder's acquireTime): " +
      ["SIGTERM", "SIGKILL"].map((sig) =>
        `${sig} ours ${samples("ours", sig) || "–"} / peer ${samples("peer", sig) || "–"}`
      ).join("; ") + "."
    : "";
  const convergeSamples = r.options.sizes.map((n) => {
    const list = (kind: OperatorKind, f: (c: ConvergeResult) => number | undefined) =>
      r.converge.filter((c) => c.operator === kind && c.n === n)
        .sort((x, y) => x.repeat - y.repeat)
        .map((c) => (c.ok ? fmt(f(c), 1) : "failed")).join(", ") || "–";
    return `N=${n}: seconds ours ${list("ours", (c) => c.convergeSeconds)} / peer ${
      list("peer", (c) => c.convergeSeconds)
    }; CPU s ours ${list("ours", (c) => c.cpuSecondsConverge)} / peer ${
      list("peer", (c) => c.cpuSecondsConverge)
    }; apiserver ms per write ours ${list("ours", (c) => c.meanWriteServerMs)} / peer ${
      list("peer", (c) => c.meanWriteServerMs)
    }`;
  });
  const startupLine = r.options.sizes.map((n) => {
    const list = (kind: OperatorKind) =>
      get(kind, n)?.restart?.startupSamplesMs?.map((ms) => fmt(ms / 1000, 2)).join(", ") || "–";
    return `N=${n}: ours ${list("ours")} / peer ${list("peer")}`;
  });
  const ceilingRows = r.ceiling.map((c) => [
    c.n,
    c.concurrency,
    c.writes,
    fmt(c.seconds, 2),
    fmt(c.writesPerSecond, 0),
    fmt(c.appServicesPerSecond, 0),
  ]);
  // Requests by verb and resource for the largest size.
  const nMax = Math.max(...r.options.sizes);
  const a = get("ours", nMax), b = get("peer", nMax);
  const keys = [
    ...new Set([
      ...Object.keys(a?.convergeRequests ?? {}),
      ...Object.keys(b?.convergeRequests ?? {}),
    ]),
  ].sort();
  const verbRows = keys.map((k) => [
    `\`${k}\``,
    a?.convergeRequests?.[k] ?? 0,
    b?.convergeRequests?.[k] ?? 0,
  ]);
  const steadyKeys = [
    ...new Set([
      ...Object.keys(a?.steady?.requests ?? {}),
      ...Object.keys(b?.steady?.requests ?? {}),
    ]),
  ].sort();
  const steadyRows = steadyKeys.map((k) => [
    `\`${k}\``,
    a?.steady?.requests?.[k] ?? 0,
    b?.steady?.requests?.[k] ?? 0,
  ]);
  const failed = r.converge.filter((c) => !c.ok).map((c) => `${c.operator} N=${c.n}: ${c.error}`);
  return [
    "## Operator benchmark (`deno task bench`)",
    "",
    `Command: \`${r.command}\``,
    "",
    `Run ${r.startedAt} on ${r.machine} (at the start). Versions: ${
      Object.entries(r.versions).map(([k, v]) => `${k} ${v}`).join(", ")
    }. Both operators: --max-concurrent-reconciles=${r.options.maxConcurrentReconciles}, no ` +
    "client-side rate limit, managedFields dropped from the cache, informers on all namespaces, " +
    "info-level JSON logs. Each run: a fresh namespace, the operator started alone, cleanup after. " +
    "Ours runs as `deno task start` runs it (its permission and V8 flags, from deno.json" +
    (r.options.oursDenoFlags?.length
      ? `, plus \`${r.options.oursDenoFlags.join(" ")}\` for this run`
      : "") +
    ") and caches owned Pods without their spec (a cache transform: the reconciler never reads " +
    "it); the peer caches whole objects but managedFields (controller-runtime's " +
    "TransformStripManagedFields).",
    "",
    table(["Scenario", "ours", "peer", "ours/peer"], rows),
    "",
    r.ceiling.length > 0
      ? "Write ceiling (a minimal client doing only finalizer patch, Pod create and status " +
        "patch per AppService, no operator running):\n\n" +
        table(["N", "in flight", "writes", "seconds", "writes/s", "AppServices/s"], ceilingRows) +
        "\n\nThe ceiling runs in a minute of its own; on a shared machine its rate moves as " +
        "much as the operators' (compare the apiserver ms per write of the runs), so a share " +
        'near or above 100% reads "at the apiserver\'s limit", not "faster than it".'
      : "",
    "",
    `Converge requests by verb and resource, N=${nMax} (audit log, by User-Agent):`,
    "",
    table(["verb resource", "ours", "peer"], verbRows),
    "",
    steadyRows.length > 0
      ? `Steady-state requests, N=${nMax}, over ${
        a?.steady?.seconds ?? b?.steady?.seconds
      } s:\n\n` +
        table(["verb resource", "ours", "peer"], steadyRows)
      : `Steady state, N=${nMax}: no requests from either operator.`,
    "",
    r.converge.length > 0
      ? `Converge runs in order of repeat (the table shows medians): ${convergeSamples.join(". ")}.`
      : "",
    "",
    r.converge.some((c) => c.restart?.startupSamplesMs)
      ? `Start-up samples (seconds to /readyz, in order; each operator's after its own converge run): ${
        startupLine.join(". ")
      }.`
      : "",
    "",
    failoverLine,
    "",
    r.plots.length > 0
      ? `Plots (Ready count over time): ${r.plots.map((p) => `\`${p}\``).join(", ")}; the ` +
        `largest, N = ${nMax}, is committed as \`${DOCS_PLOT}\`:\n\n` +
        `![Ready AppServices over time, N = ${nMax}, ours and the peer](${DOCS_PLOT})`
      : "",
    "",
    memoryMarkdown(r),
    "",
    ...r.notes.map((n) => `- ${n}`),
    failed.length > 0 ? `\nFAILED: ${failed.join("; ")}` : "",
  ].filter((l, i, all) => !(l === "" && all[i - 1] === "")).join("\n");
}

async function main(): Promise<number> {
  let o: BenchOptions;
  try {
    o = parseBenchArgs(Deno.args);
  } catch (err) {
    console.error(`error: ${(err as Error).message}\n${USAGE}`);
    return 2;
  }
  await Deno.mkdir(join(o.resultsDir, "logs"), { recursive: true });
  if (o.fromJson) {
    const saved = JSON.parse(await Deno.readTextFile(o.fromJson)) as BenchResults;
    saved.plots = [];
    for (const n of saved.options.sizes) {
      const plot = plotConverge(saved.converge, n, o.resultsDir);
      if (plot) saved.plots.push(plot.replace(`${REPO}/`, ""));
    }
    const text = markdown(saved);
    console.log(text);
    if (o.markdown) {
      await writeDocsPlot(saved);
      await writeSection("bench:run", text);
    }
    return saved.converge.some((c) => !c.ok) ? 1 : 0;
  }
  const startedAt = new Date().toISOString();
  const results: BenchResults = {
    startedAt,
    command: ["deno task bench", ...Deno.args].join(" "),
    machine: machineLine(),
    options: { ...o, scenarios: [...o.scenarios] },
    versions: await versions(),
    converge: [],
    ceiling: [],
    failover: [],
    plots: [],
    notes: [],
  };
  log("machine", { machine: results.machine });
  if (o.operators.includes("peer")) {
    log("building the peer (go build in bench/peer)");
    await buildPeer(cacheDir());
  }
  if (o.operators.includes("ours")) await warmOurs();

  let info: ClusterInfo | undefined;
  if (o.reuseCluster) {
    info = await readClusterInfo(o.clusterDir);
    if (!info) throw new Error(`no cluster running in ${o.clusterDir}`);
  } else {
    const nodes = Math.max(3, Math.ceil(Math.max(...o.sizes) / PODS_PER_NODE) + 1);
    log("starting the local control plane", { dir: o.clusterDir, nodes });
    info = await startCluster({ dir: o.clusterDir, nodes });
  }
  const admin = benchClient(info.kubeconfig, `${BENCH_AGENT}0.1.0`);
  const audit = new AuditLog(join(info.dir, "audit.log"), [
    AGENT_PREFIX.ours,
    AGENT_PREFIX.peer,
    BENCH_AGENT,
    CEILING_AGENT,
  ]);
  let failed = false;
  try {
    await installCrd(admin);
    await audit.poll(0);
    for (const [i, n] of o.sizes.entries()) {
      if (o.scenarios.has("converge")) {
        for (let rep = 0; rep < o.repeats; rep++) {
          // Alternate the order, so neither always runs first (on the fresher cluster, or
          // in a quieter minute of the machine).
          const order = (i + rep) % 2 === 0 ? o.operators : [...o.operators].reverse();
          for (const kind of order) {
            const r = await convergeRun(kind, n, rep, o, info, admin, audit);
            results.converge.push(r);
            if (!r.ok) failed = true;
            await Deno.writeTextFile(
              join(o.resultsDir, "latest.json"),
              JSON.stringify(results, null, 2),
            );
          }
        }
        const plot = plotConverge(results.converge, n, o.resultsDir);
        if (plot) results.plots.push(plot.replace(`${REPO}/`, ""));
      }
      if (o.scenarios.has("ceiling")) {
        for (const c of o.ceilingConcurrency) {
          results.ceiling.push(await ceilingRun(n, c, o, info, admin));
        }
      }
    }
    if (o.scenarios.has("failover") && o.failoverRuns > 0) {
      await createNamespace(admin, "bench-failover");
      for (const kind of o.operators) {
        for (const sig of ["SIGTERM", "SIGKILL"] as const) {
          for (let run = 0; run < o.failoverRuns; run++) {
            results.failover.push(await failoverRun(kind, sig, run, o, info, admin));
          }
        }
      }
      await dropNamespace(admin, "bench-failover", 4).catch(() => {});
    }
  } finally {
    admin.close();
    if (!o.reuseCluster && !o.keepCluster) {
      log("stopping the local control plane");
      await stopCluster(o.clusterDir).catch((err) => log("stop failed", { error: String(err) }));
    }
  }
  if (o.scenarios.has("memory") && o.operators.includes("ours")) {
    log("memory: import probes and per-object probes");
    results.importCosts = await importCosts(IMPORT_PROBE_RUNS).catch((err) => {
      log("memory: import probes failed", { error: String(err) });
      return undefined;
    });
    results.storeCosts = [];
    for (const [kind, transform] of [["appservices", ""], ["pods", "pod"]] as const) {
      const file = join(o.resultsDir, `objects-${kind}.json`);
      try {
        await Deno.stat(file);
        results.storeCosts.push({ kind, results: await storeCosts(file, transform) });
      } catch (err) {
        log("memory: store probe skipped", { kind, error: String(err) });
      }
    }
  }
  const loads = results.converge.map((c) => c.loadAverageAtStart[0]).filter(Number.isFinite);
  results.notes.push(
    `1-minute load average at the start of the converge runs: ${
      loads.length ? `${Math.min(...loads)}–${Math.max(...loads)}` : "–"
    }; at the end: ${loadAverage().join(" ")}. Other engineers' test clusters share the 2 ` +
      "cores, so converge times are noisy: read them with the per-run list and each run's " +
      "apiserver ms per write; CPU seconds, requests and memory are steadier.",
    "Converge time includes the benchmark's own creates, kube-scheduler binding and kwok " +
      "marking Pods Ready, which are the same for both; CPU seconds and requests are the " +
      "operator's own.",
    "Failover: 3 replicas, Lease 15 s / renew deadline 10 s / retry 2 s for both; the peer " +
      "sets LeaderElectionReleaseOnCancel like ours releases on shutdown.",
  );
  const stamp = startedAt.replace(/[:.]/g, "-");
  await Deno.writeTextFile(
    join(o.resultsDir, `bench-${stamp}.json`),
    JSON.stringify(results, null, 2),
  );
  await Deno.writeTextFile(join(o.resultsDir, "latest.json"), JSON.stringify(results, null, 2));
  const md = markdown(results);
  console.log(md);
  if (o.markdown) {
    await writeDocsPlot(results);
    await writeSection("bench:run", md);
  }
  return failed ? 1 : 0;
}

if (import.meta.main) {
  let code = 1;
  try {
    code = await main();
  } catch (err) {
    console.error(`bench failed: ${err instanceof Error ? err.stack : err}`);
  }
  Deno.exit(code);
}
