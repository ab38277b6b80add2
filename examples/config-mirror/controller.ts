/**
 * Example controller of a kind from a CRD it ships (crd.yaml): a `ConfigMirror`
 * (`mirror.example.com/v1alpha1`, namespaced) names a source object of its own namespace by
 * `apiVersion`, `kind` and `name` (a ConfigMap, a Secret, or an object of any namespaced kind the
 * apiserver serves, CRDs included) and the namespaces to copy it into. The controller keeps in
 * each target namespace a copy of the same kind and name with the source's content (every
 * top-level field but `apiVersion`, `kind`, `metadata` and `status`), puts back a copy edited by
 * hand, deletes the copy of a namespace taken off the list, reports a `Ready` condition with
 * `observedGeneration`, and deletes every copy when the ConfigMirror is deleted.
 *
 * How:
 * - The source's kind is known only at run time: it is resolved through `Discovery` (a CRD
 *   installed after the controller started is found; until then Ready is False, `KindNotServed`)
 *   and read and written through `DynamicClient` and the resolved `ResourceType`.
 * - Informers are declared before the manager runs, so sources and copies of kinds named later
 *   are not watched: each ConfigMirror is reconciled again every `resyncMs` (a source change or a
 *   hand edit is followed within that) with two reads (the source; its copies, by label, in all
 *   namespaces) and writes only for the copies that differ.
 * - An ownerReference cannot point to another namespace, so the copies carry the label
 *   {@link UID_LABEL} (the ConfigMirror's uid) and the finalizer {@link FINALIZER} deletes them,
 *   as the garbage collector would delete owned objects.
 * - What the apiserver assigns is not copied: `metadata` (uid, resourceVersion,
 *   creationTimestamp, generation, managedFields, ownerReferences, ...) and `status` are not
 *   content, and the fields it allocates inside the content ({@link serverAssigned}: a Service's
 *   `spec.clusterIP(s)`, node ports) are left out of the copy and keep the copy's own values, so
 *   that a copy neither collides with the source's allocation nor differs from it at every
 *   resync.
 * - Each copy is written with an optimistic lock ({@link writeCopy}): the patch carries the
 *   resourceVersion read, and a 409 (the copy changed, or was created, in between) reads it again
 *   and writes once more, a bounded number of times.
 * - An object in a target namespace that this ConfigMirror did not make is left alone, and a
 *   copy the apiserver refuses (e.g. no such namespace) is not retried before the next resync:
 *   Ready False, `CopyFailed`, each named in the message. The copies stay as they are while the
 *   source is missing (`SourceNotFound`).
 *
 * @module
 */
import {
  ApiError,
  DynamicClient,
  isAlreadyExists,
  isConflict,
  isNoKindMatch,
  isNotFound,
  type KindRef,
  type KubeClient,
  type KubeObject,
  type ResourceType,
} from "../../lib/kube/mod.ts";
import {
  type Condition,
  createOrPatch,
  deletionOrFinalizersChanged,
  finalizer,
  generationChanged,
  jsonEqual,
  type Manager,
  or,
  Reconcile,
  type ReconcileContext,
  setStatusCondition,
  WrittenVersions,
} from "../../lib/runtime/mod.ts";

/** The ConfigMirror resource, as crd.yaml defines it. */
export const CONFIG_MIRRORS: ResourceType = {
  apiVersion: "mirror.example.com/v1alpha1",
  kind: "ConfigMirror",
  plural: "configmirrors",
  namespaced: true,
};
/** Field manager of every write, and the `app.kubernetes.io/managed-by` label of the copies. */
export const FIELD_MANAGER = "config-mirror";
/** Finalizer that deletes the copies before the ConfigMirror goes. */
export const FINALIZER = "mirror.example.com/cleanup";
/** Label of each copy: the uid of the ConfigMirror that made it. */
export const UID_LABEL = "mirror.example.com/uid";
/** How often (ms) each ConfigMirror is reconciled again when nothing enqueues it sooner. */
export const DEFAULT_RESYNC_MS = 10_000;

/** A ConfigMirror as stored (crd.yaml has the schema and its documentation). */
export interface ConfigMirror extends KubeObject {
  /** The object to copy (in the ConfigMirror's namespace; immutable) and where to. */
  spec: {
    source: { apiVersion: string; kind: string; name: string };
    targetNamespaces: string[];
  };
  /** What the controller last found: `Ready`, for `observedGeneration`; current copies. */
  status?: { observedGeneration?: number; synced?: number; conditions?: Condition[] };
}

/** Options of {@link addConfigMirrorController}. */
export interface ConfigMirrorOptions {
  /** See {@link DEFAULT_RESYNC_MS} (the default). */
  resyncMs?: number;
}

/** Top-level fields that are not an object's content. */
const NOT_CONTENT = new Set(["apiVersion", "kind", "metadata", "status"]);

/** An object's content: its top-level fields but `apiVersion`, `kind`, `metadata`, `status`. */
export function contentOf(obj: KubeObject): Record<string, unknown> {
  return Object.fromEntries(Object.entries(obj).filter(([k]) => !NOT_CONTENT.has(k)));
}

/** A JSON object as the apiserver sends it. */
type Json = Record<string, unknown>;

/**
 * The fields the apiserver allocates inside an object's content, for the kinds that have them (by
 * `apiVersion` and `kind`; Kubernetes API reference): for a core/v1 Service,
 * `spec.clusterIP` and `spec.clusterIPs` (unless `None`: a headless Service, the owner's
 * choice), `spec.healthCheckNodePort` and each `spec.ports[].nodePort`, allocated once per
 * cluster: a copy that asks for the source's is refused (already allocated), and a copy's own
 * never equals the source's. `take(content)` removes them from a copy of the content (returned);
 * `keep(content, live)` puts back into `content` those `live` (the copy as read) has.
 */
export const serverAssigned: Record<string, {
  take(content: Json): Json;
  keep(content: Json, live: Json): void;
}> = {
  "v1/Service": {
    take(content) {
      const out = structuredClone(content);
      const spec = out.spec as Json | undefined;
      if (!spec) return out;
      if (spec.clusterIP !== "None") {
        delete spec.clusterIP;
        delete spec.clusterIPs;
      }
      delete spec.healthCheckNodePort;
      for (const port of (spec.ports ?? []) as Json[]) delete port.nodePort;
      return out;
    },
    keep(content, live) {
      const spec = content.spec as Json | undefined;
      const was = live.spec as Json | undefined;
      if (!spec || !was) return;
      for (const k of ["clusterIP", "clusterIPs", "healthCheckNodePort"]) {
        if (spec[k] === undefined && was[k] !== undefined) spec[k] = was[k];
      }
      const same = (a: Json, b: Json) =>
        a.port === b.port && (a.protocol ?? "TCP") === (b.protocol ?? "TCP");
      for (const port of (spec.ports ?? []) as Json[]) {
        const before = ((was.ports ?? []) as Json[]).find((p) => same(p, port));
        if (port.nodePort === undefined && before?.nodePort !== undefined) {
          port.nodePort = before.nodePort;
        }
      }
    },
  },
};

/**
 * What a copy of `obj`, of `type` (list items carry no `apiVersion` and `kind`), holds: its
 * content ({@link contentOf}) without what the apiserver assigns ({@link serverAssigned}). Two
 * objects are in sync when theirs are equal.
 */
export function copiedContent(
  obj: KubeObject,
  type: Pick<ResourceType, "apiVersion" | "kind">,
): Json {
  const content = contentOf(obj);
  return serverAssigned[`${type.apiVersion}/${type.kind}`]?.take(content) ?? content;
}

/** A target object this ConfigMirror did not make (thrown before anything is written). */
class TargetConflict extends Error {}

/**
 * The `createOrPatch` mutation that makes `obj` a copy of `source` (of `type`) by the ConfigMirror
 * `uid`: its content replaced by the source's {@link copiedContent}, the fields the apiserver
 * assigned to `obj` kept, its labels set. @throws TargetConflict for an existing object without
 * that ConfigMirror's label.
 */
function copyFrom(
  source: KubeObject,
  type: ResourceType,
  uid: string,
): (obj: KubeObject) => void {
  const content = copiedContent(source, type);
  const assigned = serverAssigned[`${type.apiVersion}/${type.kind}`];
  return (obj) => {
    const meta = obj.metadata!;
    if (meta.uid && meta.labels?.[UID_LABEL] !== uid) {
      throw new TargetConflict(`${meta.namespace}: ${obj.kind} ${meta.name} was not made by it`);
    }
    const live = contentOf(obj);
    for (const k of Object.keys(live)) delete (obj as Json)[k];
    Object.assign(obj, structuredClone(content));
    assigned?.keep(obj as Json, live);
    meta.labels = {
      ...meta.labels,
      [UID_LABEL]: uid,
      "app.kubernetes.io/managed-by": FIELD_MANAGER,
    };
  };
}

/** How many times {@link writeCopy} writes at most (the first, and again after each 409). */
export const MAX_COPY_WRITES = 3;

/**
 * Makes the object `key` names what `mutate` makes of it (`createOrPatch`, which reads it first)
 * under an optimistic lock: the patch carries the resourceVersion read (`optimisticLock`), so a
 * change made between the read and the write is answered 409 Conflict instead of being
 * overwritten or left beside the patch; then, as after a 409 AlreadyExists (created in between),
 * it reads and writes again, at most {@link MAX_COPY_WRITES} writes in all (controller-runtime's
 * `retry.RetryOnConflict` does the same, k8s.io/client-go/util/retry).
 * @returns what the last write did (`created`, `patched`, `unchanged`)
 * @throws the last 409 when every write met one; what `createOrPatch` throws otherwise
 */
export async function writeCopy<T extends KubeObject>(
  client: KubeClient,
  type: ResourceType,
  key: { name: string; namespace: string },
  mutate: (obj: T) => void | Promise<void>,
  signal?: AbortSignal,
): Promise<string> {
  for (let write = 1;; write++) {
    try {
      return await createOrPatch(client, type, key, mutate, {
        fieldManager: FIELD_MANAGER,
        optimisticLock: true,
        signal,
      });
    } catch (err) {
      if (!(isConflict(err) || isAlreadyExists(err)) || write >= MAX_COPY_WRITES) throw err;
    }
  }
}

/** What a sync found, for the status: Ready is True only for `Synced`. */
interface Outcome {
  reason: "Synced" | "KindNotServed" | "KindNotNamespaced" | "SourceNotFound" | "CopyFailed";
  message: string;
  synced: number;
}

/** Declares the controller on `manager`. */
export function addConfigMirrorController(manager: Manager, o: ConfigMirrorOptions = {}): void {
  const resyncMs = o.resyncMs ?? DEFAULT_RESYNC_MS;
  const client = manager.client;
  const dynamic = new DynamicClient(client); // its Discovery caches, shared by every reconcile
  const mirrors = manager.informer<ConfigMirror>(CONFIG_MIRRORS);
  const finalizerOptions = {
    client,
    resource: CONFIG_MIRRORS,
    name: FINALIZER,
    fieldManager: FIELD_MANAGER,
  };
  // Its own writes (finalizer, status) until the cache shows them: a resync that runs before the
  // watch delivered the status write starts from the answered object, and writes nothing again.
  const written = new WrittenVersions<ConfigMirror>();

  /** The copies `m` made, in every namespace. @throws NoKindMatchError when the kind is gone. */
  const copiesOf = async (m: ConfigMirror, signal: AbortSignal) =>
    (await dynamic.listAll(m.spec.source, {
      labelSelector: `${UID_LABEL}=${m.metadata!.uid}`,
      signal,
    })).items;

  /** Deletes `copy`, of the kind `ref` names (a 404 is fine: it is gone already). */
  const remove = async (ref: KindRef, copy: KubeObject, signal: AbortSignal) => {
    const { name, namespace, uid } = copy.metadata!;
    try {
      await dynamic.delete(ref, name!, { namespace, preconditions: { uid }, signal });
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
  };

  /** Makes the copies match the source; what it found goes into the status. */
  const sync = async (m: ConfigMirror, { signal, logger }: ReconcileContext): Promise<Outcome> => {
    const { source: ref, targetNamespaces } = m.spec;
    const at = `${ref.kind} ${m.metadata!.namespace}/${ref.name}`;
    let type: ResourceType, source: KubeObject;
    try {
      type = await dynamic.discovery.resolve(ref, signal);
      if (!type.namespaced) {
        return { reason: "KindNotNamespaced", message: `${ref.kind} is cluster-scoped`, synced: 0 };
      }
      source = await dynamic.get(ref, ref.name, { namespace: m.metadata!.namespace, signal });
    } catch (err) {
      if (isNoKindMatch(err)) return { reason: "KindNotServed", message: err.message, synced: 0 };
      if (!isNotFound(err)) throw err;
      return { reason: "SourceNotFound", message: `${at} not found`, synced: 0 };
    }
    const copies = await copiesOf(m, signal);
    for (const copy of copies) {
      if (!targetNamespaces.includes(copy.metadata!.namespace!)) await remove(ref, copy, signal);
    }
    const mutate = copyFrom(source, type, m.metadata!.uid!);
    const failed: string[] = [];
    for (const namespace of targetNamespaces) {
      const copy = copies.find((c) => c.metadata!.namespace === namespace);
      if (copy && jsonEqual(copiedContent(copy, type), copiedContent(source, type))) continue; // in sync
      try {
        // Reads the target, then creates it or patches only what differs from the source.
        const result = await writeCopy(client, type, { name: ref.name, namespace }, mutate, signal);
        logger.info(`Copy ${result}`, { target: namespace });
      } catch (err) {
        // The apiserver's refusal (e.g. no such namespace) is reported; the others (a 409 on
        // every write among them) are retried.
        if (isConflict(err) || isAlreadyExists(err)) throw err;
        if (!(err instanceof TargetConflict || err instanceof ApiError)) throw err;
        failed.push(err instanceof ApiError ? `${namespace}: ${err.message}` : err.message);
      }
    }
    const synced = targetNamespaces.length - failed.length;
    return failed.length > 0
      ? { reason: "CopyFailed", message: `not copied to ${failed.join("; ")}`, synced }
      : { reason: "Synced", message: `${at} copied to ${synced} namespace(s)`, synced };
  };

  /**
   * Writes `outcome` as the status of `m`, unless the status says it already; notes the answer in
   * `written` under `key`.
   */
  const report = async (key: string, m: ConfigMirror, outcome: Outcome, signal: AbortSignal) => {
    const generation = m.metadata!.generation;
    const conditions = [...(m.status?.conditions ?? [])];
    const changed = setStatusCondition(conditions, {
      type: "Ready",
      status: outcome.reason === "Synced" ? "True" : "False",
      reason: outcome.reason,
      message: outcome.message,
      observedGeneration: generation,
    });
    if (
      !changed && m.status?.observedGeneration === generation &&
      m.status?.synced === outcome.synced
    ) return;
    const status = { observedGeneration: generation, synced: outcome.synced, conditions };
    const answered = await client.patch<ConfigMirror>(CONFIG_MIRRORS, m.metadata!.name!, {
      status,
    }, {
      namespace: m.metadata!.namespace,
      subresource: "status",
      fieldManager: FIELD_MANAGER,
      signal,
    });
    written.note(key, m, answered);
  };

  manager.add({
    name: "config-mirror",
    for: mirrors,
    // A spec change, or the deletion (deletionTimestamp, finalizers); not our own status writes.
    predicates: [or(generationChanged, deletionOrFinalizersChanged)],
    reconcile: async (key, ctx) => {
      const inCache = mirrors.store.get(key);
      if (!inCache) {
        written.forget(key);
        return Reconcile.done; // deleted: the finalizer's cleanup has run
      }
      const cached = written.newest(key, inCache);
      const signal = ctx.signal;
      const onAdded = (before: ConfigMirror, after: ConfigMirror) =>
        written.note(key, before, after);
      return await finalizer(cached, { ...finalizerOptions, signal, onAdded }, async (event) => {
        if (event.type === "cleanup") {
          let copies: KubeObject[] = [];
          try {
            copies = await copiesOf(event.obj, signal);
          } catch (err) {
            if (!isNoKindMatch(err)) throw err; // the kind is gone, and its objects with it
          }
          for (const copy of copies) await remove(event.obj.spec.source, copy, signal);
          ctx.logger.info("Copies deleted", { count: copies.length });
          return Reconcile.done; // the finalizer is removed, the ConfigMirror goes
        }
        const outcome = await sync(event.obj, ctx);
        await report(key, event.obj, outcome, signal);
        return Reconcile.after(resyncMs); // the source and copies are not watched: read again
      });
    },
  });
}
