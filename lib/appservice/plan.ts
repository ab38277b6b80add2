/**
 * The plan of one reconcile of a living AppService: a pure function from the AppService, its
 * cached Pods, Service and PodDisruptionBudget, the refused writes still held back and the time,
 * to the actions that make the cluster match the spec (act.ts performs them; reconcile.ts runs
 * plan → act → status, docs/design/reconciler.md).
 *
 * What is decided here:
 * - **Pods** (rollout.ts `planRollout`, the rollout rule): the slots to create a Pod of the
 *   current spec in and the Pods to delete with why, within `replicas + maxSurge` Pods and
 *   `replicas - maxUnavailable` available (docs/design/rollouts.md). No creates while a refused
 *   create waits for its slow retry (rejections.ts).
 * - **Ownership**: orphans of this AppService's name that may be adopted, owned Pods whose labels
 *   must be put back.
 * - **Service** (service.ts): find it (not cached: it may exist, made by someone else), converge
 *   it, delete it (no ports declared), or nothing; held back while a refused write waits.
 * - **PodDisruptionBudget** (disruption.ts): apply, delete or nothing.
 * - **What next** ({@link nextStep}): the requeue decision from the failures, the times the
 *   reconcile wants to run again and the status write's outcome.
 *
 * @module
 */
import type { Pod, Service } from "kubernetes-types/core/v1.d.ts";
import type { PodDisruptionBudget } from "kubernetes-types/policy/v1.d.ts";
import { Reconcile, type ReconcileResult } from "../runtime/controller.ts";
import { claim } from "../runtime/ownership.ts";
import { desiredPdb, pdbMatches } from "./disruption.ts";
import { hasSelectorLabels, ownerRef, podOrdinal, SPEC_HASH_ANNOTATION, specHash } from "./pods.ts";
import type { Failure } from "./report.ts";
import type { Refusal } from "./rejections.ts";
import {
  type FailureDue,
  type PlannedDelete,
  planRollout,
  type RolloutParams,
  rolloutParams,
  type RolloutPlan,
} from "./rollout.ts";
import type { AppService } from "./schema.ts";
import { desiredService, serviceMatches, servicePatch } from "./service.ts";

/** Condition reason of a Pod create (or its dry run) the apiserver refused. */
export const REASON_POD_CREATE_REJECTED = "PodCreateRejected";
/** Condition reason of a Service write the apiserver refused. */
export const REASON_SERVICE_REJECTED = "ServiceRejected";
/** Condition reason of a PodDisruptionBudget write the apiserver refused. */
export const REASON_PDB_REJECTED = "PodDisruptionBudgetRejected";

/** What the plan does with the Service. */
export type ServiceStep =
  /** No Service wanted and none to delete. */
  | { readonly kind: "none" }
  /** Wanted, cached and as it should be. */
  | { readonly kind: "current" }
  /** A write of it is held back by an earlier refusal (rejections.ts). */
  | { readonly kind: "held"; readonly refusal: Refusal }
  /** Wanted, not in the cache: read it from the API, then {@link serviceWrite}. */
  | { readonly kind: "find"; readonly want: Service }
  /** Wanted, cached and different: merge-patch it ({@link serviceWrite}). */
  | { readonly kind: "converge"; readonly live: Service; readonly want: Service }
  /** Not wanted (no ports): delete the cached one. */
  | { readonly kind: "delete"; readonly live: Service };

/** What the plan does with the PodDisruptionBudget. */
export type PdbStep =
  | { readonly kind: "none" }
  /** A write of it is held back by an earlier refusal (rejections.ts). */
  | { readonly kind: "held"; readonly refusal: Refusal }
  /**
   * Server-side apply `want`; `live` is the cached one, if any. Without one, the name is read
   * from the API first: someone else's budget of that name is never taken over.
   */
  | {
    readonly kind: "apply";
    readonly want: PodDisruptionBudget;
    readonly live?: PodDisruptionBudget;
  }
  /** Delete the cached one (no longer wanted). */
  | { readonly kind: "delete"; readonly live: PodDisruptionBudget };

/** What {@link plan} reads. */
export interface PlanInput {
  /** The AppService (living, with the finalizer). */
  appService: AppService;
  /**
   * Its owned Pods as cached (orphans just adopted included), with the reconciler's own Pod writes
   * the cache does not show yet (written.ts `OwnPodWrites`).
   */
  pods: Pod[];
  /** Its owned Service as cached, if any. */
  service?: Service;
  /**
   * Its owned PodDisruptionBudget as cached, if any; `undefined` with `pdbs` false: none is kept
   * (the reconciler has no cache of them).
   */
  pdb?: PodDisruptionBudget;
  /** Whether PodDisruptionBudgets are kept at all. */
  pdbs: boolean;
  /** Now (ms). */
  nowMs: number;
  /** When a failed Pod of the current spec may be replaced (replacements.ts). */
  failureDue: FailureDue;
  /** Slots whose Pod failed recently, filled first (replacements.ts). */
  preferSlots?: ReadonlySet<number>;
  /** Refused Pod create held back until its retry (rejections.ts), if any. */
  createHeld?: Refusal;
  /** Refused Service write held back until its retry, if any. */
  serviceHeld?: Refusal;
  /** Refused PodDisruptionBudget write held back until its retry, if any. */
  pdbHeld?: Refusal;
}

/** The actions of one reconcile (see the module doc). */
export interface ReconcilePlan {
  /** Rollout parameters resolved from the spec. */
  params: RolloutParams;
  /** Current spec hash. */
  hash: string;
  /** The rollout plan (counts, creates, deletes, held failed Pods). */
  rollout: RolloutPlan;
  /** Slots to create a Pod in now: the rollout's creates, none while a refused create is held. */
  create: number[];
  /** The refusal of Pod creates held back, if any (reported while the rollout would create). */
  createHeld?: Refusal;
  /** What to do with the Service. */
  service: ServiceStep;
  /** What to do with the PodDisruptionBudget. */
  pdb: PdbStep;
}

/** Orphan Pods (from the cache's orphan index) that `as` may adopt: those of its slot names. */
export function adoptablePods(as: AppService, orphans: Pod[]): Pod[] {
  return claim(as, orphans, (p) => podOrdinal(as, p) !== undefined).adopt;
}

/** Owned Pods, not being deleted, that lost a label of ours (still seen through another one). */
export function podsToRelabel(as: AppService, owned: Pod[]): Pod[] {
  return owned.filter((p) => !p.metadata?.deletionTimestamp && !hasSelectorLabels(as, p));
}

/** The Service step (see {@link ServiceStep}). */
function serviceStep(as: AppService, live: Service | undefined, held?: Refusal): ServiceStep {
  const want = desiredService(as);
  if (want) {
    if (held) return { kind: "held", refusal: held };
    if (!live) return { kind: "find", want };
    return serviceMatches(live, want) ? { kind: "current" } : { kind: "converge", live, want };
  }
  if (live && !live.metadata?.deletionTimestamp) return { kind: "delete", live };
  return { kind: "none" };
}

/** The PodDisruptionBudget step (see {@link PdbStep}). */
function pdbStep(as: AppService, params: RolloutParams, i: PlanInput): PdbStep {
  if (!i.pdbs) return { kind: "none" };
  const want = desiredPdb(as, params);
  const live = i.pdb;
  if (want && (!live || !pdbMatches(live, want))) {
    return i.pdbHeld ? { kind: "held", refusal: i.pdbHeld } : { kind: "apply", want, live };
  }
  if (!want && live && !live.metadata?.deletionTimestamp) return { kind: "delete", live };
  return { kind: "none" };
}

/** Plans one reconcile of a living AppService (see the module doc). Pure. */
export function plan(i: PlanInput): ReconcilePlan {
  const as = i.appService;
  const params = rolloutParams(as.spec);
  const hash = specHash(as);
  const rollout = planRollout(
    params,
    hash,
    as.metadata.name!,
    i.pods,
    as.spec.restartPolicy ?? "Always",
    i.nowMs,
    i.failureDue,
    i.preferSlots,
  );
  return {
    params,
    hash,
    rollout,
    create: i.createHeld ? [] : rollout.create,
    createHeld: i.createHeld,
    service: serviceStep(as, i.service, i.serviceHeld),
    pdb: pdbStep(as, params, i),
  };
}

/**
 * Whether the current Pod template is known to be admitted: a create of it went through in this
 * reconcile, or a Pod of it exists (not being deleted). Otherwise a dry run has to show it before
 * an available Pod goes within the availability budget.
 */
export function templateProven(created: number, owned: Pod[], hash: string): boolean {
  return created > 0 ||
    owned.some((p) =>
      !p.metadata?.deletionTimestamp && p.metadata?.annotations?.[SPEC_HASH_ANNOTATION] === hash
    );
}

/**
 * The deletes of `planned` that a plan of the live Pods (a consistent read) agrees with: every
 * delete outside the availability budget, and those within it that `livePlan` plans too (by uid).
 * A cache that shows more Pods available than the apiserver must not spend the budget twice.
 */
export function agreedDeletes(
  planned: PlannedDelete[],
  livePlan: Pick<RolloutPlan, "delete">,
): { keep: PlannedDelete[]; dropped: PlannedDelete[] } {
  const agreed = new Set(
    livePlan.delete.filter((d) => d.withinBudget).map((d) => d.pod.metadata?.uid),
  );
  const dropped = planned.filter((d) => d.withinBudget && !agreed.has(d.pod.metadata?.uid));
  return { keep: planned.filter((d) => !dropped.includes(d)), dropped };
}

/**
 * The Service write after it was found (or not) through the API: `apply` (server-side apply of
 * `want`: none exists), `merge` (a merge patch converging ports, selector and type; with `adopt`,
 * the controller ownerReference added to the others' under a uid precondition) or `none`.
 */
export function serviceWrite(
  as: AppService,
  live: Service | undefined,
  want: Service,
  adopt: boolean,
): { kind: "apply"; body: Service } | { kind: "merge"; body: Record<string, unknown> } | {
  kind: "none";
} {
  if (!live) return { kind: "apply", body: want };
  if (!adopt && serviceMatches(live, want)) return { kind: "none" };
  const patch = servicePatch(live, want);
  if (adopt) {
    // The controller reference added to others' (the list is replaced: uid precondition).
    const refs = (live.metadata?.ownerReferences ?? []).filter((r) => !r.controller);
    patch.metadata = {
      ...(patch.metadata as Record<string, unknown>),
      uid: live.metadata?.uid,
      ownerReferences: [...refs, ownerRef(as)],
    };
  }
  return { kind: "merge", body: patch };
}

/** What {@link nextStep} decides from. */
export interface NextInput {
  /** Failures of this reconcile. */
  failures: Failure[];
  /** Delay until the first held-back refused write is due (ms), if any is held. */
  rejectedDelayMs?: number;
  /** When the reconcile wants to run again by itself (ms, report.ts), or Infinity. */
  wakeAtMs: number;
  /** When a held-back status write is due (ms), if one is. */
  statusDueAtMs?: number;
  /** The status write was refused with 409 (computed from an older version). */
  statusOutdated: boolean;
  /** Now (ms). */
  nowMs: number;
}

/**
 * The requeue decision at the end of a reconcile, pure:
 * - failures that are all refused writes (rejections.ts): `after` the first one's retry, or the
 *   earlier wake time; never the error backoff;
 * - any other failure: `{fail}` with the message to throw (already reported in status and Events;
 *   the controller's error backoff applies);
 * - a status write refused as outdated: `backoff` (the newer version's watch event is coming);
 * - else `after` the wake time or a held-back status write, if any; else `done`.
 */
export function nextStep(
  i: NextInput,
): { result: ReconcileResult; slowRetry?: boolean } | { fail: string } {
  const wake = Math.min(i.wakeAtMs, i.statusDueAtMs ?? Infinity);
  if (i.failures.length > 0) {
    // Only refused writes: come back when the first one is due (or at once on a spec change,
    // through the watch), not through the error backoff.
    const due = i.rejectedDelayMs === undefined ? undefined : Math.min(
      i.rejectedDelayMs,
      Number.isFinite(wake) ? Math.max(1, wake - i.nowMs) : Infinity,
    );
    if (i.failures.every((f) => f.rejected) && due !== undefined) {
      return { result: Reconcile.after(due), slowRetry: true };
    }
    return { fail: i.failures.map((f) => f.message).join("; ") };
  }
  if (i.statusOutdated) return { result: Reconcile.backoff() };
  // A failed Pod held back by its replacement delay, a Pod being deleted that becomes stuck
  // terminating, or a status change held back: come back then (no watch event will say so).
  if (Number.isFinite(wake)) return { result: Reconcile.after(Math.max(1, wake - i.nowMs)) };
  return { result: Reconcile.done };
}
