/**
 * The PodDisruptionBudget of an AppService (policy/v1): voluntary disruptions — `kubectl drain`,
 * a cluster autoscaler removing a Node, anything that goes through the Eviction API — take at most
 * `maxUnavailable` of its Pods at a time. Named like the AppService, selecting its Pods, owned by
 * it (controller ownerReference), written with server-side apply (field manager
 * `appservice-operator`, force: the AppService is its only source of truth).
 *
 * When there is one (`spec.podDisruptionBudget`):
 * - `enabled: false`: none (an existing one is deleted).
 * - `maxUnavailable` set (a number or a percentage, 0 allowed): that budget, for any `replicas`.
 *   0 means a drain never lowers the number of available Pods: it waits until someone moves them
 *   (what users ask for when every Pod must serve; the drain does not finish by itself).
 * - otherwise, with `replicas >= 2`: the rollout's `maxUnavailable`, but at least 1, so a drain
 *   always finishes and never takes the last Pods; with one replica none (a budget of 0 would
 *   block every drain, one of 1 protects nothing).
 *
 * @module
 */
import type { PodDisruptionBudget } from "kubernetes-types/policy/v1.d.ts";
import { isControlledBy } from "../runtime/ownership.ts";
import { ownedLabels, ownerRef, selectorLabels, stableJson } from "./pods.ts";
import type { RolloutParams } from "./rollout.ts";
import type { AppService } from "./schema.ts";

/** The PodDisruptionBudget `as` wants, or undefined when it wants none (see the module doc). */
export function desiredPdb(as: AppService, params: RolloutParams): PodDisruptionBudget | undefined {
  const o = as.spec.podDisruptionBudget;
  if (o?.enabled === false) return undefined;
  if (o?.maxUnavailable === undefined && params.replicas < 2) return undefined;
  const maxUnavailable = o?.maxUnavailable ?? Math.max(1, params.maxUnavailable);
  return {
    apiVersion: "policy/v1",
    kind: "PodDisruptionBudget",
    metadata: {
      name: as.metadata.name,
      namespace: as.metadata.namespace,
      labels: ownedLabels(as),
      ownerReferences: [ownerRef(as)],
    },
    spec: {
      maxUnavailable,
      selector: { matchLabels: selectorLabels(as) },
      // Pods that are not Ready may be evicted whatever the budget (they serve nothing), so a
      // crash-looping Pod never blocks a drain (policy/v1, Kubernetes 1.31+ GA).
      unhealthyPodEvictionPolicy: "AlwaysAllow",
    },
  };
}

/** Whether the live budget already has what `want` sets (budget, selector, policy, owner). */
export function pdbMatches(live: PodDisruptionBudget, want: PodDisruptionBudget): boolean {
  const l = live.spec ?? {};
  const w = want.spec!;
  return String(l.maxUnavailable) === String(w.maxUnavailable) && l.minAvailable === undefined &&
    stableJson(l.selector?.matchLabels ?? {}) === stableJson(w.selector?.matchLabels ?? {}) &&
    l.unhealthyPodEvictionPolicy === w.unhealthyPodEvictionPolicy &&
    isControlledBy(live, want.metadata?.ownerReferences?.[0].uid);
}

/**
 * Annotation the operator sets (to the time, RFC 3339) on a PodDisruptionBudget the disruption
 * controller failed to compute, so that it computes it again: the controller queues a budget on
 * any change of it, but not again after a failed sync while nothing changes.
 */
export const RESYNC_ANNOTATION = "apps.our-org.com/disruption-resync";

/** Delay before the first resync of a failed budget (ms): let the controller's discovery catch up. */
export const FIRST_RESYNC_DELAY_MS = 5_000;

/** Longest delay between two resyncs of a budget that keeps failing (ms). */
export const MAX_RESYNC_DELAY_MS = 300_000;

/**
 * The message of a PodDisruptionBudget the disruption controller failed to compute (condition
 * `DisruptionAllowed` False with reason `SyncFailed`, policy/v1; its `disruptionsAllowed` is then
 * 0 and every eviction is refused), or undefined. A common cause: the budget was created right
 * after the AppService CRD, and kube-controller-manager's discovery did not know the kind yet
 * (`no matches for kind "AppService"`, Event `CalculateExpectedPodCountFailed`).
 */
export function syncFailure(pdb: PodDisruptionBudget): string | undefined {
  const c = pdb.status?.conditions?.find((x) => x.type === "DisruptionAllowed");
  return c?.status === "False" && c.reason === "SyncFailed"
    ? (c.message || "SyncFailed")
    : undefined;
}

/**
 * Delay after resync number `n` (0 = before the first) of a budget that keeps failing (ms):
 * {@link FIRST_RESYNC_DELAY_MS} doubled each time, at most {@link MAX_RESYNC_DELAY_MS}.
 */
export function resyncDelayMs(n: number): number {
  return Math.min(FIRST_RESYNC_DELAY_MS * 2 ** n, MAX_RESYNC_DELAY_MS);
}
