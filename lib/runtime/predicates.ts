/**
 * Event filters of a controller's watches (controller-runtime `predicate.Predicate`): which cache
 * changes enqueue a key. A predicate may decide on create, update and delete; an omitted one
 * passes. A watch with several predicates enqueues only when every one passes (controller-runtime
 * applies a watch's predicates with AND); {@link anyOf} combines them with OR.
 *
 * Cache changes here are the informer's: `create` is an object first seen (also after a relist),
 * `update` gets the old and new state, `delete` the last known state (a delete missed across a
 * relist is still reported, with the last state the cache saw; see reflector.ts).
 *
 * @module
 */
import type { KubeObject } from "../kube/client.ts";

/** Decides, per kind of cache change, whether an object's change enqueues a key. */
export interface Predicate<T> {
  /** An object was added to the cache; omitted: passes. */
  create?(obj: T): boolean;
  /** An object changed; omitted: passes. */
  update?(oldObj: T, newObj: T): boolean;
  /** An object left the cache (its last known state); omitted: passes. */
  delete?(obj: T): boolean;
}

/**
 * Passes updates whose `metadata.generation` changed (a spec change; status and metadata writes
 * do not bump it), and every create and delete: controller-runtime `GenerationChangedPredicate`.
 * Resources without a generation (most core kinds but Pods' own) never pass an update.
 */
export const generationChanged: Predicate<KubeObject> = {
  update: (a, b) => a.metadata?.generation !== b.metadata?.generation,
};

/**
 * Passes updates whose `metadata.deletionTimestamp` appeared or went, or whose
 * `metadata.finalizers` changed: the steps of a deletion that a finalizer holds up (Kubernetes
 * API docs, "Finalizers"). Creates and deletes pass.
 */
export const deletionOrFinalizersChanged: Predicate<KubeObject> = {
  update: (a, b) =>
    !!a.metadata?.deletionTimestamp !== !!b.metadata?.deletionTimestamp ||
    (a.metadata?.finalizers ?? []).join() !== (b.metadata?.finalizers ?? []).join(),
};

/** Passes no delete: for a primary whose cleanup runs through a finalizer (the update shows it). */
export const ignoreDeletes: Predicate<KubeObject> = { delete: () => false };

/** Passes a change when any of `ps` passes it (OR; an omitted decision passes). */
export function anyOf<T>(...ps: Predicate<T>[]): Predicate<T> {
  return {
    create: (o) => ps.some((p) => p.create?.(o) ?? true),
    update: (a, b) => ps.some((p) => p.update?.(a, b) ?? true),
    delete: (o) => ps.some((p) => p.delete?.(o) ?? true),
  };
}

/** Whether every predicate passes this change (AND, as controller-runtime applies them). */
export function passes<T>(
  ps: readonly Predicate<T>[],
  change: { type: "create"; obj: T } | { type: "update"; oldObj: T; newObj: T } | {
    type: "delete";
    obj: T;
  },
): boolean {
  for (const p of ps) {
    let ok: boolean | undefined;
    switch (change.type) {
      case "create":
        ok = p.create?.(change.obj);
        break;
      case "update":
        ok = p.update?.(change.oldObj, change.newObj);
        break;
      case "delete":
        ok = p.delete?.(change.obj);
        break;
    }
    if (ok === false) return false;
  }
  return true;
}
