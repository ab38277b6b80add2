/**
 * AppService status: computed from the owned Pods, compared with what is stored, and written
 * through the status subresource only when its content changed (S9: an AppService at rest causes
 * no writes; `lastReconciliation` changes only together with a real change, and a status write
 * does not change `metadata.generation`, so it never triggers a reconcile of its own).
 *
 * Conditions follow meta/v1 Condition (Kubernetes API conventions): `Ready`, `Progressing`,
 * `Degraded`, each with reason, message and observedGeneration; `lastTransitionTime` moves only
 * when `status` flips.
 *
 * @module
 */
import type { Pod } from "kubernetes-types/core/v1.d.ts";
import { isPodReady, restartCount, stableJson } from "./pods.ts";
import type { AppServiceStatusT, ConditionT, PodStatusEntryT } from "./schema.ts";

/** A condition before times are filled in. */
export type ConditionInput = Omit<ConditionT, "lastTransitionTime" | "observedGeneration">;

/**
 * Merges new conditions into old ones: keeps `lastTransitionTime` where `status` did not change,
 * stamps `nowIso` where it did, sets `observedGeneration` on all.
 */
export function mergeConditions(
  old: ConditionT[] | undefined,
  next: ConditionInput[],
  generation: number,
  nowIso: string,
): ConditionT[] {
  return next.map((c) => {
    const prev = old?.find((o) => o.type === c.type);
    return {
      ...c,
      lastTransitionTime: prev && prev.status === c.status ? prev.lastTransitionTime : nowIso,
      observedGeneration: generation,
    };
  });
}

/** Per-Pod status entries, sorted by name. */
export function podStatuses(pods: Pod[]): PodStatusEntryT[] {
  return pods
    .map((p) => {
      const e: PodStatusEntryT = {
        name: p.metadata?.name ?? "",
        phase: p.metadata?.deletionTimestamp ? "Terminating" : p.status?.phase ?? "Pending",
        ready: isPodReady(p),
        restartCount: restartCount(p),
      };
      if (p.status?.podIP) e.podIP = p.status.podIP;
      return e;
    })
    .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

/** Whether two statuses differ in anything but `lastReconciliation`. */
export function statusChanged(
  old: AppServiceStatusT | undefined,
  next: AppServiceStatusT,
): boolean {
  const strip = (s: AppServiceStatusT | undefined) => {
    if (!s) return "";
    const { lastReconciliation: _l, ...rest } = s;
    return stableJson(rest);
  };
  return strip(old) !== strip(next);
}
