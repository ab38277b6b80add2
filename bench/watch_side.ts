/**
 * One side of `deno task bench:watch`, run in its own process (`--v8-flags=--expose-gc`) so each
 * side has a heap of its own: an informer over the ConfigMaps of one namespace, until it holds
 * `--objects` objects and has applied `--events` update events; then the heap after GC.
 *
 * Sides:
 * - `ours`: lib/runtime/reflector.ts + lib/runtime/store.ts over lib/kube/client.ts with the
 *   operator's defaults (a consistent list in pages of 500, managedFields dropped);
 * - `ours-list-from-cache`: the same with `initialListFromCache: true` (the first list at
 *   resourceVersion=0, answered whole from the watch cache, as client-go's reflector asks);
 * - `ours-keep-managed-fields`: the defaults with `keepManagedFields: true` (what the other keeps);
 * - `client-node`: `makeInformer` (ListWatch) of npm `@kubernetes/client-node`.
 *
 * Prints one JSON line ({@link SideResult}) on stdout. Bounded by `--timeout-seconds`.
 *
 * @module
 */
import { parseArgs } from "node:util";
import * as k8s from "@kubernetes/client-node";
import type { ConfigMap } from "kubernetes-types/core/v1.d.ts";
import { KubeClient } from "../lib/kube/client.ts";
import { loadClusterConfig } from "../lib/kube/config.ts";
import { CONFIGMAPS } from "../lib/kube/resources.ts";
import { Reflector } from "../lib/runtime/reflector.ts";
import { Store } from "../lib/runtime/store.ts";

/** Our sides: the defaults and two variants (see the module doc). */
const OURS_SIDES = new Set(["ours", "ours-list-from-cache", "ours-keep-managed-fields"]);

/** What one side reports. */
export interface SideResult {
  side: string;
  objects: number;
  /** Seconds from start to `objects` cached (list decoded and applied). */
  syncSeconds: number;
  /** Watch events applied after the list. */
  events: number;
  /** Seconds from synced to the last expected event applied. */
  eventsSeconds: number;
  eventsPerSecond: number;
  /** V8 heap used after GC, before the informer existed and with everything cached. */
  heapBeforeBytes: number;
  heapAfterBytes: number;
  heapBytesPerObject: number;
  rssBeforeBytes: number;
  rssAfterBytes: number;
  /** Objects in the cache at the end. */
  cached: number;
}

const gc = (globalThis as unknown as { gc?: () => void }).gc;

async function settleHeap(): Promise<number> {
  if (!gc) throw new Error("run with --v8-flags=--expose-gc");
  for (let i = 0; i < 4; i++) {
    gc();
    await new Promise((r) => setTimeout(r, 50));
  }
  return Deno.memoryUsage().heapUsed;
}

/**
 * Counts adds and updates and notes the time the targets are reached, inside the handlers (no
 * polling of the caches, which would cost the side under test).
 */
class Progress {
  adds = 0;
  updates = 0;
  syncedAt = 0;
  doneAt = 0;
  constructor(readonly objects: number, readonly events: number) {}
  add(): void {
    if (++this.adds === this.objects) {
      this.syncedAt = performance.now();
      if (this.events === 0) this.doneAt = this.syncedAt;
    }
  }
  update(): void {
    if (++this.updates === this.events) this.doneAt = performance.now();
  }
}

/** An informer under test. */
interface Side {
  start(): void;
  stop(): void;
  /** Objects in the cache now (called once at the end). */
  size(): number;
}

function oursSide(
  kubeconfig: string,
  ns: string,
  o: { keepManagedFields: boolean; initialListFromCache: boolean },
  p: Progress,
): Side {
  const client = new KubeClient(loadClusterConfig({ kubeconfig }), {
    userAgent: "appservice-bench-watch/ours",
  });
  const store = new Store<ConfigMap>({ keepManagedFields: o.keepManagedFields });
  store.addHandler({ add: () => p.add(), update: () => p.update() });
  const ctl = new AbortController();
  const reflector = new Reflector<ConfigMap>({
    client,
    resource: CONFIGMAPS,
    store,
    namespace: ns,
    initialListFromCache: o.initialListFromCache,
  });
  return {
    start: () => {
      reflector.run(ctl.signal).catch(() => {});
    },
    stop: () => {
      ctl.abort();
      client.close();
    },
    size: () => store.size,
  };
}

function clientNodeSide(kubeconfig: string, ns: string, p: Progress): Side {
  const kc = new k8s.KubeConfig();
  kc.loadFromFile(kubeconfig);
  const api = kc.makeApiClient(k8s.CoreV1Api);
  const informer = k8s.makeInformer(
    kc,
    `/api/v1/namespaces/${ns}/configmaps`,
    () => api.listNamespacedConfigMap({ namespace: ns }),
  );
  informer.on("add", () => p.add());
  informer.on("update", () => p.update());
  informer.on("error", (err: unknown) => {
    console.error(`client-node informer error: ${err}`);
  });
  return {
    start: () => {
      informer.start().catch((err: unknown) => console.error(`client-node start: ${err}`));
    },
    stop: () => {
      informer.stop().catch(() => {});
    },
    size: () => informer.list(ns).length,
  };
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      side: { type: "string" },
      kubeconfig: { type: "string" },
      namespace: { type: "string", default: "bench-watch" },
      objects: { type: "string", default: "10000" },
      events: { type: "string", default: "0" },
      "timeout-seconds": { type: "string", default: "300" },
    },
    strict: true,
  });
  const objects = Number(values.objects);
  const events = Number(values.events);
  const deadline = performance.now() + Number(values["timeout-seconds"]) * 1000;
  const ns = values.namespace;
  const kubeconfig = values.kubeconfig!;
  const p = new Progress(objects, events);
  const side = values.side === "client-node"
    ? clientNodeSide(kubeconfig, ns, p)
    : OURS_SIDES.has(values.side ?? "")
    ? oursSide(kubeconfig, ns, {
      keepManagedFields: values.side === "ours-keep-managed-fields",
      initialListFromCache: values.side === "ours-list-from-cache",
    }, p)
    : undefined;
  if (!side) {
    throw new Error(`--side: ${[...OURS_SIDES].join(", ")} or client-node`);
  }
  const heapBefore = await settleHeap();
  const rssBefore = Deno.memoryUsage().rss;

  const t0 = performance.now();
  side.start();
  for (let i = 0; i < 100_000_000 && p.doneAt === 0; i++) {
    if (performance.now() > deadline) {
      throw new Error(
        `${values.side}: timed out (adds ${p.adds}/${objects}, updates ${p.updates}/${events})`,
      );
    }
    await new Promise((r) => setTimeout(r, 5));
  }
  const tSync = p.syncedAt;
  const tEvents = p.doneAt;
  const cached = side.size();
  const heapAfter = await settleHeap();
  const rssAfter = Deno.memoryUsage().rss;
  side.stop();
  const eventsSeconds = (tEvents - tSync) / 1000;
  const result: SideResult = {
    side: values.side!,
    objects,
    syncSeconds: Number(((tSync - t0) / 1000).toFixed(4)),
    events: p.updates,
    eventsSeconds: Number(eventsSeconds.toFixed(4)),
    eventsPerSecond: events > 0 ? Math.round(events / eventsSeconds) : 0,
    heapBeforeBytes: heapBefore,
    heapAfterBytes: heapAfter,
    heapBytesPerObject: Math.round((heapAfter - heapBefore) / cached),
    rssBeforeBytes: rssBefore,
    rssAfterBytes: rssAfter,
    cached,
  };
  console.log(JSON.stringify(result));
}

if (import.meta.main) {
  try {
    await main();
    Deno.exit(0);
  } catch (err) {
    console.error(err instanceof Error ? err.message : String(err));
    Deno.exit(1);
  }
}
