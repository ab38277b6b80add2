/**
 * Scenario `sharded` of `deno task bench` (issue 30): N AppServices run by one replica and by 3
 * replicas with `--shards 3`, with kube-apiserver's `ShardedListAndWatch` gate on (a control plane
 * of its own: the informers ask for `shardSelector`) and off (the benchmark's control plane: the
 * informers filter on the client). Per run: converge time, RSS of each replica at idle after
 * converging; for the 3 replicas, a failover: SIGKILL of one replica, then every AppService's spec
 * is changed at once, and the share reconciled (observedGeneration caught up) before the killed
 * replica's lease runs out is counted — the AppServices of the shards the others hold keep
 * working, those of the killed one's shard wait for the takeover.
 *
 * Ours only (the peer has no sharding). Namespaces: 2 per shard, named by the shard contract
 * (lib/runtime/shards.ts `shardOf`), the N AppServices spread over them evenly.
 * @module
 */
import { join } from "node:path";
import type { Lease } from "kubernetes-types/coordination/v1.d.ts";
import type { KubeClient } from "../../lib/kube/client.ts";
import type { Pod } from "kubernetes-types/core/v1.d.ts";
import { LEASES, PODS } from "../../lib/kube/resources.ts";
import type { AppService } from "../../lib/appservice/schema.ts";
import { shardOf } from "../../lib/runtime/shards.ts";
import { SHARD_SELECTOR_NOT_SERVED, SHARD_SELECTOR_SERVED } from "../../lib/runtime/shard_work.ts";
import {
  cacheDir,
  type ClusterInfo,
  startCluster,
  stateDir,
  stopCluster,
} from "../../tests/cluster/cluster.ts";
import {
  AS_RESOURCE,
  benchAppService,
  benchClient,
  createNamespace,
  dropNamespace,
  installCrd,
  pool,
  ReadyTracker,
  sleep,
  waitUntil,
} from "./kube.ts";
import { type OperatorProcess, type OperatorSettings, startOperatorProcess } from "./operators.ts";
import { fmt, median, table } from "./report.ts";
import { rssSplit } from "./memory.ts";
import { type BenchOptions, PODS_PER_NODE } from "./options.ts";
import { BENCH_AGENT, log } from "./scenarios.ts";

/** Shards and replicas of the sharded runs. */
export const SHARDED_REPLICAS = 3;
/** Namespaces per shard the AppServices are spread over. */
const NAMESPACES_PER_SHARD = 2;
/**
 * AppServices changed after the SIGKILL: small enough that the changes are all sent within a few
 * seconds (16 in flight), large enough that the share reconciled is read to about 1%.
 */
export const FAILOVER_SAMPLE = 600;
/** Lease timings of the sharded runs (the failover scenario's): lease, renew deadline, retry. */
const LEASE_S = 15;
const RENEW_S = 10;
const RETRY_S = 2;

/** One sharded-scenario run. */
export interface ShardedResult {
  n: number;
  /** Whether kube-apiserver had `ShardedListAndWatch` on (server-side shard selection). */
  gate: boolean;
  /** 1: one replica without shards; 3: three replicas with `--shards 3`. */
  replicas: number;
  /**
   * How the replicas' informers select their shards, from their start-up lines: `server`
   * (`shardSelector` served), `client` (filtered in the stores), `mixed`, or `unknown` (no line).
   */
  selection?: "server" | "client" | "mixed" | "unknown";
  ok: boolean;
  error?: string;
  /** Seconds from the first create until all N were Ready. */
  convergeSeconds?: number;
  /** RSS of each replica at idle after converging, bytes. */
  rssBytes?: number[];
  /** The same RSS split: anonymous (heap, stacks) and file-backed (the executable), bytes. */
  anonBytes?: number[];
  fileBytes?: number[];
  /** CPU seconds (user + system) of each replica from its start to idle after converging. */
  cpuSeconds?: number[];
  /**
   * Failover (3 replicas): SIGKILL of one, then a sample of the AppServices changed (every k-th of
   * each namespace, {@linkcode FAILOVER_SAMPLE} in all): changing all N at the client's rate would
   * take longer than the lease, and the result would measure the client, not the operator.
   */
  failover?: {
    /** AppServices changed (the sample). */
    sampled: number;
    /** Of the sample, those in the shards the killed replica held. */
    inKilledShards: number;
    /** Of the sample, reconciled before the killed replica's lease ran out (its last renewal). */
    reconciledBeforeExpiry: number;
    /** Seconds from the kill until every change was reconciled. */
    allReconciledSeconds?: number;
    /** Seconds from the kill until the last change was sent (the sample's patches). */
    patchedSeconds?: number;
  };
}

/** `count` namespace names `<prefix>-<i>` per shard of `shards` (the first found), flattened. */
function namespacesFor(prefix: string, shards: number): string[] {
  const per: string[][] = Array.from({ length: shards }, () => []);
  for (let i = 0; i < 100_000 && per.some((p) => p.length < NAMESPACES_PER_SHARD); i++) {
    const name = `${prefix}-${i}`;
    const k = shardOf(name, shards);
    if (per[k].length < NAMESPACES_PER_SHARD) per[k].push(name);
  }
  return per.flat();
}

/** Live shard holders from the Leases `<id>-shard-<k>`: identity prefix (Pod name) -> shards. */
async function shardHolders(c: KubeClient, ns: string, id: string): Promise<Map<string, number[]>> {
  const out = new Map<string, number[]>();
  for (const l of (await c.list<Lease>(LEASES, { namespace: ns })).items) {
    const m = new RegExp(`^${id}-shard-(\\d+)$`).exec(l.metadata?.name ?? "");
    const h = l.spec?.holderIdentity ?? "";
    if (!m || !h.includes("_") || h.startsWith("handover:")) continue;
    const renewed = Date.parse(l.spec?.renewTime ?? "") || 0;
    if (renewed + (l.spec?.leaseDurationSeconds ?? 0) * 1000 < Date.now()) continue;
    const pod = h.slice(0, h.lastIndexOf("_"));
    out.set(pod, [...out.get(pod) ?? [], Number(m[1])]);
  }
  return out;
}

/** The shard selection the replicas' start-up lines report (their log files, read after exit). */
async function selectionOf(procs: OperatorProcess[]): Promise<ShardedResult["selection"]> {
  const modes = new Set<string>();
  for (const p of procs) {
    const text = await Deno.readTextFile(p.logFile).catch(() => "");
    if (text.includes(SHARD_SELECTOR_SERVED)) modes.add("server");
    else if (text.includes(SHARD_SELECTOR_NOT_SERVED)) modes.add("client");
    else modes.add("unknown");
  }
  if (modes.size > 1) return "mixed";
  return [...modes][0] as ShardedResult["selection"];
}

/**
 * Scenario sharded for size `n`, for each of `o.shardedGates`: gate on (a control plane of its
 * own) and off (`info`'s).
 */
export async function shardedRuns(
  n: number,
  o: BenchOptions,
  info: ClusterInfo,
  admin: KubeClient,
): Promise<ShardedResult[]> {
  const out: ShardedResult[] = [];
  if (o.shardedGates.includes(true)) out.push(...await gatedRuns(n, o));
  if (o.shardedGates.includes(false)) {
    await waitPodRuns(admin, o);
    for (const replicas of o.shardedReplicas) {
      out.push(await shardedRun(n, false, replicas, o, info, admin));
    }
  }
  return out;
}

/** The runs of size `n` on a control plane of their own with `ShardedListAndWatch` on. */
async function gatedRuns(n: number, o: BenchOptions): Promise<ShardedResult[]> {
  const out: ShardedResult[] = [];
  const dir = join(stateDir(), "bench-sharded-cluster");
  log("sharded: starting a control plane with ShardedListAndWatch on", { dir });
  const gated = await startCluster({
    dir,
    nodes: Math.max(3, Math.ceil(n / PODS_PER_NODE) + 1),
    featureGates: { ShardedListAndWatch: true },
  });
  const gatedAdmin = benchClient(gated.kubeconfig, `${BENCH_AGENT}0.1.0`);
  try {
    await installCrd(gatedAdmin);
    await waitPodRuns(gatedAdmin, o);
    for (const replicas of o.shardedReplicas) {
      out.push(await shardedRun(n, true, replicas, o, gated, gatedAdmin));
    }
  } finally {
    gatedAdmin.close();
    log("sharded: stopping the gated control plane");
    await stopCluster(dir).catch((err) => log("stop failed", { error: String(err) }));
  }
  return out;
}

/**
 * Waits until a new control plane runs a Pod (kube-scheduler bound it, kwok marked it Ready;
 * bounded: 120 s), then deletes it. A converge timed on a control plane started seconds before
 * counts its warm-up: at N=1,000, 20.1 s when the AppServices were created 4–5 s after its start
 * against 18.2 s from 6 s on (bench/README.md).
 */
async function waitPodRuns(admin: KubeClient, o: BenchOptions): Promise<void> {
  const ns = "bench-sharded-warmup";
  await createNamespace(admin, ns);
  try {
    await admin.create<Pod>(PODS, {
      apiVersion: "v1",
      kind: "Pod",
      metadata: { name: "warmup", namespace: ns },
      spec: { containers: [{ name: "app", image: "nginx:1.27" }] },
    });
    await waitUntil(
      "a Pod running on the new control plane",
      async () =>
        (await admin.get<Pod>(PODS, "warmup", { namespace: ns })).status?.conditions?.some((c) =>
          c.type === "Ready" && c.status === "True"
        ) ?? false,
      120_000,
      100,
    );
  } finally {
    await dropNamespace(admin, ns, o.createConcurrency).catch((err) =>
      log("cleanup failed", { namespace: ns, error: String(err) })
    );
  }
}

/** One run: `replicas` replicas (3: `--shards 3`) converge `n` AppServices; with 3, a failover. */
async function shardedRun(
  n: number,
  gate: boolean,
  replicas: number,
  o: BenchOptions,
  info: ClusterInfo,
  admin: KubeClient,
): Promise<ShardedResult> {
  const res: ShardedResult = { n, gate, replicas, ok: false };
  const tag = `${gate ? "on" : "off"}-${replicas}`;
  const namespaces = namespacesFor(`bench-sharded-${tag}`, SHARDED_REPLICAS);
  const leNs = `bench-sharded-le-${tag}`;
  const leaseId = `bench-sharded-${tag}`;
  const procs: OperatorProcess[] = [];
  const trackers: ReadyTracker[] = [];
  try {
    for (const ns of [...namespaces, leNs]) await createNamespace(admin, ns);
    for (const ns of namespaces) trackers.push(new ReadyTracker(admin, ns));
    for (const t of trackers) await t.synced();
    const settings: OperatorSettings = {
      kubeconfig: info.kubeconfig,
      maxConcurrentReconciles: o.maxConcurrentReconciles,
      watchNamespace: namespaces.join(","),
      ...(replicas > 1
        ? {
          leaderElect: true,
          leaderElectionNamespace: leNs,
          leaderElectionId: leaseId,
          leaseDurationSeconds: LEASE_S,
          renewDeadlineSeconds: RENEW_S,
          retryPeriodSeconds: RETRY_S,
          shards: SHARDED_REPLICAS,
        }
        : {}),
    };
    for (let i = 0; i < replicas; i++) {
      procs.push(
        await startOperatorProcess("ours", settings, {
          cacheDir: cacheDir(),
          logDir: join(o.resultsDir, "logs"),
          label: `sharded-${tag}-${n}-${i}`,
          denoFlags: o.oursDenoFlags,
          podName: `replica-${i}`,
        }),
      );
    }
    for (const p of procs) await p.waitReady(120_000);
    if (replicas > 1) {
      await waitUntil(
        "one shard per replica",
        async () => {
          const m = await shardHolders(admin, leNs, leaseId);
          return m.size === replicas && [...m.values()].every((ks) => ks.length === 1);
        },
        120_000,
        200,
      );
    }
    log("sharded: creating", { n, gate, replicas });
    const t0 = Date.now();
    await pool(n, o.createConcurrency, async (i) => {
      const ns = namespaces[i % namespaces.length];
      await admin.create<AppService>(AS_RESOURCE, benchAppService(ns, i));
    });
    const share = (k: number) =>
      Math.floor(n / namespaces.length) + (k < n % namespaces.length ? 1 : 0);
    const deadline = Date.now() + o.convergeTimeoutSeconds * 1000;
    for (const [k, t] of trackers.entries()) {
      if (!await t.waitReady(share(k), Math.max(0, deadline - Date.now()))) {
        res.error = `namespace ${namespaces[k]}: ${t.ready}/${share(k)} Ready after ` +
          `${o.convergeTimeoutSeconds} s`;
        return res;
      }
    }
    res.convergeSeconds = (Date.now() - t0) / 1000;
    log("sharded: all Ready", { n, gate, replicas, seconds: res.convergeSeconds });
    await sleep(o.settleSeconds * 1000);
    res.rssBytes = procs.map((p) => p.sample()?.rssBytes ?? NaN);
    const splits = procs.map((p) => rssSplit(p.pid));
    res.anonBytes = splits.map((x) => x?.anonBytes ?? NaN);
    res.fileBytes = splits.map((x) => x?.fileBytes ?? NaN);
    res.cpuSeconds = procs.map((p) => p.sample()?.cpuSeconds ?? NaN);
    if (replicas > 1) res.failover = await failover(namespaces, leNs, leaseId, procs, admin);
    res.ok = true;
    return res;
  } catch (err) {
    res.error = err instanceof Error ? err.message : String(err);
    log("sharded: error", { n, gate, replicas, error: res.error });
    return res;
  } finally {
    for (const t of trackers) t.stop();
    await Promise.all(procs.map((p) => p.stop("SIGTERM")));
    // A log file is complete once its process has ended (the pump's writes are buffered).
    if (replicas > 1 && procs.length > 0) res.selection = await selectionOf(procs);
    for (const ns of [...namespaces, leNs]) {
      await dropNamespace(admin, ns, o.createConcurrency).catch((err) =>
        log("cleanup failed", { namespace: ns, error: String(err) })
      );
    }
  }
}

/**
 * SIGKILL of replica 0, then a sample of {@linkcode FAILOVER_SAMPLE} AppServices (evenly over the
 * namespaces) changed at once; counts those whose observedGeneration caught up before the lease
 * duration (from the kill) ran out, and the time until all did.
 */
async function failover(
  namespaces: string[],
  leNs: string,
  leaseId: string,
  procs: OperatorProcess[],
  admin: KubeClient,
): Promise<ShardedResult["failover"]> {
  const held = await shardHolders(admin, leNs, leaseId);
  const killedShards = held.get("replica-0") ?? [];
  const inKilled = new Set(
    namespaces.filter((ns) => killedShards.includes(shardOf(ns, SHARDED_REPLICAS))),
  );
  const everyone: AppService[] = [];
  for (const ns of namespaces) {
    everyone.push(...(await admin.listAll<AppService>(AS_RESOURCE, { namespace: ns })).items);
  }
  const step = Math.max(1, Math.ceil(everyone.length / FAILOVER_SAMPLE));
  const all = everyone.filter((_, i) => i % step === 0);
  await procs[0].stop("SIGKILL");
  const killedAt = Date.now();
  // The lease runs out from its last renewal, which may precede the kill by up to the retry
  // period; the read is against that, not the kill.
  let expiresAt = killedAt + LEASE_S * 1000;
  for (const k of killedShards) {
    const l = await admin.get<Lease>(LEASES, `${leaseId}-shard-${k}`, { namespace: leNs });
    const renewed = Date.parse(l.spec?.renewTime ?? "");
    if (Number.isFinite(renewed)) expiresAt = Math.min(expiresAt, renewed + LEASE_S * 1000);
  }
  log("sharded: killed replica-0", { shards: killedShards, expiresInMs: expiresAt - killedAt });
  const want = new Map<string, number>();
  await pool(all.length, 16, async (i) => {
    const a = all[i];
    const got = await admin.patch<AppService>(AS_RESOURCE, a.metadata.name!, {
      spec: { progressDeadlineSeconds: 601 },
    }, { namespace: a.metadata.namespace });
    want.set(`${a.metadata.namespace}/${a.metadata.name}`, got.metadata.generation ?? 0);
  });
  const patchedSeconds = (Date.now() - killedAt) / 1000;
  const caught = async () => {
    let count = 0;
    for (const ns of namespaces) {
      for (const a of (await admin.listAll<AppService>(AS_RESOURCE, { namespace: ns })).items) {
        const key = `${ns}/${a.metadata.name}`;
        if ((a.status?.observedGeneration ?? 0) >= (want.get(key) ?? Infinity)) count++;
      }
    }
    return count;
  };
  // The count is read from a list that takes up to a second at N=10,000, so it starts 1 s early.
  await sleep(Math.max(0, expiresAt - 1000 - Date.now()));
  const reconciledBeforeExpiry = await caught();
  let allReconciledSeconds: number | undefined;
  await waitUntil(
    "every change reconciled",
    async () => {
      if (await caught() < all.length) return false;
      allReconciledSeconds = (Date.now() - killedAt) / 1000;
      return true;
    },
    180_000,
    500,
  ).catch((err) => log("sharded: not all reconciled", { error: String(err) }));
  return {
    sampled: all.length,
    inKilledShards: all.filter((a) => inKilled.has(a.metadata.namespace!)).length,
    reconciledBeforeExpiry,
    allReconciledSeconds,
    patchedSeconds,
  };
}

/** The markdown of the sharded runs (empty without any). */
export function shardedMarkdown(results: ShardedResult[] | undefined): string {
  if (!results?.length) return "";
  const mib = (b: number) => fmt(b / 2 ** 20, 1);
  const rows = results.map((r) => [
    r.n,
    r.gate ? "on" : "off",
    r.replicas === 1 ? "1" : `${r.replicas}, --shards ${SHARDED_REPLICAS}`,
    r.selection ? `${r.selection}-side` : "–",
    r.ok ? fmt(r.convergeSeconds, 1) : "failed",
    r.rssBytes?.length
      ? (r.replicas === 1 ? mib(r.rssBytes[0]) : `${mib(median(r.rssBytes))} (median)`)
      : "–",
    r.anonBytes?.length && r.fileBytes?.length
      ? `${mib(median(r.anonBytes))} / ${mib(median(r.fileBytes))}`
      : "–",
    r.cpuSeconds?.length ? fmt(r.cpuSeconds.reduce((a, b) => a + b, 0), 1) : "–",
    r.failover
      ? `${r.failover.reconciledBeforeExpiry}/${r.failover.sampled} changed (${
        r.failover.sampled - r.failover.inKilledShards
      } outside the killed shard; sent within ${fmt(r.failover.patchedSeconds, 1)} s)`
      : "–",
    r.failover?.allReconciledSeconds !== undefined ? fmt(r.failover.allReconciledSeconds, 1) : "–",
  ]);
  return [
    `Sharded (ours; lease ${LEASE_S} s / renew ${RENEW_S} s / retry ${RETRY_S} s; AppServices over ` +
    `${SHARDED_REPLICAS * NAMESPACES_PER_SHARD} namespaces, ${NAMESPACES_PER_SHARD} per shard):`,
    "",
    table(
      [
        "N",
        "ShardedListAndWatch",
        "replicas",
        "shard selection (start-up line)",
        "converge s",
        "RSS MiB per replica",
        "of it anonymous / file-backed MiB",
        "CPU s, all replicas",
        "after SIGKILL of one: reconciled before its lease ran out",
        "all reconciled, s after the kill",
      ],
      rows,
    ),
    "",
    shardedRatios(results),
  ].join("\n");
}

/**
 * One line per gate and size with both runs: 3 replicas against the single leader — RSS per
 * replica (median), its anonymous part, converge seconds and CPU seconds of all replicas together.
 */
function shardedRatios(results: ShardedResult[]): string {
  const lines: string[] = [];
  for (const r3 of results.filter((r) => r.replicas > 1 && r.ok)) {
    const r1 = results.find((r) => r.replicas === 1 && r.ok && r.n === r3.n && r.gate === r3.gate);
    if (!r1) continue;
    const ratio = (a: number | undefined, b: number | undefined) =>
      a !== undefined && b !== undefined && Number.isFinite(a / b) ? `${fmt(a / b, 2)}×` : "–";
    const med = (xs: number[] | undefined) => xs?.length ? median(xs) : undefined;
    const sum = (xs: number[] | undefined) =>
      xs?.length ? xs.reduce((a, b) => a + b, 0) : undefined;
    lines.push(
      `- N=${r3.n}, gate ${r3.gate ? "on" : "off"}, ${r3.replicas} replicas / 1: RSS per replica ` +
        `${ratio(med(r3.rssBytes), med(r1.rssBytes))}, anonymous ${
          ratio(med(r3.anonBytes), med(r1.anonBytes))
        }, converge ${ratio(r3.convergeSeconds, r1.convergeSeconds)}, CPU of all replicas ${
          ratio(sum(r3.cpuSeconds), sum(r1.cpuSeconds))
        }; reconciled before the killed replica's lease ran out ${
          r3.failover
            ? `${fmt((100 * r3.failover.reconciledBeforeExpiry) / r3.failover.sampled, 0)}%`
            : "–"
        }.`,
    );
  }
  return lines.join("\n");
}
