/**
 * The rollout planner: a pure function from an AppService's rollout parameters and its cached Pods
 * to what one reconcile does to them — the slots to create a Pod of the current spec in, the Pods
 * to delete and why — plus the counts that status reports. No I/O; reconcile.ts performs the plan.
 *
 * Rules (Deployment's RollingUpdate, apps/v1, with the same parameter names and defaults that
 * never lower capacity):
 * - **Slots.** Pods are named `<name>-<slot>` with `slot` in `[0, replicas + maxSurge)`. Any spec
 *   may occupy any free slot, so two generations live side by side, and the name space itself
 *   bounds the Pods: a reconcile on a stale cache can only be refused with AlreadyExists, never
 *   add a Pod beyond `replicas + maxSurge` (a terminating Pod keeps its name, so it counts too).
 * - **Surge first.** A Pod of the current spec is created while fewer than `replicas` exist and a
 *   slot is free (lowest slot first, a deterministic choice that a stale cache repeats).
 * - **Availability kept.** A Pod is available when its Ready condition is True (so readiness gates
 *   count), it is not terminating, and it has been Ready for `minReadySeconds`. An outdated Pod
 *   that is Ready goes only while more than `replicas - maxUnavailable` Pods of any spec are
 *   available; an outdated Pod that is not Ready serves nothing and goes at once (so reverting a
 *   spec to the one the serving Pods run rolls back at once).
 * - **Scale down.** Pods in slots past the range, and Pods of the current spec beyond `replicas`
 *   (not Ready first, then the highest slot), go at once.
 * - **Failed Pods** (phase Failed, or Succeeded under `restartPolicy: Always`) are deleted when
 *   their replacement delay is due (replacements.ts); until then they keep their slot, and while
 *   one is being deleted no replacement is made elsewhere: it is made in the same slot once free
 *   (the delay is counted per slot).
 *
 * @module
 */
import type { Pod } from "kubernetes-types/core/v1.d.ts";
import { isPodReady, podOrdinal, SPEC_HASH_ANNOTATION } from "./pods.ts";
import type { AppServiceSpecT } from "./schema.ts";

/** Default `strategy.rollingUpdate.maxSurge`: Deployment's default, 25% of replicas rounded up. */
export const DEFAULT_MAX_SURGE = "25%";
/** Default `strategy.rollingUpdate.maxUnavailable`: 0, so a rollout never lowers capacity. */
export const DEFAULT_MAX_UNAVAILABLE = 0;
/** Default `progressDeadlineSeconds` (Deployment's default, seconds). */
export const DEFAULT_PROGRESS_DEADLINE_SECONDS = 600;

/** The rollout parameters of one AppService, resolved to Pod counts. */
export interface RolloutParams {
  /** Desired Pods (`spec.replicas`). */
  replicas: number;
  /** Pods allowed above `replicas` during a rollout (resolved `maxSurge`, rounded up). */
  maxSurge: number;
  /** Pods allowed below `replicas` available during a rollout (resolved, rounded down). */
  maxUnavailable: number;
  /** Seconds a Pod must have been Ready to count as available (`spec.minReadySeconds`). */
  minReadySeconds: number;
  /** Seconds without progress before `ProgressDeadlineExceeded` (`spec.progressDeadlineSeconds`). */
  progressDeadlineSeconds: number;
}

/**
 * An int-or-percent (`3`, `"25%"`) of `total`, rounded up or down (apimachinery
 * `intstr.GetScaledValueFromIntOrPercent`). Anything unparsable counts as 0 (the CRD refuses it).
 */
export function scaledValue(
  v: number | string | undefined,
  total: number,
  roundUp: boolean,
): number {
  if (v === undefined) return 0;
  if (typeof v === "number") return Math.max(0, Math.trunc(v));
  const m = /^([0-9]+)%$/.exec(v);
  if (!m) return 0;
  const x = (Number(m[1]) * total) / 100;
  return roundUp ? Math.ceil(x) : Math.floor(x);
}

/**
 * Resolves the spec's rollout fields with their defaults. As Deployment's `ResolveFenceposts`:
 * surge rounds up, unavailable rounds down, and when both come to 0 (e.g. `maxSurge: 0` with a
 * percentage of unavailable that rounds down to 0) one Pod may be unavailable, or no rollout could
 * ever start. `maxUnavailable` is capped at `replicas`.
 */
export function rolloutParams(spec: AppServiceSpecT): RolloutParams {
  const replicas = spec.replicas ?? 1;
  const ru = spec.strategy?.rollingUpdate;
  const maxSurge = scaledValue(ru?.maxSurge ?? DEFAULT_MAX_SURGE, replicas, true);
  let maxUnavailable = scaledValue(ru?.maxUnavailable ?? DEFAULT_MAX_UNAVAILABLE, replicas, false);
  if (maxSurge === 0 && maxUnavailable === 0) maxUnavailable = 1;
  return {
    replicas,
    maxSurge,
    maxUnavailable: Math.min(maxUnavailable, replicas),
    minReadySeconds: spec.minReadySeconds ?? 0,
    progressDeadlineSeconds: spec.progressDeadlineSeconds ?? DEFAULT_PROGRESS_DEADLINE_SECONDS,
  };
}

/** Number of Pod names (`<name>-0` ... `<name>-<slots-1>`) an AppService may use. */
export function slotCount(p: RolloutParams): number {
  return p.replicas + p.maxSurge;
}

/**
 * When a Pod became Ready (ms, its Ready condition's lastTransitionTime), or undefined when it is
 * not Ready. A Ready condition without a time counts as Ready since forever.
 */
export function readySinceMs(pod: Pod): number | undefined {
  if (!isPodReady(pod)) return undefined;
  const c = pod.status?.conditions?.find((x) => x.type === "Ready");
  const t = c?.lastTransitionTime ? Date.parse(c.lastTransitionTime) : NaN;
  return Number.isFinite(t) ? t : -Infinity;
}

/**
 * Whether a Pod is available at `nowMs`: Ready, not terminating, Ready for `minReadySeconds`
 * (Deployment's `IsPodAvailable`).
 */
export function isPodAvailable(pod: Pod, minReadySeconds: number, nowMs: number): boolean {
  if (pod.metadata?.deletionTimestamp) return false;
  const since = readySinceMs(pod);
  return since !== undefined && since + minReadySeconds * 1000 <= nowMs;
}

/** Why the plan deletes a Pod. */
export type DeleteReason =
  /** In a slot past the range, or beyond `replicas` at the current spec. */
  | "ScaledDown"
  /** Made from another spec (outdated). */
  | "SpecChanged"
  /** Ended (phase Failed) and due for replacement. */
  | "PodFailed"
  /** Exited 0 under `restartPolicy: Always` and due for replacement. */
  | "PodExited";

/** A Pod the plan deletes. */
export interface PlannedDelete {
  /** The Pod as cached (its uid is the delete's precondition). */
  pod: Pod;
  /** Why. */
  why: DeleteReason;
  /**
   * An available Pod of another spec that goes because enough others are available (the
   * maxUnavailable budget): it must not go unless the current spec's Pods can be created at all.
   */
  withinBudget: boolean;
}

/** A failed Pod kept in its slot, and when it may be replaced. */
export interface HeldFailure {
  /** The Pod. */
  pod: Pod;
  /** Its slot. */
  slot: number;
  /** When it may be deleted and replaced (ms). */
  dueMs: number;
}

/** Counts of one plan, before it is performed (the cache's view). */
export interface RolloutCounts {
  /** Pods that exist, terminating ones included (what the slots bound). */
  total: number;
  /** Pods being deleted. */
  terminating: number;
  /** Pods of the current spec, not terminating (failed ones included). */
  updated: number;
  /** Pods of the current spec that are available. */
  updatedAvailable: number;
  /** Pods of another spec, not terminating. */
  outdated: number;
  /** Ready Pods of any spec, not terminating. */
  ready: number;
  /** Available Pods of any spec. */
  available: number;
}

/** What one reconcile does to the Pods of an AppService. */
export interface RolloutPlan {
  /** Slots to create a Pod of the current spec in, lowest first. */
  create: number[];
  /** Pods to delete, in order. */
  delete: PlannedDelete[];
  /** Failed Pods whose replacement delay has not passed (they keep their slot meanwhile). */
  held: HeldFailure[];
  /** Failed Pods due now (also in `delete`). */
  failedDue: HeldFailure[];
  /** Counts before the plan is performed. */
  counts: RolloutCounts;
  /** When a Ready Pod becomes available by `minReadySeconds` (ms), or Infinity: wake then. */
  nextAvailableAtMs: number;
}

/** What the planner needs to know of a failed Pod: when it may be replaced (ms). */
export type FailureDue = (pod: Pod, slot: number) => number;

/** Whether a Pod has ended and must be replaced (not under restartPolicy OnFailure/Never if 0). */
export function isPodEnded(pod: Pod, restartPolicy: string): boolean {
  const phase = pod.status?.phase;
  return phase === "Failed" || (phase === "Succeeded" && restartPolicy === "Always");
}

/**
 * Plans one reconcile (see the module doc).
 * @param p the resolved parameters
 * @param hash the current spec hash (pods.ts `specHash`)
 * @param name the AppService's name (Pod names are `<name>-<slot>`)
 * @param pods the owned Pods as cached (a Pod this replica deleted and the cache still shows as
 *   alive should be passed with a deletionTimestamp: see reconcile.ts)
 * @param restartPolicy the spec's restartPolicy
 * @param nowMs now
 * @param failureDue when a failed Pod may be replaced (replacements.ts)
 * @param preferSlots slots to create in first: those whose Pod failed recently (replacements.ts),
 *   so a crash loop's back-off, counted per slot, is not reset by a move to another slot
 */
export function planRollout(
  p: RolloutParams,
  hash: string,
  name: string,
  pods: Pod[],
  restartPolicy: string,
  nowMs: number,
  failureDue: FailureDue,
  preferSlots: ReadonlySet<number> = new Set(),
): RolloutPlan {
  const slots = slotCount(p);
  const occupied = new Set<number>();
  const del: PlannedDelete[] = [];
  const held: HeldFailure[] = [];
  const failedDue: HeldFailure[] = [];
  const current: { pod: Pod; slot: number }[] = [];
  const outdated: { pod: Pod; slot: number }[] = [];
  let terminating = 0;
  let nextAvailableAtMs = Infinity;
  const ownerName = { metadata: { name } };
  const isCurrent = (pod: Pod) => pod.metadata?.annotations?.[SPEC_HASH_ANNOTATION] === hash;

  /** Ended Pods of the current spec being deleted: their replacement waits for their slot. */
  let replacing = 0;
  for (const pod of pods) {
    const slot = podOrdinal(ownerName, pod);
    if (slot !== undefined) occupied.add(slot);
    if (pod.metadata?.deletionTimestamp) {
      terminating++;
      if (slot !== undefined && slot < slots && isCurrent(pod) && isPodEnded(pod, restartPolicy)) {
        replacing++;
      }
      continue;
    }
    if (slot === undefined || slot >= slots) {
      del.push({ pod, why: "ScaledDown", withinBudget: false });
      continue;
    }
    if (isPodEnded(pod, restartPolicy)) {
      const why = pod.status?.phase === "Failed" ? "PodFailed" : "PodExited";
      if (!isCurrent(pod)) {
        del.push({ pod, why, withinBudget: false }); // an old spec's: no reason to wait
        continue;
      }
      const dueMs = failureDue(pod, slot);
      if (dueMs <= nowMs) {
        del.push({ pod, why, withinBudget: false });
        failedDue.push({ pod, slot, dueMs });
        replacing++; // deleted now; replaced in its slot once gone
      } else {
        held.push({ pod, slot, dueMs });
      }
      current.push({ pod, slot }); // keeps its place among the current spec's Pods until gone
      continue;
    }
    const since = readySinceMs(pod);
    if (since !== undefined && since + p.minReadySeconds * 1000 > nowMs) {
      nextAvailableAtMs = Math.min(nextAvailableAtMs, since + p.minReadySeconds * 1000);
    }
    (isCurrent(pod) ? current : outdated).push({ pod, slot });
  }

  const avail = (pod: Pod) => isPodAvailable(pod, p.minReadySeconds, nowMs);
  const ended = (pod: Pod) => isPodEnded(pod, restartPolicy);
  const counts: RolloutCounts = {
    total: pods.length,
    terminating,
    updated: current.length,
    updatedAvailable: current.filter((x) => avail(x.pod)).length,
    outdated: outdated.length,
    ready: [...current, ...outdated].filter((x) => !ended(x.pod) && isPodReady(x.pod)).length,
    available: [...current, ...outdated].filter((x) => avail(x.pod)).length,
  };

  // Scale down at the current spec: not Ready (failed ones first), then the highest slot.
  const going = new Set(del.map((d) => d.pod));
  const rank = (x: { pod: Pod; slot: number }) =>
    (ended(x.pod) ? 0 : isPodReady(x.pod) ? 2 : 1) * 1000 - x.slot;
  const keep = [...current].filter((x) => !going.has(x.pod)).sort((a, b) => rank(b) - rank(a));
  for (const x of keep.slice(p.replicas)) {
    del.push({ pod: x.pod, why: "ScaledDown", withinBudget: false });
    going.add(x.pod);
  }
  const currentKept = Math.min(keep.length + replacing, p.replicas);

  // Outdated Pods: not Ready ones at once; Ready ones within the availability budget, those not
  // yet available first (they do not lower it), then the highest slot.
  let budget = counts.available - [...going].filter(avail).length -
    (p.replicas - p.maxUnavailable);
  const byCost = [...outdated].sort((a, b) =>
    (avail(a.pod) ? 1 : 0) - (avail(b.pod) ? 1 : 0) || b.slot - a.slot
  );
  for (const x of byCost) {
    if (!avail(x.pod)) {
      del.push({ pod: x.pod, why: "SpecChanged", withinBudget: false });
    } else if (budget > 0) {
      del.push({ pod: x.pod, why: "SpecChanged", withinBudget: true });
      budget--;
    }
  }

  // Creates: up to `replicas` of the current spec, in free slots, within the slots (every Pod
  // that exists holds its name until it is gone, so the total never passes the slot count).
  // A slot with a failure record first: the replacement of a Pod that failed goes back into its
  // slot, where replacements.ts counts its failures in a row.
  const create: number[] = [];
  let want = p.replicas - currentKept;
  const order = [...preferSlots].filter((s) => s < slots).sort((a, b) => a - b);
  for (let s = 0; s < slots; s++) if (!preferSlots.has(s)) order.push(s);
  for (const s of order) {
    if (want === 0) break;
    if (occupied.has(s)) continue;
    create.push(s);
    want--;
  }
  return { create, delete: del, held, failedDue, counts, nextAvailableAtMs };
}

/** The status counts {@link madeProgress} compares (AppService status fields). */
export interface ProgressCounts {
  /** Pods that exist and are not terminating. */
  replicas?: number;
  /** Of those, Pods of the current spec. */
  updatedReplicas?: number;
  /** Ready Pods of any spec. */
  readyReplicas?: number;
  /** Available Pods of any spec. */
  availableReplicas?: number;
}

/**
 * Whether a rollout made progress between two observations (Deployment's `DeploymentProgressing`):
 * more Pods at the current spec, more Ready or available, or fewer of other specs. No `before`
 * (nothing observed yet) counts as progress.
 */
export function madeProgress(before: ProgressCounts | undefined, after: ProgressCounts): boolean {
  if (!before) return true;
  const n = (x: number | undefined) => x ?? 0;
  const oldBefore = n(before.replicas) - n(before.updatedReplicas);
  const oldAfter = n(after.replicas) - n(after.updatedReplicas);
  return n(after.updatedReplicas) > n(before.updatedReplicas) ||
    n(after.readyReplicas) > n(before.readyReplicas) ||
    n(after.availableReplicas) > n(before.availableReplicas) ||
    oldAfter < oldBefore;
}
