/**
 * Renderers of `deno task bench` results: the converge plots (PNG) and the BENCHMARKS.md tables.
 * @module
 */

import { join } from "node:path";
import { REPO } from "../../tests/cluster/host.ts";
import type { OperatorKind } from "./operators.ts";
import { renderChart, type Rgb } from "./plot.ts";
import type { MemorySample } from "./memory.ts";
import { fmt, median, ratio, spread, table } from "./report.ts";
import type { BenchResults, ConvergeResult } from "./results.ts";
import { IMPORT_PROBE_RUNS, STARTUP_SAMPLES } from "./options.ts";
import { shardedMarkdown } from "./sharded.ts";

/** The converge plot of the largest size, committed and shown in BENCHMARKS.md and README.md. */
const DOCS_PLOT = "docs/converge.png";
/** Colour of each operator's series in the converge plots. */
const COLORS: Record<OperatorKind, Rgb> = { ours: [31, 119, 180], peer: [230, 110, 0] };
/** Legend of each operator's series in the converge plots. */
const LABEL: Record<OperatorKind, string> = {
  ours: "ours (appservice-operator, Deno)",
  peer: "peer (controller-runtime v0.24.1, Go)",
};

/** Writes the Ready-over-time PNG of size `n` (every operator and repeat) into `dir`; returns its path, or undefined when no run of that size has a timeline. */
export function plotConverge(
  results: ConvergeResult[],
  n: number,
  dir: string,
): string | undefined {
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
export async function writeDocsPlot(r: BenchResults): Promise<void> {
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

/**
 * One row of the scenario table: the cells (median, and min–max when there were several runs),
 * the ratio of the medians, ours / peer, and whether ours is behind on it.
 */
export interface ScenarioRow {
  /** The row's label, with `N=<n>` for a per-size row. */
  label: string;
  /** The size of a per-size row. */
  n?: number;
  /** Ours' cell. */
  ours: string;
  /** The peer's cell. */
  peer: string;
  /** ours / peer of the medians, two decimals, or "–". */
  ratio: string;
  /** The medians (undefined when unknown). */
  oursValue?: number;
  /** The peer's median. */
  peerValue?: number;
  /**
   * Ours is behind: the ratio above 1.00 (time, requests, memory, CPU: lower is better), or below
   * 1.00 for a share of the ceiling (higher is better).
   */
  behind: boolean;
}

/** Whether a higher value is better on the row `label` (shares of the ceiling). */
function higherIsBetter(label: string): boolean {
  return label.includes("% of the ceiling");
}

/**
 * The finite numbers `f` gives of `kind`'s successful converge runs at size `n`, in run order (runs
 * without one are left out): the repeats a table cell takes the median and min–max of.
 */
function convergeValues(
  r: BenchResults,
  kind: OperatorKind,
  n: number,
  f: (c: ConvergeResult) => number | undefined,
): number[] {
  return r.converge.filter((c) => c.operator === kind && c.n === n && c.ok).map(f)
    .filter((x): x is number => typeof x === "number" && Number.isFinite(x));
}

/** The rows of the scenario table of `r` (see {@link ScenarioRow}), in table order. */
export function scenarioRows(r: BenchResults): ScenarioRow[] {
  // Steady state, memory and start-up: the full run; converge measures: median of the repeats.
  const get = (kind: OperatorKind, n: number) =>
    r.converge.find((c) => c.operator === kind && c.n === n && c.repeat === 0);
  const values = (kind: OperatorKind, n: number, f: (c: ConvergeResult) => number | undefined) =>
    convergeValues(r, kind, n, f);
  const rows: ScenarioRow[] = [];
  const row = (
    label: string,
    a: number | number[] | undefined,
    b: number | number[] | undefined,
    digits = 1,
  ) => {
    const cell = (x: number | number[] | undefined) =>
      Array.isArray(x) ? spread(x, digits) : fmt(x, digits);
    const mid = (x: number | number[] | undefined) =>
      Array.isArray(x) ? (x.length ? median(x) : undefined) : x;
    const known = (x: number | undefined) => typeof x === "number" && Number.isFinite(x);
    if (known(mid(a)) || known(mid(b))) {
      const q = ratio(mid(a), mid(b));
      const x = q === "∞" ? Infinity : Number(q);
      const n = /N=(\d+)/.exec(label)?.[1];
      rows.push({
        label,
        n: n === undefined ? undefined : Number(n),
        ours: cell(a),
        peer: cell(b),
        ratio: q,
        oursValue: mid(a),
        peerValue: mid(b),
        behind: Number.isFinite(x) || x === Infinity
          ? (higherIsBetter(label) ? x < 1 : x > 1)
          : false,
      });
    }
  };
  // The start-up samples when recorded (the table shows their median and range), else the one figure.
  const startupSeconds = (c: ConvergeResult | undefined) =>
    c?.restart?.startupSamplesMs?.length
      ? c.restart.startupSamplesMs.map((ms) => ms / 1000)
      : (c?.restart?.startupMs ?? NaN) / 1000;
  for (const n of r.options.sizes) {
    const a = get("ours", n), b = get("peer", n);
    // The ceiling is the best of the concurrency levels tried.
    const ceil = r.ceiling.filter((c) => c.n === n)
      .sort((x, y) => y.writesPerSecond - x.writesPerSecond)[0];
    const both = (label: string, f: (c: ConvergeResult) => number | undefined, digits = 1) =>
      row(label, values("ours", n, f), values("peer", n, f), digits);
    both(`Converge N=${n}: seconds to all Ready`, (c) => c.convergeSeconds);
    both(`Converge N=${n}: seconds to half Ready`, (c) => c.halfReadySeconds);
    both(`Converge N=${n}: seconds to the first AppService Ready`, (c) => c.firstReadySeconds, 2);
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
      `Idle N=${n}: anonymous RSS MiB (heap, stacks; RssAnon)`,
      mib(a?.memoryIdle?.split?.anonBytes),
      mib(b?.memoryIdle?.split?.anonBytes),
    );
    row(
      `Idle N=${n}: file-backed RSS MiB (executable code paged in)`,
      mib(a?.memoryIdle?.split?.fileBytes),
      mib(b?.memoryIdle?.split?.fileBytes),
    );
    row(
      `Start-up with N=${n} existing: seconds to /readyz (median of ${STARTUP_SAMPLES})`,
      startupSeconds(a),
      startupSeconds(b),
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
  const fo = (kind: OperatorKind, sig: string) =>
    r.failover.filter((f) => f.operator === kind && f.signal === sig && f.ok)
      .map((f) => f.toNewLeaderMs! / 1000);
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
  return rows;
}

/**
 * Rows the README summary always shows (labels with `N` for the size); every other row of the
 * scenario table joins them when ours is behind on it at some size.
 */
const SUMMARY_ROWS = [
  "Converge N: seconds to all Ready",
  "Converge N: seconds to the first AppService Ready",
  "Converge N: writes per AppService",
  "Converge N: CPU seconds (user+system)",
  "Converge N: AppServices/s as % of the ceiling's",
  "Steady N: requests per minute",
  "Idle N: RSS MiB (after steady state)",
  "Idle N: anonymous RSS MiB (heap, stacks; RssAnon)",
  "Start-up with N existing: seconds to /readyz",
  "Start-up with 0 existing (before the N runs): seconds to /readyz",
  "Failover after SIGTERM of the leader: seconds to a new leader",
  "Failover after SIGKILL of the leader: seconds to a new leader",
];

/**
 * The README's benchmark summary (section `bench:summary`) of `r`: per measure and size, ours vs
 * the peer (medians) and the ratio, **bold** where ours is behind; the rows of
 * {@link SUMMARY_ROWS} and every other row of the scenario table on which ours is behind, so the
 * summary never hides where ours loses.
 */
export function summaryMarkdown(r: BenchResults): string {
  const rows = scenarioRows(r);
  const key = (label: string) => label.replace(/N=\d+/, "N");
  const always = (k: string) => SUMMARY_ROWS.some((s) => k.startsWith(s));
  const keys: string[] = [];
  for (const x of rows) {
    const k = key(x.label);
    if (!keys.includes(k) && (always(k) || rows.some((y) => key(y.label) === k && y.behind))) {
      keys.push(k);
    }
  }
  const median = (cell: string) => cell.split(" (")[0];
  const show = (x: ScenarioRow | undefined) => {
    if (!x) return "—";
    const text = `${median(x.ours)} vs ${median(x.peer)}` +
      (x.ratio === "–" ? " (–)" : ` (${x.ratio}×)`);
    return x.behind ? `**${text}**` : text;
  };
  const sizes = r.options.sizes;
  const perSize = keys.filter((k) => rows.some((x) => key(x.label) === k && x.n !== undefined));
  const single = keys.filter((k) => !perSize.includes(k));
  const repeats = r.options.repeats;
  const parts = [
    `From \`${r.command}\` (${r.startedAt.slice(0, 10)}; ${
      repeats > 1 ? `medians of ${repeats} runs, min–max in BENCHMARKS.md` : "one run"
    }). Each cell: ours vs the peer (ours/peer); **bold**: ours is behind. Every row of the full ` +
    "table on which ours is behind at some size is here.",
    "",
    table(
      ["measure", ...sizes.map((n) => `N = ${n}`)],
      perSize.map((k) => [
        k.replace(/ N:/, ":"),
        ...sizes.map((n) => show(rows.find((x) => x.n === n && key(x.label) === k))),
      ]),
    ),
  ];
  if (single.length > 0) {
    parts.push(
      "",
      table(
        ["measure", "ours vs peer"],
        single.map((k) => [k, show(rows.find((x) => x.label === k))]),
      ),
    );
  }
  return parts.join("\n");
}

/** The BENCHMARKS.md section of this benchmark. */
export function markdown(r: BenchResults): string {
  const get = (kind: OperatorKind, n: number) =>
    r.converge.find((c) => c.operator === kind && c.n === n && c.repeat === 0);
  const rows = scenarioRows(r).map((x) => [x.label, x.ours, x.peer, x.ratio]);
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
  // Apiserver time by kind of write, all sizes: medians over the repeats of each operator.
  const okRuns = (kind: OperatorKind, n: number) =>
    r.converge.filter((c) => c.operator === kind && c.n === n && c.ok);
  const kindMs = (kind: OperatorKind, n: number, k: string) =>
    convergeValues(r, kind, n, (c) => c.writeServerMsByKind?.[k]);
  const latencyRows = r.options.sizes.flatMap((n) => {
    const kinds = [
      ...new Set(
        r.converge.filter((c) => c.n === n).flatMap((c) =>
          Object.keys(c.writeServerMsByKind ?? {})
        ),
      ),
    ].sort();
    return kinds.map((k) => {
      const x = kindMs("ours", n, k), y = kindMs("peer", n, k);
      const mx = x.length ? median(x) : undefined, my = y.length ? median(y) : undefined;
      return [
        n,
        `\`${k}\``,
        x.length ? spread(x, 1) : "–",
        y.length ? spread(y, 1) : "–",
        ratio(mx, my),
      ];
    });
  });
  // The path to the first Ready: ms after the first create of each step's first request.
  const STEP_ORDER = [
    "AppService created",
    "Pod created",
    "Pod bound",
    "Pod status written",
    "AppService status written",
  ];
  const stepRows = r.options.sizes.flatMap((n) =>
    STEP_ORDER.map((step) => {
      const ms = (kind: OperatorKind) => convergeValues(r, kind, n, (c) => c.firstSteps?.[step]);
      const x = ms("ours"), y = ms("peer");
      return [n, step, x.length ? spread(x, 0) : "–", y.length ? spread(y, 0) : "–"];
    }).filter((row) => row[2] !== "–" || row[3] !== "–")
  );
  const clusterLine = r.options.sizes.map((n) => {
    const part = (kind: OperatorKind) => {
      const runs = okRuns(kind, n).filter((c) => c.clusterWrites);
      if (runs.length === 0) return "–";
      const ps = runs.map((c) => c.clusterWrites!.perSecond);
      const ms = runs.map((c) => c.clusterWrites!.meanServerMs);
      return `${fmt(median(ps), 1)}/s at ${fmt(median(ms), 1)} ms`;
    };
    return `N=${n}: ours ${part("ours")} / peer ${part("peer")}`;
  });
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
    latencyRows.length > 0
      ? "Converge: apiserver ms per write by verb and resource (audit; median of the repeats, " +
        "min–max). The mean over all writes in the table above mixes kinds of different cost, " +
        "and the two operators make different mixes:\n\n" +
        table(["N", "verb resource", "ours", "peer", "ours/peer"], latencyRows)
      : "",
    "",
    stepRows.length > 0
      ? "Converge: the path to the first AppService Ready — ms from the first create to the " +
        "first request of each step in the run's namespace (audit; median of the repeats, " +
        "min–max):\n\n" + table(["N", "first of", "ours", "peer"], stepRows)
      : "",
    "",
    r.converge.some((c) => c.clusterWrites)
      ? "Writes of the control plane's own components in the run's namespace during converge " +
        "(kube-scheduler's bindings, kwok's Pod status; median rate and mean apiserver ms): " +
        `${clusterLine.join(". ")}. They follow the operator's Pod creates, so the faster ` +
        "operator shares the apiserver with more of them."
      : "",
    "",
    steadyRows.length > 0
      ? `Steady-state requests, N=${nMax}, over ${
        a?.steady?.seconds ?? b?.steady?.seconds
      } s:\n\n` +
        table(["verb resource", "ours", "peer"], steadyRows)
      : `Steady state, N=${nMax}: no requests from either operator.`,
    "",
    r.converge.length > 0
      ? `Converge runs in order of repeat (the table shows medians and min–max): ${
        convergeSamples.join(". ")
      }.`
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
    shardedMarkdown(r.sharded),
    "",
    ...r.notes.map((n) => `- ${n}`),
    failed.length > 0 ? `\nFAILED: ${failed.join("; ")}` : "",
  ].filter((l, i, all) => !(l === "" && all[i - 1] === "")).join("\n");
}
