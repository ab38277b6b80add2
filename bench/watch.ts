/**
 * `deno task bench:watch`: our reflector + store (lib/runtime) against an informer of npm
 * `@kubernetes/client-node` under Deno, with 10,000 ConfigMaps cached (the size kube-rs
 * benchmarks memory with), in one run.
 *
 * 1. On the local control plane: create the ConfigMaps, list them (resourceVersion R), watch
 *    from R while updating each one once, and record the list and the watch events.
 * 2. Replay: a loopback HTTPS server on the apiserver's own HTTP stack (bench/replay, Go
 *    net/http, started by bench/lib/replay.ts) serves that list and that watch stream as fast as
 *    the client reads, so "events decoded and applied per second" is the client's speed, not the
 *    apiserver's. Each side runs in its own process with `--expose-gc`: objects/s of the initial
 *    list, watch events/s, heap bytes per cached object after GC.
 * 3. Live: each side lists the same ConfigMaps from the real apiserver (TLS, client
 *    certificate): seconds to synced and heap per object.
 *
 * Sides run one after the other, alternating order, `--runs` times; the table shows medians.
 * Writes the `bench:watch` section of BENCHMARKS.md and JSON in bench/results/.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { join } from "node:path";
import type { ConfigMap } from "kubernetes-types/core/v1.d.ts";
import { CONFIGMAPS } from "../lib/kube/resources.ts";
import {
  cacheDir,
  type ClusterInfo,
  readClusterInfo,
  startCluster,
  stateDir,
  stopCluster,
} from "../tests/cluster/cluster.ts";
import { REPO } from "../tests/cluster/host.ts";
import { benchClient, createNamespace, pool } from "./lib/kube.ts";
import {
  buildReplayServer,
  makeServingCert,
  type Recording,
  replayKubeconfig,
  startReplayServer,
} from "./lib/replay.ts";
import { intFlag, listFlag } from "./lib/flags.ts";
import { fmt, loadAverage, machineLine, ratio, table, writeSection } from "./lib/report.ts";
import type { SideResult } from "./watch_side.ts";

const SIDES = [
  "ours",
  "client-node",
  "ours-list-from-cache",
  "ours-keep-managed-fields",
] as const;
const NAMESPACE = "bench-watch";

interface WatchOptions {
  objects: number;
  runs: number;
  concurrency: number;
  modes: Set<string>;
  clusterDir: string;
  reuseCluster: boolean;
  keepCluster: boolean;
  resultsDir: string;
  markdown: boolean;
  /** Sides to run (default all). */
  sides: string[];
  /** A saved recording to replay instead of recording anew; written when missing. */
  recording?: string;
}

const USAGE = `usage: deno task bench:watch [flags]
  --objects 10000       ConfigMaps cached (and updates replayed)
  --runs 5              runs of each side per mode (medians reported)
  --modes replay,live   replay: recorded list + watch from a loopback server; live: list from
                        the apiserver
  --concurrency 32      in-flight writes while creating and updating the ConfigMaps
  --cluster-dir DIR     default <cache>/bench-watch-cluster
  --reuse-cluster       use the cluster already running in --cluster-dir
  --keep-cluster        leave the cluster running at the end
  --results DIR         default bench/results
  --no-markdown         do not rewrite BENCHMARKS.md
  --sides a,b           sides to run (default ${SIDES.join(",")})
  --recording FILE      replay this saved recording (JSON) instead of recording anew; when FILE
                        does not exist, record and save it there (for development)`;

function parse(args: string[]): WatchOptions {
  const { values } = parseArgs({
    args,
    options: {
      objects: { type: "string", default: "10000" },
      runs: { type: "string", default: "5" },
      modes: { type: "string", default: "replay,live" },
      concurrency: { type: "string", default: "32" },
      "cluster-dir": { type: "string", default: join(stateDir(), "bench-watch-cluster") },
      "reuse-cluster": { type: "boolean", default: false },
      "keep-cluster": { type: "boolean", default: false },
      results: { type: "string", default: join(REPO, "bench", "results") },
      "no-markdown": { type: "boolean", default: false },
      sides: { type: "string", default: SIDES.join(",") },
      recording: { type: "string" },
      help: { type: "boolean", short: "h", default: false },
    },
    strict: true,
  });
  if (values.help) {
    console.log(USAGE);
    Deno.exit(0);
  }
  const modes = new Set(listFlag("modes", values.modes, ["replay", "live"]));
  return {
    objects: intFlag("objects", values.objects, 1, 100_000),
    runs: intFlag("runs", values.runs, 1, 20),
    concurrency: intFlag("concurrency", values.concurrency, 1, 256),
    modes,
    clusterDir: values["cluster-dir"],
    reuseCluster: values["reuse-cluster"],
    keepCluster: values["keep-cluster"],
    resultsDir: values.results,
    markdown: !values["no-markdown"],
    sides: listFlag("sides", values.sides, SIDES),
    recording: values.recording,
  };
}

function log(msg: string, fields: Record<string, unknown> = {}): void {
  const extra = Object.entries(fields).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join(" ");
  console.error(
    `[bench:watch ${new Date().toISOString().slice(11, 19)}] ${msg} ${extra}`.trimEnd(),
  );
}

/** A ConfigMap of the benchmark: two labels and two short keys of data. */
function configMap(i: number): ConfigMap {
  return {
    apiVersion: "v1",
    kind: "ConfigMap",
    metadata: {
      name: `cm-${String(i).padStart(5, "0")}`,
      namespace: NAMESPACE,
      labels: { app: "bench-watch", shard: String(i % 16) },
    },
    data: { "app.properties": `index=${i}\nmode=bench\n`, greeting: `hello ${i}` },
  };
}

/** Creates the ConfigMaps (if missing) and records a list plus one update of each. */
async function record(
  info: ClusterInfo,
  o: WatchOptions,
): Promise<Recording & { liveCount: number }> {
  const c = benchClient(info.kubeconfig, "appservice-bench/watch-recorder");
  try {
    await createNamespace(c, NAMESPACE);
    const existing = await c.listAll<ConfigMap>(CONFIGMAPS, { namespace: NAMESPACE });
    const have = new Set(existing.items.map((x) => x.metadata?.name));
    log("creating ConfigMaps", {
      count: Array.from({ length: o.objects }, (_, i) => configMap(i).metadata!.name)
        .filter((n) => !have.has(n)).length,
    });
    await pool(o.objects, o.concurrency, async (i) => {
      const cm = configMap(i);
      if (!have.has(cm.metadata!.name)) await c.create(CONFIGMAPS, cm);
    });
    const list = await c.listAll<ConfigMap>(CONFIGMAPS, { namespace: NAMESPACE });
    const items = list.items.filter((x) => /^cm-\d{5}$/.test(x.metadata?.name ?? ""));
    log("listed", { items: items.length, resourceVersion: list.resourceVersion });
    const events: { type: string; object: unknown }[] = [];
    const ctl = new AbortController();
    const watching = (async () => {
      for await (
        const ev of c.watch<ConfigMap>(CONFIGMAPS, {
          namespace: NAMESPACE,
          resourceVersion: list.resourceVersion,
          timeoutSeconds: 600,
          signal: ctl.signal,
        })
      ) {
        if (ev.type === "BOOKMARK") continue;
        events.push({ type: ev.type, object: ev.object });
        if (events.length >= items.length) break;
      }
    })();
    log("updating each ConfigMap once");
    const stamp = Date.now();
    await pool(items.length, o.concurrency, async (i) => {
      const name = items[i].metadata!.name!;
      await c.patch(CONFIGMAPS, name, { data: { greeting: `updated ${stamp} ${i}` } }, {
        namespace: NAMESPACE,
      });
    });
    const timer = setTimeout(() => ctl.abort(new Error("recording watch timed out")), 300_000);
    try {
      await watching;
    } finally {
      clearTimeout(timer);
    }
    log("recorded", { events: events.length });
    return {
      namespace: NAMESPACE,
      listResourceVersion: list.resourceVersion,
      items,
      events,
      // A live list also holds the namespace's kube-root-ca.crt (and any other ConfigMap).
      liveCount: list.items.length,
    };
  } finally {
    c.close();
  }
}

/** {@link record}, or the recording saved in `o.recording` (saved there when missing). */
async function loadOrRecord(
  info: ClusterInfo,
  o: WatchOptions,
): Promise<Recording & { liveCount: number }> {
  if (o.recording) {
    try {
      const saved = JSON.parse(await Deno.readTextFile(o.recording));
      log("replaying a saved recording", { file: o.recording, events: saved.events.length });
      return saved;
    } catch (err) {
      if (!(err instanceof Deno.errors.NotFound)) throw err;
    }
  }
  const rec = await record(info, o);
  if (o.recording) await Deno.writeTextFile(o.recording, JSON.stringify(rec));
  return rec;
}

async function runSide(
  side: string,
  kubeconfig: string,
  objects: number,
  events: number,
): Promise<SideResult> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--v8-flags=--expose-gc",
      "--allow-read",
      "--allow-net=127.0.0.1",
      "--allow-env",
      "--allow-sys",
      join(REPO, "bench", "watch_side.ts"),
      `--side=${side}`,
      `--kubeconfig=${kubeconfig}`,
      `--namespace=${NAMESPACE}`,
      `--objects=${objects}`,
      `--events=${events}`,
      "--timeout-seconds=300",
    ],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  const stdout = new TextDecoder().decode(out.stdout).trim();
  if (!out.success) {
    throw new Error(
      `side ${side} failed (exit ${out.code}): ${
        new TextDecoder().decode(out.stderr).slice(-2000)
      }`,
    );
  }
  return JSON.parse(stdout.split("\n").at(-1)!) as SideResult;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  if (s.length === 0) return NaN;
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
}

interface ModeResult {
  mode: "replay" | "live";
  runs: Record<string, SideResult[]>;
}

function summarize(m: ModeResult, side: string) {
  const rs = m.runs[side] ?? [];
  return {
    syncSeconds: median(rs.map((r) => r.syncSeconds)),
    objectsPerSecond: median(rs.map((r) => r.objects / r.syncSeconds)),
    eventsPerSecond: median(rs.map((r) => r.eventsPerSecond)),
    heapBytesPerObject: median(rs.map((r) => r.heapBytesPerObject)),
    rssMiB: median(rs.map((r) => (r.rssAfterBytes) / 1048576)),
  };
}

/** " Requests replayed: …" from the replay server's counts ("" without them). */
function replayProtocols(c: Record<string, number> | undefined): string {
  if (!c) return "";
  return ` Requests replayed: ${c.list} lists and ${c.watch} watches, ${c.http2} over HTTP/2 and ` +
    `${c.http1} over HTTP/1.1 (ours speaks HTTP/1.1 only, see lib/kube/credentials.ts; ` +
    "client-node's undici offers h2).";
}

function markdown(
  o: WatchOptions,
  modes: ModeResult[],
  meta: {
    command: string;
    startedAt: string;
    machine: string;
    recorded: number;
    /** Requests the replay server served, by kind and protocol. */
    replayCounts?: Record<string, number>;
  },
): string {
  const rows: (string | number)[][] = [];
  for (const m of modes) {
    const a = summarize(m, "ours"), b = summarize(m, "client-node");
    const k = summarize(m, "ours-keep-managed-fields");
    const c = summarize(m, "ours-list-from-cache");
    // One table row: a measure of every side, in the column order of the table below.
    const row = (label: string, key: keyof typeof a) =>
      rows.push([
        label,
        fmt(a[key], 0),
        fmt(b[key], 0),
        ratio(a[key], b[key]),
        fmt(c[key], 0),
        fmt(k[key], 0),
      ]);
    const where = m.mode === "replay" ? "replayed" : "from the apiserver";
    row(`List ${where}: objects decoded and cached per second`, "objectsPerSecond");
    if (m.mode === "replay") {
      row("Watch replayed: events decoded and applied per second", "eventsPerSecond");
    }
    row(`Heap bytes per cached object (${m.mode}, after GC)`, "heapBytesPerObject");
    row(`Process RSS MiB at the end (${m.mode})`, "rssMiB");
  }
  return [
    "## Watch and cache benchmark (`deno task bench:watch`)",
    "",
    `Command: \`${meta.command}\``,
    "",
    `Run ${meta.startedAt} on ${meta.machine} (at the start). ${o.objects} ConfigMaps ` +
    `(2 labels, 2 short data keys, managedFields as the apiserver returns them), ` +
    `${meta.recorded} recorded update events. Ours: lib/runtime/reflector.ts + store.ts over ` +
    "lib/kube/client.ts with the operator's defaults: a consistent list (resourceVersion unset) " +
    "in pages of 500, managedFields dropped. Variants: the first list at resourceVersion=0 " +
    "(`initialListFromCache`: answered whole from the watch cache, as client-go's reflector " +
    "asks, but possibly stale; see lib/runtime/reflector.ts), and managedFields kept. " +
    "Peer: `makeInformer` of npm @kubernetes/client-node 2.0.1 under Deno " +
    `${Deno.version.deno} (one list request without resourceVersion, a consistent read; keeps ` +
    "managedFields). Each side in its own " +
    `process (--v8-flags=--expose-gc), ${o.runs} runs each, medians; the ratio is ours / ` +
    "client-node (above 1 is better for rates, below 1 for bytes).",
    "",
    table(
      [
        "Measure",
        "ours",
        "client-node",
        "ours/client-node",
        "ours, first list from cache",
        "ours, managedFields kept",
      ],
      rows,
    ),
    "",
    "- replay: the recorded list and watch stream served by a loopback HTTPS server on " +
    "kube-apiserver's own HTTP stack (bench/replay: Go net/http + crypto/tls, HTTP/2 when the " +
    "client offers it by ALPN; TLS with a certificate of the cluster CA) as fast as the client " +
    "reads, so the rates are the client's own decode-and-apply speed (it answers " +
    "resourceVersion=0 lists whole, as the watch cache does); live: the initial list " +
    "from the real apiserver over TLS." + replayProtocols(meta.replayCounts),
    "- Heap: `Deno.memoryUsage().heapUsed` after forced GC with everything cached, minus the " +
    "same before the informer started, divided by the objects cached. The last column (ours " +
    "with `keepManagedFields: true`) shows how much of the difference is the dropped " +
    "managedFields; the one before it what a list from the watch cache saves over a " +
    "consistent paged one.",
    "- Rates are over short intervals (about a second for 10,000 objects), so single runs " +
    `vary by ±30% on this shared machine; the medians of ${o.runs} runs are shown, every run ` +
    "is in the JSON.",
    `- Load average at the end: ${loadAverage().join(" ")}.`,
  ].join("\n");
}

async function main(): Promise<number> {
  let o: WatchOptions;
  try {
    o = parse(Deno.args);
  } catch (err) {
    console.error(`error: ${(err as Error).message}\n${USAGE}`);
    return 2;
  }
  await Deno.mkdir(o.resultsDir, { recursive: true });
  const startedAt = new Date().toISOString();
  const machine = machineLine();
  log("machine", { machine });
  let info: ClusterInfo | undefined;
  if (o.reuseCluster) {
    info = await readClusterInfo(o.clusterDir);
    if (!info) throw new Error(`no cluster running in ${o.clusterDir}`);
  } else {
    log("starting the local control plane", { dir: o.clusterDir });
    info = await startCluster({ dir: o.clusterDir, nodes: 0 });
  }
  const modes: ModeResult[] = [];
  let recorded = 0;
  let replayCounts: Record<string, number> | undefined;
  try {
    const rec = await loadOrRecord(info, o);
    recorded = rec.events.length;
    if (o.modes.has("replay")) {
      const dir = join(o.resultsDir, "replay");
      const tls = await makeServingCert(info.caCertFile, info.caKeyFile, dir);
      log("building the replay server (go build in bench/replay)");
      const binary = await buildReplayServer(cacheDir());
      // The server reads the recording from a file: the saved one, or this run's.
      const recordingFile = o.recording ?? join(dir, "recording.json");
      if (!o.recording) await Deno.writeTextFile(recordingFile, JSON.stringify(rec));
      const server = await startReplayServer({ binary, recordingFile, tls });
      log("replay server", { url: server.url });
      const kc = join(dir, "kubeconfig");
      await Deno.writeTextFile(kc, replayKubeconfig(server.url, tls.caPem));
      const m: ModeResult = { mode: "replay", runs: {} };
      try {
        for (let run = 0; run < o.runs; run++) {
          const order = run % 2 === 0 ? [...o.sides] : [...o.sides].reverse();
          for (const side of order) {
            const r = await runSide(side, kc, rec.items.length, rec.events.length);
            (m.runs[side] ??= []).push(r);
            log("replay", {
              side,
              run,
              syncSeconds: r.syncSeconds,
              eventsPerSecond: r.eventsPerSecond,
              heapBytesPerObject: r.heapBytesPerObject,
            });
          }
        }
      } finally {
        await server.close();
        replayCounts = server.counts;
        log("replay server requests", replayCounts);
      }
      modes.push(m);
    }
    if (o.modes.has("live")) {
      const m: ModeResult = { mode: "live", runs: {} };
      for (let run = 0; run < o.runs; run++) {
        const order = run % 2 === 0 ? [...o.sides] : [...o.sides].reverse();
        for (const side of order) {
          const r = await runSide(side, info.kubeconfig, rec.liveCount, 0);
          (m.runs[side] ??= []).push(r);
          log("live", {
            side,
            run,
            syncSeconds: r.syncSeconds,
            heapBytesPerObject: r.heapBytesPerObject,
          });
        }
      }
      modes.push(m);
    }
  } finally {
    if (!o.reuseCluster && !o.keepCluster) {
      log("stopping the local control plane");
      await stopCluster(o.clusterDir).catch((err) => log("stop failed", { error: String(err) }));
    }
  }
  const command = ["deno task bench:watch", ...Deno.args].join(" ");
  const results = {
    startedAt,
    command,
    machine,
    options: { ...o, modes: [...o.modes] },
    modes,
    replayCounts,
  };
  const stamp = startedAt.replace(/[:.]/g, "-");
  await Deno.writeTextFile(
    join(o.resultsDir, `watch-${stamp}.json`),
    JSON.stringify(results, null, 2),
  );
  await Deno.writeTextFile(
    join(o.resultsDir, "watch-latest.json"),
    JSON.stringify(results, null, 2),
  );
  const md = markdown(o, modes, { command, startedAt, machine, recorded, replayCounts });
  console.log(md);
  if (o.markdown) await writeSection("bench:watch", md);
  return 0;
}

if (import.meta.main) {
  let code = 1;
  try {
    code = await main();
  } catch (err) {
    console.error(`bench:watch failed: ${err instanceof Error ? err.stack : err}`);
  }
  Deno.exit(code);
}
