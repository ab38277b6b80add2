/**
 * Example controller on lib/runtime: every Namespace labelled `quota.example.com/default=true`
 * gets a ResourceQuota `default-quota` (pods 10, requests.cpu 4, requests.memory 8Gi; the
 * annotation `quota.example.com/pods` overrides the pod count). An edited or deleted quota is put
 * back; removing the label removes the quota.
 *
 * The primary is the Namespace (cluster-scoped, key = its name); the quota's controller
 * ownerReference names it, so the quota's creation, deletion or change of spec enqueues its
 * Namespace. The reconcile builds the desired quota and writes it with a forced server-side apply.
 *
 * @module
 */
import type { Namespace, ResourceQuota } from "kubernetes-types/core/v1.d.ts";
import { isNotFound, NAMESPACES, type ResourceType } from "../../lib/kube/mod.ts";
import {
  annotationsChanged,
  apply,
  jsonEqual,
  type Manager,
  type Predicate,
  Reconcile,
  setControllerReference,
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

/**
 * The quota a Namespace should have, as the apply configuration: only the fields this controller
 * owns, the Namespace as its controller (`apply` fills in `apiVersion` and `kind`).
 */
export function desiredQuota(ns: Namespace): ResourceQuota {
  const pods = ns.metadata?.annotations?.[PODS_ANNOTATION] ?? "10";
  const quota: ResourceQuota = {
    metadata: {
      name: QUOTA_NAME,
      namespace: ns.metadata!.name,
      labels: { "app.kubernetes.io/managed-by": MANAGER },
    },
    spec: { hard: { pods, "requests.cpu": "4", "requests.memory": "8Gi" } },
  };
  // The owner's type is stated: objects of a list (and so of a cache) may lack apiVersion and kind.
  setControllerReference({ apiVersion: "v1", kind: "Namespace", metadata: ns.metadata! }, quota);
  return quota;
}

/** Passes the updates of a quota that change its spec, not the usage its `status` keeps. */
const specChanged: Predicate<ResourceQuota> = {
  update: (a, b) => !jsonEqual(a.spec, b.spec),
};

/** Declares the controller on `manager`. */
export function addNamespaceQuotaController(manager: Manager): void {
  const namespaces = manager.informer<Namespace>(NAMESPACES, { labelSelector: `${LABEL}=true` });
  const quotas = manager.informer<ResourceQuota>(RESOURCE_QUOTAS, {
    labelSelector: `app.kubernetes.io/managed-by=${MANAGER}`,
  });
  const client = manager.client;
  manager.add({
    name: "namespace-quota",
    for: namespaces,
    predicates: [annotationsChanged], // of a Namespace's updates, only the annotation matters
    owns: [{ informer: quotas, predicates: [specChanged] }],
    reconcile: async (name, ctx) => {
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
      if (ns.metadata?.deletionTimestamp) return Reconcile.done; // terminating: the quota goes too
      const want = desiredQuota(ns);
      if (have && jsonEqual(have.spec?.hard, want.spec?.hard)) return Reconcile.done;
      // Forced server-side apply: creates it, or takes the fields back from whoever changed them.
      await apply(client, RESOURCE_QUOTAS, want, {
        fieldManager: MANAGER,
        force: true,
        signal: ctx.signal,
      });
      ctx.logger.info(have ? "Quota restored" : "Quota created", { hard: want.spec?.hard });
      return Reconcile.done;
    },
  });
}
