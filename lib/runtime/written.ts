/**
 * Read your own writes from a cache: what a reconciler itself wrote, by key, until its informer's
 * cache shows the write. A reconcile that follows the reconciler's own write (a requeue, a
 * resync, another event) can run before the watch has delivered that write; started from the
 * cached version the write replaced, it would compute the same change again and write it a second
 * time (a redundant write), or write a status computed from a replaced version (which the
 * apiserver answers with 409 Conflict when the write carries that resourceVersion).
 * {@link WrittenVersions} lets it start from the object the apiserver answered instead.
 *
 * controller-runtime and kube-rs leave this to each reconciler (a reconcile on a stale cache is
 * expected to be idempotent); the write it costs is the one this removes.
 *
 * @module
 */
import type { KubeObject } from "../kube/client.ts";

/** At most this many replaced resourceVersions are kept per key (a cache that lags by more is not waited for). */
export const MAX_REPLACED_VERSIONS = 64;

/**
 * The objects a reconciler wrote, by key (e.g. `namespace/name`), until the cache shows the write:
 * the object the apiserver answered and the resourceVersions it replaced. While the cache still
 * holds one of those, {@link WrittenVersions.newest} gives the answered object instead. Memory: one
 * object and at most {@link MAX_REPLACED_VERSIONS} strings per key written and not yet seen.
 */
export class WrittenVersions<T extends KubeObject = KubeObject> {
  #m = new Map<string, { obj: T; replaced: Set<string> }>();

  /**
   * The newest known version of the cached `cached`: the object this reconciler wrote over it, if
   * the cache still holds a version that write replaced (same uid); else `cached` (the cache has
   * caught up, or moved on by another writer's change), and the record is dropped.
   */
  newest(key: string, cached: T): T {
    const w = this.#m.get(key);
    if (!w) return cached;
    if (
      w.obj.metadata?.uid === cached.metadata?.uid &&
      w.replaced.has(cached.metadata?.resourceVersion ?? "")
    ) {
      return w.obj;
    }
    this.#m.delete(key);
    return cached;
  }

  /**
   * Notes that `obj` (the apiserver's answer to a write) replaced `from` (the version the write
   * was computed from). Writes in a row (from the answer of the previous one) keep every version
   * they replaced, so a cache still at the first one is recognised.
   */
  note(key: string, from: T, obj: T): void {
    const w = this.#m.get(key);
    const replaced = w && w.obj === from ? w.replaced : new Set<string>();
    replaced.add(from.metadata?.resourceVersion ?? "");
    if (replaced.size > MAX_REPLACED_VERSIONS) replaced.delete(replaced.values().next().value!);
    this.#m.set(key, { obj, replaced });
  }

  /** Forgets the key (the object is gone). */
  forget(key: string): void {
    this.#m.delete(key);
  }

  /** Keys with a write the cache has not shown yet (for tests and metrics). */
  get size(): number {
    return this.#m.size;
  }
}
