/**
 * What the AppService reconciler itself wrote, until its cache shows it (docs/scenarios.md S24):
 * a reconcile that follows the reconciler's own write starts from the object the apiserver
 * answered, not from the cached version that write replaced (docs/design/status.md).
 *
 * @module
 */
import type { ObjectMeta } from "kubernetes-types/meta/v1.d.ts";
import type { AppService } from "./schema.ts";

/**
 * `target` with the JSON merge patch `patch` applied (RFC 7386): members of `patch` replace those
 * of `target`, objects merge member by member, `null` removes, arrays and scalars replace whole.
 * Neither argument is changed.
 */
export function applyMergePatch(target: unknown, patch: unknown): unknown {
  if (typeof patch !== "object" || patch === null || Array.isArray(patch)) return patch;
  const out: Record<string, unknown> =
    typeof target === "object" && target !== null && !Array.isArray(target)
      ? { ...target as Record<string, unknown> }
      : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else if (v !== undefined) out[k] = applyMergePatch(out[k], v);
  }
  return out;
}

/**
 * The AppService stored by a merge patch of its status subresource, from what the reconciler
 * knows without decoding the answer's object: `from` (the version the patch was made against,
 * its resourceVersion the patch's precondition, so the stored object was exactly `from`), the
 * status patch, and the metadata the apiserver answered (`response: "metadata"`; its
 * managedFields are left out, as the cache leaves them out). The status subresource changes only
 * the status and the metadata the apiserver sets (resourceVersion; the status has no defaults in
 * the CRD).
 */
export function statusWritten(
  from: AppService,
  statusPatch: Record<string, unknown>,
  answered: ObjectMeta,
): AppService {
  const { managedFields: _, ...metadata } = answered;
  return {
    ...from,
    metadata: metadata as AppService["metadata"],
    status: applyMergePatch(from.status, statusPatch) as AppService["status"],
  };
}

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
