/**
 * The AppService reconciler: from the cached AppService and its cached Pods and Service, it
 * makes the cluster match the spec, then reports status. One call handles one key; it is
 * idempotent and safe to run on a stale cache (see below). It runs **plan → act → status**
 * (docs/design/reconciler.md): plan.ts decides (pure), act.ts performs, report.ts computes the
 * status once, and this module writes it, records the Events and decides what comes next.
 *
 * Steps:
 * 1. Gone from the cache: nothing to do (owned objects carry ownerReferences; the garbage
 *    collector removes them if the finalizer was bypassed).
 * 2. Being deleted (runtime/finalizer.ts `cleanup`): delete owned Pods and the Service, confirm
 *    through the API (not the cache) that they are gone; then the finalizer is removed. A failing
 *    cleanup keeps the finalizer, sets `Degraded` (reason CleanupFailed), records a Warning Event
 *    and retries with backoff (docs/scenarios.md S6).
 * 3. Otherwise (`apply`, the finalizer added first): plan the Pods (rollout.ts: a pure function of
 *    the cached Pods) and perform the plan — create Pods of the current spec in free slots first
 *    (surge), then delete what the plan says: Pods past the slots or beyond `replicas`, Failed
 *    Pods when their replacement is due (replacements.ts), outdated Pods that are not Ready, and
 *    outdated Ready Pods while more than `replicas - maxUnavailable` Pods stay available
 *    (docs/scenarios.md S22); create, update or delete the Service; write status only when it
 *    changed (docs/scenarios.md S9).
 *
 * The reconciler's own Pod writes count before the cache shows them (written.ts `OwnPodWrites`,
 * docs/scenarios.md S5): a Pod it created stands in the view, one it deleted is seen terminating,
 * so a reconcile that follows them at once does not repeat them. A stale cache may cost a retry,
 * never a Pod: creates use slot names (AlreadyExists), deletes a uid precondition, and before
 * deleting any Pod the AppService is read from the API (not the cache); when its generation is
 * newer than the cached one, nothing is deleted and the key is retried until the cache catches up.
 * An available Pod that goes within the availability budget goes only when a list of the Pods from
 * the API (a consistent read) plans the same deletion, so a Pod that stopped being Ready since the
 * cache saw it is not counted as serving. The AppService is
 * read from the API at most once per reconcile (act.ts `Actor.live`; the answer to the finalizer
 * patch stands for it).
 *
 * Status is written with the resourceVersion it was computed from as a precondition (a merge patch
 * carrying `metadata.resourceVersion`; the apiserver answers 409 Conflict when the object changed
 * since), so a status computed from a stale cache, or by a replica that lost the Lease, never
 * overwrites a newer one; a 409 there only requeues the key. The reconciler's own writes do not
 * make it stale (docs/scenarios.md S24): until the cache shows a write, the next reconcile of the
 * key starts from the object the apiserver answered, not from the cached version that write
 * replaced.
 *
 * Status writes are bounded (docs/scenarios.md S24, docs/design/status.md): a change of state
 * (counts, a condition's status or reason, a Pod's phase, readiness or stuck reason,
 * observedGeneration) is written at once; a change of only counters and messages at most once per
 * 30 s per AppService (status.ts `statusWriteAtMs`), the reconcile requeueing itself for the
 * held-back write. Conditions say what `Ready` says: Pods that will not become Ready by themselves
 * make `Degraded` True with their reason and names, and `Progressing` `PodsStuck` (then
 * ProgressDeadlineExceeded), never the words of a healthy start.
 *
 * A write refused by the Lease fence (`FencedError`) or throttled by the apiserver (429, 503 with
 * Retry-After) ends the reconcile at once: it is never reported as a failure in status or Events;
 * the controller's error policy requeues the key.
 *
 * Pods are created with POST (not server-side apply): a Pod's spec is immutable, so "apply" could
 * only ever create, and POST's AlreadyExists makes a stale-cache retry harmless. The Service is
 * created with server-side apply (field manager `appservice-operator`) and converged with a merge
 * patch that sets its ports, selector and type outright, whatever other field managers own
 * (docs/scenarios.md S20, service.ts).
 *
 * A Pod create or Service write that the apiserver refuses (admission policy, webhook, quota:
 * what only the write can tell, docs/scenarios.md S19) sets `Degraded` with reason
 * `PodCreateRejected` or `ServiceRejected`, records a Warning Event and is retried slowly
 * (rejections.ts): other reconciles of the key skip it, and the reconcile asks to be requeued when
 * its retry is due, rather than failing into the work queue's fast error backoff. A new generation
 * is tried at once, and a create a ResourceQuota refused is tried again as soon as a quota of its
 * namespace changes (controller.ts watches them; rejections.ts).
 *
 * Why a Pod is stuck (docs/scenarios.md S18): the Ready condition names the cause and the Pod,
 * `podStatuses` carry each container's state (status.ts), and each stuck Pod gets one Warning
 * Event per reason (reason as the kubelet or scheduler says it, `related` the Pod). A new
 * occurrence is a change of the Pod's cause (its reason, or its restart count under the same
 * reason) since the last reconcile; repeats become the Event's series count (runtime/events.ts).
 * Occurrences are seen only in reconciles that follow a Pod change, so an AppService at rest
 * records nothing (docs/scenarios.md S9).
 *
 * Orphans and lost labels: Pods named `<name>-<n>` and the Service `<name>` that carry the
 * operator's labels and no controller (what `kubectl delete --cascade=orphan` leaves) are adopted
 * by the AppService of that name, after a read from the API confirms it is not being deleted
 * (client-go's ControllerRefManager); an owned Pod whose labels were removed by hand gets them back
 * (without `managed-by` it is out of the cache's sight and a rollout could never replace it).
 *
 * A namespace being deleted (docs/scenarios.md S21): the first create refused because of it (403
 * with cause NamespaceTerminating, or 404 for the namespace) is remembered
 * ({@link TerminatingNamespaces}): from then on no Pod, Service or Event is created for the
 * AppServices there, and nothing is reported as a failure; their deletion (the namespace controller
 * deletes them) still runs the finalizer, which only deletes and patches, as the apiserver allows
 * in such a namespace.
 *
 * @module
 */
import type { Pod, Service } from "kubernetes-types/core/v1.d.ts";
import type { PodDisruptionBudget } from "kubernetes-types/policy/v1.d.ts";
import type { KubeClient } from "../kube/client.ts";
import { isConflict, isNotFound } from "../kube/errors.ts";
import { PODDISRUPTIONBUDGETS } from "../kube/resources.ts";
import {
  controllerOwnerKeys,
  Reconcile,
  type ReconcileContext,
  type ReconcileResult,
} from "../runtime/controller.ts";
import type { EventRecorder } from "../runtime/events.ts";
import { finalizer } from "../runtime/finalizer.ts";
import { errorText } from "../runtime/log.ts";
import type { TerminatingNamespaces } from "../runtime/namespaces.ts";
import { isControlledBy } from "../runtime/ownership.ts";
import { CONTROLLER_UID_INDEX, splitKey, type Store } from "../runtime/store.ts";
import { Actor, FIELD_MANAGER, rethrowIfAbortive, type Turn } from "./act.ts";
import { cleanupOwned, outOfSightPods, pdbStep, serviceStep } from "./act_owned.ts";
import { APPSERVICES, FINALIZER } from "./api.ts";
import { RESYNC_ANNOTATION, resyncDelayMs, syncFailure } from "./disruption.ts";
import { adoptablePods, nextStep, plan, podsToRelabel, type ReconcilePlan } from "./plan.ts";
import { ORPHAN_INDEX, orphanKeys, SPEC_HASH_ANNOTATION } from "./pods.ts";
import { RejectedWrites } from "./rejections.ts";
import { type PodFailure, PodReplacements } from "./replacements.ts";
import { OwnPodWrites, statusWritten, WrittenVersions } from "./written.ts";
import { cleanupStatus, type FailedPod, outageCause, reconcileStatus } from "./report.ts";
import type { AppService, AppServiceStatusT } from "./schema.ts";
import {
  awaitsScheduler,
  type CauseSignature,
  type ConditionInput,
  conditionReason,
  type HeldStep,
  holdRolloutStep,
  isRolloutStep,
  newCauses,
  type PodCause,
  REASON_PROGRESS_DEADLINE_EXCEEDED,
  statusChanged,
  statusWriteAtMs,
} from "./status.ts";

export { FIELD_MANAGER } from "./act.ts";
export { REASON_POD_CREATE_REJECTED, REASON_SERVICE_REJECTED } from "./plan.ts";

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
   * Namespaces being deleted (docs/scenarios.md S21), shared with the EventRecorder; without it a
   * refusal only stops the reconcile that got it.
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

/** Builds the reconcile function for the controller (see the module doc). */
export function appServiceReconciler(
  deps: ReconcilerDeps,
): (key: string, ctx: ReconcileContext) => Promise<ReconcileResult> {
  const r = new AppServiceReconciler(deps);
  return (key, ctx) => r.reconcile(key, ctx);
}

/**
 * How long the answer to a PodDisruptionBudget apply stands for the budget while the cache does
 * not show it (ms): longer than a watch event takes, short enough that a budget deleted by someone
 * else before the cache saw it is applied again soon.
 */
const APPLIED_PDB_TRUST_MS = 10_000;

/** The key of a Pod's controlling AppService (none for another controller's or none). */
const appServiceKeyOf = controllerOwnerKeys(APPSERVICES);

/** The reconciler's state between reconciles, and its steps (see the module doc). */
class AppServiceReconciler {
  #deps: ReconcilerDeps;
  #now: () => number;
  /** Stuck-Pod causes seen per AppService key, by Pod uid (see {@link newCauses}). */
  #seenCauses = new Map<string, Map<string, CauseSignature>>();
  /**
   * Per AppService key, the rollout step waiting to be written ({@link holdRolloutStep}); cleared
   * by a write and by a status that is no such step.
   */
  #heldStep = new Map<string, HeldStep>();
  #rejected: RejectedWrites;
  #replacements: PodReplacements;
  #written = new WrittenVersions<AppService>();
  /** The Pods this reconciler created and deleted, until the cache shows those writes. */
  #podWrites: OwnPodWrites;
  /**
   * Per AppService key, the uid of the AppService last reconciled alive or in cleanup, until its
   * cleanup completed (or left the dependents to the garbage collector on purpose): a key whose
   * AppService is gone from the cache while an entry remains went without this cleanup, and its
   * dependents are swept ({@link AppServiceReconciler.#sweep}).
   */
  #cleanupOwed = new Map<string, string>();
  /**
   * Per AppService key whose PodDisruptionBudget the disruption controller failed to compute:
   * resyncs asked so far and when the next is due (ms; {@link AppServiceReconciler.#resyncPdb}).
   */
  #pdbResync = new Map<string, { n: number; atMs: number }>();
  /**
   * Per AppService key, the PodDisruptionBudget this reconciler applied and when (ms), until the
   * cache shows one of that owner, for at most {@link APPLIED_PDB_TRUST_MS}: a reconcile in
   * between neither applies it again nor reports it created twice, and a cleanup in between
   * deletes it.
   */
  #appliedPdb = new Map<string, { pdb: PodDisruptionBudget; atMs: number }>();
  #act: Actor;

  constructor(deps: ReconcilerDeps) {
    this.#deps = deps;
    this.#now = deps.now ?? Date.now;
    this.#rejected = deps.rejected ?? new RejectedWrites(this.#now);
    this.#replacements = new PodReplacements(this.#now);
    this.#podWrites = new OwnPodWrites(this.#now);
    this.#act = new Actor({
      client: deps.client,
      events: deps.events,
      rejected: this.#rejected,
      terminating: deps.terminating,
      now: this.#now,
      podWrites: this.#podWrites,
    });
    // Orphans (--cascade=orphan) by the key of the AppService that may adopt them.
    deps.pods.addIndex(ORPHAN_INDEX, orphanKeys);
    // The cache's events end the records of this reconciler's own Pod writes (written.ts).
    const ownerKey = (pod: Pod) => appServiceKeyOf(pod)[0];
    deps.pods.addHandler({
      add: (pod) => this.#podWrites.observed(ownerKey(pod), pod, false),
      update: (_, pod) => this.#podWrites.observed(ownerKey(pod), pod, false),
      delete: (pod) => this.#podWrites.observed(ownerKey(pod), pod, true),
    });
    deps.services.addIndex(ORPHAN_INDEX, orphanKeys);
  }

  /** Reconciles one key: cache read, then the finalizer's `cleanup` or `apply`. */
  async reconcile(key: string, ctx: ReconcileContext): Promise<ReconcileResult> {
    /** When this reconcile started (ms): its writes' attempts start after it. */
    const startedMs = this.#now();
    const cached = this.#deps.appServices.get(key);
    const as = cached && this.#written.newest(key, cached);
    if (!as) {
      const uid = this.#cleanupOwed.get(key);
      this.#cleanupOwed.delete(key);
      if (uid) await this.#sweep(key, uid, ctx, startedMs);
      this.#pdbResync.delete(key);
      this.#appliedPdb.delete(key);
      this.#written.forget(key);
      this.#podWrites.forget(key);
      this.#seenCauses.delete(key);
      this.#heldStep.delete(key);
      this.#rejected.forget(key);
      this.#replacements.forget(key);
      return Reconcile.done;
    }
    if (as.metadata.deletionTimestamp) {
      this.#podWrites.forget(key);
      this.#rejected.forget(key);
      this.#replacements.forget(key);
      this.#seenCauses.delete(key);
    } else if (this.#deps.terminating?.has(as.metadata.namespace!, as.metadata.uid)) {
      // Its namespace is being deleted: nothing can be created; its own deletion will follow.
      ctx.logger.debug("Namespace is being deleted; creating nothing");
      return Reconcile.done;
    }
    this.#cleanupOwed.set(key, as.metadata.uid!);
    const t = this.#act.turn(key, as, ctx, startedMs);
    return await finalizer(as, {
      client: this.#deps.client,
      resource: APPSERVICES,
      name: FINALIZER,
      fieldManager: FIELD_MANAGER,
      signal: ctx.signal,
      onAdded: (before, after) => {
        this.#written.note(key, before, after);
        this.#act.knowLive(t, after);
        ctx.logger.debug("Added finalizer");
      },
    }, (event) => {
      if (event.type === "cleanup") return this.#cleanup(t);
      t.as = event.obj;
      return this.#apply(t);
    });
  }

  /**
   * Writes `next` as the status of `as` when it differs from the stored one: at once when its
   * state changed, else (only counters and messages) not before {@link statusWriteAtMs}
   * (docs/scenarios.md S24); a step of a healthy rollout ({@link isRolloutStep}) not before
   * `ROLLOUT_STEP_HOLD_MS` (status.ts) after it was first computed, or after the first reconcile
   * that saw every Pod bound (`podsUnbound`, {@link awaitsScheduler}: the hold starts again at each
   * reconcile that sees a Pod waiting for kube-scheduler, and at the first one after; at most
   * `ROLLOUT_STEP_MAX_HOLD_MS` in all), so a Pod that becomes Ready soon after its binding costs
   * one write. Returns when a write held back is due (ms), if one was.
   */
  async #writeStatus(
    key: string,
    as: AppService,
    next: AppServiceStatusT,
    signal: AbortSignal,
    podsUnbound = false,
  ): Promise<number | undefined> {
    if (!statusChanged(as.status, next)) {
      this.#heldStep.delete(key);
      return undefined;
    }
    const nowMs = this.#now();
    let at = statusWriteAtMs(as.status, next, nowMs);
    if (isRolloutStep(next)) {
      // One write on the way to Ready: the next step is expected soon (docs/design/status.md).
      const { held, dueMs } = holdRolloutStep(this.#heldStep.get(key), podsUnbound, nowMs);
      this.#heldStep.set(key, held);
      at = Math.max(at, dueMs);
    } else {
      this.#heldStep.delete(key);
    }
    if (at > nowMs) return at;
    const status = { ...next, lastReconciliation: new Date(nowMs).toISOString() };
    // The resourceVersion `next` was computed from is a precondition (409 when outdated).
    const metadata = { resourceVersion: as.metadata.resourceVersion };
    // Only the answer's metadata is read: the stored object is `as` with this patch applied.
    const got = await this.#deps.client.patch(
      APPSERVICES,
      as.metadata.name!,
      { metadata, status },
      {
        namespace: as.metadata.namespace,
        subresource: "status",
        type: "merge",
        fieldManager: FIELD_MANAGER,
        signal,
        response: "metadata",
      },
    );
    this.#heldStep.delete(key);
    if (got?.metadata?.resourceVersion) {
      this.#written.note(key, as, statusWritten(as, status, got.metadata));
    }
    return undefined;
  }

  /**
   * The dependents of an AppService that went without its cleanup (docs/design/finalizer.md,
   * "Gone without the cleanup"): deleted now rather than left to the garbage collector. It
   * happens when a delete races the finalizer being added — kube-apiserver can delete an object
   * whose finalizer a concurrent update just added (kubernetes/kubernetes#77988), which the
   * finalizer admission policy closes by adding it at create — or when the finalizer is removed
   * by hand. Only objects controlled by `uid` are deleted (a new AppService of the same name owns
   * its own); a failure is logged and left to the garbage collector, which removes them by their
   * ownerReference anyway.
   */
  async #sweep(key: string, uid: string, ctx: ReconcileContext, startedMs: number): Promise<void> {
    const gone = {
      apiVersion: APPSERVICES.apiVersion,
      kind: APPSERVICES.kind,
      metadata: { ...splitKey(key), uid },
    } as AppService;
    const t = this.#act.turn(key, gone, ctx, startedMs);
    const pdb = this.#ownedPdb(key, uid);
    try {
      const left = await cleanupOwned(this.#act, t, pdb);
      // Logged even when nothing was left (the garbage collector may have been first).
      ctx.logger.warn(
        "AppService gone without its cleanup (a delete raced the finalizer, or it was removed " +
          "by hand); deleted what it owned",
        { pods: left.pods.length, service: left.service, failures: left.failures },
      );
    } catch (err) {
      rethrowIfAbortive(err);
      ctx.logger.warn(
        "AppService gone without its cleanup; its dependents are left to the " +
          "garbage collector",
        { error: errorText(err) },
      );
    }
  }

  /**
   * The PodDisruptionBudget controlled by the AppService of uid `uid`: the cached one, else the
   * one this reconciler applied and the cache does not show yet.
   */
  #ownedPdb(key: string, uid: string): PodDisruptionBudget | undefined {
    const cached = this.#deps.pdbs?.byIndex(CONTROLLER_UID_INDEX, uid)[0];
    const a = this.#appliedPdb.get(key);
    const usable = a !== undefined && isControlledBy(a.pdb, uid) &&
      this.#now() - a.atMs < APPLIED_PDB_TRUST_MS;
    if (cached || !usable) this.#appliedPdb.delete(key);
    return cached ?? (usable ? a.pdb : undefined);
  }

  /**
   * Asks the disruption controller to compute the AppService's PodDisruptionBudget again when it
   * failed to ({@link syncFailure}): a merge patch of {@link RESYNC_ANNOTATION}, first
   * {@link FIRST_RESYNC_DELAY_MS} after the failure was seen, then with doubling delays while it
   * keeps failing (docs/api.md, "When the disruption controller cannot compute the budget").
   * Returns when to look again (ms), Infinity when the budget is computed.
   */
  async #resyncPdb(t: Turn): Promise<number> {
    const { key, as, ctx } = t;
    const pdb = this.#ownedPdb(key, as.metadata.uid!);
    const why = pdb && !pdb.metadata?.deletionTimestamp ? syncFailure(pdb) : undefined;
    if (!pdb || !why) {
      this.#pdbResync.delete(key);
      return Infinity;
    }
    const nowMs = this.#now();
    const s = this.#pdbResync.get(key);
    if (!s) {
      const atMs = nowMs + resyncDelayMs(0);
      this.#pdbResync.set(key, { n: 0, atMs });
      return atMs;
    }
    if (nowMs < s.atMs) return s.atMs;
    s.n++;
    s.atMs = nowMs + resyncDelayMs(s.n);
    try {
      await this.#deps.client.patch(
        PODDISRUPTIONBUDGETS,
        pdb.metadata!.name!,
        { metadata: { annotations: { [RESYNC_ANNOTATION]: new Date(nowMs).toISOString() } } },
        {
          namespace: as.metadata.namespace,
          type: "merge",
          fieldManager: FIELD_MANAGER,
          signal: ctx.signal,
          response: "none",
        },
      );
      ctx.logger.info(
        "PodDisruptionBudget not computed by the disruption controller; asked it again",
        { message: why, attempt: s.n, nextInMs: s.atMs - nowMs },
      );
    } catch (err) {
      rethrowIfAbortive(err);
      ctx.logger.warn("PodDisruptionBudget resync not written", { error: errorText(err) });
    }
    return s.atMs;
  }

  /** The cleanup of a deleted AppService (finalizer.ts `cleanup`): `done` when all is gone. */
  async #cleanup(t: Turn): Promise<ReconcileResult> {
    const { as, ctx: { signal, logger } } = t;
    // `kubectl delete --cascade=orphan`: the garbage collector keeps the dependents; so do we.
    if (as.metadata.finalizers?.includes("orphan")) {
      logger.info("Deleted with propagationPolicy Orphan; leaving Pods and Service in place");
      this.#cleanupOwed.delete(t.key);
      return Reconcile.done;
    }
    const pdb = this.#ownedPdb(t.key, as.metadata.uid!);
    const left = await cleanupOwned(this.#act, t, pdb);
    if (left.failures.length === 0 && left.pods.length === 0 && !left.service) {
      logger.info("Cleanup complete; removing the finalizer");
      this.#cleanupOwed.delete(t.key);
      return Reconcile.done;
    }
    const { status, message } = cleanupStatus(
      as,
      left.pods,
      left.service,
      left.failures,
      this.#now(),
    );
    try {
      await this.#writeStatus(t.key, as, status, signal);
    } catch (err) {
      rethrowIfAbortive(err);
      // A 409: computed from an older version; not written, retried below like the rest.
      if (!isNotFound(err) && !isConflict(err)) {
        logger.warn("Status write failed", { error: errorText(err) });
      }
    }
    if (left.failures.length > 0) {
      this.#deps.events.record(as, {
        type: "Warning",
        reason: "CleanupFailed",
        action: "Delete",
        note: message,
      });
      throw new ReportedError(message);
    }
    // The Pod watch reconciles again as each one goes; the backoff only covers a missed event
    // (growing from 5 ms, so Pods held by their own finalizers cause no request loop).
    return Reconcile.backoff();
  }

  /** The plan of a living AppService, after adopting orphans and putting lost labels back. */
  async #plan(
    t: Turn,
  ): Promise<
    { p: ReconcilePlan; owned: Pod[]; failedPods: FailedPod[]; podWritesExpireAtMs?: number }
  > {
    const { key, as, ctx } = t;
    const deps = this.#deps;
    const cachedOwned = deps.pods.byIndex(CONTROLLER_UID_INDEX, as.metadata.uid!);
    // Ownership first (client-go ControllerRefManager): orphans of this name with this
    // operator's labels (left by --cascade=orphan) are adopted; lost labels are put back.
    const orphans = adoptablePods(as, deps.pods.byIndex(ORPHAN_INDEX, key));
    if (orphans.length > 0 && await this.#act.canAdopt(t)) {
      cachedOwned.push(...await this.#act.adoptPods(t, orphans));
    }
    // With its own creates and deletes the cache does not show yet (docs/scenarios.md S5).
    const known = this.#podWrites.view(key, as.metadata.uid!, cachedOwned, this.#now());
    const owned = known.pods;
    const generation = as.metadata.generation ?? 0;
    // A spec change that finds fewer Pods than status last counted: some may be out of the
    // cache's sight (managed-by removed while nobody watched; a scale-down would never see them).
    // Read once through the API; found ones get their labels back below and count in the plan.
    if (
      generation !== as.status?.observedGeneration &&
      (as.status?.replicas ?? 0) > owned.length
    ) {
      const seen = new Set(owned.map((p) => p.metadata?.uid));
      for (const pod of await outOfSightPods(this.#act, t)) {
        if (seen.has(pod.metadata?.uid) || pod.metadata?.deletionTimestamp) continue;
        ctx.logger.info("Found an owned Pod without the operator's labels", {
          pod: pod.metadata?.name,
        });
        owned.push(pod);
      }
    }
    for (const pod of podsToRelabel(as, owned)) await this.#act.restoreLabels(t, pod);
    /** Failed Pods of the current spec: replaced when due (replacements.ts), reported meanwhile. */
    const failureOf = new Map<Pod, PodFailure>();
    const p = plan({
      appService: as,
      pods: owned,
      service: deps.services.byIndex(CONTROLLER_UID_INDEX, as.metadata.uid!)[0],
      pdb: this.#ownedPdb(key, as.metadata.uid!),
      pdbs: deps.pdbs !== undefined,
      nowMs: this.#now(),
      failureDue: (pod, slot) => {
        const hash = pod.metadata?.annotations?.[SPEC_HASH_ANNOTATION] ?? "";
        const f = this.#replacements.failed(key, slot, pod.metadata?.uid ?? "", hash);
        failureOf.set(pod, f);
        return f.dueMs;
      },
      preferSlots: this.#replacements.slots(key),
      createHeld: this.#rejected.held(key, generation, "pod-create"),
      serviceHeld: this.#rejected.held(key, generation, "service"),
      pdbHeld: this.#rejected.held(key, generation, "pdb"),
    });
    const failedPods = [...p.rollout.failedDue, ...p.rollout.held].map((h) => ({
      pod: h.pod,
      failure: failureOf.get(h.pod)!,
    }));
    return { p, owned, failedPods, podWritesExpireAtMs: known.expiresAtMs };
  }

  /** Plan → act → status for a living AppService that carries the finalizer. */
  async #apply(t: Turn): Promise<ReconcileResult> {
    const { key, as, ctx } = t;
    const { p, owned, failedPods, podWritesExpireAtMs } = await this.#plan(t);

    // Act: creates first (surge), then deletes, the Service, the PodDisruptionBudget.
    const made = await this.#act.createPods(t, p);
    if (!made) return Reconcile.done; // the namespace is being deleted (docs/scenarios.md S21)
    const deleted = await this.#act.deletePods(t, p, owned, made);
    if (deleted === "gone" || deleted === "closed") return Reconcile.done;
    if (deleted === "stale") return Reconcile.backoff();
    await serviceStep(this.#act, t, p.service);
    const appliedPdb = await pdbStep(this.#act, t, p.pdb);
    if (appliedPdb) this.#appliedPdb.set(key, { pdb: appliedPdb, atMs: this.#now() });
    const resyncAtMs = await this.#resyncPdb(t);

    // Status, once, from the view before this round's writes (their watch events follow).
    const nowMs = this.#now();
    const report = reconcileStatus({
      as,
      owned,
      plan: p.rollout,
      params: p.params,
      hash: p.hash,
      failures: t.failures,
      failedPods,
      nowMs,
    });
    const stuck = newCauses(
      report.ofSlots,
      this.#seenCauses.get(key),
      as.status?.podStatuses,
      nowMs,
    );
    let statusOutdated = false;
    /** When a status change held back (only counters and messages changed) is due (ms). */
    let statusDueAtMs: number | undefined;
    try {
      // Pods created by this round are not in `owned` yet, and are not bound.
      const unbound = made.created > 0 || awaitsScheduler(owned);
      statusDueAtMs = await this.#writeStatus(key, as, report.status, ctx.signal, unbound);
    } catch (err) {
      if (isNotFound(err)) return Reconcile.done;
      if (!isConflict(err)) throw err;
      // Computed from an older resourceVersion (409): not written; the newer one's watch event is
      // on its way and the key is requeued. The failures of this round are still reported.
      statusOutdated = true;
      ctx.logger.debug("Status not written: the AppService changed meanwhile; requeued", {
        resourceVersion: as.metadata.resourceVersion,
      });
    }
    if (!statusOutdated) {
      this.#seenCauses.set(key, stuck.signatures);
      this.#recordProgress(t, p, report.progressing, stuck.occurrences);
    }
    for (const f of t.failures) {
      if (f.held) continue; // reported when it was refused
      this.#deps.events.record(as, {
        type: "Warning",
        reason: f.reason,
        action: "Reconcile",
        note: f.message,
      });
    }

    // What next.
    const next = nextStep({
      failures: t.failures,
      rejectedDelayMs: t.failures.length > 0 ? this.#rejected.nextDelayMs(key) : undefined,
      wakeAtMs: Math.min(report.wakeAtMs, resyncAtMs, podWritesExpireAtMs ?? Infinity),
      statusDueAtMs,
      statusOutdated,
      nowMs: this.#now(),
    });
    if ("fail" in next) throw new ReportedError(next.fail, { cause: outageCause(t.failures) });
    if (next.slowRetry && next.result.kind === "after") {
      ctx.logger.info("A write was refused; retrying slowly", {
        reasons: [...new Set(t.failures.map((f) => f.reason))].join(","),
        retryInMs: next.result.ms,
      });
    }
    return next.result;
  }

  /**
   * The Events of a written status: the progress deadline passed (once, when the condition turns
   * to it), and each stuck Pod's new cause (docs/scenarios.md S18).
   */
  #recordProgress(
    t: Turn,
    p: ReconcilePlan,
    progressing: ConditionInput,
    occurrences: { pod: Pod; cause: PodCause }[],
  ): void {
    const { as, ctx } = t;
    const events = this.#deps.events;
    const wasExceeded = as.status?.conditions?.some((x) =>
      x.type === "Progressing" && x.reason === REASON_PROGRESS_DEADLINE_EXCEEDED
    );
    if (progressing.reason === REASON_PROGRESS_DEADLINE_EXCEEDED && !wasExceeded) {
      ctx.logger.warn("The rollout made no progress within its deadline", {
        specHash: p.hash,
        progressDeadlineSeconds: p.params.progressDeadlineSeconds,
      });
      events.record(as, {
        type: "Warning",
        reason: REASON_PROGRESS_DEADLINE_EXCEEDED,
        action: "Rollout",
        note: progressing.message,
      });
    }
    for (const { pod, cause } of occurrences) {
      events.record(as, {
        type: "Warning",
        reason: conditionReason(cause.reason),
        action: STUCK_POD_ACTION,
        note: `${pod.metadata?.name}: ${cause.message || cause.reason}`,
        related: { apiVersion: "v1", kind: "Pod", metadata: pod.metadata },
      });
    }
  }
}
