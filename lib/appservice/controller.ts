/**
 * The AppService controller's wiring, in one place next to its reconciler (as controller-runtime's
 * `SetupWithManager` and kube-rs's `Controller::new(...).owns(...)` keep it): the primary
 * AppServices, the Pods, Services and PodDisruptionBudgets it owns (only those labelled as managed
 * by this operator, so
 * the caches hold nothing else), the predicates and the reconciler.
 *
 * Enqueued: an AppService added, or updated in its spec (generation), its deletionTimestamp or
 * its finalizers (status and metadata writes, including the operator's own status writes, do not
 * enqueue); never its removal from the cache (cleanup runs through the finalizer, which the
 * update with a deletionTimestamp already brought). Any change of an owned Pod or Service
 * enqueues its controller owner (with high priority when a Pod's readiness changed or it went:
 * {@link POD_READINESS_CHANGED}); one of an orphan with the operator's labels (no controller, as
 * `--cascade=orphan` leaves it) enqueues the AppService named by its instance label, which adopts
 * it.
 *
 * Cache transform ({@link cachedPod}): owned Pods are cached without their `spec` but for
 * `nodeName` and `restartPolicy`. The reconciler reads a Pod's metadata (name, ownerReferences,
 * the spec-hash annotation that stands for the template, deletionTimestamp) and status (phase,
 * conditions, container statuses, podIP) and of its spec only those two. The rest of the spec,
 * filled by the apiserver with defaults (volumes, tolerations, container defaults), is the largest
 * part of a cached Pod. Measured in BENCHMARKS.md (memory section).
 *
 * @module
 */
import type { Pod, PodSpec, Service } from "kubernetes-types/core/v1.d.ts";
import type { PodDisruptionBudget } from "kubernetes-types/policy/v1.d.ts";
import { PODDISRUPTIONBUDGETS, PODS, SERVICES } from "../kube/resources.ts";
import type { KubeObject } from "../kube/client.ts";
import type { Controller } from "../runtime/controller.ts";
import type { Manager } from "../runtime/manager.ts";
import type { Metrics } from "../runtime/metrics.ts";
import { TerminatingNamespaces } from "../runtime/namespaces.ts";
import {
  anyOf,
  deletionOrFinalizersChanged,
  generationChanged,
  type Predicate,
} from "../runtime/predicates.ts";
import { APPSERVICES, GROUP } from "./api.ts";
import { isPodReady, MANAGED_SELECTOR, orphanKeys } from "./pods.ts";
import { appServiceReconciler } from "./reconcile.ts";
import { RejectedWrites, RESOURCE_QUOTAS } from "./rejections.ts";
import type { AppService } from "./schema.ts";

/** Name of the AppService controller (metrics label `controller`, logs). */
export const CONTROLLER_NAME = "appservice";

/**
 * Owned Pod changes whose AppService goes in the work queue's high lane (runtime/queue.ts
 * `QueuePriority`): a Pod whose Ready condition changed, or one that went. Such a change finishes a
 * step under way (the AppService reports Ready, or replaces a Pod it lost) with one reconcile; in
 * plain FIFO order it waits behind every key added before it, which during a converge of many new
 * AppServices is every new AppService's first reconcile (docs/design/runtime.md, "Priority in the work queue").
 * A Pod's creation (the operator's own) and its other updates (binding, IPs) stay normal.
 */
export const POD_READINESS_CHANGED: Predicate<KubeObject> = {
  create: () => false,
  update: (a, b) => isPodReady(a as Pod) !== isPodReady(b as Pod),
  delete: () => true,
};

/** `reportingController` of the operator's Events (events.k8s.io/v1: `<domain>/<name>`). */
export const REPORTING_CONTROLLER = `${GROUP}/appservice-operator`;

/**
 * The cache transform of owned Pods (controller-runtime's cache `TransformFunc`): replaces `spec`,
 * in place, by one that holds only the two fields the status reads, `nodeName` (who has to
 * confirm a deletion, `stuckTerminating` in status.ts) and `restartPolicy` (whether a completed
 * Pod comes
 * back), and returns the Pod. Everything else the reconciler and its status read is metadata and
 * status, which stay; see the module doc. Idempotent. (A tested rule: tests/unit/pod_cache_test.ts
 * runs every status function over a full and a transformed Pod in each state.)
 */
export function cachedPod(pod: Pod): Pod {
  const spec = pod.spec;
  if (spec !== undefined) {
    // Only these two keys: `containers` and the defaults the apiserver filled in are dropped.
    pod.spec = { nodeName: spec.nodeName, restartPolicy: spec.restartPolicy } as PodSpec;
  }
  return pod;
}

/**
 * The cache transform of ResourceQuotas: only the metadata is kept (a change of a quota is all
 * the controller reads: it releases the creates a quota refused, rejections.ts). In place;
 * returns the object.
 */
export function quotaOnly(quota: KubeObject): KubeObject {
  const q = quota as KubeObject & { spec?: unknown; status?: unknown };
  delete q.spec;
  delete q.status;
  return q;
}

/**
 * Name of the gauge of AppServices by namespace and readiness (labels `namespace`, `ready` =
 * `"true"` or `"false"`; deploy/monitoring's `AppServiceNotReady` alert reads it). Every replica
 * exports it from its own cache: standbys too, so it survives a failover.
 */
export const APPSERVICES_METRIC = "appservice_appservices";

/**
 * Counts AppServices by namespace and by whether `status.ready` is true (one not yet reconciled
 * counts as not ready): the samples of {@link APPSERVICES_METRIC}. Both values of `ready` are
 * given for every namespace that has an AppService, so a namespace whose last unready one
 * became Ready reads 0 rather than vanishing.
 */
export function countByReady(
  list: readonly AppService[],
): [{ namespace: string; ready: string }, number][] {
  const m = new Map<string, [number, number]>();
  for (const a of list) {
    const ns = a.metadata?.namespace ?? "";
    const c = m.get(ns) ?? [0, 0];
    c[a.status?.ready === true ? 0 : 1]++;
    m.set(ns, c);
  }
  return [...m].flatMap(([namespace, [ready, notReady]]) => [
    [{ namespace, ready: "true" }, ready] as [{ namespace: string; ready: string }, number],
    [{ namespace, ready: "false" }, notReady] as [{ namespace: string; ready: string }, number],
  ]);
}

/**
 * Registers the product's own metrics on `metrics`: {@link APPSERVICES_METRIC}, counted from
 * `list` (the AppService cache) at each scrape.
 * @throws Error when they are registered on `metrics` already
 */
export function addAppServiceMetrics(metrics: Metrics, list: () => readonly AppService[]): void {
  metrics.addStateGauge(
    APPSERVICES_METRIC,
    "AppServices in this replica's cache by namespace and whether status.ready is true",
    ["namespace", "ready"],
    () => countByReady(list()),
  );
}

/**
 * Declares the AppService controller on `manager`: informers of AppServices (all), and of Pods,
 * Services and PodDisruptionBudgets labelled `app.kubernetes.io/managed-by=appservice-operator`,
 * in the manager's watch namespace; workers, timeout and sync period are the manager's defaults.
 * @returns the controller (its queue, for tests and metrics)
 */
export function addAppServiceController(manager: Manager): Controller {
  const appServices = manager.informer<AppService>(APPSERVICES);
  const pods = manager.informer<Pod>(PODS, {
    labelSelector: MANAGED_SELECTOR,
    transform: cachedPod,
  });
  const services = manager.informer<Service>(SERVICES, { labelSelector: MANAGED_SELECTOR });
  const pdbs = manager.informer<PodDisruptionBudget>(PODDISRUPTIONBUDGETS, {
    labelSelector: MANAGED_SELECTOR,
  });
  // Namespaces being deleted (docs/scenarios.md S21): every AppService cached there is held back
  // at once, Events
  // included; an entry goes with the AppService's removal from the cache.
  const terminating = new TerminatingNamespaces((ns) =>
    appServices.store.list().filter((a) => a.metadata?.namespace === ns).map((a) =>
      a.metadata!.uid!
    )
  );
  appServices.store.addHandler({
    delete: (obj) => terminating.forget(obj.metadata?.namespace, obj.metadata?.uid),
  });
  const events = manager.eventRecorder(REPORTING_CONTROLLER, { terminating });
  // ResourceQuotas (docs/scenarios.md S24): a change releases the creates a quota refused in its
  // namespace, and
  // requeues their AppServices, instead of waiting for the slow retry (rejections.ts).
  const quotas = manager.informer<KubeObject>(RESOURCE_QUOTAS, { transform: quotaOnly });
  const rejected = new RejectedWrites();
  addAppServiceMetrics(manager.metrics, () => appServices.store.list());
  return manager.add({
    name: CONTROLLER_NAME,
    for: appServices,
    // Deletes pass: a reconcile of a key whose AppService is gone sweeps what it owned when its
    // cleanup did not run (reconcile.ts `#sweep`); after a cleanup it is a no-op without requests.
    predicates: [anyOf(generationChanged, deletionOrFinalizersChanged)],
    owns: [
      { informer: pods, priority: POD_READINESS_CHANGED },
      { informer: services },
      { informer: pdbs },
    ],
    // Orphans with this operator's labels (left by --cascade=orphan) go to the AppService of
    // their name, which adopts them.
    watches: [
      { informer: pods, map: orphanKeys },
      { informer: services, map: orphanKeys },
      { informer: quotas, map: (q) => rejected.releaseQuota(q.metadata?.namespace) },
    ],
    reconcile: appServiceReconciler({
      client: manager.client,
      appServices: appServices.store,
      pods: pods.store,
      services: services.store,
      pdbs: pdbs.store,
      events,
      terminating,
      rejected,
    }),
  });
}
