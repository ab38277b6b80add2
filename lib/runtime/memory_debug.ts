/**
 * A debug-only memory report of this process: `Deno.memoryUsage()`, V8's heap statistics, heap
 * space statistics (used and committed per space) and code statistics (`node:v8`), optionally
 * after a forced full garbage collection. It is what `deno task bench` records to say where the
 * operator's memory goes (BENCHMARKS.md).
 *
 * Nothing here runs in production: main.ts serves the report only when the environment variable
 * {@link MEMORY_DEBUG_ADDRESS_ENV} is set (to `host:port`), as `GET /debug/memory` (add `?gc=1`
 * to collect garbage first) on that address, and `node:v8` is loaded only at the first report, so
 * the process measured is the production one until it is asked. The permissions are those of
 * `deno task start` (listening needs `--allow-net`, reading `APPSERVICE_*` is already allowed).
 *
 * @module
 */
import type * as V8 from "node:v8";
import { collectGarbage, type GcFunction } from "./collect.ts";

/** Environment variable that turns the report on: the `host:port` to serve it on. */
export const MEMORY_DEBUG_ADDRESS_ENV = "APPSERVICE_DEBUG_MEMORY_ADDRESS";

/** One V8 heap space (`v8.getHeapSpaceStatistics()`), in bytes. */
export interface HeapSpace {
  /** e.g. `new_space`, `old_space`, `code_space`, `large_object_space`. */
  name: string;
  /** Committed (reserved and paged in) by V8. */
  committedBytes: number;
  /** Occupied by objects (live and not yet collected). */
  usedBytes: number;
  /** Physically resident pages of the space. */
  physicalBytes: number;
}

/** What {@link memoryReport} returns; every figure in bytes. */
export interface MemoryReport {
  /** `Date.now()` when taken (ms). */
  atMs: number;
  /** Whether a full GC ran just before (`?gc=1`). */
  gcForced: boolean;
  /** `Deno.memoryUsage()`: rss, heapTotal, heapUsed, external. */
  memoryUsage: { rss: number; heapTotal: number; heapUsed: number; external: number };
  /** `v8.getHeapStatistics()` (its snake_case keys as V8 names them). */
  heap: Record<string, number>;
  /** `v8.getHeapSpaceStatistics()`, spaces with nothing committed left out. */
  spaces: HeapSpace[];
  /** `v8.getHeapCodeStatistics()`: machine code, bytecode and script source sizes. */
  code: Record<string, number>;
}

let gcFn: GcFunction | undefined | null;
let v8mod: typeof V8 | undefined;

async function v8(): Promise<typeof V8> {
  return v8mod ??= (await import("node:v8")).default;
}

/**
 * The `gc()` function V8 exposes with `--expose-gc`, set at run time (Node's documented
 * `v8.setFlagsFromString` + `vm.runInNewContext` recipe); null where that is not possible.
 */
async function gcFunction(): Promise<GcFunction | null> {
  if (gcFn !== undefined) return gcFn;
  try {
    (await v8()).setFlagsFromString("--expose-gc");
    const vm = await import("node:vm");
    const f = vm.runInNewContext("gc");
    gcFn = typeof f === "function" ? f as GcFunction : null;
  } catch {
    gcFn = null;
  }
  return gcFn;
}

/**
 * Takes a {@link MemoryReport}; with `gc`, after the same memory-reducing full collection the
 * manager runs at rest (collect.ts `collectGarbage`: V8's last-resort flavour).
 */
export async function memoryReport(gc = false): Promise<MemoryReport> {
  let gcForced = false;
  if (gc) {
    const f = await gcFunction();
    if (f) {
      collectGarbage(f);
      gcForced = true;
    }
  }
  const v = await v8();
  const spaces = v.getHeapSpaceStatistics()
    .filter((s) => s.space_size > 0 || s.space_used_size > 0)
    .map((s) => ({
      name: s.space_name,
      committedBytes: s.space_size,
      usedBytes: s.space_used_size,
      physicalBytes: s.physical_space_size,
    }));
  return {
    atMs: Date.now(),
    gcForced,
    memoryUsage: Deno.memoryUsage(),
    heap: { ...v.getHeapStatistics() } as unknown as Record<string, number>,
    spaces,
    code: { ...v.getHeapCodeStatistics() } as unknown as Record<string, number>,
  };
}

/**
 * Serves `GET /debug/memory[?gc=1]` (JSON {@link MemoryReport}) on `hostname:port` until `signal`
 * aborts. Returns the bound port.
 */
export function serveMemoryDebug(
  hostname: string,
  port: number,
  signal: AbortSignal,
): number {
  const server = Deno.serve({ hostname, port, signal, onListen: () => {} }, async (req) => {
    const url = new URL(req.url);
    if (url.pathname !== "/debug/memory") return new Response("not found\n", { status: 404 });
    const report = await memoryReport(url.searchParams.get("gc") === "1");
    return Response.json(report);
  });
  return server.addr.port;
}
