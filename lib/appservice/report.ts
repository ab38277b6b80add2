/**
 * The status of one reconcile, computed once from the cache's view before the reconcile's writes
 * (their watch events follow): counts (rollout.ts), conditions (status.ts) and the time the
 * reconcile wants to run again by itself. Pure: no I/O, the time is a parameter. reconcile.ts
 * writes the result (bounded by status.ts `statusWriteAtMs`); docs/design/reconciler.md shows
 * where this sits in plan → act → status.
 *
 * @module
 */
import type { Pod } from "kubernetes-types/core/v1.d.ts";
import { isUnreachable } from "../kube/errors.ts";
import { isPodReady, podOrdinal, selectorLabels, specHash } from "./pods.ts";
import type { PodFailure } from "./replacements.ts";
import {
  planRollout,
  type RolloutCounts,
  type RolloutParams,
  rolloutParams,
  type RolloutPlan,
  slotCount,
} from "./rollout.ts";
import type { AppService, AppServiceStatusT } from "./schema.ts";
import {
  type ConditionInput,
  mergeConditions,
  podCause,
  podStatuses,
  progressingCondition,
  readyCondition,
  REASON_PROGRESS_DEADLINE_EXCEEDED,
  rolloutProgress,
  stuckDegradedCondition,
  stuckPods,
  stuckTerminating,
  TERMINATING_STUCK_AFTER_MS,
} from "./status.ts";

/** One failure of a reconcile, for the Degraded condition and Warning Events. */
export interface Failure {
  /** Condition and Event reason, e.g. `FailedCreatePod`. */
  reason: string;
  /** What failed, with the apiserver's answer. */
  message: string;
  /** A refused write, retried slowly: the reconcile requeues itself instead of failing. */
  rejected?: boolean;
  /** Already reported by an earlier reconcile (a write held back): no new Event. */
  held?: boolean;
  /**
   * The error the write failed with, if any: how the reconcile's error is told apart as part of
   * an apiserver outage once it is reported, which may be after the path came back
   * ({@link outageCause}).
   */
  cause?: unknown;
}

/**
 * The cause to give the error of a reconcile that failed with `failures`: the first one's cause
 * when every failure that is reported now failed because the apiserver could not be reached
 * (`isUnreachable`), else undefined. The controller logs such an error as part of the outage (one
 * line per outage, docs/design/transport.md), also when the reconcile ends after the path came
 * back, e.g. a Pod create failed in the outage and the status write that followed went through.
 * One failure of another kind makes it an error of its own, logged as such.
 */
export function outageCause(failures: readonly Failure[]): unknown {
  const now = failures.filter((f) => !f.held);
  return now.length > 0 && now.every((f) => isUnreachable(f.cause)) ? now[0].cause : undefined;
}

/** A failed Pod of the current spec, with its replacement record (replacements.ts). */
export interface FailedPod {
  /** The Pod as cached. */
  pod: Pod;
  /** Its failures in a row and when it is replaced. */
  failure: PodFailure;
}

/**
 * How a failed Pod is reported in `Degraded`: its name, cause (reason and exit code) and when it
 * is replaced, e.g. `web-0 (Error: container app terminated with exit code 1; failure 3 in a
 * row, next in 20 s)`. The text depends only on the failure as first seen, so a held reconcile
 * writes no status.
 */
export function failedPodText(f: FailedPod): string {
  const cause = podCause(f.pod);
  const why = cause ? `${cause.reason}${cause.message ? `: ${cause.message}` : ""}` : "failed";
  const when = f.failure.delayMs === 0
    ? "replaced at once"
    : `failure ${f.failure.failures} in a row, next in ${Math.round(f.failure.delayMs / 1000)} s`;
  return `${f.pod.metadata?.name} (${why}; ${when})`;
}

/**
 * The status of `as` with these Pods at `nowMs`, its conditions as stored (the caller merges new
 * ones). Counts as rollout.ts makes them (`counts`, or counted here): Ready and available Pods of
 * any spec (during a rollout the old ones serve too, as `kubectl get pods` shows them); `ready`
 * needs every desired Pod available at the current spec and none of another spec left (kstatus
 * "Current").
 */
function countedStatus(
  as: AppService,
  pods: Pod[],
  nowMs: number,
  counts?: RolloutCounts,
): AppServiceStatusT {
  const params = rolloutParams(as.spec);
  const replicas = params.replicas;
  const c = counts ??
    planRollout(params, specHash(as), as.metadata.name!, pods, "Always", nowMs, () => Infinity)
      .counts;
  return {
    ready: c.outdated === 0 && c.updated === replicas && c.updatedAvailable === replicas,
    replicas: c.total - c.terminating,
    selector: Object.entries(selectorLabels(as)).map(([k, v]) => `${k}=${v}`).join(","),
    readyReplicas: c.ready,
    updatedReplicas: c.updated,
    availableReplicas: c.available,
    replicasSummary: `${c.ready}/${replicas}`,
    observedGeneration: as.metadata.generation ?? 0,
    conditions: as.status?.conditions,
    podStatuses: podStatuses(pods, nowMs),
  };
}

/** `status` with `conditions` merged into the stored ones (status.ts `mergeConditions`). */
function withConditions(
  as: AppService,
  status: AppServiceStatusT,
  conditions: ConditionInput[],
  nowMs: number,
): AppServiceStatusT {
  const generation = as.metadata.generation ?? 0;
  const nowIso = new Date(nowMs).toISOString();
  return {
    ...status,
    conditions: mergeConditions(as.status?.conditions, conditions, generation, nowIso),
  };
}

/** What {@link reconcileStatus} needs: the reconcile's view and outcome. */
export interface StatusInput {
  /** The AppService as the reconcile saw it. */
  as: AppService;
  /**
   * Its owned Pods as cached (terminating ones included), with the reconciler's own Pod writes the
   * cache does not show yet (written.ts `OwnPodWrites`).
   */
  owned: Pod[];
  /** The rollout plan made from them. */
  plan: RolloutPlan;
  /** Its rollout parameters. */
  params: RolloutParams;
  /** The current spec hash. */
  hash: string;
  /** Failures of this reconcile's writes (first one names `Degraded`). */
  failures: Failure[];
  /** Failed Pods of the current spec, due or held. */
  failedPods: FailedPod[];
  /** Now (ms). */
  nowMs: number;
}

/** The status of one reconcile, and when the reconcile wants to run again by itself. */
export interface StatusReport {
  /** The status to write (without `lastReconciliation`). */
  status: AppServiceStatusT;
  /** The owned Pods of the slots, being deleted or not (whose stuck causes are Events). */
  ofSlots: Pod[];
  /** The Progressing condition in it (for the deadline Event). */
  progressing: ConditionInput;
  /**
   * When this reconcile wants to run again by itself (ms), or Infinity: a held failed Pod due, a
   * Pod being deleted that becomes stuck terminating, a Pod becoming available by
   * `minReadySeconds`, the progress deadline.
   */
  wakeAtMs: number;
}

/**
 * The Degraded condition: the first failure of this reconcile's writes, else failed Pods, else
 * Pods stuck terminating, else Pods that will not become Ready by themselves, else AsExpected.
 */
function degradedCondition(
  failures: Failure[],
  failedPods: FailedPod[],
  owned: Pod[],
  counted: Pod[],
  nowMs: number,
): ConditionInput {
  if (failures.length > 0) {
    return {
      type: "Degraded",
      status: "True",
      reason: failures[0].reason,
      message: failures.map((f) => f.message).join("; "),
    };
  }
  if (failedPods.length > 0) {
    return {
      type: "Degraded",
      status: "True",
      reason: "PodFailed",
      message: `Pod(s) failed: ${failedPods.map(failedPodText).join("; ")}`,
    };
  }
  /** Pods being deleted past their grace period and still there (status.ts), named. */
  const stuckGoing = owned.flatMap((p) => {
    const cause = stuckTerminating(p, nowMs);
    return cause ? [{ pod: p, message: cause.message }] : [];
  });
  if (stuckGoing.length > 0) {
    // Its replacement serves from a free slot; the Pod holds its own slot until it goes.
    return {
      type: "Degraded",
      status: "True",
      reason: "PodStuckTerminating",
      message: `Pod(s) stuck terminating, each holding its slot: ${
        stuckGoing.map((x) => `${x.pod.metadata?.name} (${x.message})`).join("; ")
      }`,
    };
  }
  return stuckDegradedCondition(counted, nowMs) ??
    { type: "Degraded", status: "False", reason: "AsExpected", message: "no failures" };
}

/**
 * The status of a reconcile of a living AppService (see the module doc): counts and conditions
 * Ready, Available, Progressing and Degraded, computed once.
 */
export function reconcileStatus(i: StatusInput): StatusReport {
  const { as, owned, plan, params, hash, nowMs } = i;
  const c = plan.counts;
  const replicas = params.replicas;
  const slots = slotCount(params);
  const restartPolicy = as.spec.restartPolicy ?? "Always";
  const st = countedStatus(as, owned, nowMs, c);
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
  const minAvailable = replicas - params.maxUnavailable;
  const progress = rolloutProgress(as, st, params, nowMs);
  // Pods of the slots, not being deleted, that will not become Ready by themselves
  // (docs/scenarios.md S24).
  const stuckNow = stuckPods(counted, nowMs).filter((s) => s.cause.reason !== "Completed");
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
      message: `${c.available}/${replicas} Pods available (at least ${minAvailable} needed)`,
    },
    progressing,
    degradedCondition(i.failures, i.failedPods, owned, counted, nowMs),
  ];
  const status = withConditions(as, st, conditions, nowMs);
  /** When a Pod being deleted counts as stuck terminating (ms), if one may yet (status.ts). */
  const stuckTerminatingAtMs = Math.min(
    ...owned.filter((p) => p.metadata?.deletionTimestamp).map((p) =>
      Date.parse(p.metadata!.deletionTimestamp!) + TERMINATING_STUCK_AFTER_MS
    ).filter((t) => t > nowMs),
  );
  const wakeAtMs = Math.min(
    Math.min(...plan.held.map((h) => h.dueMs)),
    stuckTerminatingAtMs,
    plan.nextAvailableAtMs,
    progressing.reason === REASON_PROGRESS_DEADLINE_EXCEEDED || progressing.status === "False"
      ? Infinity
      : progress.deadlineAtMs,
  );
  return { status, ofSlots, progressing, wakeAtMs };
}

/**
 * The status of an AppService whose cleanup is not complete: Pods (and the Service) still there,
 * or a delete that failed. Ready and Progressing `Terminating`; Degraded `CleanupFailed` when a
 * delete failed. `message` is also the Warning Event's note.
 * @param pods its owned Pods as listed from the API
 * @param service whether its Service is still there
 * @param failures the deletes that failed, as texts
 */
export function cleanupStatus(
  as: AppService,
  pods: Pod[],
  service: boolean,
  failures: string[],
  nowMs: number,
): { status: AppServiceStatusT; message: string } {
  // Pods held past their grace period are named with what holds them (status.ts).
  const held = pods.flatMap((p) => {
    const c = stuckTerminating(p, nowMs);
    return c ? [`${p.metadata?.name}: ${c.message}`] : [];
  });
  const message = failures.length > 0
    ? `cleanup failed: ${failures.join("; ")}`
    : `waiting for ${pods.length} Pod(s)${service ? " and the Service" : ""} to be deleted${
      held.length > 0 ? ` (stuck: ${held.join("; ")})` : ""
    }`;
  const conditions: ConditionInput[] = [
    { type: "Ready", status: "False", reason: "Terminating", message },
    { type: "Progressing", status: "True", reason: "Terminating", message },
    failures.length > 0
      ? { type: "Degraded", status: "True", reason: "CleanupFailed", message }
      : { type: "Degraded", status: "False", reason: "AsExpected", message: "no failures" },
  ];
  return { status: withConditions(as, countedStatus(as, pods, nowMs), conditions, nowMs), message };
}
