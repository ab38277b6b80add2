/**
 * Controller ownership of dependents: who controls an object, the controller ownerReference to
 * set, and which candidates a controller owns, adopts or releases — in the shape of client-go's
 * `ControllerRefManager.ClaimObject` (k8s.io/kubernetes pkg/controller/controller_ref_manager.go)
 * and controller-runtime's `controllerutil.SetControllerReference`.
 *
 * Editing an object's references ({@link setControllerReference}, {@link setOwnerReference},
 * {@link removeOwnerReference}) follows controller-runtime's `controllerutil`: a reference names
 * the same owner when group (of `apiVersion`, the version aside), kind and name are equal, so a
 * reference to an owner of that name deleted and made again is updated to the new uid; a
 * namespaced owner may only own objects of its namespace ({@link InvalidOwnerError}); an object
 * has one controller ({@link AlreadyOwnedError}). They assign `obj.metadata` a copy with the new
 * `ownerReferences` (the old metadata, its array and their entries are left as they were), so a
 * shallow copy of a cached object (`{ ...cached }`) keeps the cache intact.
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
  /**
   * The owner's name and uid (both required: the reference names both), and its namespace
   * (absent or "" for a cluster-scoped owner; the reference editors check it against the
   * object's, see the module doc).
   */
  metadata: { name?: string; uid?: string; namespace?: string };
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

/**
 * Refused: the object already has a controller other than the owner given
 * (controller-runtime's `controllerutil.AlreadyOwnedError`). An object has at most one controller;
 * taking it over is a decision for the caller (release it first), never a side effect.
 */
export class AlreadyOwnedError extends Error {
  /** The object's current controller reference. */
  readonly owner: OwnerReference;
  /** `namespace/name` (or `name`) of the object that was refused. */
  readonly object: string;

  /** An error naming the object and the controller it already has. */
  constructor(object: string, owner: OwnerReference) {
    super(
      `${object} is already controlled by ${owner.kind} ${owner.name} (uid ${owner.uid}): ` +
        "an object has one controller",
    );
    this.name = "AlreadyOwnedError";
    this.owner = owner;
    this.object = object;
  }
}

/**
 * Refused: the owner cannot own the object (controller-runtime's `validateOwner`): a namespaced
 * owner and an object of another namespace, or a cluster-scoped object (Kubernetes "Owners and
 * dependents": cross-namespace owner references are not allowed; the garbage collector would
 * treat the owner as absent and delete the dependent).
 */
export class InvalidOwnerError extends Error {
  /** An error with the rule that was broken. */
  constructor(message: string) {
    super(message);
    this.name = "InvalidOwnerError";
  }
}

/** The API group of `apiVersion` (`apps/v1` → `apps`, `v1` → "" for the core group). */
function groupOf(apiVersion: string): string {
  const i = apiVersion.indexOf("/");
  return i < 0 ? "" : apiVersion.slice(0, i);
}

/** What names an owner in a reference. */
type OwnerName = Pick<OwnerReference, "apiVersion" | "kind" | "name">;

/** Whether two references name the same owner: group, kind and name (controller-runtime's rule). */
function sameOwner(a: OwnerName, b: OwnerName): boolean {
  return groupOf(a.apiVersion) === groupOf(b.apiVersion) && a.kind === b.kind &&
    a.name === b.name;
}

/** The name part of a reference to `owner`. */
function ownerName(owner: OwnerIdentity): OwnerName {
  return { apiVersion: owner.apiVersion, kind: owner.kind, name: owner.metadata.name ?? "" };
}

/** Whether two references are equal in every field a reference has. */
function sameReference(a: OwnerReference, b: OwnerReference): boolean {
  return sameOwner(a, b) && a.apiVersion === b.apiVersion && a.uid === b.uid &&
    (a.controller ?? false) === (b.controller ?? false) &&
    (a.blockOwnerDeletion ?? false) === (b.blockOwnerDeletion ?? false);
}

/** `namespace/name` of `obj`, for messages. */
function describe(obj: KubeObject): string {
  const m = obj.metadata ?? {};
  return `${obj.kind ?? "object"} ${m.namespace ? `${m.namespace}/` : ""}${m.name ?? "(no name)"}`;
}

/** Throws {@link InvalidOwnerError} when `owner` may not own `obj` (see the class). */
function validateOwner(owner: OwnerIdentity, obj: KubeObject): void {
  const ownerNs = owner.metadata.namespace;
  if (!ownerNs) return;
  const ns = obj.metadata?.namespace;
  if (!ns) {
    throw new InvalidOwnerError(
      `${describe(obj)} is cluster-scoped (or has no namespace set) and cannot be owned by ` +
        `${owner.kind} ${ownerNs}/${owner.metadata.name}, which is namespaced`,
    );
  }
  if (ns !== ownerNs) {
    throw new InvalidOwnerError(
      `${describe(obj)} cannot be owned by ${owner.kind} ${ownerNs}/${owner.metadata.name}: ` +
        "owner references across namespaces are not allowed",
    );
  }
}

/** Puts `ref` in place of the reference to the same owner, or appends it; whether it changed. */
function upsertReference(obj: KubeObject, ref: OwnerReference): boolean {
  const refs = obj.metadata?.ownerReferences ?? [];
  const i = refs.findIndex((r) => sameOwner(r, ref));
  if (i >= 0 && sameReference(refs[i], ref)) return false;
  const next = i < 0 ? [...refs, ref] : refs.map((r, j) => (j === i ? ref : r));
  obj.metadata = { ...obj.metadata, ownerReferences: next };
  return true;
}

/**
 * Makes `owner` the controller of `obj` (controller-runtime `controllerutil.SetControllerReference`):
 * sets the reference of {@link controllerReference} in `obj.metadata.ownerReferences`, in place of
 * a reference to the same owner (same group, kind and name) or appended. Unlike
 * controller-runtime, `blockOwnerDeletion` is set only when asked (see
 * {@link controllerReference}: it needs a permission on the owner that a controller may not have).
 * Give the object its namespace before: the namespace rule is checked against it.
 * @param owner the owner (with `metadata.namespace` when namespaced)
 * @param obj the dependent, changed in place (a new `metadata` with a new `ownerReferences`)
 * @returns whether `obj` changed (false: the same reference was there already)
 * @throws AlreadyOwnedError when another owner controls `obj` (nothing is changed)
 * @throws InvalidOwnerError when `owner` may not own `obj` (another namespace, or `obj` is
 *   cluster-scoped while `owner` is namespaced)
 * @throws Error when the owner has no name or uid
 */
export function setControllerReference(
  owner: OwnerIdentity,
  obj: KubeObject,
  opts: { blockOwnerDeletion?: boolean } = {},
): boolean {
  validateOwner(owner, obj);
  const ref = controllerReference(owner, opts);
  const current = controllerOf(obj);
  if (current && !sameOwner(current, ref)) throw new AlreadyOwnedError(describe(obj), current);
  return upsertReference(obj, ref);
}

/**
 * Adds `owner` to `obj`'s owners without making it the controller (controller-runtime
 * `controllerutil.SetOwnerReference`): the garbage collector deletes `obj` once all its owners are
 * gone. As in controller-runtime, a reference to the same owner (same group, kind and name) is
 * replaced by the plain one, so this also demotes that owner from controller.
 * @param obj the dependent, changed in place (a new `metadata` with a new `ownerReferences`)
 * @returns whether `obj` changed
 * @throws InvalidOwnerError when `owner` may not own `obj` (see {@link setControllerReference})
 * @throws Error when the owner has no name or uid
 */
export function setOwnerReference(owner: OwnerIdentity, obj: KubeObject): boolean {
  validateOwner(owner, obj);
  const { name, uid } = owner.metadata;
  if (!name || !uid) throw new Error(`owner reference to ${owner.kind} without name and uid`);
  return upsertReference(obj, { apiVersion: owner.apiVersion, kind: owner.kind, name, uid });
}

/**
 * Whether `obj` has a controller at all (controller-runtime `controllerutil.HasControllerReference`;
 * {@link isControlledBy} asks whether it is a given owner).
 */
export function hasControllerReference(obj: KubeObject): boolean {
  return controllerOf(obj) !== undefined;
}

/**
 * Whether `obj` has a reference, controller or not, to `owner` — the same group, kind and name
 * (controller-runtime `controllerutil.HasOwnerReference`; the uid is not compared).
 */
export function hasOwnerReference(obj: KubeObject, owner: OwnerIdentity): boolean {
  return (obj.metadata?.ownerReferences ?? []).some((r) => sameOwner(r, ownerName(owner)));
}

/**
 * Removes `obj`'s reference to `owner` (same group, kind and name), controller or not
 * (controller-runtime `controllerutil.RemoveOwnerReference`, which fails when there is none; here
 * that is the `false` result).
 * @param obj the dependent, changed in place (a new `metadata`; `ownerReferences` left out when
 *   empty)
 * @returns whether a reference was removed
 */
export function removeOwnerReference(owner: OwnerIdentity, obj: KubeObject): boolean {
  const refs = obj.metadata?.ownerReferences ?? [];
  const next = refs.filter((r) => !sameOwner(r, ownerName(owner)));
  if (next.length === refs.length) return false;
  const { ownerReferences: _, ...rest } = obj.metadata ?? {};
  obj.metadata = next.length > 0 ? { ...rest, ownerReferences: next } : rest;
  return true;
}
