/**
 * Garbage collections at rest: when the manager asks V8 for a full collection, and how.
 *
 * An operator at rest allocates almost nothing, so V8 sees no reason for another major GC and
 * keeps whatever garbage and free pages the last burst of work (the initial lists, a converge)
 * left committed, for as long as the process stays idle. Go's runtime returns idle heap to the OS
 * by itself (its background scavenger); V8 does the same only when the embedder tells it that
 * memory is short (`Isolate::LowMemoryNotification`), which Deno never does. The manager
 * therefore collects itself at two moments (manager.ts): once the first pass is over, and when
 * the controllers go idle after work or with enough new heap ({@link idleCollectionDue}).
 *
 * The collection is V8's memory-reducing one ({@link collectGarbage}): `gc({type: "major",
 * execution: "sync", flavor: "last-resort"})`, V8's `CollectAllAvailableGarbage`, the collection
 * behind `LowMemoryNotification`: full GCs until nothing more is freed, compaction to reduce the
 * footprint, and the emptied pages given back to the OS. Two plain `gc()` calls free the same
 * objects but keep the emptied pages pooled (committed) for reuse (docs/design/runtime.md,
 * "Collections at rest").
 *
 * @module
 */

/** The options V8's `gc` extension takes (`src/extensions/gc-extension.cc`). */
export interface GcOptions {
  /** `major` (full) or `minor` (young generation only). */
  type?: "major" | "minor";
  /** `sync`: collected before `gc` returns; `async`: scheduled as a task. */
  execution?: "sync" | "async";
  /** `last-resort`: `CollectAllAvailableGarbage` (memory-reducing); `regular` otherwise. */
  flavor?: "regular" | "last-resort";
}

/** `globalThis.gc` as V8 exposes it with `--expose-gc`. */
export type GcFunction = (options?: GcOptions) => void;

/** The `gc` function V8 exposes with `--v8-flags=--expose-gc` (in `deno task start`), or undefined. */
export function exposedGc(): GcFunction | undefined {
  const f = (globalThis as { gc?: unknown }).gc;
  return typeof f === "function" ? f as GcFunction : undefined;
}

/**
 * One memory-reducing full collection: V8's last-resort flavour (see the module doc), run
 * synchronously. Returns the V8 heap bytes in use right after it (`Deno.memoryUsage().heapUsed`,
 * i.e. the live objects), the baseline of the next {@link idleCollectionDue}.
 */
export function collectGarbage(gc: GcFunction): number {
  gc({ type: "major", execution: "sync", flavor: "last-resort" });
  return Deno.memoryUsage().heapUsed;
}

/** Shortest time (ms) between two idle collections. */
export const IDLE_GC_MIN_INTERVAL_MS = 30_000;
/** How often (ms) the manager looks for an idle moment (two idle looks in a row are needed). */
export const IDLE_GC_POLL_MS = 1_000;
/** Idle looks in a row before a collection: the controllers' queues empty, no reconcile running. */
export const IDLE_GC_LOOKS = 2;
/** Least new heap (bytes) that earns an idle collection when no reconcile ran since the last: 2 MiB. */
export const IDLE_GC_MIN_GROWTH_BYTES = 2 * 1024 * 1024;
/** The same as a share of what was live after the last collection: 10%. */
export const IDLE_GC_MIN_GROWTH_RATIO = 0.1;

/** What {@link idleCollectionDue} decides on. */
export interface IdleState {
  /** Idle looks in a row so far (this one included). */
  idleLooks: number;
  /** Time since the last collection (ms). */
  sinceLastMs: number;
  /** Reconciles finished since the last collection (all controllers). */
  reconcilesSinceLast: number;
  /** V8 heap in use now (bytes; live objects and garbage not yet collected). */
  heapUsedBytes: number;
  /** V8 heap in use right after the last collection (bytes; what was live then). */
  liveAfterLastBytes: number;
}

/**
 * Whether the manager should collect now: the controllers have been idle for
 * {@link IDLE_GC_LOOKS} looks, the last collection is at least {@link IDLE_GC_MIN_INTERVAL_MS}
 * old (a collection that is due meanwhile waits for it, it is not dropped), and either reconciles
 * ran since the last collection (a converge, a relist, any burst of work, however few reconciles
 * it took) or, at rest, the heap has grown by {@link IDLE_GC_MIN_GROWTH_BYTES} and
 * {@link IDLE_GC_MIN_GROWTH_RATIO} of what was live after the last one (probes and bookmarks take
 * many minutes to earn one). After work the growth is no guide: what was live at the last
 * collection (requests in flight, queued keys) is garbage by the time the controllers rest
 * (docs/design/runtime.md, "Collections at rest").
 */
export function idleCollectionDue(s: IdleState): boolean {
  if (s.idleLooks < IDLE_GC_LOOKS) return false;
  if (s.sinceLastMs < IDLE_GC_MIN_INTERVAL_MS) return false;
  if (s.reconcilesSinceLast > 0) return true;
  const growth = s.heapUsedBytes - s.liveAfterLastBytes;
  return growth >= IDLE_GC_MIN_GROWTH_BYTES &&
    growth >= IDLE_GC_MIN_GROWTH_RATIO * s.liveAfterLastBytes;
}
