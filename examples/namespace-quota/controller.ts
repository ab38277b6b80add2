/**
 * Example controller on lib/runtime: every Namespace labelled `quota.example.com/default=true`
 * gets a ResourceQuota `default-quota` (pods 10, requests.cpu 4, requests.memory 8Gi; the
 * annotation `quota.example.com/pods` overrides the pod count). An edited or deleted quota is put
 * back; removing the label removes the quota.
 *
 * The primary is the Namespace (cluster-scoped, key = its name); the quota is owned through a
 * controller ownerReference, so any change to it enqueues its Namespace.
 *
 * @module
 */
import type { Namespace, ResourceQuota } from "kubernetes-types/core/v1.d.ts";
import { isNotFound, NAMESPACES, type ResourceType } from "../../lib/kube/mod.ts";
import {
  type Manager,
  Reconcile,
  type ReconcileContext,
  type ReconcileResult,
} from "../../lib/runtime/mod.ts";

/** Namespaces with this label get a quota. */
export const LABEL = "quota.example.com/default";
/** Annotation of a Namespace overriding the quota's `pods`. */
export const PODS_ANNOTATION = "quota.example.com/pods";
/** Name of the quota in each Namespace. */
export const QUOTA_NAME = "default-quota";
/** Field manager of the server-side apply, and the managed-by label of the quota. */
export const MANAGER = "namespace-quota";

/** core/v1 ResourceQuotas (lib/kube names only the resources the operator itself uses). */
export const RESOURCE_QUOTAS: ResourceType = {
  apiVersion: "v1",
  kind: "ResourceQuota",
  plural: "resourcequotas",
  namespaced: true,
};

/** The quota a Namespace should have. */
export function desiredQuota(ns: Namespace): ResourceQuota {
  const pods = ns.metadata?.annotations?.[PODS_ANNOTATION] ?? "10";
  return {
    apiVersion: "v1",
    kind: "ResourceQuota",
    metadata: {
      name: QUOTA_NAME,
      namespace: ns.metadata!.name,
      labels: { "app.kubernetes.io/managed-by": MANAGER },
      ownerReferences: [{
        apiVersion: "v1",
        kind: "Namespace",
        name: ns.metadata!.name!,
        uid: ns.metadata!.uid!,
        controller: true,
      }],
    },
    spec: { hard: { pods, "requests.cpu": "4", "requests.memory": "8Gi" } },
  };
}

/** Declares the controller on `manager`. */
export function addNamespaceQuotaController(manager: Manager): void {
  const namespaces = manager.informer<Namespace>(NAMESPACES, { labelSelector: `${LABEL}=true` });
  const quotas = manager.informer<ResourceQuota>(RESOURCE_QUOTAS, {
    labelSelector: `app.kubernetes.io/managed-by=${MANAGER}`,
  });
  const client = manager.client;

  async function reconcile(name: string, ctx: ReconcileContext): Promise<ReconcileResult> {
    const ns = namespaces.store.get(name);
    const have = quotas.store.get(`${name}/${QUOTA_NAME}`);
    if (!ns) {
      // Not in the cache: the label was removed (or the Namespace is gone). Remove our quota.
      if (!have) return Reconcile.done;
      try {
        await client.delete(RESOURCE_QUOTAS, QUOTA_NAME, { namespace: name, signal: ctx.signal });
        ctx.logger.info("Quota removed");
      } catch (err) {
        if (!isNotFound(err)) throw err;
      }
      return Reconcile.done;
    }
    // The namespace controller empties it.
    if (ns.metadata?.deletionTimestamp) return Reconcile.done;
    const want = desiredQuota(ns);
    const hard = want.spec!.hard!;
    const got = have?.spec?.hard ?? {};
    const same = Object.keys(got).length === Object.keys(hard).length &&
      Object.entries(hard).every(([k, v]) => got[k] === v);
    if (have && same) return Reconcile.done;
    // Server-side apply: creates it, or takes the fields back from whoever changed them.
    await client.patch(RESOURCE_QUOTAS, QUOTA_NAME, want, {
      namespace: name,
      type: "apply",
      fieldManager: MANAGER,
      force: true,
      signal: ctx.signal,
    });
    ctx.logger.info(have ? "Quota restored" : "Quota created", { hard });
    return Reconcile.done;
  }

  manager.add({
    name: "namespace-quota",
    for: namespaces,
    owns: [{ informer: quotas }],
    reconcile,
  });
}
