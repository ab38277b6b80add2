/**
 * Status conditions (`metav1.Condition`, the `status.conditions` list of the Kubernetes API
 * conventions): set one with the transition-time rule, find, remove and test one — the helpers
 * of apimachinery's `k8s.io/apimachinery/pkg/api/meta` (`SetStatusCondition`,
 * `FindStatusCondition`, `RemoveStatusCondition`, `IsStatusConditionTrue` / `False` /
 * `PresentAndEqual`).
 *
 * Rules ({@link setStatusCondition}), as apimachinery's:
 * - At most one condition per `type`; a new type is appended, so the order is that of first set.
 * - `lastTransitionTime` moves only when `status` changes (to the one given with the new condition,
 *   else now); a condition set for the first time gets the one given, else now. A change of
 *   `reason`, `message` or `observedGeneration` alone keeps it.
 * - The result says whether anything changed: a caller writes status only then.
 *
 * Times are RFC 3339 strings in UTC at second precision (`2026-01-02T03:04:05Z`), as `metav1.Time`
 * is serialized. The list is changed in place, but the conditions in it are replaced, never
 * modified: copying the array (`[...cached]`) is enough to leave an informer's cached object as
 * it was.
 *
 * @module
 */
import type { Condition } from "kubernetes-types/meta/v1.d.ts";

export type { Condition };

/** The `status` values of a condition (Kubernetes API conventions). */
export type ConditionStatus = "True" | "False" | "Unknown";

/**
 * A condition to set: `type`, `status` and `reason` are required; `message` defaults to "";
 * `lastTransitionTime`, when given, is used where the rule moves it (see {@link
 * setStatusCondition}); `observedGeneration` is the `metadata.generation` the condition was
 * computed from (absent counts as 0, as the Go zero value does).
 */
export interface ConditionInput {
  /** CamelCase type, e.g. `Ready`, or `example.com/CamelCase`. */
  type: string;
  /** `True`, `False` or `Unknown`. */
  status: ConditionStatus;
  /** CamelCase machine-readable reason of the last transition; must not be empty for the API. */
  reason: string;
  /** Human-readable detail; default "". */
  message?: string;
  /** The `metadata.generation` this condition is based on. */
  observedGeneration?: number;
  /** RFC 3339 time of the transition; default now (only used where the rule moves it). */
  lastTransitionTime?: string;
}

/** Now as `metav1.Time` serializes it: RFC 3339, UTC, whole seconds. */
export function conditionTimeNow(nowMs: number = Date.now()): string {
  return new Date(nowMs).toISOString().replace(/\.\d+Z$/, "Z");
}

/**
 * Sets `newCondition` in `conditions` (apimachinery `meta.SetStatusCondition`; rules in the module
 * doc): appends it when its type is new, else replaces the element of that type with one whose
 * `status`, `reason`, `message` and `observedGeneration` are the new ones and whose
 * `lastTransitionTime` moved only if `status` changed.
 * @param conditions the list, changed in place (elements are replaced, not modified)
 * @param newCondition the condition to set (see {@link ConditionInput})
 * @param nowIso the time stamped where the rule moves `lastTransitionTime` and `newCondition`
 *   gives none; default {@link conditionTimeNow}
 * @returns whether `conditions` changed (false: nothing to write)
 */
export function setStatusCondition(
  conditions: Condition[],
  newCondition: ConditionInput,
  nowIso?: string,
): boolean {
  const stamp = () => newCondition.lastTransitionTime || nowIso || conditionTimeNow();
  const i = conditions.findIndex((c) => c.type === newCondition.type);
  if (i < 0) {
    const added: Condition = {
      type: newCondition.type,
      status: newCondition.status,
      reason: newCondition.reason,
      message: newCondition.message ?? "",
      lastTransitionTime: stamp(),
    };
    if (newCondition.observedGeneration !== undefined) {
      added.observedGeneration = newCondition.observedGeneration;
    }
    conditions.push(added);
    return true;
  }
  const old = conditions[i];
  const next: Condition = { ...old };
  let changed = false;
  if (old.status !== newCondition.status) {
    next.status = newCondition.status;
    next.lastTransitionTime = stamp();
    changed = true;
  }
  if (old.reason !== newCondition.reason) {
    next.reason = newCondition.reason;
    changed = true;
  }
  const message = newCondition.message ?? "";
  if ((old.message ?? "") !== message) {
    next.message = message;
    changed = true;
  }
  if ((old.observedGeneration ?? 0) !== (newCondition.observedGeneration ?? 0)) {
    if (newCondition.observedGeneration === undefined) delete next.observedGeneration;
    else next.observedGeneration = newCondition.observedGeneration;
    changed = true;
  }
  if (changed) conditions[i] = next;
  return changed;
}

/**
 * The condition of `type` in `conditions`, or undefined (apimachinery
 * `meta.FindStatusCondition`). `conditions` may be undefined (a status not written yet).
 */
export function findStatusCondition(
  conditions: readonly Condition[] | undefined,
  type: string,
): Condition | undefined {
  return conditions?.find((c) => c.type === type);
}

/**
 * Removes the condition of `type` from `conditions` in place (apimachinery
 * `meta.RemoveStatusCondition`).
 * @returns whether one was removed (false: nothing to write)
 */
export function removeStatusCondition(conditions: Condition[], type: string): boolean {
  const i = conditions.findIndex((c) => c.type === type);
  if (i < 0) return false;
  conditions.splice(i, 1);
  return true;
}

/**
 * Whether `conditions` holds a condition of `type` whose `status` is `status` (apimachinery
 * `meta.IsStatusConditionPresentAndEqual`); false when there is none.
 */
export function isStatusConditionPresentAndEqual(
  conditions: readonly Condition[] | undefined,
  type: string,
  status: ConditionStatus,
): boolean {
  return findStatusCondition(conditions, type)?.status === status;
}

/**
 * Whether the condition of `type` is present with status `True` (apimachinery
 * `meta.IsStatusConditionTrue`). Absent or `Unknown`: false.
 */
export function isStatusConditionTrue(
  conditions: readonly Condition[] | undefined,
  type: string,
): boolean {
  return isStatusConditionPresentAndEqual(conditions, type, "True");
}

/**
 * Whether the condition of `type` is present with status `False` (apimachinery
 * `meta.IsStatusConditionFalse`). Absent or `Unknown`: false — so `!isStatusConditionTrue` and
 * `isStatusConditionFalse` differ exactly where the condition is absent or `Unknown`.
 */
export function isStatusConditionFalse(
  conditions: readonly Condition[] | undefined,
  type: string,
): boolean {
  return isStatusConditionPresentAndEqual(conditions, type, "False");
}
