/**
 * The memory part of `deno task bench`: where each operator's memory goes, taken at idle after
 * converging and after a restart with N existing, and two breakdowns of ours run in processes of
 * their own (bench/memory_probe.ts): what each dependency costs when imported under
 * `deno task start`'s flags, and the heap bytes per cached object for each way of caching.
 *
 * - Both operators: RSS split into anonymous and file-backed pages (`/proc/<pid>/status`:
 *   RssAnon, RssFile + RssShmem). The file-backed part is the executable's own code paged in.
 * - Ours: the debug memory report (lib/runtime/memory_debug.ts, served only because the benchmark
 *   sets `APPSERVICE_DEBUG_MEMORY_ADDRESS`): V8 heap committed and used by space, external
 *   memory, code, and the same after a forced full GC (live data). It is asked for after the RSS
 *   was read, so loading `node:v8` for it does not count.
 * - Peer: the Go runtime's own figures from its `/metrics` (`go_memstats_*`).
 *
 * @module
 */
import { join } from "node:path";
import { REPO, startPermissionFlags } from "../../tests/cluster/host.ts";
import type { MemoryReport } from "../../lib/runtime/memory_debug.ts";
import { type ImportProbeResult, STORE_VARIANTS, type StoreProbeResult } from "../memory_probe.ts";

/** RSS of a process split by kind of page, in bytes (`/proc/<pid>/status`). */
export interface RssSplit {
  rssBytes: number;
  /** RssAnon: heap, stacks, every allocation. */
  anonBytes: number;
  /** RssFile + RssShmem: mapped files, mostly the executable's code. */
  fileBytes: number;
}

/** One memory sample of one operator process. */
export interface MemorySample {
  split?: RssSplit;
  /** Ours: the debug report as the process was. */
  report?: MemoryReport;
  /** Ours: the debug report right after a forced full GC. */
  reportAfterGc?: MemoryReport;
  /** Ours: RSS right after the forced full GC (what V8 gave back at once). */
  rssAfterGcBytes?: number;
  /** Peer: `go_memstats_*` and `process_resident_memory_bytes` from its /metrics. */
  go?: Record<string, number>;
}

/** Reads the RSS split of `pid`; undefined when the process is gone. */
export function rssSplit(pid: number): RssSplit | undefined {
  let status: string;
  try {
    status = Deno.readTextFileSync(`/proc/${pid}/status`);
  } catch {
    return undefined;
  }
  const kb = (name: string) => {
    const m = new RegExp(`^${name}:\\s+(\\d+)\\s+kB`, "m").exec(status);
    return m ? Number(m[1]) * 1024 : 0;
  };
  return {
    rssBytes: kb("VmRSS"),
    anonBytes: kb("RssAnon"),
    fileBytes: kb("RssFile") + kb("RssShmem"),
  };
}

/** GET `/debug/memory` of ours on `port`; undefined when it does not answer. */
export async function fetchMemoryReport(
  port: number,
  gc: boolean,
): Promise<MemoryReport | undefined> {
  try {
    const r = await fetch(`http://127.0.0.1:${port}/debug/memory${gc ? "?gc=1" : ""}`, {
      signal: AbortSignal.timeout(10_000),
    });
    if (!r.ok) {
      await r.body?.cancel();
      return undefined;
    }
    return await r.json() as MemoryReport;
  } catch {
    return undefined;
  }
}

/** The `go_memstats_*` and `process_*_memory_bytes` samples of a Prometheus text. */
export function goMemstats(metricsText: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (
    const m of metricsText.matchAll(/^(go_memstats_[a-z_]+|process_[a-z_]*memory_bytes) (\S+)$/gm)
  ) {
    out[m[1]] = Number(m[2]);
  }
  return out;
}

/** What the import probes load, by label; "" is a bare `deno run`. */
export const IMPORT_PROBES: [label: string, specifier: string][] = [
  ["nothing (bare `deno run`)", ""],
  ["`prom-client` (npm, CommonJS)", "prom-client"],
  ["`yaml` (npm, CommonJS)", "yaml"],
  ["`js-yaml` (npm, ESM)", "js-yaml"],
  ["`@logtape/logtape` (npm, ESM)", "@logtape/logtape"],
  ["`@sinclair/typebox` (npm, ESM)", "@sinclair/typebox"],
  ["the operator's modules (main.ts, not run)", "../main.ts"],
];

/** Median of each import probe over `runs` processes. */
export interface ImportCost {
  label: string;
  specifier: string;
  /** Whether the operator's module graph (main.ts) loads it at run time. */
  inOperator: boolean;
  rssBytes: number;
  heapUsedBytes: number;
  importMs: number;
  /** Every run's RSS. */
  rssRuns: number[];
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
}

/**
 * The npm packages main.ts loads at run time: `deno info --json`, walked from main.ts along code
 * imports only (a type-only import, `import type`, loads nothing at run time).
 */
export async function operatorNpmPackages(): Promise<string[]> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["info", "--json", join(REPO, "main.ts")],
    cwd: REPO,
    stdout: "piped",
    stderr: "null",
  }).output();
  const info = JSON.parse(new TextDecoder().decode(out.stdout)) as {
    roots: string[];
    redirects?: Record<string, string>;
    modules: {
      specifier: string;
      kind?: string;
      npmPackage?: string;
      dependencies?: { code?: { specifier?: string } }[];
    }[];
  };
  const bySpec = new Map(info.modules.map((m) => [m.specifier, m]));
  const resolve = (s: string) => info.redirects?.[s] ?? s;
  const names = new Set<string>();
  const seen = new Set<string>();
  const todo = info.roots.map(resolve);
  for (let i = 0; i < todo.length && i < 100_000; i++) {
    const spec = todo[i];
    if (seen.has(spec)) continue;
    seen.add(spec);
    const m = bySpec.get(spec);
    if (!m) continue;
    if (m.kind === "npm" && m.npmPackage) names.add(m.npmPackage.replace(/@[^@/]+$/, ""));
    for (const d of m.dependencies ?? []) {
      if (d.code?.specifier) todo.push(resolve(d.code.specifier));
    }
  }
  return [...names].sort();
}

/** Runs each of {@link IMPORT_PROBES} `runs` times under `deno task start`'s flags. */
export async function importCosts(runs: number): Promise<ImportCost[]> {
  const flags = await startPermissionFlags();
  const loaded = await operatorNpmPackages();
  const out: ImportCost[] = [];
  for (const [label, specifier] of IMPORT_PROBES) {
    const results: ImportProbeResult[] = [];
    for (let i = 0; i < runs; i++) {
      const r = await new Deno.Command(Deno.execPath(), {
        args: ["run", ...flags, join(REPO, "bench", "memory_probe.ts"), "import", specifier],
        cwd: REPO,
        stdin: "null",
        stdout: "piped",
        stderr: "piped",
      }).output();
      if (!r.success) {
        throw new Error(`import probe ${specifier}: ${new TextDecoder().decode(r.stderr)}`);
      }
      const line = new TextDecoder().decode(r.stdout).trim().split("\n").pop()!;
      results.push(JSON.parse(line));
    }
    out.push({
      label,
      specifier,
      inOperator: specifier === "" || specifier === "../main.ts" ||
        loaded.includes(specifier),
      rssBytes: median(results.map((r) => r.rss)),
      heapUsedBytes: median(results.map((r) => r.heapUsed)),
      importMs: median(results.map((r) => r.importMs)),
      rssRuns: results.map((r) => r.rss),
    });
  }
  return out;
}

/** Processes per store probe variant (the table shows the median). */
export const STORE_PROBE_RUNS = 3;

/**
 * Heap bytes per cached object of the objects in `file`, for each way of caching (the cache
 * transform only with `transform`): each variant in {@link STORE_PROBE_RUNS} processes of its
 * own, the median.
 */
export async function storeCosts(file: string, transform: "" | "pod"): Promise<StoreProbeResult[]> {
  const out: StoreProbeResult[] = [];
  for (let v = 0; v < STORE_VARIANTS.length; v++) {
    if (v === 2 && !transform) continue;
    const runs: StoreProbeResult[] = [];
    for (let i = 0; i < STORE_PROBE_RUNS; i++) {
      const r = await new Deno.Command(Deno.execPath(), {
        args: [
          "run",
          "--allow-read",
          "--v8-flags=--expose-gc",
          join(REPO, "bench", "memory_probe.ts"),
          "store",
          file,
          String(v),
          transform,
        ],
        cwd: REPO,
        stdin: "null",
        stdout: "piped",
        stderr: "piped",
      }).output();
      if (!r.success) throw new Error(`store probe: ${new TextDecoder().decode(r.stderr)}`);
      runs.push(JSON.parse(new TextDecoder().decode(r.stdout).trim().split("\n").pop()!));
    }
    out.push({
      ...runs[0],
      heapBytesPerObject: median(runs.map((x) => x.heapBytesPerObject)),
    });
  }
  return out;
}
