/**
 * Finalizer handling for a reconciler, in the shape of kube-rs `finalizer` and controller-runtime
 * `pkg/finalizer`: the reconciler is given an `apply` event while the object lives and a
 * `cleanup` event once it is being deleted; this helper adds the finalizer before the first
 * `apply` and removes it when `cleanup` is complete.
 *
 * Rules:
 * - Living object without the finalizer: the finalizer is added with a JSON patch whose `test` of
 *   `metadata.resourceVersion` makes it fail (409) on a concurrent change; `apply` then gets the
 *   object the apiserver answered.
 * - Living object with the finalizer: `apply`.
 * - Object being deleted (`deletionTimestamp`) with the finalizer: `cleanup`; when it resolves
 *   `done`, the finalizer is removed with a JSON patch that `test`s its position (safe against a
 *   concurrent change of the list), and the result is `done`. Any other result (cleanup still
 *   waiting) is returned as is and the finalizer stays; a cleanup that throws keeps it too.
 *   (kube-rs removes the finalizer after any successful cleanup; here the cleanup says when it is
 *   complete.)
 * - Object being deleted without the finalizer: nothing to do (`done`).
 * - A 404 while removing the finalizer: the object is gone, `done`.
 *
 * @module
 */
import type { KubeClient, KubeObject } from "../kube/client.ts";
import { isNotFound } from "../kube/errors.ts";
import type { ResourceType } from "../kube/resources.ts";
import { Reconcile, type ReconcileResult } from "./controller.ts";

/** What the reconciler is asked to do with an object under a finalizer. */
export type FinalizerEvent<T extends KubeObject> =
  /** The object lives (and carries the finalizer): make the world match it. */
  | { readonly type: "apply"; readonly obj: T }
  /** The object is being deleted: remove what it owns; resolve `done` when nothing is left. */
  | { readonly type: "cleanup"; readonly obj: T };

/** Options of {@link finalizer}. */
export interface FinalizerOptions<T extends KubeObject> {
  /** Writes the finalizer patches. */
  client: KubeClient;
  /** The object's resource. */
  resource: ResourceType;
  /** The finalizer's name (a qualified name, e.g. `example.com/cleanup`). */
  name: string;
  /** Field manager of the patches. */
  fieldManager: string;
  /** Aborts the patches. */
  signal?: AbortSignal;
  /** Called with the object before and the apiserver's answer after the finalizer was added. */
  onAdded?: (before: T, after: T) => void;
}

/** Whether `obj` carries the finalizer `name`. */
export function hasFinalizer(obj: KubeObject, name: string): boolean {
  return obj.metadata?.finalizers?.includes(name) ?? false;
}

/**
 * Runs `reconcile` for `obj` under the finalizer `o.name` (see the module doc).
 * @returns what `reconcile` resolved, or `done` after the finalizer was removed
 * @throws what the patches or `reconcile` throw (a failed `test`, 422, or a 409: the object
 *   changed meanwhile)
 */
export async function finalizer<T extends KubeObject>(
  obj: T,
  o: FinalizerOptions<T>,
  reconcile: (event: FinalizerEvent<T>) => Promise<ReconcileResult>,
): Promise<ReconcileResult> {
  const meta = obj.metadata ?? {};
  const patchOptions = {
    namespace: meta.namespace,
    type: "json" as const,
    fieldManager: o.fieldManager,
    signal: o.signal,
  };
  if (meta.deletionTimestamp) {
    if (!hasFinalizer(obj, o.name)) return Reconcile.done;
    const result = await reconcile({ type: "cleanup", obj });
    if (result.kind !== "done") return result;
    const idx = meta.finalizers!.indexOf(o.name);
    try {
      await o.client.patch(o.resource, meta.name!, [
        { op: "test", path: `/metadata/finalizers/${idx}`, value: o.name },
        { op: "remove", path: `/metadata/finalizers/${idx}` },
      ], { ...patchOptions, response: "none" });
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
    return Reconcile.done;
  }
  let live = obj;
  if (!hasFinalizer(obj, o.name)) {
    const test = { op: "test", path: "/metadata/resourceVersion", value: meta.resourceVersion };
    const add = meta.finalizers === undefined || meta.finalizers === null
      ? { op: "add", path: "/metadata/finalizers", value: [o.name] }
      : { op: "add", path: "/metadata/finalizers/-", value: o.name };
    live = await o.client.patch<T>(o.resource, meta.name!, [test, add], patchOptions);
    o.onAdded?.(obj, live);
  }
  return await reconcile({ type: "apply", obj: live });
}
