/**
 * One measurement of `deno task bench`'s memory section, in a process of its own (so nothing
 * else shares its heap). Prints one JSON line on stdout.
 *
 * - `import [SPECIFIER]`: imports SPECIFIER (nothing without it), waits a moment, reports
 *   `Deno.memoryUsage()` and how long the import took. Run with `deno task start`'s flags: what a
 *   dependency costs the operator when imported.
 * - `store FILE VARIANT [pod]`: FILE is a JSON array of objects as the apiserver lists them
 *   (managedFields included). For one way of caching them ({@link STORE_VARIANTS}: managedFields
 *   kept; dropped, the store's default; dropped and the operator's cache transform, `pod` naming
 *   it) the heap bytes per cached object: heap used after a full GC with the objects in a
 *   {@link Store}, minus the same before. Needs `--v8-flags=--expose-gc`.
 *
 * @module
 */
import { Store } from "../lib/runtime/store.ts";
import type { KubeObject } from "../lib/kube/client.ts";

/** How long the import probe waits after the import before it measures (ms). */
const SETTLE_MS = 300;

/** What the `import` mode prints. */
export interface ImportProbeResult {
  specifier: string;
  importMs: number;
  rss: number;
  heapTotal: number;
  heapUsed: number;
  external: number;
}

/** One line of the `store` mode: heap bytes per object for one way of caching. */
export interface StoreProbeResult {
  variant: string;
  objects: number;
  /** Bytes of the objects' JSON as listed (managedFields included), per object. */
  jsonBytesPerObject: number;
  heapBytesPerObject: number;
}

async function importMode(specifier: string): Promise<void> {
  const t0 = performance.now();
  if (specifier) await import(specifier);
  const importMs = performance.now() - t0;
  await new Promise((r) => setTimeout(r, SETTLE_MS));
  const m = Deno.memoryUsage();
  const out: ImportProbeResult = { specifier, importMs, ...m };
  console.log(JSON.stringify(out));
}

/** The ways of caching the `store` mode compares, by index. */
export const STORE_VARIANTS = [
  "managedFields kept",
  "managedFields dropped",
  "managedFields dropped + cache transform",
] as const;

function storeMode(file: string, variant: number, transform?: (o: KubeObject) => KubeObject): void {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (!gc) throw new Error("run with --v8-flags=--expose-gc");
  const text = Deno.readTextFileSync(file);
  const bytes = new TextEncoder().encode(text).length;
  const used = () => {
    gc();
    gc();
    return Deno.memoryUsage().heapUsed;
  };
  const opts = [{ keepManagedFields: true }, {}, { transform }][variant];
  // One variant per process: a store measured earlier in the same process may survive a
  // forced GC (found on Deno 2.9: negative figures), so nothing else shares this heap.
  const before = used();
  const store = new Store<KubeObject>(opts);
  store.replace(JSON.parse(text));
  const after = used();
  const n = store.size;
  const out: StoreProbeResult = {
    variant: STORE_VARIANTS[variant],
    objects: n,
    jsonBytesPerObject: Math.round(bytes / Math.max(1, n)),
    heapBytesPerObject: Math.round((after - before) / Math.max(1, n)),
  };
  console.log(JSON.stringify(out));
}

if (import.meta.main) {
  const [mode, arg = "", variant = "1", transformName = ""] = Deno.args;
  if (mode === "import") await importMode(arg);
  else if (mode === "store") {
    let transform: ((o: KubeObject) => KubeObject) | undefined;
    if (transformName === "pod") {
      const { cachedPod } = await import("../lib/appservice/controller.ts");
      transform = cachedPod as (o: KubeObject) => KubeObject;
    }
    storeMode(arg, Number(variant), transform);
  } else {
    console.error("usage: memory_probe.ts import [SPECIFIER] | store FILE VARIANT [pod]");
    Deno.exit(2);
  }
}
