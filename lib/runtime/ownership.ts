/**
 * Controller ownership of dependents: who controls an object, the controller ownerReference to
 * set, and which candidates a controller owns, adopts or releases — in the shape of client-go's
 * `ControllerRefManager.ClaimObject` (k8s.io/kubernetes pkg/controller/controller_ref_manager.go)
 * and controller-runtime's `controllerutil.SetControllerReference`.
 *
 * Rules ({@link claim}), from Kubernetes "Owners and dependents" and ClaimObject:
 * - An object has at most one controller: the ownerReference with `controller: true`. One that
 *   another owner controls is never touched.
 * - An object the owner controls is *owned* while it still matches; when it no longer matches it
 *   is to be *released* (the controller reference removed) — unless the owner is being deleted,
 *   when nothing is released (the garbage collector or the finalizer takes it from there).
 * - An orphan (no controller) that matches is to be *adopted* — unless the owner or the orphan is
 *   being deleted, or the orphan is in another namespace (a namespaced owner cannot own objects
 *   of another namespace).
 * - Before adopting, a controller re-reads its owner from the API once (client-go `CanAdopt`,
 *   `RecheckDeletionTimestamp`): a cached owner may already be gone or deleted, and an adoption
 *   by a dead owner would hand the orphan to the garbage collector. {@link claim} is pure; that
 *   read is the caller's.
 *
 * @module
 */
import type { OwnerReference } from "kubernetes-types/meta/v1.d.ts";
import type { KubeObject } from "../kube/client.ts";

/** The controller ownerReference of `obj` (`controller: true`), if it has one. */
export function controllerOf(obj: KubeObject): OwnerReference | undefined {
  return obj.metadata?.ownerReferences?.find((r) => r.controller === true);
}

/**
 * Whether `obj`'s controller is the object with uid `ownerUid` (an owner's `metadata.uid`).
 * Compares uids only, as the garbage collector does: a reference to a deleted owner of the same
 * name is not a reference to its successor.
 */
export function isControlledBy(obj: KubeObject, ownerUid: string | undefined): boolean {
  return ownerUid !== undefined && controllerOf(obj)?.uid === ownerUid;
}

/** What a controller reference is made from: the owner's type and identity. */
export interface OwnerIdentity {
  /** The owner's `apiVersion` (`group/version`, or `v1` for the core group). */
  apiVersion: string;
  /** The owner's kind. */
  kind: string;
  /** The owner's name and uid (both required: the reference names both). */
  metadata: { name?: string; uid?: string };
}

/**
 * The controller ownerReference pointing at `owner` (controller-runtime
 * `SetControllerReference`): `controller: true`, and `blockOwnerDeletion` only when asked —
 * setting it needs `update` on the owner's `finalizers` subresource wherever the
 * OwnerReferencesPermissionEnforcement admission plugin runs.
 * @throws Error when the owner has no name or uid (not yet created)
 */
export function controllerReference(
  owner: OwnerIdentity,
  opts: { blockOwnerDeletion?: boolean } = {},
): OwnerReference {
  const { name, uid } = owner.metadata;
  if (!name || !uid) {
    throw new Error(`controller reference to ${owner.kind} without name and uid`);
  }
  const ref: OwnerReference = {
    apiVersion: owner.apiVersion,
    kind: owner.kind,
    name,
    uid,
    controller: true,
  };
  if (opts.blockOwnerDeletion) ref.blockOwnerDeletion = true;
  return ref;
}

/** The outcome of {@link claim}: each candidate in at most one list, in the input order. */
export interface Claims<T> {
  /** Controlled by the owner and matching: the owner's dependents. */
  owned: T[];
  /** Orphans that match: to be adopted (after the owner's re-read, see the module doc). */
  adopt: T[];
  /** Controlled by the owner but no longer matching: to be released. */
  release: T[];
}

/**
 * Sorts `candidates` into what `owner` owns, may adopt and should release (rules in the module
 * doc). `match` is the controller's selector (labels, names); candidates controlled by another
 * owner, and the rest the rules leave out, are in no list. Pure.
 */
export function claim<T extends KubeObject>(
  owner: KubeObject,
  candidates: readonly T[],
  match: (obj: T) => boolean,
): Claims<T> {
  const out: Claims<T> = { owned: [], adopt: [], release: [] };
  const uid = owner.metadata?.uid;
  const ownerGoing = !!owner.metadata?.deletionTimestamp;
  for (const obj of candidates) {
    const ref = controllerOf(obj);
    if (ref) {
      if (ref.uid !== uid) continue;
      if (match(obj)) out.owned.push(obj);
      else if (!ownerGoing) out.release.push(obj);
      continue;
    }
    if (
      ownerGoing || obj.metadata?.deletionTimestamp || !match(obj) ||
      (owner.metadata?.namespace !== undefined &&
        obj.metadata?.namespace !== owner.metadata.namespace)
    ) continue;
    out.adopt.push(obj);
  }
  return out;
}
