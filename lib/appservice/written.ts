/**
 * What the AppService reconciler itself wrote, until its cache shows it (docs/scenarios.md S24):
 * a reconcile that follows the reconciler's own write starts from the object the apiserver
 * answered, not from the cached version that write replaced (docs/design/status.md).
 *
 * @module
 */
import type { AppService } from "./schema.ts";

/**
 * The AppServices this reconciler wrote, by key, until the cache shows the write
 * (docs/scenarios.md S24): the object the apiserver answered and the resourceVersions it replaced.
 * While the cache still holds one of those, a reconcile starts from the answered object instead,
 * so its status write is not computed from a replaced version (which the apiserver answers with
 * 409 Conflict).
 */
export class WrittenVersions {
  #m = new Map<string, { obj: AppService; replaced: Set<string> }>();

  /**
   * The newest known version of the cached `cached`: the object this reconciler wrote over it, if
   * the cache still holds a version that write replaced; else `cached` (the cache has caught up,
   * or moved on by another writer's change) and the record is dropped.
   */
  newest(key: string, cached: AppService): AppService {
    const w = this.#m.get(key);
    if (!w) return cached;
    if (
      w.obj.metadata.uid === cached.metadata.uid &&
      w.replaced.has(cached.metadata.resourceVersion ?? "")
    ) {
      return w.obj;
    }
    this.#m.delete(key);
    return cached;
  }

  /** Notes that `obj` (the apiserver's answer) replaced `from`. */
  note(key: string, from: AppService, obj: AppService): void {
    const w = this.#m.get(key);
    const replaced = w && w.obj === from ? w.replaced : new Set<string>();
    replaced.add(from.metadata.resourceVersion ?? "");
    // Bounded: a cache that lags by more versions than this is not waited for.
    if (replaced.size > 64) replaced.delete(replaced.values().next().value!);
    this.#m.set(key, { obj, replaced });
  }

  /** Forgets the key. */
  forget(key: string): void {
    this.#m.delete(key);
  }
}
