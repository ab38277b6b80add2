/**
 * The command line of `deno task bench`: flags, their checks and the usage text.
 * @module
 */

import { parseArgs } from "node:util";
import { join } from "node:path";
import { stateDir } from "../../tests/cluster/cluster.ts";
import { REPO } from "../../tests/cluster/host.ts";
import type { OperatorKind } from "./operators.ts";
import { intFlag, listFlag } from "./flags.ts";

/** Processes per import probe of the memory scenario (the table shows the median). */
export const IMPORT_PROBE_RUNS = 5;

/** Fresh processes whose start-up is timed per operator and size (the table: their median). */
export const STARTUP_SAMPLES = 3;

/** Pods per kwok Node the benchmark plans with (allocatable is 110). */
export const PODS_PER_NODE = 100;

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
  /** Scenario sharded: with the ShardedListAndWatch gate on, off, or both (`--sharded-gate`). */
  shardedGates: boolean[];
  /** Scenario sharded: the replica counts to run, 1 and/or 3 (`--sharded-replicas`). */
  shardedReplicas: number[];
  clusterDir: string;
  /** Extra `deno run` flags for ours (experiments, e.g. V8 flags), after deno task start's. */
  oursDenoFlags: string[];
  reuseCluster: boolean;
  keepCluster: boolean;
  resultsDir: string;
  markdown: boolean;
  /**
   * Whether ours' converge namespaces are bound to deploy/finalizer_policy.yaml (the apiserver
   * adds the finalizer at create); the peer's never are. `--no-finalizer-policy` turns it off.
   */
  finalizerPolicy: boolean;
  /** Re-render BENCHMARKS.md and the plots from this results JSON instead of running. */
  fromJson?: string;
}

/** The usage text of `deno task bench --help` (one line per flag). */
export const USAGE = `usage: deno task bench [flags]
  --sizes 100,1000               AppServices per converge run (one replica each)
  --operators ours,peer          which implementations to run
  --scenarios converge,failover,ceiling,memory
                                 converge includes steady state, memory and start-up;
                                 memory adds the breakdowns of ours (dependencies imported,
                                 heap bytes per cached object); sharded (not by default,
                                 ours only): 1 replica vs 3 with --shards 3, with the
                                 ShardedListAndWatch gate on (a control plane of its own)
                                 and off
  --repeats 2                    converge runs per operator and size, alternating order; the
                                 first also measures steady state, memory and start-up; the
                                 table shows medians and min–max
  --steady-seconds 120           length of the steady-state window
  --settle-seconds 5             wait after converge before the steady window
  --max-concurrent-reconciles 4  the same for both operators
  --create-concurrency 16        in-flight creates of the benchmark client
  --ceiling-concurrency 16       in-flight writes of the ceiling client; a list (4,16,64)
                                 runs each level and takes the best as the ceiling
  --converge-timeout-seconds 900 a run that does not converge within this fails (exit 1)
  --sharded-gate both            scenario sharded with the ShardedListAndWatch gate on,
                                 off or both
  --sharded-replicas 1,3         scenario sharded: the runs with 1 replica, with 3, or both
  --failover-runs 2              repetitions of each failover case (the table shows the
                                 median and min–max)
  --ours-deno-flags "FLAGS"      extra deno run flags for ours, after deno task start's
                                 (experiments, e.g. "--v8-flags=--max-semi-space-size=2")
  --cluster-dir DIR              default .cache/bench-cluster (the clone's own)
  --reuse-cluster                use the cluster already running in --cluster-dir
  --keep-cluster                 leave the cluster running at the end
  --results DIR                  default bench/results
  --no-finalizer-policy          run ours without deploy/finalizer_policy.yaml (by default
                                 it is bound to ours' converge namespaces, never the peer's)
  --no-markdown                  do not rewrite BENCHMARKS.md
  --from-json FILE               only re-render BENCHMARKS.md and the plots from a results JSON`;
/** `--sharded-gate`: `on`, `off` or `both` (gate on first). @throws Error for anything else. */
function shardedGates(v: string): boolean[] {
  if (v === "on") return [true];
  if (v === "off") return [false];
  if (v === "both") return [true, false];
  throw new Error(`--sharded-gate: "${v}" is not one of on, off, both`);
}

/** `--sharded-replicas`: a list of 1 and 3. @throws Error for anything else. */
function shardedReplicas(v: string): number[] {
  const out = v.split(",").map((x) => Number(x.trim()));
  if (out.length === 0 || out.some((n) => n !== 1 && n !== 3)) {
    throw new Error(`--sharded-replicas: "${v}" is not a list of 1 and 3`);
  }
  return [...new Set(out)].sort();
}

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
      "sharded-gate": { type: "string", default: "both" },
      "sharded-replicas": { type: "string", default: "1,3" },
      "cluster-dir": { type: "string", default: join(stateDir(), "bench-cluster") },
      "ours-deno-flags": { type: "string", default: "" },
      "reuse-cluster": { type: "boolean", default: false },
      "keep-cluster": { type: "boolean", default: false },
      results: { type: "string", default: join(REPO, "bench", "results") },
      "no-markdown": { type: "boolean", default: false },
      "no-finalizer-policy": { type: "boolean", default: false },
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
    listFlag("scenarios", values.scenarios, [
      "converge",
      "failover",
      "ceiling",
      "memory",
      "sharded",
    ]),
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
    shardedGates: shardedGates(values["sharded-gate"]),
    shardedReplicas: shardedReplicas(values["sharded-replicas"]),
    clusterDir: values["cluster-dir"],
    oursDenoFlags: values["ours-deno-flags"].split(/\s+/).filter(Boolean),
    reuseCluster: values["reuse-cluster"],
    keepCluster: values["keep-cluster"],
    resultsDir: values.results,
    markdown: !values["no-markdown"],
    finalizerPolicy: !values["no-finalizer-policy"],
    fromJson: values["from-json"],
  };
}
