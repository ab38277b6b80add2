/**
 * The AppService reconciler: from the cached AppService and its cached Pods and Service, it
 * makes the cluster match the spec, then reports status. One call handles one key; it is
 * idempotent and safe to run on a stale cache (see below).
 *
 * Steps:
 * 1. Gone from the cache: nothing to do (owned objects carry ownerReferences; the garbage
 *    collector removes them if the finalizer was bypassed).
 * 2. Being deleted: delete owned Pods and the Service, confirm through the API (not the cache)
 *    that they are gone, then remove the finalizer with a JSON patch whose `test` op makes it
 *    safe against concurrent change. A failing cleanup keeps the finalizer, sets `Degraded`
 *    (reason CleanupFailed), records a Warning Event and retries with backoff (S6).
 * 3. Otherwise: add the finalizer; plan the Pods (rollout.ts: a pure function of the cached Pods)
 *    and perform the plan — create Pods of the current spec in free slots first (surge), then
 *    delete what the plan says: Pods past the slots or beyond `replicas`, Failed Pods when their
 *    replacement is due (replacements.ts), outdated Pods that are not Ready, and outdated Ready
 *    Pods while more than `replicas - maxUnavailable` Pods stay available (S22); create, update
 *    or delete the Service; write status only when it changed (S9).
 *
 * A stale cache may cost a retry, never a Pod: creates use slot names (AlreadyExists), deletes a
 * uid precondition, and before deleting any Pod the AppService is read from the API (not the
 * cache); when its generation is newer than the cached one, nothing is deleted and the key is
 * retried until the cache catches up. Without that, a standby taking over with a cache that lags
 * (its apiserver's watch cache stalled) saw an AppService scaled 2 → 4 at 2 and deleted the 2
 * new Pods (tests/e2e/stale_list_test.ts). An available Pod that goes within the availability
 * budget goes only when a list of the Pods from the API (a consistent read) plans the same
 * deletion, so a Pod that stopped being Ready since the cache saw it is not counted as serving.
 *
 * Status is written with the resourceVersion it was computed from as a precondition (a merge patch
 * carrying `metadata.resourceVersion`; the apiserver answers 409 Conflict when the object changed
 * since), so a status computed from a stale cache, or by a replica that lost the Lease, never
 * overwrites a newer one; a 409 there only requeues the key. The reconciler's own writes do not
 * make it stale (S24): until the cache shows a write, the next reconcile of the key starts from
 * the object the apiserver answered, not from the cached version that write replaced (which
 * caused a 409 and a second write after most scalings).
 *
 * Status writes are bounded (S24, docs/design/status.md): a change of state (counts, a
 * condition's status or reason, a Pod's phase, readiness or stuck reason, observedGeneration) is
 * written at once; a change of only counters and messages (restart counts, back-off texts, a
 * refused write's attempt count) at most once per 30 s per AppService (status.ts
 * `statusWriteAtMs`), the reconcile requeueing itself for the held-back write. A crash-looping Pod
 * thus costs a bounded number of writes, not one per crash. Conditions say what `Ready` says: Pods
 * that will not become Ready by themselves make `Degraded` True with their reason and names, and
 * `Progressing` `PodsStuck` (then ProgressDeadlineExceeded), never the words of a healthy start.
 *
 * A write refused by the Lease fence (`FencedError`) or throttled by the apiserver (429, 503 with
 * Retry-After) ends the reconcile at once: it is never reported as a failure in status or Events;
 * the controller's error policy requeues the key.
 *
 * Pods are created with POST (not server-side apply): a Pod's spec is immutable, so "apply" could
 * only ever create, and POST's AlreadyExists makes a stale-cache retry harmless. The Service is
 * created with server-side apply (field manager `appservice-operator`) and converged with a merge
 * patch that sets its ports, selector and type outright, whatever other field managers own (S20,
 * service.ts).
 *
 * A Pod create or Service write that the apiserver refuses (admission policy, webhook, quota:
 * what only the write can tell, S19) sets `Degraded` with reason `PodCreateRejected` or
 * `ServiceRejected`, records a Warning Event and is retried slowly (rejections.ts): other
 * reconciles of the key skip it, and the reconcile asks to be requeued when its retry is due,
 * rather than failing into the work queue's fast error backoff. A new generation is tried at once,
 * and a create a ResourceQuota refused is tried again as soon as a quota of its namespace changes
 * (controller.ts watches them; rejections.ts).
 *
 * Why a Pod is stuck (S18): the Ready condition names the cause and the Pod, `podStatuses` carry
 * each container's state (status.ts), and each stuck Pod gets one Warning Event per reason
 * (reason as the kubelet or scheduler says it, `related` the Pod). A new occurrence is a change of
 * the Pod's cause (its reason, or its restart count under the same reason) since the last
 * reconcile; repeats become the Event's series count (runtime/events.ts). Occurrences are seen only
 * in reconciles that follow a Pod change, so an AppService at rest records nothing (S9).
 *
 * Orphans and lost labels: Pods named `<name>-<n>` and the Service `<name>` that carry the
 * operator's labels and no controller (what `kubectl delete --cascade=orphan` leaves) are adopted
 * by the AppService of that name, after a read from the API confirms it is not being deleted
 * (client-go's ControllerRefManager); an owned Pod whose labels were removed by hand gets them back
 * (without `managed-by` it is out of the cache's sight and a rollout could never replace it).
 *
 * A namespace being deleted (S21): the first create refused because of it (403 with cause
 * NamespaceTerminating, or 404 for the namespace) is remembered ({@link TerminatingNamespaces}):
 * from then on no Pod, Service or Event is created for the AppServices there, and nothing is
 * reported as a failure; their deletion (the namespace controller deletes them) still runs the
 * finalizer, which only deletes and patches, as the apiserver allows in such a namespace.
 *
 * @module
 */
import type { Pod, Service } from "kubernetes-types/core/v1.d.ts";
import type { PodDisruptionBudget } from "kubernetes-types/policy/v1.d.ts";
import type { KubeClient } from "../kube/client.ts";
import {
  ApiError,
  isAlreadyExists,
  isConflict,
  isFenced,
  isNamespaceClosed,
  isNotFound,
  isThrottled,
} from "../kube/errors.ts";
import { PODDISRUPTIONBUDGETS, PODS, SERVICES } from "../kube/resources.ts";
import type { ReconcileContext, ReconcileResult } from "../runtime/controller.ts";
import type { EventRecorder } from "../runtime/events.ts";
import type { TerminatingNamespaces } from "../runtime/namespaces.ts";
import { errorText } from "../runtime/log.ts";
import { CONTROLLER_UID_INDEX, splitKey, type Store } from "../runtime/store.ts";
import {
  desiredPod,
  hasSelectorLabels,
  isPodReady,
  MANAGED_BY,
  MANAGED_SELECTOR,
  ORPHAN_INDEX,
  orphanKeys,
  ownerRef,
  podOrdinal,
  selectorLabels,
  SPEC_HASH_ANNOTATION,
  specHash,
} from "./pods.ts";
import { APPSERVICES, FINALIZER } from "./api.ts";
import type { AppService, AppServiceStatusT } from "./schema.ts";
import { desiredService, serviceMatches, servicePatch } from "./service.ts";
import { desiredPdb, pdbMatches } from "./disruption.ts";
import { isQuotaRefusal, isWriteRejection, type Refusal, RejectedWrites } from "./rejections.ts";
import { type PodFailure, PodReplacements } from "./replacements.ts";
import { planRollout, type RolloutCounts, rolloutParams, slotCount } from "./rollout.ts";
import {
  type CauseSignature,
  type ConditionInput,
  conditionReason,
  mergeConditions,
  newCauses,
  podCause,
  podStatuses,
  progressingCondition,
  readyCondition,
  REASON_PROGRESS_DEADLINE_EXCEEDED,
  rolloutProgress,
  statusChanged,
  statusWriteAtMs,
  stuckDegradedCondition,
  stuckPods,
  stuckTerminating,
  TERMINATING_STUCK_AFTER_MS,
} from "./status.ts";

/** Field manager of every write (server-side apply and create/update). */
export const FIELD_MANAGER = MANAGED_BY;

/** What the reconciler reads and writes through. */
export interface ReconcilerDeps {
  client: KubeClient;
  appServices: Store<AppService>;
  pods: Store<Pod>;
  services: Store<Service>;
  /** Owned PodDisruptionBudgets (disruption.ts); without it none is kept. */
  pdbs?: Store<PodDisruptionBudget>;
  events: EventRecorder;
  /**
   * Namespaces being deleted (S21), shared with the EventRecorder; without it a refusal only
   * stops the reconcile that got it.
   */
  terminating?: TerminatingNamespaces;
  /** Wall clock (ms); injected for tests. */
  now?: () => number;
  /**
   * The record of refused writes (rejections.ts), shared with the watch that releases the ones a
   * ResourceQuota refused when a quota changes; without it the reconciler keeps its own.
   */
  rejected?: RejectedWrites;
}

/** Action of the Warning Events about stuck Pods (events.k8s.io/v1 `action`). */
export const STUCK_POD_ACTION = "WaitForPodReady";

/** An error already reported through status and an Event; the controller only retries it. */
class ReportedError extends Error {}

/** A Service of the wanted name exists and belongs to someone else. */
class ServiceConflict extends Error {}

/**
 * Rethrows an error that must end the reconcile instead of becoming a reported failure: a write
 * the fence refused (this replica may not write now) or the apiserver throttling us.
 */
function rethrowIfAbortive(err: unknown): void {
  if (isFenced(err) || isThrottled(err)) throw err;
}

/** Condition reason of a Pod create (or its dry run) the apiserver refused. */
export const REASON_POD_CREATE_REJECTED = "PodCreateRejected";
/** Condition reason of a Service write the apiserver refused. */
export const REASON_SERVICE_REJECTED = "ServiceRejected";

/** One failure of a reconcile, for the Degraded condition and Warning Events. */
interface Failure {
  reason: string;
  message: string;
  /** A refused write, retried slowly: the reconcile requeues itself instead of failing. */
  rejected?: boolean;
  /** Already reported by an earlier reconcile (a write held back): no new Event. */
  held?: boolean;
}

/**
 * How a failed Pod is reported in `Degraded`: its name, cause (reason and exit code) and when it
 * is replaced, e.g. `web-0 (Error: container app terminated with exit code 1; failure 3 in a
 * row, next in 20 s)`. The text depends only on the failure as first seen, so a held reconcile
 * writes no status.
 */
function failedPodText(f: { pod: Pod; failure: PodFailure }): string {
  const cause = podCause(f.pod);
  const why = cause ? `${cause.reason}${cause.message ? `: ${cause.message}` : ""}` : "failed";
  const when = f.failure.delayMs === 0
    ? "replaced at once"
    : `failure ${f.failure.failures} in a row, next in ${Math.round(f.failure.delayMs / 1000)} s`;
  return `${f.pod.metadata?.name} (${why}; ${when})`;
}

/** Builds the reconcile function for the controller. */
export function appServiceReconciler(deps: ReconcilerDeps) {
  const now = deps.now ?? Date.now;
  const { client, events } = deps;
  const closedNamespaces = deps.terminating;
  /** Stuck-Pod causes seen per AppService key, by Pod uid (see {@link newCauses}). */
  const seenCauses = new Map<string, Map<string, CauseSignature>>();

  /**
   * Notes a create refused because the namespace is being deleted or is gone; true when it was
   * (the caller then creates nothing more there).
   */
  function namespaceClosed(as: AppService, err: unknown): boolean {
    if (closedNamespaces) {
      return closedNamespaces.observe(as.metadata.namespace!, as.metadata.uid, err);
    }
    return isNamespaceClosed(err);
  }

  const rejected = deps.rejected ?? new RejectedWrites(now);
  const replacements = new PodReplacements(now);
  // Orphans (--cascade=orphan) by the key of the AppService that may adopt them.
  deps.pods.addIndex(ORPHAN_INDEX, orphanKeys);
  deps.services.addIndex(ORPHAN_INDEX, orphanKeys);

  /**
   * Records a refused write and gives the failure to report: the apiserver's answer, how often,
   * and when the next attempt goes (fixed at refusal time, so held reconciles report the same
   * text and write no status). `attemptAtMs`: when the attempt started (rejections.ts).
   */
  function refusal(
    key: string,
    as: AppService,
    write: string,
    reason: string,
    what: string,
    err: unknown,
    attemptAtMs: number,
  ): Failure {
    const r = rejected.refused(
      key,
      as.metadata.generation ?? 0,
      write,
      "",
      isQuotaRefusal(err),
      attemptAtMs,
    );
    const inS = Math.round((r.nextAtMs - now()) / 1000);
    const answer = err instanceof ApiError && err.status?.message
      ? `${err.code} ${err.reason}: ${err.status.message}`
      : errorText(err);
    r.message = `${what} refused: ${answer} (attempt ${r.attempts}; next in ${inS} s, ` +
      "at once when the spec changes)";
    return { reason, message: r.message, rejected: true };
  }

  /** The failure to report for a write held back by an earlier refusal. */
  function held(reason: string, r: Refusal): Failure {
    return { reason, message: r.message, rejected: true, held: true };
  }

  /**
   * The AppServices this reconciler wrote, by key, until the cache shows the write (S24): the
   * object the apiserver answered and the resourceVersions it replaced. While the cache still
   * holds one of those, a reconcile starts from the answered object instead, so its status write
   * is not computed from a replaced version (which the apiserver answers with 409 Conflict).
   */
  const written = new Map<string, { obj: AppService; replaced: Set<string> }>();

  /**
   * The newest known version of the cached `cached`: the object this reconciler wrote over it, if
   * the cache still holds a version that write replaced; else `cached` (the cache has caught up,
   * or moved on by another writer's change) and the record is dropped.
   */
  function newest(key: string, cached: AppService): AppService {
    const w = written.get(key);
    if (!w) return cached;
    if (
      w.obj.metadata.uid === cached.metadata.uid &&
      w.replaced.has(cached.metadata.resourceVersion ?? "")
    ) {
      return w.obj;
    }
    written.delete(key);
    return cached;
  }

  /** Notes that `obj` (the apiserver's answer) replaced `from` (see {@link written}). */
  function noteWritten(key: string, from: AppService, obj: AppService): void {
    const w = written.get(key);
    const replaced = w && w.obj === from ? w.replaced : new Set<string>();
    replaced.add(from.metadata.resourceVersion ?? "");
    // Bounded: a cache that lags by more versions than this is not waited for.
    if (replaced.size > 64) replaced.delete(replaced.values().next().value!);
    written.set(key, { obj, replaced });
  }

  /**
   * Writes `next` as the status of `as` when it differs from the stored one: at once when its
   * state changed, else (only counters and messages) not before {@link statusWriteAtMs} (S24).
   * Returns the newest object and, when the write was held back, when it is due (ms).
   */
  async function writeStatus(
    key: string,
    as: AppService,
    next: AppServiceStatusT,
    signal: AbortSignal,
  ): Promise<{ as: AppService; dueAtMs?: number }> {
    if (!statusChanged(as.status, next)) return { as };
    const nowMs = now();
    const at = statusWriteAtMs(as.status, next, nowMs);
    if (at > nowMs) return { as, dueAtMs: at };
    const status = { ...next, lastReconciliation: new Date(nowMs).toISOString() };
    // The resourceVersion `next` was computed from is a precondition (409 when outdated).
    const metadata = { resourceVersion: as.metadata.resourceVersion };
    const got = await client.patch<AppService>(
      APPSERVICES,
      as.metadata.name!,
      { metadata, status },
      {
        namespace: as.metadata.namespace,
        subresource: "status",
        type: "merge",
        fieldManager: FIELD_MANAGER,
        signal,
      },
    );
    if (got?.metadata?.resourceVersion) noteWritten(key, as, got);
    return { as: got ?? as };
  }

  /**
   * The status of `as` with these Pods and conditions. Counts as rollout.ts makes them (`counts`,
   * or counted here): Ready and available Pods of any spec (during a rollout the old ones serve
   * too, as `kubectl get pods` shows them); `ready` needs every desired Pod available at the
   * current spec and none of another spec left (kstatus "Current").
   */
  function baseStatus(
    as: AppService,
    pods: Pod[],
    conditions: ConditionInput[],
    counts?: RolloutCounts,
  ): AppServiceStatusT {
    const params = rolloutParams(as.spec);
    const replicas = params.replicas;
    const c = counts ??
      planRollout(params, specHash(as), as.metadata.name!, pods, "Always", now(), () => Infinity)
        .counts;
    const generation = as.metadata.generation ?? 0;
    const nowIso = new Date(now()).toISOString();
    return {
      ready: c.outdated === 0 && c.updated === replicas && c.updatedAvailable === replicas,
      replicas: c.total - c.terminating,
      selector: Object.entries(selectorLabels(as)).map(([k, v]) => `${k}=${v}`).join(","),
      readyReplicas: c.ready,
      updatedReplicas: c.updated,
      availableReplicas: c.available,
      replicasSummary: `${c.ready}/${replicas}`,
      observedGeneration: generation,
      conditions: mergeConditions(as.status?.conditions, conditions, generation, nowIso),
      podStatuses: podStatuses(pods, now()),
    };
  }

  async function deleteIgnoringNotFound(
    kind: "Pod" | "Service" | "PodDisruptionBudget",
    obj: Pod | Service | PodDisruptionBudget,
    signal: AbortSignal,
  ): Promise<void> {
    const rt = kind === "Pod" ? PODS : kind === "Service" ? SERVICES : PODDISRUPTIONBUDGETS;
    try {
      await client.delete(rt, obj.metadata!.name!, {
        namespace: obj.metadata!.namespace,
        preconditions: { uid: obj.metadata!.uid },
        signal,
      });
    } catch (err) {
      // Already gone, or replaced by another object of that name (uid precondition: 409).
      if (isNotFound(err) || (err instanceof ApiError && err.code === 409)) return;
      throw err;
    }
  }

  /**
   * Whether `as` may adopt orphans now: a read from the API (not the cache) shows the same uid and
   * no deletionTimestamp (client-go ControllerRefManager's `RecheckDeletionTimestamp`: never adopt
   * for an owner that is going away or was replaced).
   */
  async function canAdopt(as: AppService, signal: AbortSignal): Promise<boolean> {
    try {
      const live = await client.get<AppService>(APPSERVICES, as.metadata.name!, {
        namespace: as.metadata.namespace,
        signal,
      });
      return live.metadata.uid === as.metadata.uid && !live.metadata.deletionTimestamp;
    } catch (err) {
      if (isNotFound(err)) return false;
      throw err;
    }
  }

  /**
   * Adopts orphan Pods ({@link orphanKeys}): adds the controller ownerReference with a strategic
   * merge patch (ownerReferences merge by uid, others' references stay) carrying the Pod's uid as a
   * precondition. A Pod gone, replaced or taken by another controller meanwhile is skipped.
   * @returns the Pods adopted, as the apiserver answered
   */
  async function adoptPods(as: AppService, orphans: Pod[], ctx: ReconcileContext): Promise<Pod[]> {
    const out: Pod[] = [];
    for (const p of orphans) {
      try {
        const got = await client.patch<Pod>(PODS, p.metadata!.name!, {
          metadata: { uid: p.metadata!.uid, ownerReferences: [ownerRef(as)] },
        }, {
          namespace: as.metadata.namespace,
          type: "strategic",
          fieldManager: FIELD_MANAGER,
          signal: ctx.signal,
        });
        out.push(got);
        ctx.logger.info("Adopted Pod", { pod: p.metadata?.name });
        events.record(as, {
          type: "Normal",
          reason: "PodAdopted",
          action: "Adopt",
          note: `Adopted Pod ${p.metadata?.name} (it had this AppService's labels and no owner)`,
          related: p,
        });
      } catch (err) {
        rethrowIfAbortive(err);
        // Gone (404), replaced (uid precondition: 409) or given another controller (422).
        if (isNotFound(err) || (err instanceof ApiError && [409, 422].includes(err.code))) continue;
        throw err;
      }
    }
    return out;
  }

  /**
   * Puts this AppService's selector labels back on a Pod it owns that lost them (a `kubectl
   * label` by hand): without `managed-by` it is out of the operator's sight, without `instance`
   * out of the Service's. A merge patch with the Pod's uid as precondition; a Pod gone (404) or
   * replaced (409) meanwhile is left alone.
   */
  async function restoreLabels(
    as: AppService,
    obj: Pod,
    ctx: ReconcileContext,
  ): Promise<void> {
    try {
      await client.patch(PODS, obj.metadata!.name!, {
        metadata: { uid: obj.metadata!.uid, labels: selectorLabels(as) },
      }, {
        namespace: as.metadata.namespace,
        type: "merge",
        fieldManager: FIELD_MANAGER,
        signal: ctx.signal,
      });
    } catch (err) {
      rethrowIfAbortive(err);
      if (isNotFound(err) || isConflict(err)) return;
      throw err;
    }
    ctx.logger.info("Put the AppService's labels back on its Pod", { pod: obj.metadata?.name });
  }

  async function finalize(as: AppService, ctx: ReconcileContext): Promise<ReconcileResult> {
    const { signal, logger } = ctx;
    seenCauses.delete(`${as.metadata.namespace}/${as.metadata.name}`);
    if (!as.metadata.finalizers?.includes(FINALIZER)) return {};
    const ns = as.metadata.namespace!;
    const uid = as.metadata.uid!;
    // `kubectl delete --cascade=orphan`: the garbage collector keeps the dependents; so do we.
    if (as.metadata.finalizers.includes("orphan")) {
      logger.info("Deleted with propagationPolicy Orphan; leaving Pods and Service in place");
      return await removeFinalizer(as, signal);
    }
    // Confirm through the API, not the cache: the finalizer goes only when they are really gone.
    // Owned objects are found by owner UID (the name may not be a valid label value).
    const listed = await client.listAll<Pod>(PODS, {
      namespace: ns,
      labelSelector: MANAGED_SELECTOR,
      signal,
    });
    const pods = listed.items.filter((p) =>
      p.metadata?.ownerReferences?.some((r) => r.controller && r.uid === uid)
    );
    let svc: Service | undefined;
    try {
      const s = await client.get<Service>(SERVICES, as.metadata.name!, { namespace: ns, signal });
      if (s.metadata?.ownerReferences?.some((r) => r.controller && r.uid === uid)) svc = s;
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
    const failures: string[] = [];
    for (const p of pods) {
      if (p.metadata?.deletionTimestamp) continue;
      try {
        await deleteIgnoringNotFound("Pod", p, signal);
        logger.info("Deleted Pod for cleanup", { pod: p.metadata?.name });
      } catch (err) {
        rethrowIfAbortive(err);
        failures.push(`Pod ${p.metadata?.name}: ${errorText(err)}`);
      }
    }
    if (svc && !svc.metadata?.deletionTimestamp) {
      try {
        await deleteIgnoringNotFound("Service", svc, signal);
        logger.info("Deleted Service for cleanup", { service: svc.metadata?.name });
      } catch (err) {
        rethrowIfAbortive(err);
        failures.push(`Service ${svc.metadata?.name}: ${errorText(err)}`);
      }
    }
    // The PodDisruptionBudget protects nothing once the Pods go; the garbage collector would
    // remove it after the AppService, this removes it with them.
    const pdb = deps.pdbs?.byIndex(CONTROLLER_UID_INDEX, uid)[0];
    if (pdb && !pdb.metadata?.deletionTimestamp) {
      try {
        await deleteIgnoringNotFound("PodDisruptionBudget", pdb, signal);
      } catch (err) {
        rethrowIfAbortive(err);
        failures.push(`PodDisruptionBudget ${pdb.metadata?.name}: ${errorText(err)}`);
      }
    }
    const remaining = pods.length + (svc ? 1 : 0);
    if (failures.length > 0 || remaining > 0) {
      // Pods held past their grace period are named with what holds them (status.ts).
      const held = pods.flatMap((p) => {
        const c = stuckTerminating(p, now());
        return c ? [`${p.metadata?.name}: ${c.message}`] : [];
      });
      const message = failures.length > 0
        ? `cleanup failed: ${failures.join("; ")}`
        : `waiting for ${pods.length} Pod(s)${svc ? " and the Service" : ""} to be deleted${
          held.length > 0 ? ` (stuck: ${held.join("; ")})` : ""
        }`;
      const conditions: ConditionInput[] = [
        { type: "Ready", status: "False", reason: "Terminating", message },
        { type: "Progressing", status: "True", reason: "Terminating", message },
        failures.length > 0
          ? { type: "Degraded", status: "True", reason: "CleanupFailed", message }
          : { type: "Degraded", status: "False", reason: "AsExpected", message: "no failures" },
      ];
      try {
        await writeStatus(
          `${ns}/${as.metadata.name}`,
          as,
          baseStatus(as, pods, conditions),
          signal,
        );
      } catch (err) {
        rethrowIfAbortive(err);
        // A 409: computed from an older version; not written, retried below like the rest.
        if (!isNotFound(err) && !isConflict(err)) {
          logger.warn("Status write failed", { error: errorText(err) });
        }
      }
      if (failures.length > 0) {
        events.record(as, {
          type: "Warning",
          reason: "CleanupFailed",
          action: "Delete",
          note: message,
        });
        throw new ReportedError(message);
      }
      // The Pod watch reconciles again as each one goes; the backoff only covers a missed event
      // (growing from 5 ms, so Pods held by their own finalizers cause no request loop).
      return { requeue: true };
    }
    logger.info("Cleanup complete; removing the finalizer");
    return await removeFinalizer(as, signal);
  }

  /**
   * Whether the cached AppService still has the live spec: a GET (a consistent read, not the
   * cache) shows the same uid and generation (status writes do not change the generation).
   * Undefined when it is gone. Throws what the GET throws (the reconcile is retried).
   */
  async function cachedSpecIsLive(
    as: AppService,
    signal: AbortSignal,
  ): Promise<boolean | undefined> {
    try {
      const live = await client.get<AppService>(APPSERVICES, as.metadata.name!, {
        namespace: as.metadata.namespace,
        signal,
      });
      return live.metadata.uid === as.metadata.uid &&
        live.metadata.generation === as.metadata.generation;
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
  }

  /** Removes our finalizer, guarded by a JSON patch `test` of its position (safe against races). */
  async function removeFinalizer(as: AppService, signal: AbortSignal): Promise<ReconcileResult> {
    const ns = as.metadata.namespace!;
    const idx = as.metadata.finalizers!.indexOf(FINALIZER);
    try {
      await client.patch(APPSERVICES, as.metadata.name!, [
        { op: "test", path: `/metadata/finalizers/${idx}`, value: FINALIZER },
        { op: "remove", path: `/metadata/finalizers/${idx}` },
      ], { namespace: ns, type: "json", fieldManager: FIELD_MANAGER, signal });
    } catch (err) {
      if (isNotFound(err)) return {};
      throw err;
    }
    return {};
  }

  return async function reconcile(
    key: string,
    ctx: ReconcileContext,
  ): Promise<ReconcileResult | void> {
    const { signal, logger } = ctx;
    /** When this reconcile started (ms): its writes' attempts start after it. */
    const startedMs = now();
    const cached = deps.appServices.get(key);
    let as = cached && newest(key, cached);
    if (!as) {
      written.delete(key);
      seenCauses.delete(key);
      rejected.forget(key);
      replacements.forget(key);
      return;
    }
    if (as.metadata.deletionTimestamp) {
      rejected.forget(key);
      replacements.forget(key);
      return await finalize(as, ctx);
    }
    const { namespace: ns, name } = splitKey(key);
    if (closedNamespaces?.has(ns, as.metadata.uid)) {
      // Its namespace is being deleted: nothing can be created; its own deletion will follow.
      logger.debug("Namespace is being deleted; creating nothing");
      return;
    }

    if (!as.metadata.finalizers?.includes(FINALIZER)) {
      const has = as.metadata.finalizers !== undefined && as.metadata.finalizers !== null;
      const before: AppService = as;
      as = await client.patch<AppService>(
        APPSERVICES,
        name,
        has
          ? [
            { op: "test", path: "/metadata/resourceVersion", value: as.metadata.resourceVersion },
            { op: "add", path: "/metadata/finalizers/-", value: FINALIZER },
          ]
          : [
            { op: "test", path: "/metadata/resourceVersion", value: as.metadata.resourceVersion },
            { op: "add", path: "/metadata/finalizers", value: [FINALIZER] },
          ],
        { namespace: ns, type: "json", fieldManager: FIELD_MANAGER, signal },
      );
      noteWritten(key, before, as);
      logger.debug("Added finalizer");
    }

    const params = rolloutParams(as.spec);
    const replicas = params.replicas;
    const slots = slotCount(params);
    const hash = specHash(as);
    const generation = as.metadata.generation ?? 0;
    const restartPolicy = as.spec.restartPolicy ?? "Always";
    const owned = deps.pods.byIndex(CONTROLLER_UID_INDEX, as.metadata.uid!);
    // Orphans of this name with this operator's labels (left by --cascade=orphan): adopted.
    const orphans = deps.pods.byIndex(ORPHAN_INDEX, key).filter((p) =>
      podOrdinal(as, p) !== undefined
    );
    if (orphans.length > 0 && await canAdopt(as, signal)) {
      owned.push(...await adoptPods(as, orphans, ctx));
    }
    // Owned Pods that lost a label of ours (still seen through another one): labels put back.
    for (const p of owned) {
      if (p.metadata?.deletionTimestamp || hasSelectorLabels(as, p)) continue;
      await restoreLabels(as, p, ctx);
    }
    const failures: Failure[] = [];
    /** Failed Pods of the current spec: replaced when due (replacements.ts), reported meanwhile. */
    const failureOf = new Map<Pod, PodFailure>();
    const failureDue = (p: Pod, slot: number) => {
      const f = replacements.failed(
        key,
        slot,
        p.metadata?.uid ?? "",
        p.metadata?.annotations?.[SPEC_HASH_ANNOTATION] ?? "",
      );
      failureOf.set(p, f);
      return f.dueMs;
    };
    const plan = planRollout(
      params,
      hash,
      name,
      owned,
      restartPolicy,
      now(),
      failureDue,
      replacements.slots(key),
    );
    const failedPods = [...plan.failedDue, ...plan.held].map((h) => ({
      pod: h.pod,
      failure: failureOf.get(h.pod)!,
    }));

    // 1. Creates first (surge), lowest free slot first; none while a refused create waits for its
    // slow retry. A create that goes through proves the new template is admitted.
    let created = 0;
    let createRefused = false;
    const createHeld = rejected.held(key, generation, "pod-create");
    if (createHeld && plan.create.length > 0) {
      failures.push(held(REASON_POD_CREATE_REJECTED, createHeld));
    }
    for (const slot of createHeld ? [] : plan.create) {
      const pod = desiredPod(as, slot, hash);
      try {
        const made = await client.create<Pod>(PODS, pod, { fieldManager: FIELD_MANAGER, signal });
        rejected.succeeded(key, "pod-create");
        created++;
        logger.info("Created Pod", { pod: pod.metadata?.name, specHash: hash });
        events.record(as, {
          type: "Normal",
          reason: "PodCreated",
          action: "Create",
          note: `Created Pod ${pod.metadata?.name}`,
          // With its uid: a Pod made again under the same name is another Event, not a repeat.
          related: { ...pod, metadata: { ...pod.metadata, uid: made?.metadata?.uid } },
        });
      } catch (err) {
        rethrowIfAbortive(err);
        if (namespaceClosed(as, err)) {
          logger.info("Namespace is being deleted; creating nothing more in it", {
            error: errorText(err),
          });
          return;
        }
        if (isAlreadyExists(err)) {
          // Stale cache (its watch event will come), or a Pod of that name that is not ours.
          const other = await client.get<Pod>(PODS, pod.metadata!.name!, { namespace: ns, signal })
            .catch(() => undefined);
          const ours = other?.metadata?.ownerReferences?.some((r) =>
            r.controller && r.uid === as.metadata.uid
          );
          if (other && !ours) {
            failures.push({
              reason: "PodNameConflict",
              message: `Pod ${pod.metadata?.name} exists and is not owned by this AppService`,
            });
          } else if (other && !other.metadata?.deletionTimestamp && !hasSelectorLabels(as, other)) {
            // Ours, but out of the cache's sight: its labels were removed by hand. Put back, it
            // comes into sight (and its watch event reconciles again).
            await restoreLabels(as, other, ctx);
          }
          continue;
        }
        createRefused = true;
        if (isWriteRejection(err)) {
          // The other slots would be refused alike: one attempt per retry.
          failures.push(
            refusal(
              key,
              as,
              "pod-create",
              REASON_POD_CREATE_REJECTED,
              `Pod ${pod.metadata?.name}`,
              err,
              startedMs,
            ),
          );
          break;
        }
        failures.push({
          reason: "FailedCreatePod",
          message: `Pod ${pod.metadata?.name}: ${errorText(err)}`,
        });
      }
    }

    // 2. Deletes. An available Pod of another spec goes only within the availability budget, and
    // only when the new template is admitted: proven by a create that went through or a Pod of it
    // that exists, else by a dry run (a spec the CRD accepts but an admission policy, a quota or
    // Pod Security refuses must not cost a running Pod; generateName, so the dry run does not
    // collide with a Pod of that name).
    let toDelete = plan.delete;
    if (toDelete.some((d) => d.withinBudget)) {
      const proven = created > 0 ||
        owned.some((p) =>
          !p.metadata?.deletionTimestamp && p.metadata?.annotations?.[SPEC_HASH_ANNOTATION] === hash
        );
      let admitted = proven && !createRefused;
      if (!proven && !createRefused && !createHeld) {
        const probe = desiredPod(as, 0, hash);
        probe.metadata = { ...probe.metadata, generateName: `${name}-`, name: undefined };
        try {
          await client.create<Pod>(PODS, probe, {
            fieldManager: FIELD_MANAGER,
            dryRun: true,
            signal,
          });
          rejected.succeeded(key, "pod-create");
          admitted = true;
        } catch (err) {
          rethrowIfAbortive(err);
          if (namespaceClosed(as, err)) return; // being deleted (S21): nothing to roll out
          const what = "the new Pod template (dry run), keeping the Pods that serve:";
          failures.push(
            isWriteRejection(err)
              ? refusal(key, as, "pod-create", REASON_POD_CREATE_REJECTED, what, err, startedMs)
              : { reason: "FailedCreatePod", message: `${what} ${errorText(err)}` },
          );
        }
      }
      if (!admitted) toDelete = toDelete.filter((d) => !d.withinBudget);
    }

    // Deletions follow from the spec: only from the live one (see the module doc); and an
    // available Pod goes only if a consistent read of the Pods agrees that enough others are
    // available (a cache behind the apiserver must not spend the budget twice).
    if (toDelete.length > 0) {
      const live = await cachedSpecIsLive(as, signal);
      if (live === undefined) return;
      if (!live) {
        logger.info(
          "The cached AppService is older than the live one; deleting no Pod until the cache catches up",
        );
        return { requeue: true };
      }
      if (toDelete.some((d) => d.withinBudget)) {
        const listed = await client.listAll<Pod>(PODS, {
          namespace: ns,
          labelSelector: MANAGED_SELECTOR,
          signal,
        });
        const livePods = listed.items.filter((p) =>
          p.metadata?.ownerReferences?.some((r) => r.controller && r.uid === as.metadata.uid)
        );
        const livePlan = planRollout(
          params,
          hash,
          name,
          livePods,
          restartPolicy,
          now(),
          () => Infinity,
        );
        const agreed = new Set(
          livePlan.delete.filter((d) => d.withinBudget).map((d) => d.pod.metadata?.uid),
        );
        const dropped = toDelete.filter((d) => d.withinBudget && !agreed.has(d.pod.metadata?.uid));
        if (dropped.length > 0) {
          logger.debug("The cache shows more Pods available than the apiserver; keeping Pods", {
            pods: dropped.map((d) => d.pod.metadata?.name).join(","),
          });
          toDelete = toDelete.filter((d) => !dropped.includes(d));
        }
      }
    }

    for (const { pod, why } of toDelete) {
      try {
        await deleteIgnoringNotFound("Pod", pod, signal);
        logger.info("Deleted Pod", { pod: pod.metadata?.name, reason: why });
        events.record(as, {
          type: "Normal",
          reason: why === "SpecChanged" ? "PodReplaced" : "PodDeleted",
          action: "Delete",
          note: `Deleted Pod ${pod.metadata?.name} (${why})`,
          related: pod,
        });
      } catch (err) {
        rethrowIfAbortive(err);
        failures.push({
          reason: "FailedDeletePod",
          message: `Pod ${pod.metadata?.name}: ${errorText(err)}`,
        });
      }
    }

    // Service: created with server-side apply; converged with a merge patch (service.ts).
    const wantSvc = desiredService(as);
    let liveSvc: Service | undefined =
      deps.services.byIndex(CONTROLLER_UID_INDEX, as.metadata.uid!)[0];
    const svcHeld = wantSvc ? rejected.held(key, generation, "service") : undefined;
    let adoptSvc = false;
    try {
      if (svcHeld) {
        failures.push(held(REASON_SERVICE_REJECTED, svcHeld));
      } else if (wantSvc) {
        if (!liveSvc) {
          // Not in our cache: it may still exist, made by someone else. Never adopt it: taking
          // over a foreign Service would reroute its traffic and delete it with the AppService.
          const other = await client.get<Service>(SERVICES, name, { namespace: ns, signal })
            .catch((err) => {
              if (isNotFound(err)) return undefined;
              throw err;
            });
          if (other && !other.metadata?.ownerReferences?.some((r) => r.uid === as.metadata.uid)) {
            // An orphan with this operator's labels for this name (--cascade=orphan) is adopted.
            adoptSvc = orphanKeys(other).includes(key) && await canAdopt(as, signal);
            if (!adoptSvc) {
              throw new ServiceConflict(
                `Service ${name} exists and is not owned by this AppService`,
              );
            }
          }
          liveSvc = other; // ours, but out of the cache's sight (e.g. its labels were changed)
        }
        if (!liveSvc || adoptSvc || !serviceMatches(liveSvc, wantSvc)) {
          const created = !liveSvc;
          let body: Record<string, unknown> | Service = wantSvc;
          if (liveSvc) {
            const patch = servicePatch(liveSvc, wantSvc);
            if (adoptSvc) {
              // The controller reference added to others' (the list is replaced: uid precondition).
              const refs = (liveSvc.metadata?.ownerReferences ?? []).filter((r) => !r.controller);
              patch.metadata = {
                ...(patch.metadata as Record<string, unknown>),
                uid: liveSvc.metadata?.uid,
                ownerReferences: [...refs, ownerRef(as)],
              };
            }
            body = patch;
          }
          await client.patch<Service>(
            SERVICES,
            name,
            body,
            liveSvc
              ? { namespace: ns, type: "merge", fieldManager: FIELD_MANAGER, signal }
              : { namespace: ns, type: "apply", fieldManager: FIELD_MANAGER, force: true, signal },
          );
          const [verb, reason, action] = created
            ? ["Created", "ServiceCreated", "Create"]
            : adoptSvc
            ? ["Adopted", "ServiceAdopted", "Adopt"]
            : ["Updated", "ServiceUpdated", "Update"];
          logger.info(`${verb} Service`, { service: name });
          events.record(as, { type: "Normal", reason, action, note: `${verb} Service ${name}` });
        }
        rejected.succeeded(key, "service");
      } else if (liveSvc && !liveSvc.metadata?.deletionTimestamp) {
        await deleteIgnoringNotFound("Service", liveSvc, signal);
        logger.info("Deleted Service", { service: name });
        events.record(as, {
          type: "Normal",
          reason: "ServiceDeleted",
          action: "Delete",
          note: `Deleted Service ${name} (no ports declared)`,
        });
      }
    } catch (err) {
      rethrowIfAbortive(err);
      if (err instanceof ServiceConflict) {
        failures.push({ reason: "ServiceNameConflict", message: err.message });
      } else if (namespaceClosed(as, err)) {
        // Its namespace is being deleted (S21): not a failure; nothing more is created there.
      } else if (wantSvc && isWriteRejection(err)) {
        failures.push(
          refusal(key, as, "service", REASON_SERVICE_REJECTED, `Service ${name}`, err, startedMs),
        );
      } else {
        failures.push({ reason: "FailedService", message: `Service ${name}: ${errorText(err)}` });
      }
    }

    // PodDisruptionBudget (disruption.ts): server-side apply when missing or different; deleted
    // when no longer wanted.
    if (deps.pdbs) {
      const wantPdb = desiredPdb(as, params);
      const livePdb = deps.pdbs.byIndex(CONTROLLER_UID_INDEX, as.metadata.uid!)[0];
      try {
        if (wantPdb && (!livePdb || !pdbMatches(livePdb, wantPdb))) {
          await client.patch(PODDISRUPTIONBUDGETS, name, wantPdb, {
            namespace: ns,
            type: "apply",
            fieldManager: FIELD_MANAGER,
            force: true,
            signal,
          });
          const verb = livePdb ? "Updated" : "Created";
          logger.info(`${verb} PodDisruptionBudget`, {
            maxUnavailable: String(wantPdb.spec?.maxUnavailable),
          });
          events.record(as, {
            type: "Normal",
            reason: `PodDisruptionBudget${verb}`,
            action: livePdb ? "Update" : "Create",
            note:
              `${verb} PodDisruptionBudget ${name} (maxUnavailable ${wantPdb.spec?.maxUnavailable})`,
          });
        } else if (!wantPdb && livePdb && !livePdb.metadata?.deletionTimestamp) {
          await deleteIgnoringNotFound("PodDisruptionBudget", livePdb, signal);
          logger.info("Deleted PodDisruptionBudget");
          events.record(as, {
            type: "Normal",
            reason: "PodDisruptionBudgetDeleted",
            action: "Delete",
            note: `Deleted PodDisruptionBudget ${name}`,
          });
        }
      } catch (err) {
        rethrowIfAbortive(err);
        if (!namespaceClosed(as, err)) {
          failures.push({
            reason: "FailedPodDisruptionBudget",
            message: `PodDisruptionBudget ${name}: ${errorText(err)}`,
          });
        }
      }
    }

    // Status, from the cache's view before this round's writes (their watch events follow).
    const c = plan.counts;
    const nowMs = now();
    /** The earliest time a held failed Pod may be replaced (ms), if any is held. */
    const heldFailedDueMs = Math.min(...plan.held.map((h) => h.dueMs));
    /** When a Pod being deleted counts as stuck terminating (ms), if one may yet (status.ts). */
    const stuckTerminatingAtMs = Math.min(
      ...owned.filter((p) => p.metadata?.deletionTimestamp).map((p) =>
        Date.parse(p.metadata!.deletionTimestamp!) + TERMINATING_STUCK_AFTER_MS
      ).filter((t) => t > nowMs),
    );
    const st = baseStatus(as, owned, [], c);
    // Nothing left to do but wait for Pods: every Pod at the current spec, none going.
    const converged = c.outdated === 0 && c.terminating === 0 && plan.delete.length === 0 &&
      plan.create.length === 0 && c.updated === replicas;
    // The Pods of the slots, being deleted or not: a stuck one (terminating too) is named.
    const ofSlots = owned.filter((p) => (podOrdinal(as, p) ?? Infinity) < slots);
    const counted = ofSlots.filter((p) => !p.metadata?.deletionTimestamp);
    // Pods that exited 0 under restartPolicy OnFailure or Never: kept, never restarted.
    const completed = counted.filter((p) =>
      p.status?.phase === "Succeeded" && restartPolicy !== "Always"
    );
    /** Pods being deleted past their grace period and still there (status.ts), named. */
    const stuckGoing = owned.flatMap((p) => {
      const cause = stuckTerminating(p, nowMs);
      return cause ? [{ pod: p, message: cause.message }] : [];
    });
    const minAvailable = replicas - params.maxUnavailable;
    const availableText = `${c.available}/${replicas} Pods available (at least ${minAvailable} ` +
      "needed)";
    const progress = rolloutProgress(as, st, params, nowMs);
    /** Pods of the slots (not being deleted) that will not become Ready by themselves (S24). */
    const stuckNow = stuckPods(counted, nowMs).filter((s) => s.cause.reason !== "Completed");
    const stuckDegraded = stuckDegradedCondition(counted, nowMs);
    const progressing: ConditionInput = converged && st.ready
      ? {
        type: "Progressing",
        status: "False",
        reason: "Complete",
        message: `${replicas} Pod(s) at spec hash ${hash}`,
      }
      : converged && completed.length > 0 &&
          counted.every((p) => isPodReady(p) || completed.includes(p))
      ? {
        // Nothing more will happen by itself: those Pods are done and are not restarted.
        type: "Progressing",
        status: "False",
        reason: "Completed",
        message: `${replicas} Pod(s) at spec hash ${hash}; completed and not restarted: ${
          completed.map((p) => p.metadata?.name).join(", ")
        }`,
      }
      : progressingCondition(c, plan, params, hash, converged, progress, nowMs, stuckNow);
    const conditions: ConditionInput[] = [
      readyCondition(ofSlots, st.readyReplicas ?? 0, replicas, st.ready === true, {
        updated: st.updatedReplicas,
        outdated: c.outdated,
        nowMs,
      }),
      {
        type: "Available",
        status: c.available >= minAvailable ? "True" : "False",
        reason: c.available >= minAvailable
          ? "MinimumReplicasAvailable"
          : "MinimumReplicasUnavailable",
        message: availableText,
      },
      progressing,
      failures.length > 0
        ? {
          type: "Degraded",
          status: "True",
          reason: failures[0].reason,
          message: failures.map((f) => f.message).join("; "),
        }
        : failedPods.length > 0
        ? {
          type: "Degraded",
          status: "True",
          reason: "PodFailed",
          message: `Pod(s) failed: ${failedPods.map(failedPodText).join("; ")}`,
        }
        : stuckGoing.length > 0
        ? {
          // Its replacement serves from a free slot; the Pod holds its own slot until it goes.
          type: "Degraded",
          status: "True",
          reason: "PodStuckTerminating",
          message: `Pod(s) stuck terminating, each holding its slot: ${
            stuckGoing.map((x) => `${x.pod.metadata?.name} (${x.message})`).join("; ")
          }`,
        }
        : stuckDegraded ??
          { type: "Degraded", status: "False", reason: "AsExpected", message: "no failures" },
    ];
    const next = baseStatus(as, owned, conditions, c);
    /** When this reconcile wants to run again by itself (ms), or Infinity. */
    const wakeAtMs = Math.min(
      heldFailedDueMs,
      stuckTerminatingAtMs,
      plan.nextAvailableAtMs,
      progressing.reason === REASON_PROGRESS_DEADLINE_EXCEEDED || progressing.status === "False"
        ? Infinity
        : progress.deadlineAtMs,
    );
    const stuck = newCauses(ofSlots, seenCauses.get(key), as.status?.podStatuses, nowMs);
    let statusOutdated = false;
    /** When a status change held back (only counters and messages changed) is due (ms). */
    let statusDueAtMs: number | undefined;
    try {
      statusDueAtMs = (await writeStatus(key, as, next, signal)).dueAtMs;
    } catch (err) {
      if (isNotFound(err)) return;
      if (!isConflict(err)) throw err;
      // Computed from an older resourceVersion (409): not written; the newer one's watch event is
      // on its way and the key is requeued. The failures of this round are still reported.
      statusOutdated = true;
      logger.debug("Status not written: the AppService changed meanwhile; requeued", {
        resourceVersion: as.metadata.resourceVersion,
      });
    }
    if (!statusOutdated) seenCauses.set(key, stuck.signatures);
    const wasExceeded = as.status?.conditions?.some((x) =>
      x.type === "Progressing" && x.reason === REASON_PROGRESS_DEADLINE_EXCEEDED
    );
    if (
      !statusOutdated && progressing.reason === REASON_PROGRESS_DEADLINE_EXCEEDED && !wasExceeded
    ) {
      logger.warn("The rollout made no progress within its deadline", {
        specHash: hash,
        progressDeadlineSeconds: params.progressDeadlineSeconds,
      });
      events.record(as, {
        type: "Warning",
        reason: REASON_PROGRESS_DEADLINE_EXCEEDED,
        action: "Rollout",
        note: progressing.message,
      });
    }
    for (const { pod, cause } of statusOutdated ? [] : stuck.occurrences) {
      events.record(as, {
        type: "Warning",
        reason: conditionReason(cause.reason),
        action: STUCK_POD_ACTION,
        note: `${pod.metadata?.name}: ${cause.message || cause.reason}`,
        related: { apiVersion: "v1", kind: "Pod", metadata: pod.metadata },
      });
    }
    if (failures.length > 0) {
      for (const f of failures) {
        if (f.held) continue; // reported when it was refused
        events.record(as, {
          type: "Warning",
          reason: f.reason,
          action: "Reconcile",
          note: f.message,
        });
      }
      // Only refused writes: come back when the first one is due (or at once on a spec change,
      // through the watch), not through the error backoff.
      const dueRejected = rejected.nextDelayMs(key);
      const wake = Math.min(wakeAtMs, statusDueAtMs ?? Infinity);
      const due = dueRejected === undefined ? undefined : Math.min(
        dueRejected,
        Number.isFinite(wake) ? Math.max(1, wake - now()) : Infinity,
      );
      if (failures.every((f) => f.rejected) && due !== undefined) {
        logger.info("A write was refused; retrying slowly", {
          reasons: [...new Set(failures.map((f) => f.reason))].join(","),
          retryInMs: due,
        });
        return { requeueAfterMs: due };
      }
      throw new ReportedError(failures.map((f) => f.message).join("; "));
    }
    if (statusOutdated) return { requeue: true };
    // A failed Pod held back by its replacement delay, a Pod being deleted that becomes stuck
    // terminating, or a status change held back: come back then (no watch event will say so).
    const wakeMs = Math.min(wakeAtMs, statusDueAtMs ?? Infinity);
    if (Number.isFinite(wakeMs)) return { requeueAfterMs: Math.max(1, wakeMs - now()) };
  };
}
