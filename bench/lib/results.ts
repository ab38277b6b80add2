/**
 * The result records of `deno task bench` (what latest.json and bench-<time>.json hold) and the versions they were measured with.
 * @module
 */

import { join } from "node:path";
import { REPO } from "../../tests/cluster/host.ts";
import type { OperatorKind } from "./operators.ts";
import type { ImportCost, MemorySample } from "./memory.ts";
import type { StoreProbeResult } from "../memory_probe.ts";
import type { BenchOptions } from "./options.ts";
import type { ShardedResult } from "./sharded.ts";

/** One converge run (with its steady state, memory and restart). */
export interface ConvergeResult {
  operator: OperatorKind;
  n: number;
  /** 0 for the full run (with steady state, memory, start-up), then converge-only repeats. */
  repeat: number;
  ok: boolean;
  error?: string;
  loadAverageAtStart: number[];
  /** Whether deploy/finalizer_policy.yaml was bound to the run's namespace (ours only). */
  finalizerPolicy?: boolean;
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
  /** The same by `verb resource` (e.g. `create pods`), ms. */
  writeServerMsByKind?: Record<string, number>;
  /**
   * Writes of the control plane's components (`CLUSTER_AGENTS`: scheduler bindings, kwok's Pod
   * status) in the run's namespace from the first create to convergence, and their mean apiserver
   * time, ms: load the operator's Pod creates cause, which its own writes queue behind.
   */
  clusterWrites?: { count: number; perSecond: number; meanServerMs: number };
  /**
   * The path to the first AppService Ready, from the audit log: ms from the first create until the
   * first request of each step in the run's namespace — the benchmark's first AppService create,
   * the operator's first Pod create, the scheduler's first binding, kwok's first Pod status write,
   * the operator's first AppService status write. Which step takes the time says why the first
   * AppService is Ready when it is.
   */
  firstSteps?: Record<string, number>;
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
    /** Every sample (ms), in order: `STARTUP_SAMPLES` (options.ts) fresh processes, the last one kept. */
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
  /** Scenario sharded: one replica and 3 with `--shards 3`, gate on and off, per size. */
  sharded?: ShardedResult[];
}

/** Versions the results were measured with: Deno, V8, the peer's controller-runtime, client-go and Go (from bench/peer/go.mod), Kubernetes. */
export async function versions(): Promise<Record<string, string>> {
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
