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
 * - sharded (ours only, not by default): N AppServices by 1 replica and by 3 with `--shards 3`,
 *   with the `ShardedListAndWatch` gate on (a control plane of its own) and off; converge time,
 *   RSS per replica, the share still reconciled after SIGKILL of one (bench/lib/sharded.ts).
 *
 * Exits 1 only when a converge (or sharded) run does not converge (or the benchmark cannot run at all).
 * Every address is 127.0.0.1; every loop and wait is bounded.
 *
 * @module
 */
import { join } from "node:path";
import {
  cacheDir,
  type ClusterInfo,
  readClusterInfo,
  startCluster,
  stopCluster,
} from "../tests/cluster/cluster.ts";
import { REPO } from "../tests/cluster/host.ts";
import { AuditLog } from "./lib/audit.ts";
import { benchClient, createNamespace, dropNamespace, installCrd } from "./lib/kube.ts";
import { AGENT_PREFIX, buildPeer, CLUSTER_AGENTS, warmOurs } from "./lib/operators.ts";
import { importCosts, storeCosts } from "./lib/memory.ts";
import { loadAverage, machineLine, README_MD, writeSection } from "./lib/report.ts";
import {
  BENCH_AGENT,
  CEILING_AGENT,
  ceilingRun,
  convergeRun,
  failoverRun,
  log,
} from "./lib/scenarios.ts";
import {
  type BenchOptions,
  IMPORT_PROBE_RUNS,
  parseBenchArgs,
  PODS_PER_NODE,
  USAGE,
} from "./lib/options.ts";
import { type BenchResults, versions } from "./lib/results.ts";
import { shardedMarkdown, shardedRuns } from "./lib/sharded.ts";
import { markdown, plotConverge, summaryMarkdown, writeDocsPlot } from "./lib/render.ts";

async function main(): Promise<number> {
  let o: BenchOptions;
  try {
    o = parseBenchArgs(Deno.args);
  } catch (err) {
    console.error(`error: ${(err as Error).message}\n${USAGE}`);
    return 2;
  }
  await Deno.mkdir(join(o.resultsDir, "logs"), { recursive: true });
  if (o.fromJson) return await rerender(o, o.fromJson);
  const results: BenchResults = {
    startedAt: new Date().toISOString(),
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
  let failed: boolean;
  try {
    failed = await runScenarios(o, info, results);
  } finally {
    if (!o.reuseCluster && !o.keepCluster) {
      log("stopping the local control plane");
      await stopCluster(o.clusterDir).catch((err) => log("stop failed", { error: String(err) }));
    }
  }
  if (o.scenarios.has("memory") && o.operators.includes("ours")) await memoryProbes(o, results);
  results.notes.push(...runNotes(results));
  const stamp = results.startedAt.replace(/[:.]/g, "-");
  await Deno.writeTextFile(
    join(o.resultsDir, `bench-${stamp}.json`),
    JSON.stringify(results, null, 2),
  );
  await Deno.writeTextFile(join(o.resultsDir, "latest.json"), JSON.stringify(results, null, 2));
  await publish(o, results);
  return failed ? 1 : 0;
}

/** `--from-json`: the plots and tables of saved results, printed (and written unless `--no-markdown`). */
async function rerender(o: BenchOptions, file: string): Promise<number> {
  const saved = JSON.parse(await Deno.readTextFile(file)) as BenchResults;
  saved.plots = [];
  for (const n of saved.options.sizes) {
    const plot = plotConverge(saved.converge, n, o.resultsDir);
    if (plot) saved.plots.push(plot.replace(`${REPO}/`, ""));
  }
  await publish(o, saved);
  return saved.converge.some((c) => !c.ok) ? 1 : 0;
}

/** Prints the BENCHMARKS.md section of `r`; with `--markdown` (the default) also writes it and the docs plot. */
async function publish(o: BenchOptions, r: BenchResults): Promise<void> {
  // A run of the sharded scenario alone has a section of its own, so it leaves the side-by-side
  // run's section as it was.
  const shardedOnly = (r.sharded?.length ?? 0) > 0 && r.converge.length === 0 &&
    r.ceiling.length === 0 && r.failover.length === 0;
  if (shardedOnly) {
    const md = [
      "## Sharded benchmark (`deno task bench --scenarios sharded`)",
      "",
      `Command: \`${r.command}\``,
      "",
      `Run ${r.startedAt} on ${r.machine} (at the start). Versions: ${
        Object.entries(r.versions).map(([k, v]) => `${k} ${v}`).join(", ")
      }.`,
      "",
      shardedMarkdown(r.sharded),
    ].join("\n");
    console.log(md);
    if (o.markdown) await writeSection("bench:sharded", md);
    return;
  }
  const md = markdown(r);
  console.log(md);
  if (o.markdown) {
    await writeDocsPlot(r);
    await writeSection("bench:run", md);
    // The converge tables only: a run of other scenarios leaves the README's summary as it was.
    if (r.converge.length > 0) await writeSection("bench:summary", summaryMarkdown(r), README_MD);
  }
}

/**
 * The scenarios on a running cluster, in order (per size: converge runs and plot, ceiling; then
 * failover), each result added to `results` as it comes (latest.json rewritten after every
 * converge run). Returns whether a converge run failed.
 */
async function runScenarios(
  o: BenchOptions,
  info: ClusterInfo,
  results: BenchResults,
): Promise<boolean> {
  const admin = benchClient(info.kubeconfig, `${BENCH_AGENT}0.1.0`);
  const audit = new AuditLog(join(info.dir, "audit.log"), [
    AGENT_PREFIX.ours,
    AGENT_PREFIX.peer,
    BENCH_AGENT,
    CEILING_AGENT,
    ...CLUSTER_AGENTS,
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
    if (o.scenarios.has("sharded") && o.operators.includes("ours")) {
      results.sharded = [];
      for (const n of o.sizes) results.sharded.push(...await shardedRuns(n, o, info, admin));
      if (results.sharded.some((r) => !r.ok)) failed = true;
    }
  } finally {
    admin.close();
  }
  return failed;
}

/** Scenario memory's probes in processes of their own (after the cluster stopped): import costs and heap bytes per cached object. */
async function memoryProbes(o: BenchOptions, results: BenchResults): Promise<void> {
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

/** The notes printed under the tables: the machine's load during the runs and what the figures include. */
function runNotes(results: BenchResults): string[] {
  const loads = results.converge.map((c) => c.loadAverageAtStart[0]).filter(Number.isFinite);
  return [
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
    results.converge.some((c) => c.finalizerPolicy)
      ? "Finalizer: deploy/finalizer_policy.yaml (the apiserver adds the finalizer at create) " +
        "was bound to ours' converge namespaces only; the peer ran as a kubebuilder operator " +
        "does, without it, and adds the finalizer with a patch."
      : "Finalizer: both operators ran without deploy/finalizer_policy.yaml " +
        "(--no-finalizer-policy, or results from before it): each adds it with a patch.",
  ];
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
