/**
 * Event filters of a controller's watches (controller-runtime `predicate.Predicate`): which cache
 * changes enqueue a key. A predicate may decide on create, update and delete; an omitted one
 * passes. A watch with several predicates enqueues only when every one passes (controller-runtime
 * applies a watch's predicates with AND); {@link and}, {@link or} and {@link not} compose them
 * (controller-runtime `predicate.And`, `Or`, `Not`), deciding every kind of change with an omitted
 * decision taken as a pass, so that `passes([not(p)], c)` is always `!passes([p], c)`.
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

/** Whether two string maps (labels, annotations) hold the same entries; absent is empty. */
function sameMap(
  a: Readonly<Record<string, string>> | undefined,
  b: Readonly<Record<string, string>> | undefined,
): boolean {
  const ka = Object.keys(a ?? {});
  if (ka.length !== Object.keys(b ?? {}).length) return false;
  return ka.every((k) => Object.hasOwn(b!, k) && a![k] === b![k]);
}

/**
 * Passes updates whose `metadata.labels` changed (an entry added, removed or given another
 * value; absent and empty are the same), and every create and delete: controller-runtime
 * `LabelChangedPredicate`, kube-rs `predicates::labels`. With {@link generationChanged} under
 * {@link or}: a spec or label change, e.g. for a controller that selects by its primary's labels.
 */
export const labelsChanged: Predicate<KubeObject> = {
  update: (a, b) => !sameMap(a.metadata?.labels, b.metadata?.labels),
};

/**
 * Passes updates whose `metadata.annotations` changed (as {@link labelsChanged} for labels), and
 * every create and delete: controller-runtime `AnnotationChangedPredicate`, kube-rs
 * `predicates::annotations`.
 */
export const annotationsChanged: Predicate<KubeObject> = {
  update: (a, b) => !sameMap(a.metadata?.annotations, b.metadata?.annotations),
};

/**
 * Passes updates whose `metadata.resourceVersion` changed, and every create and delete:
 * controller-runtime `ResourceVersionChangedPredicate`, which drops the updates an informer's
 * resync delivers with the object unchanged. This runtime's stores deliver no such update (a
 * relist skips objects whose resourceVersion it already has, and the periodic sync enqueues keys
 * without an event), so it matters only under {@link not} or for updates from other sources.
 */
export const resourceVersionChanged: Predicate<KubeObject> = {
  update: (a, b) => a.metadata?.resourceVersion !== b.metadata?.resourceVersion,
};

/**
 * Passes a change when any of `ps` passes it (OR; an omitted decision passes; with no `ps`,
 * nothing passes): controller-runtime `predicate.Or`. Also exported as {@link or}.
 */
export function anyOf<T>(...ps: Predicate<T>[]): Predicate<T> {
  return {
    create: (o) => ps.some((p) => p.create?.(o) ?? true),
    update: (a, b) => ps.some((p) => p.update?.(a, b) ?? true),
    delete: (o) => ps.some((p) => p.delete?.(o) ?? true),
  };
}

/**
 * Passes a change when every one of `ps` passes it (AND; an omitted decision passes; with no
 * `ps`, everything passes): controller-runtime `predicate.And`. A watch's own list of predicates
 * is already an AND; this is for nesting one under {@link or} or {@link not}. Also exported as
 * {@link and}.
 */
export function allOf<T>(...ps: Predicate<T>[]): Predicate<T> {
  return {
    create: (o) => ps.every((p) => p.create?.(o) ?? true),
    update: (a, b) => ps.every((p) => p.update?.(a, b) ?? true),
    delete: (o) => ps.every((p) => p.delete?.(o) ?? true),
  };
}

/** {@link allOf} under controller-runtime's name (`predicate.And`). */
export const and: <T>(...ps: Predicate<T>[]) => Predicate<T> = allOf;

/** {@link anyOf} under controller-runtime's name (`predicate.Or`). */
export const or: <T>(...ps: Predicate<T>[]) => Predicate<T> = anyOf;

/**
 * Passes a change exactly when `p` does not (controller-runtime `predicate.Not`). A decision `p`
 * omits passes, so its negation passes nothing of that kind: `not(generationChanged)` passes the
 * updates that keep the generation, and no create or delete.
 */
export function not<T>(p: Predicate<T>): Predicate<T> {
  return {
    create: (o) => !(p.create?.(o) ?? true),
    update: (a, b) => !(p.update?.(a, b) ?? true),
    delete: (o) => !(p.delete?.(o) ?? true),
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
