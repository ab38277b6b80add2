/**
 * The scenarios of `deno task bench`: converge (with steady state, memory and start-up), the write ceiling and failover; each runs one operator on the local control plane and returns its result record.
 * @module
 */

import { isHandoverMarker } from "../../lib/runtime/handover.ts";
import { join } from "node:path";
import type { Lease } from "kubernetes-types/coordination/v1.d.ts";
import type { KubeClient } from "../../lib/kube/client.ts";
import { isNotFound } from "../../lib/kube/errors.ts";
import { LEASES, PODS } from "../../lib/kube/resources.ts";
import { desiredPod } from "../../lib/appservice/pods.ts";
import { type AppService, FINALIZER } from "../../lib/appservice/schema.ts";
import { cacheDir, type ClusterInfo } from "../../tests/cluster/cluster.ts";
import {
  type AuditLog,
  type AuditRecord,
  countByVerbResource,
  countWrites,
  meanWriteServerMs,
  parseTime,
  WRITE_VERBS,
  writeServerMsByVerbResource,
} from "./audit.ts";
import {
  AS_RESOURCE,
  benchClient,
  createAppServices,
  createNamespace,
  dropNamespace,
  installFinalizerPolicy,
  POLICY_NAMESPACE_LABEL,
  ReadyTracker,
  sleep,
  waitUntil,
} from "./kube.ts";
import {
  AGENT_PREFIX,
  CLUSTER_AGENTS,
  isLeaderByMetrics,
  type OperatorKind,
  type OperatorProcess,
  type OperatorSettings,
  startOperatorProcess,
} from "./operators.ts";
import { fetchMemoryReport, goMemstats, type MemorySample, rssSplit } from "./memory.ts";
import { loadAverage, median } from "./report.ts";
import { type BenchOptions, STARTUP_SAMPLES } from "./options.ts";
import type { CeilingResult, ConvergeResult, FailoverResult } from "./results.ts";

/** User-Agent of the benchmark's own requests. */
export const BENCH_AGENT = "appservice-bench/";

/** User-Agent of the ceiling client. */
export const CEILING_AGENT = "appservice-ceiling/";

/** One progress line on stderr: `[bench HH:MM:SS] msg key=json ...`. */
export function log(msg: string, fields: Record<string, unknown> = {}): void {
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

/**
 * Scenario converge for one operator and size: creates `n` AppServices in a namespace of its own and
 * times until all are Ready; on the full run (`repeat` 0) also steady state, memory and start-up.
 * Cleans the namespace up at the end; a failure is recorded in the result (`ok`, `error`), not thrown.
 */
/**
 * The first request of each step on the way to an AppService's Ready in namespace `ns` between
 * `t0` and `t1`, ms after `t0` (see {@linkcode ConvergeResult.firstSteps}); a step not seen is
 * left out.
 */
function firstSteps(
  audit: AuditLog,
  agent: string,
  ns: string,
  t0: number,
  t1: number,
): Record<string, number> {
  const steps: [string, string, (r: AuditRecord) => boolean][] = [
    ["AppService created", BENCH_AGENT, (r) => r.verb === "create" && r.resource === "appservices"],
    ["Pod created", agent, (r) => r.verb === "create" && r.resource === "pods"],
    ["Pod bound", "kube-scheduler/", (r) => r.verb === "create" && r.resource === "pods/binding"],
    [
      "Pod status written",
      "kwok/",
      (r) => (r.verb === "patch" || r.verb === "update") && r.resource === "pods/status",
    ],
    [
      "AppService status written",
      agent,
      (r) => WRITE_VERBS.has(r.verb) && r.resource === "appservices/status",
    ],
  ];
  const out: Record<string, number> = {};
  for (const [name, who, match] of steps) {
    const first = audit.between(who, t0, t1).find((r) =>
      r.namespace === ns && r.code < 300 &&
      match(r)
    );
    if (first) out[name] = Math.round(first.atMs - t0);
  }
  return out;
}

export async function convergeRun(
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
  // deploy/finalizer_policy.yaml for ours only (BENCHMARKS.md): its binding selects this label.
  const policy = kind === "ours" && o.finalizerPolicy;
  await createNamespace(admin, ns, policy ? { [POLICY_NAMESPACE_LABEL]: "on" } : undefined);
  if (policy) await installFinalizerPolicy(admin, ns);
  res.finalizerPolicy = policy;
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
    res.writeServerMsByKind = writeServerMsByVerbResource(conv);
    const cluster = CLUSTER_AGENTS.flatMap((a) => audit.between(a, t0, t1))
      .filter((r) => r.namespace === ns);
    const clusterWrites = countWrites(cluster);
    res.clusterWrites = {
      count: clusterWrites,
      perSecond: Number((clusterWrites / ((t1 - t0) / 1000)).toFixed(1)),
      meanServerMs: Number(meanWriteServerMs(cluster).toFixed(2)),
    };
    res.firstSteps = firstSteps(audit, agent, ns, t0, t1);
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

/** Scenario ceiling: the writes of `n` AppServices by a minimal client with `concurrency` in flight, timed. */
export async function ceilingRun(
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

/** Scenario failover: 3 replicas with leader election; time from `signal` to the leader until another holds the Lease. */
export async function failoverRun(
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
        // Ours seals a takeover with a handover marker first: not a holder yet.
        if (h && h !== holder && !isHandoverMarker(h)) after = l;
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
