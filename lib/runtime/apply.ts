/**
 * Writing an object to a desired state: {@link apply}, server-side apply with the field manager
 * and the force choice always explicit, and {@link createOrPatch}, read–mutate–write with a JSON
 * merge patch of the difference (controller-runtime `controllerutil.CreateOrPatch`).
 *
 * Which to use: `apply` when the controller can state every field it owns at once (the apiserver
 * merges, tracks ownership per field in `managedFields`, and a field another manager owns is a
 * 409 unless forced); `createOrPatch` when the change is easier written as an edit of the live
 * object (add a label, set a reference) and other writers' fields must stay untouched without
 * server-side apply's ownership.
 *
 * Both read and write through the apiserver (not an informer's cache) and throw what the client
 * throws: `ApiError` (409 conflict, 422 invalid, 403 forbidden...), `NetworkError`, `FencedError`
 * when this replica may not write, the signal's reason when aborted.
 *
 * @module
 */
import type { KubeClient, KubeObject } from "../kube/client.ts";
import { isNotFound } from "../kube/errors.ts";
import type { ResourceType } from "../kube/resources.ts";
import { type JsonObject, mergePatch } from "./merge_patch.ts";

/**
 * Options of {@link apply}. `force` has no default: whether to take fields another manager owns is
 * a decision, not a detail (with `false` such a field is a 409 Conflict naming the manager; with
 * `true` the field moves to `fieldManager`).
 */
export interface ApplyOptions {
  /** The field manager the applied fields are recorded under (`managedFields`); required. */
  fieldManager: string;
  /** Take fields another manager owns (`force=true`) or fail with 409 on them (`false`). */
  force: boolean;
  /** Namespace of a namespaced object; default `obj.metadata.namespace`. */
  namespace?: string;
  /** A subresource to apply to, e.g. `status`. */
  subresource?: string;
  /** Aborts the request. */
  signal?: AbortSignal;
}

/** `namespace/name` of the object a helper writes, or an Error when it cannot be addressed. */
function address(
  resource: ResourceType,
  name: string | undefined,
  namespace: string | undefined,
  what: string,
): { name: string; namespace: string | undefined } {
  if (!name) throw new Error(`${what}: ${resource.kind} without metadata.name`);
  if (resource.namespaced && !namespace) {
    throw new Error(`${what}: ${resource.kind} ${name} is namespaced; no namespace given`);
  }
  return { name, namespace: resource.namespaced ? namespace : undefined };
}

/**
 * Server-side apply of `obj` (Kubernetes "Server-Side Apply"; controller-runtime's
 * `client.Apply` patch with `client.FieldOwner` and `client.ForceOwnership`, kube-rs's
 * `Patch::Apply` with `PatchParams::apply(manager).force()`): creates the object or merges the
 * fields `obj` states into it, recording them as owned by `fieldManager`; fields this manager
 * owned before and `obj` leaves out are removed.
 *
 * `obj` is the apply configuration: only the fields this manager owns, with `metadata.name`
 * (and `namespace`); `apiVersion` and `kind` default to the resource's. Do not send an object
 * read from the API as it is: its `managedFields` are refused and its `resourceVersion` makes the
 * apply conditional (409 when the object changed since).
 * @returns the object as the apiserver answered it
 * @throws TypeError when `force` is not a boolean (JavaScript callers); Error when `obj` has no
 *   name, or a namespaced resource no namespace; ApiError 409 Conflict when `force` is false and a
 *   field is owned by another manager (the message names it); what {@link KubeClient.patch}
 *   throws
 */
export async function apply<T extends KubeObject>(
  client: KubeClient,
  resource: ResourceType,
  obj: T,
  opts: ApplyOptions,
): Promise<T> {
  if (typeof opts.force !== "boolean") {
    throw new TypeError("apply: `force` must be given as true or false");
  }
  if (!opts.fieldManager) throw new TypeError("apply: `fieldManager` is required");
  const at = address(
    resource,
    obj.metadata?.name,
    opts.namespace ?? obj.metadata?.namespace,
    "apply",
  );
  const body = {
    ...obj,
    apiVersion: obj.apiVersion ?? resource.apiVersion,
    kind: obj.kind ?? resource.kind,
  };
  return await client.patch<T>(resource, at.name, body, {
    type: "apply",
    namespace: at.namespace,
    fieldManager: opts.fieldManager,
    force: opts.force,
    subresource: opts.subresource,
    signal: opts.signal,
  });
}

/** What {@link createOrPatch} did: created the object, patched it, or sent nothing. */
export type OperationResult = "created" | "patched" | "unchanged";

/** Names one object (controller-runtime `client.ObjectKey`). */
export interface ObjectKey {
  /** The object's name. */
  name: string;
  /** Its namespace; required for a namespaced resource, ignored for a cluster-scoped one. */
  namespace?: string;
}

/** Options of {@link createOrPatch}. */
export interface CreateOrPatchOptions {
  /** The field manager of the create and the patches (`managedFields`); required. */
  fieldManager: string;
  /**
   * Send the `resourceVersion` read with each patch, so that it fails with 409 Conflict if the
   * object changed between the read and the patch (controller-runtime
   * `MergeFromWithOptimisticLock`). Default false: a merge patch changes only the members it
   * names, but lists are replaced whole, so a list another writer changed meanwhile is lost.
   */
  optimisticLock?: boolean;
  /** Aborts the requests. */
  signal?: AbortSignal;
}

/**
 * Refused: the `mutate` function of {@link createOrPatch} changed the object's name or namespace
 * (controller-runtime refuses the same: the key names the object to write, the mutation only its
 * content). Nothing was written.
 */
export class KeyChangedError extends Error {
  /** The key asked for. */
  readonly key: ObjectKey;
  /** Name and namespace after `mutate`. */
  readonly got: { name?: string; namespace?: string };

  /** An error naming the key and what `mutate` made of it. */
  constructor(key: ObjectKey, got: { name?: string; namespace?: string }) {
    super(
      `createOrPatch: mutate changed the object's key from ${fmtKey(key)} to ${fmtKey(got)}; ` +
        "it may change the content only",
    );
    this.name = "KeyChangedError";
    this.key = key;
    this.got = got;
  }
}

/** `namespace/name` or `name`. */
function fmtKey(k: { name?: string; namespace?: string }): string {
  return `${k.namespace ? `${k.namespace}/` : ""}${k.name ?? "(no name)"}`;
}

/** Throws {@link KeyChangedError} when `obj` is no longer the object `key` names. */
function checkKey(resource: ResourceType, key: ObjectKey, obj: KubeObject): void {
  const got = { name: obj.metadata?.name, namespace: obj.metadata?.namespace };
  const wantNs = resource.namespaced ? key.namespace : undefined;
  if (got.name !== key.name || (got.namespace || undefined) !== wantNs) {
    throw new KeyChangedError(key, got);
  }
}

/**
 * Makes the object `key` names what `mutate` makes of it (controller-runtime
 * `controllerutil.CreateOrPatch`):
 * 1. reads it (one GET from the apiserver);
 * 2. absent (404): `mutate` is given a new object with `apiVersion`, `kind`, `metadata.name` and
 *    `namespace` filled in, and the result is created — `"created"`;
 * 3. present: `mutate` is given a copy, and the JSON merge patch from the read state to the
 *    mutated one ({@link mergePatch}) is sent — `"patched"` — or, when it is empty, nothing at all
 *    — `"unchanged"` (no write, so no new resourceVersion, no watch event, no audit entry).
 *
 * As in controller-runtime, a change `mutate` makes to `status` is sent as a second merge patch to
 * the `status` subresource (resources with a status subresource ignore `status` in the main
 * patch; one without a `status` subresource answers that patch 404). A created object's `status`
 * is left to whatever the apiserver keeps of the create.
 *
 * `mutate` must be idempotent (it runs on whatever the apiserver holds) and may not change the
 * name or namespace. It may be async; nothing is written if it throws.
 * @param key the object's name and, for a namespaced resource, namespace
 * @param mutate sets the fields this controller decides, in place
 * @returns what was done
 * @throws KeyChangedError when `mutate` changed the name or namespace (nothing written); Error
 *   when a namespaced resource gets no namespace; ApiError 409 AlreadyExists when the object was
 *   created between the read and the create, 409 Conflict with `optimisticLock` when it changed
 *   meanwhile; what `mutate` and the client throw
 */
export async function createOrPatch<T extends KubeObject>(
  client: KubeClient,
  resource: ResourceType,
  key: ObjectKey,
  mutate: (obj: T) => void | Promise<void>,
  opts: CreateOrPatchOptions,
): Promise<OperationResult> {
  if (!opts.fieldManager) throw new TypeError("createOrPatch: `fieldManager` is required");
  const at = address(resource, key.name, key.namespace, "createOrPatch");
  const call = { namespace: at.namespace, signal: opts.signal };
  let live: T | undefined;
  try {
    live = await client.get<T>(resource, at.name, call);
  } catch (err) {
    if (!isNotFound(err)) throw err;
  }
  if (live === undefined) {
    const fresh = {
      apiVersion: resource.apiVersion,
      kind: resource.kind,
      metadata: at.namespace ? { name: at.name, namespace: at.namespace } : { name: at.name },
    } as T;
    await mutate(fresh);
    checkKey(resource, key, fresh);
    await client.create<T>(resource, fresh, { ...call, fieldManager: opts.fieldManager });
    return "created";
  }
  const before = structuredClone(live) as JsonObject;
  const after = structuredClone(live);
  await mutate(after);
  checkKey(resource, key, after);
  const patch = mergePatch(before, after as JsonObject);
  const statusPatch = patch.status;
  delete patch.status;
  const patchOpts = { ...call, type: "merge" as const, fieldManager: opts.fieldManager };
  let resourceVersion = live.metadata?.resourceVersion;
  const lock = (p: JsonObject): JsonObject =>
    opts.optimisticLock
      ? { ...p, metadata: { ...(p.metadata as JsonObject | undefined), resourceVersion } }
      : p;
  if (Object.keys(patch).length > 0) {
    const answer = await client.patch<T>(resource, at.name, lock(patch), patchOpts);
    resourceVersion = answer.metadata?.resourceVersion;
  }
  if (statusPatch !== undefined) {
    await client.patch<T>(resource, at.name, lock({ status: statusPatch }), {
      ...patchOpts,
      subresource: "status",
    });
  }
  return Object.keys(patch).length > 0 || statusPatch !== undefined ? "patched" : "unchanged";
}
