/**
 * AppService status: computed from the owned Pods, compared with what is stored, and written
 * through the status subresource only when its content changed (docs/scenarios.md S9: an
 * AppService at rest causes
 * no writes; `lastReconciliation` changes only together with a real change, and a status write
 * does not change `metadata.generation`, so it never triggers a reconcile of its own).
 *
 * Conditions follow meta/v1 Condition (Kubernetes API conventions): `Ready`, `Progressing`,
 * `Degraded`, each with reason, message and observedGeneration; `lastTransitionTime` moves only
 * when `status` flips.
 *
 * Why a Pod is stuck (docs/scenarios.md S18): each `podStatuses` entry carries its containers'
 * state as core/v1
 * ContainerStatus reports it (waiting reason and message, terminated reason and exit code, the last
 * termination, restart count), and, while the Pod cannot become Ready, the cause ({@link
 * podCause}):
 * the Pod's own reason (e.g. Evicted), the scheduler's (PodScheduled=False, e.g. Unschedulable), or
 * a container's waiting or terminated reason from the kubelet (ImagePullBackOff, ErrImagePull,
 * InvalidImageName, CreateContainerConfigError, CrashLoopBackOff, OOMKilled, Error, ...). The Ready
 * condition names the first stuck Pod by ordinal and counts the others ({@link readyCondition}).
 *
 * @module
 */
import type { ContainerState, ContainerStatus, Pod } from "kubernetes-types/core/v1.d.ts";
import { isPodReady, jsonEqual, restartCount } from "./pods.ts";
import {
  madeProgress,
  type ProgressCounts,
  type RolloutCounts,
  type RolloutParams,
  type RolloutPlan,
} from "./rollout.ts";
import type {
  AppService,
  AppServiceStatusT,
  ConditionT,
  ContainerStateEntryT,
  ContainerStatusEntryT,
  PodStatusEntryT,
} from "./schema.ts";

/** Longest message kept from the kubelet or the scheduler per Pod or container (characters). */
export const POD_MESSAGE_MAX = 512;

/**
 * Waiting reasons of a container that is still starting normally (kubelet
 * `ContainerCreating`, `PodInitializing`): not a reason the Pod is stuck.
 */
export const STARTING_REASONS: ReadonlySet<string> = new Set([
  "ContainerCreating",
  "PodInitializing",
]);

/**
 * How long past its `deletionTimestamp` (the end of its grace period) a Pod may still exist before
 * it counts as stuck terminating (ms): the kubelet removes a Pod within seconds of the grace
 * period's end, so one still there half a minute later is held (a finalizer, an unreachable Node).
 */
export const TERMINATING_STUCK_AFTER_MS = 30_000;

/**
 * Why a Pod being deleted is still there, once it is {@link TERMINATING_STUCK_AFTER_MS} past its
 * grace period (undefined before, or when it is not being deleted). The text depends only on the
 * Pod, so it causes one status write, not one per reconcile.
 */
export function stuckTerminating(pod: Pod, nowMs: number): PodCause | undefined {
  const at = pod.metadata?.deletionTimestamp;
  if (!at || nowMs < Date.parse(at) + TERMINATING_STUCK_AFTER_MS) return undefined;
  const finalizers = pod.metadata?.finalizers ?? [];
  const held = finalizers.length > 0
    ? `held by finalizer(s) ${finalizers.join(", ")}`
    : pod.spec?.nodeName
    ? `its Node ${pod.spec.nodeName} has not confirmed the deletion (unreachable?)`
    : "not removed";
  return {
    reason: "PodStuckTerminating",
    message: `being deleted since ${at} (end of its grace period): ${held}`,
    stuck: true,
  };
}

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

/** Cuts `text` to `max` characters (with an ellipsis), so a status stays small. */
export function clip(text: string, max = POD_MESSAGE_MAX): string {
  return text.length <= max ? text : `${text.slice(0, max - 1)}…`;
}

/** A container state for status: reasons, messages (cut) and exit codes; no timestamps but startedAt. */
function stateEntry(st: ContainerState | undefined): ContainerStateEntryT | undefined {
  if (!st) return undefined;
  if (st.waiting) {
    const w: NonNullable<ContainerStateEntryT["waiting"]> = {};
    if (st.waiting.reason) w.reason = st.waiting.reason;
    if (st.waiting.message) w.message = clip(st.waiting.message);
    return { waiting: w };
  }
  if (st.terminated) {
    const t: NonNullable<ContainerStateEntryT["terminated"]> = {
      exitCode: st.terminated.exitCode ?? 0,
    };
    if (st.terminated.reason) t.reason = st.terminated.reason;
    if (st.terminated.signal) t.signal = st.terminated.signal;
    if (st.terminated.message) t.message = clip(st.terminated.message);
    return { terminated: t };
  }
  if (st.running) {
    return { running: st.running.startedAt ? { startedAt: st.running.startedAt } : {} };
  }
  return undefined;
}

/** Each container's state, as core/v1 ContainerStatus reports it (init containers first). */
export function containerEntries(pod: Pod): ContainerStatusEntryT[] {
  const all: ContainerStatus[] = [
    ...(pod.status?.initContainerStatuses ?? []),
    ...(pod.status?.containerStatuses ?? []),
  ];
  return all.map((c) => {
    const e: ContainerStatusEntryT = {
      name: c.name,
      ready: c.ready ?? false,
      restartCount: c.restartCount ?? 0,
    };
    const state = stateEntry(c.state);
    if (state) e.state = state;
    const last = stateEntry(c.lastState);
    if (last?.terminated) e.lastState = last;
    return e;
  });
}

/** Why a Pod is not Ready. */
export interface PodCause {
  /** The kubelet's, scheduler's or Pod's reason, e.g. `ImagePullBackOff`, `Unschedulable`. */
  reason: string;
  /** Their message (cut to {@link POD_MESSAGE_MAX}), with the exit code where one applies. */
  message: string;
  /**
   * True when the Pod is stuck (it will not become Ready by itself soon); false while it is still
   * starting normally (no status yet, ContainerCreating, a readiness check not yet passed).
   */
  stuck: boolean;
}

/** "exit code 137" or "exit code 137 (signal 9)" of a terminated state. */
function exitText(t: NonNullable<ContainerState["terminated"]>): string {
  return `exit code ${t.exitCode ?? 0}${t.signal ? ` (signal ${t.signal})` : ""}`;
}

/**
 * Why `pod` is not Ready, or undefined when it is Ready or being deleted (with `nowMs`, a Pod being
 * deleted past its grace period is {@link stuckTerminating}). In order: the Pod's own
 * `status.reason` (Evicted, OutOfcpu, NodeAffinity, ...); phase Succeeded (`Completed`: the app
 * exited 0, and under restartPolicy OnFailure or Never the kubelet will not start it again);
 * PodScheduled=False (the scheduler's
 * reason, e.g. Unschedulable with "0/4 nodes are available: 4 Insufficient cpu"); the first
 * container (init containers first) waiting for any reason but {@link STARTING_REASONS} (with the
 * last termination, as CrashLoopBackOff has one); the first container terminated with a non-zero
 * exit code or a reason other than Completed (OOMKilled, Error, ContainerCannotRun, ...); phase
 * Failed with none of these (`PodFailed`). Otherwise the Pod is still starting (stuck false).
 */
export function podCause(pod: Pod, nowMs?: number): PodCause | undefined {
  if (pod.metadata?.deletionTimestamp) {
    return nowMs === undefined ? undefined : stuckTerminating(pod, nowMs);
  }
  if (isPodReady(pod)) return undefined;
  const st = pod.status ?? {};
  if (st.reason) return { reason: st.reason, message: clip(st.message ?? ""), stuck: true };
  if (st.phase === "Succeeded") {
    const policy = pod.spec?.restartPolicy ?? "Always";
    return {
      reason: "Completed",
      message: policy === "Always"
        ? "every container exited with exit code 0"
        : `every container exited with exit code 0; not restarted (restartPolicy ${policy})`,
      stuck: true,
    };
  }
  const scheduled = st.conditions?.find((c) => c.type === "PodScheduled");
  if (scheduled?.status === "False") {
    return {
      reason: scheduled.reason || "Unschedulable",
      message: clip(scheduled.message ?? ""),
      stuck: true,
    };
  }
  const containers = [...(st.initContainerStatuses ?? []), ...(st.containerStatuses ?? [])];
  let starting: PodCause | undefined;
  for (const c of containers) {
    const w = c.state?.waiting;
    const last = c.lastState?.terminated;
    if (w?.reason && !STARTING_REASONS.has(w.reason)) {
      const lastText = last ? `last terminated: ${last.reason || "Error"}, ${exitText(last)}` : "";
      const message = [w.message, lastText].filter((x) => x).join("; ");
      return { reason: w.reason, message: clip(message), stuck: true };
    }
    const t = c.state?.terminated;
    if (t && ((t.exitCode ?? 0) !== 0 || (t.reason && t.reason !== "Completed"))) {
      const message = [`container ${c.name} terminated with ${exitText(t)}`, t.message]
        .filter((x) => x).join(": ");
      return { reason: t.reason || "Error", message: clip(message), stuck: true };
    }
    if (w?.reason && !starting) {
      starting = { reason: w.reason, message: clip(w.message ?? ""), stuck: false };
    }
  }
  if (starting) return starting;
  if (st.phase === "Failed") return { reason: "PodFailed", message: "", stuck: true };
  const ready = st.conditions?.find((c) => c.type === "Ready");
  return {
    reason: ready?.reason || (st.phase === "Pending" || !st.phase ? "PodPending" : "PodNotReady"),
    message: clip(ready?.message ?? ""),
    stuck: false,
  };
}

/**
 * Per-Pod status entries, sorted by name; a stuck Pod's entry names its cause (with `nowMs`, also
 * a Pod stuck terminating).
 */
export function podStatuses(pods: Pod[], nowMs?: number): PodStatusEntryT[] {
  return pods
    .map((p) => {
      const e: PodStatusEntryT = {
        name: p.metadata?.name ?? "",
        phase: p.metadata?.deletionTimestamp ? "Terminating" : p.status?.phase ?? "Pending",
        ready: isPodReady(p),
        restartCount: restartCount(p),
      };
      if (p.status?.podIP) e.podIP = p.status.podIP;
      const cause = podCause(p, nowMs);
      if (cause?.stuck) {
        e.reason = cause.reason;
        if (cause.message) e.message = cause.message;
      }
      const containers = containerEntries(p);
      if (containers.length > 0) e.containers = containers;
      return e;
    })
    .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

/** Compares Pod names by ordinal (`web-2` before `web-10`), then as text. */
export function byOrdinal(a: string, b: string): number {
  return a.localeCompare(b, "en", { numeric: true });
}

/**
 * A condition reason as meta/v1 Condition allows it (`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`,
 * at most 1024 characters): other characters dropped, `fallback` when nothing is left.
 */
export function conditionReason(reason: string, fallback = "PodNotReady"): string {
  const r = reason.replace(/[^A-Za-z0-9_,:]/g, "").replace(/^[^A-Za-z]+/, "").replace(
    /[,:]+$/,
    "",
  ).slice(0, 1024);
  return r || fallback;
}

/**
 * The Ready condition. Ready: reason AllReplicasReady. Not Ready with a stuck Pod: the reason is
 * the cause of the first stuck Pod by ordinal (a stable choice), the message
 * `<reason>: <pod>: <message> (<ready>/<replicas> Pods ready[; <n> stuck: <reason> <pods>; ...])`,
 * e.g. `ImagePullBackOff: web-0: Back-off pulling image "x:1" (0/2 Pods ready; 2 stuck:
 * ImagePullBackOff web-0, web-1)`. Otherwise ReplicasNotReady with `<ready>/<replicas> Pods
 * ready`, or RollingUpdate when every Pod is Ready but some are from the previous spec. While a
 * rollout is under way the count adds `, <updated>/<replicas> at the current spec`.
 *
 * @param pods the owned Pods of the wanted ordinals (with `o.nowMs`, those being deleted too: one
 *   stuck terminating is named)
 * @param readyReplicas Ready Pods of any spec (as `kubectl get pods` counts them)
 * @param ready whether every desired Pod is Ready at the current spec
 */
export function readyCondition(
  pods: Pod[],
  readyReplicas: number,
  replicas: number,
  ready: boolean,
  o: ReadyConditionOptions = {},
): ConditionInput {
  let count = `${readyReplicas}/${replicas} Pods ready`;
  if (ready) return { type: "Ready", status: "True", reason: "AllReplicasReady", message: count };
  const outdated = o.outdated ?? 0;
  if (outdated > 0) {
    count += `, ${o.updated ?? replicas - outdated}/${replicas} at the current spec`;
  }
  const stuck = stuckPods(pods, o.nowMs);
  if (stuck.length === 0) {
    // Every Pod Ready, some from the previous spec: a rollout is replacing them.
    const reason = readyReplicas >= replicas && outdated > 0 ? "RollingUpdate" : "ReplicasNotReady";
    return { type: "Ready", status: "False", reason, message: count };
  }
  const first = stuck[0];
  let summary = count;
  if (stuck.length > 1) summary += `; ${stuck.length} stuck: ${stuckSummary(stuck)}`;
  return {
    type: "Ready",
    status: "False",
    reason: conditionReason(first.cause.reason),
    message: `${first.cause.reason}: ${first.name}: ${
      first.cause.message ? first.cause.message + " " : ""
    }(${summary})`,
  };
}

/** A Pod that will not become Ready by itself soon, and why ({@link podCause}). */
export interface StuckPod {
  /** The Pod's name. */
  name: string;
  /** Its cause (`stuck` true). */
  cause: PodCause;
}

/**
 * The stuck Pods among `pods` ({@link PodCause} `stuck`), by ordinal (a stable order). With
 * `nowMs`, a Pod being deleted past its grace period is one too ({@link stuckTerminating}).
 */
export function stuckPods(pods: Pod[], nowMs?: number): StuckPod[] {
  return pods
    .map((p) => ({ name: p.metadata?.name ?? "", cause: podCause(p, nowMs) }))
    .filter((x): x is StuckPod => !!x.cause?.stuck)
    .sort((a, b) => byOrdinal(a.name, b.name));
}

/**
 * Stuck Pods grouped by reason, in the order of `stuck`: `CrashLoopBackOff web-0, web-1;
 * Unschedulable web-2`. Names and reasons only (no kubelet message, no count), so the text
 * changes only when a Pod's reason does, not with each crash.
 */
export function stuckSummary(stuck: StuckPod[]): string {
  const byReason = new Map<string, string[]>();
  for (const s of stuck) {
    byReason.set(s.cause.reason, [...(byReason.get(s.cause.reason) ?? []), s.name]);
  }
  return [...byReason].map(([r, names]) => `${r} ${names.join(", ")}`).join("; ");
}

/**
 * The Degraded condition while Pods are stuck (docs/scenarios.md S24), or undefined when none is:
 * True, reason the
 * first stuck Pod's cause (as the Ready condition's, e.g. CrashLoopBackOff, Unschedulable,
 * CreateContainerConfigError), message `<n> Pod(s) cannot become Ready: <stuckSummary>`. A Pod
 * that completed (exit 0, not restarted under restartPolicy OnFailure or Never) is not a
 * failure and is left out; so are Pods being deleted (reported as stuck terminating elsewhere).
 * The message holds no counter or kubelet text, so a crash loop does not change it.
 */
export function stuckDegradedCondition(pods: Pod[], nowMs?: number): ConditionInput | undefined {
  const stuck = stuckPods(pods.filter((p) => !p.metadata?.deletionTimestamp), nowMs)
    .filter((s) => s.cause.reason !== "Completed");
  if (stuck.length === 0) return undefined;
  return {
    type: "Degraded",
    status: "True",
    reason: conditionReason(stuck[0].cause.reason),
    message: `${stuck.length} Pod(s) cannot become Ready: ${stuckSummary(stuck)}`,
  };
}

/** Rollout counts and the clock for {@link readyCondition}. */
export interface ReadyConditionOptions {
  /** Pods at the current spec (not being deleted). */
  updated?: number;
  /** Pods at a previous spec (not being deleted); the message counts the updated ones if any. */
  outdated?: number;
  /** Now (ms): Pods being deleted past their grace period are named as stuck terminating. */
  nowMs?: number;
}

/** A stuck Pod's cause as remembered between reconciles: reason and restart count. */
export type CauseSignature = string;

/** The signature of a stuck cause: a change means a new occurrence (a new Event or a repeat). */
export function causeSignature(reason: string, restarts: number): CauseSignature {
  return `${reason}|${restarts}`;
}

/**
 * The stuck causes seen anew in `pods`: a Pod whose cause (reason, or restart count under the same
 * reason, as a CrashLoopBackOff that crashed again) differs from what was seen before. "Before" is
 * `seen` (by Pod uid, kept by the caller between reconciles) or, when there is none yet (the first
 * reconcile after the operator started), the stored status entry of that name, so a cause already
 * reported is
 * not reported again. A Pod not in `seen` while `seen` exists is new (e.g. recreated under the
 * same name): its cause is an occurrence. Returns the new occurrences and the signatures to keep.
 */
export function newCauses(
  pods: Pod[],
  seen: ReadonlyMap<string, CauseSignature> | undefined,
  stored: PodStatusEntryT[] | undefined,
  nowMs?: number,
): { occurrences: { pod: Pod; cause: PodCause }[]; signatures: Map<string, CauseSignature> } {
  const occurrences: { pod: Pod; cause: PodCause }[] = [];
  const signatures = new Map<string, CauseSignature>();
  for (const pod of pods) {
    const uid = pod.metadata?.uid ?? pod.metadata?.name ?? "";
    const cause = podCause(pod, nowMs);
    const sig = cause?.stuck ? causeSignature(cause.reason, restartCount(pod)) : "";
    signatures.set(uid, sig);
    if (!cause?.stuck) continue;
    let before: CauseSignature;
    if (seen) {
      before = seen.get(uid) ?? "";
    } else {
      const e = stored?.find((x) => x.name === pod.metadata?.name);
      before = e?.reason ? causeSignature(e.reason, e.restartCount) : "";
    }
    if (before !== sig) occurrences.push({ pod, cause });
  }
  return { occurrences, signatures };
}

/** Whether two statuses differ in anything but `lastReconciliation`. */
export function statusChanged(
  old: AppServiceStatusT | undefined,
  next: AppServiceStatusT,
): boolean {
  if (!old) return true;
  return !jsonEqual(
    { ...old, lastReconciliation: undefined },
    { ...next, lastReconciliation: undefined },
  );
}

/**
 * Least time between two status writes of one AppService that change only counters and messages
 * (ms; docs/scenarios.md S24). 30 s: a crash-looping Pod's kubelet back-off starts at 10 s and
 * doubles, so the first
 * crashes come faster than this and are coalesced; later ones (40 s and more apart) are written
 * as they come, so `podStatuses` lags a crash by at most this much. What a user or a pipeline acts
 * on ({@link statusState}) is never held back.
 */
export const COSMETIC_STATUS_INTERVAL_MS = 30_000;

/**
 * The state part of a status (docs/scenarios.md S24): what is written at once when it changes. The
 * counts
 * (`ready`, `replicas`, `readyReplicas`, `updatedReplicas`, `availableReplicas`,
 * `replicasSummary`), `observedGeneration`, `selector`, each condition's type, status, reason,
 * observedGeneration and `lastUpdateTime`, and per Pod its name, phase, readiness, IP and stuck
 * reason. The rest is cosmetic: condition messages (e.g. a kubelet's back-off text, a refused
 * write's attempt count), restart counts, container states and messages; a change of only those
 * is written at most once per {@link COSMETIC_STATUS_INTERVAL_MS}. Returns a JSON value (undefined
 * for no status) to compare with {@link jsonEqual}.
 */
export function statusState(s: AppServiceStatusT | undefined): Record<string, unknown> | undefined {
  if (!s) return undefined;
  return {
    ready: s.ready,
    replicas: s.replicas,
    readyReplicas: s.readyReplicas,
    updatedReplicas: s.updatedReplicas,
    availableReplicas: s.availableReplicas,
    replicasSummary: s.replicasSummary,
    observedGeneration: s.observedGeneration,
    selector: s.selector,
    conditions: (s.conditions ?? []).map((c) => [
      c.type,
      c.status,
      c.reason,
      c.observedGeneration,
      c.lastUpdateTime,
    ]),
    pods: (s.podStatuses ?? []).map((p) => [p.name, p.phase, p.ready, p.podIP, p.reason]),
  };
}

/**
 * When a status change may be written (docs/scenarios.md S24): at once (`nowMs`) when the state
 * ({@link statusState}) changed or the stored status has no `lastReconciliation`; otherwise (only
 * counters and messages changed) {@link COSMETIC_STATUS_INTERVAL_MS} after the last write, whose
 * time is the stored `lastReconciliation` (stamped by every write; so the bound holds across
 * restarts and leader changes). Times in ms since the epoch.
 */
export function statusWriteAtMs(
  stored: AppServiceStatusT | undefined,
  next: AppServiceStatusT,
  nowMs: number,
  intervalMs = COSMETIC_STATUS_INTERVAL_MS,
): number {
  if (!jsonEqual(statusState(stored), statusState(next))) return nowMs;
  const last = Date.parse(stored?.lastReconciliation ?? "");
  if (!Number.isFinite(last)) return nowMs;
  // A clock far behind the last write (another replica's) waits no longer than the interval.
  return Math.min(Math.max(nowMs, last + intervalMs), nowMs + intervalMs);
}

/**
 * Longest time a status that is a step of a healthy rollout waits for the next step before it is
 * written (ms; docs/design/status.md, "One write on the way to Ready"). A Pod just created is
 * expected to become Ready soon; writing `Creating` and then `Ready` costs the apiserver two
 * status writes where one says the same. A step that lasts longer than this is written when the
 * bound expires, so `kubectl get as` lags a slow rollout by at most this much; a failure or a stuck
 * Pod ({@link isRolloutStep} is false) is never held.
 */
export const ROLLOUT_STEP_HOLD_MS = 2_000;

/**
 * Longest time a rollout step waits for kube-scheduler before it is written (ms;
 * docs/design/status.md, "One write on the way to Ready"). While a Pod of the AppService waits for
 * its Node (no `spec.nodeName`, not reported unschedulable) the {@link ROLLOUT_STEP_HOLD_MS} hold
 * starts again at each reconcile, and once more at the first reconcile that sees them all bound,
 * so the hold runs from the last binding rather than from the create: a scheduler that lags a
 * converge burst by seconds costs no extra write. A step held this long is written anyway, so a
 * scheduler that is down or far behind shows in `kubectl get as` within it. An unschedulable Pod carries a stuck reason and is never held.
 */
export const ROLLOUT_STEP_MAX_HOLD_MS = 10_000;

/**
 * When a rollout step held since `firstMs`, whose hold last started at `sinceMs`, is due to be
 * written (ms): {@link ROLLOUT_STEP_HOLD_MS} after `sinceMs`, never later than
 * {@link ROLLOUT_STEP_MAX_HOLD_MS} after `firstMs`, and never more than the hold after `nowMs`
 * (a clock that went back waits no longer than the bound). All times are ms of the same clock.
 */
export function rolloutStepDueMs(firstMs: number, sinceMs: number, nowMs: number): number {
  return Math.min(
    sinceMs + ROLLOUT_STEP_HOLD_MS,
    nowMs + ROLLOUT_STEP_HOLD_MS,
    firstMs + ROLLOUT_STEP_MAX_HOLD_MS,
  );
}

/** A rollout step held back ({@link holdRolloutStep}); times in ms of one clock. */
export interface HeldStep {
  /** When the step was first computed. */
  firstMs: number;
  /** When its hold last started. */
  sinceMs: number;
  /** Whether the last reconcile saw a Pod waiting for kube-scheduler. */
  waiting: boolean;
}

/**
 * The hold of a rollout step after a reconcile at `nowMs` that computed it again (`prev`: the
 * hold so far, if any) and saw a Pod waiting for kube-scheduler or not (`podsUnbound`): the hold
 * starts again while a Pod waits and once more at the first reconcile that sees them all bound,
 * so it runs from the binding; times in the future (a clock that went back) count from now.
 * Returns the new state and when the step is due ({@link rolloutStepDueMs}).
 */
export function holdRolloutStep(
  prev: HeldStep | undefined,
  podsUnbound: boolean,
  nowMs: number,
): { held: HeldStep; dueMs: number } {
  const firstMs = Math.min(prev?.firstMs ?? nowMs, nowMs);
  const sinceMs = podsUnbound || prev?.waiting ? nowMs : Math.min(prev?.sinceMs ?? nowMs, nowMs);
  return {
    held: { firstMs, sinceMs, waiting: podsUnbound },
    dueMs: rolloutStepDueMs(firstMs, sinceMs, nowMs),
  };
}

/**
 * Whether a Pod of `pods` waits for kube-scheduler: alive (no deletion), with no Node
 * (`spec.nodeName` unset) and no `PodScheduled` False condition (that one is a stuck Pod,
 * {@link podStatuses}). Such a Pod is expected to be bound soon, so a rollout step waiting for it
 * keeps being held ({@link ROLLOUT_STEP_MAX_HOLD_MS}).
 */
export function awaitsScheduler(pods: readonly Pod[]): boolean {
  return pods.some((pod) =>
    !pod.metadata?.deletionTimestamp && !pod.spec?.nodeName &&
    !pod.status?.conditions?.some((c) => c.type === "PodScheduled" && c.status === "False")
  );
}

/** Progressing reasons of a healthy rollout's steps ({@link progressingCondition}). */
const ROLLOUT_STEPS = new Set(["Creating", "Scaling", "RollingUpdate", "WaitingForReady"]);

/**
 * Whether `s` is a step a healthy rollout passes through on its way to Ready: `Progressing` True
 * with a step reason (`Creating`, `Scaling`, `RollingUpdate`, `WaitingForReady`), `Degraded` not
 * True and no Pod entry with a stuck reason ({@link podStatuses}). Such a status may be held for
 * {@link ROLLOUT_STEP_HOLD_MS}; anything else (Ready, a failure, a stuck Pod, the deadline) is
 * written at once.
 */
export function isRolloutStep(s: AppServiceStatusT): boolean {
  const cond = (type: string) => s.conditions?.find((c) => c.type === type);
  const progressing = cond("Progressing");
  if (progressing?.status !== "True" || !ROLLOUT_STEPS.has(progressing.reason ?? "")) return false;
  if (cond("Degraded")?.status === "True") return false;
  return !(s.podStatuses ?? []).some((p) => p.reason !== undefined);
}

/** Progressing reason of a rollout that made no progress for `progressDeadlineSeconds`. */
export const REASON_PROGRESS_DEADLINE_EXCEEDED = "ProgressDeadlineExceeded";

/**
 * Progressing reason while every Pod is at the current spec and some are stuck (docs/scenarios.md
 * S24): the rollout
 * waits for Pods that will not become Ready by themselves (a crash loop, a missing Secret, no
 * Node that fits), until its deadline.
 */
export const REASON_PODS_STUCK = "PodsStuck";

/** When a rollout last made progress, and when its deadline passes (ms). */
export interface RolloutProgress {
  /** The last progress (ms): now when this observation is progress. */
  lastProgressMs: number;
  /** `lastProgressMs + progressDeadlineSeconds` (ms). */
  deadlineAtMs: number;
}

/**
 * When the rollout of `as` last made progress, from its stored status and the counts observed
 * now (Deployment's progress rule, rollout.ts {@link madeProgress}): now when the spec changed
 * since the stored status (a new generation), when no earlier progress is stored (the
 * Progressing condition's `lastUpdateTime`), or when the counts moved forward; else the stored
 * time.
 */
export function rolloutProgress(
  as: AppService,
  next: ProgressCounts,
  params: RolloutParams,
  nowMs: number,
): RolloutProgress {
  const prev = as.status?.conditions?.find((c) => c.type === "Progressing");
  const prevMs = prev?.lastUpdateTime ? Date.parse(prev.lastUpdateTime) : NaN;
  const newSpec = as.status?.observedGeneration !== (as.metadata.generation ?? 0);
  const progressed = newSpec || !Number.isFinite(prevMs) || madeProgress(as.status, next);
  const lastProgressMs = progressed ? nowMs : prevMs;
  return { lastProgressMs, deadlineAtMs: lastProgressMs + params.progressDeadlineSeconds * 1000 };
}

/**
 * The Progressing condition while the Pods do not yet match the spec: True with the step the
 * rollout is in (RollingUpdate: Pods of another spec remain; Scaling: Pods to add or remove;
 * Creating: just created; WaitingForReady: all there, not all available, none stuck;
 * {@link REASON_PODS_STUCK}: all there, some of `stuck` will not become Ready by themselves, named
 * with the deadline), or False with {@link REASON_PROGRESS_DEADLINE_EXCEEDED} once nothing moved
 * for `progressDeadlineSeconds` (naming the stuck Pods). Carries `lastUpdateTime` (the last
 * progress).
 */
export function progressingCondition(
  c: RolloutCounts,
  plan: Pick<RolloutPlan, "create" | "delete">,
  params: RolloutParams,
  hash: string,
  converged: boolean,
  progress: RolloutProgress,
  nowMs: number,
  stuck: StuckPod[] = [],
): ConditionInput {
  const r = params.replicas;
  const step = `${c.updated}/${r} Pods at spec hash ${hash} (${c.updatedAvailable} available), ` +
    `${c.outdated} of an older spec, ${c.terminating} terminating; ${c.available} available ` +
    `in all (maxSurge ${params.maxSurge}, maxUnavailable ${params.maxUnavailable})`;
  const lastUpdateTime = new Date(progress.lastProgressMs).toISOString();
  if (nowMs >= progress.deadlineAtMs) {
    return {
      type: "Progressing",
      status: "False",
      reason: REASON_PROGRESS_DEADLINE_EXCEEDED,
      message: `no progress for ${params.progressDeadlineSeconds} s: ${step}; ` +
        (c.outdated > 0 ? "the Pods of the older spec keep serving" : "see the Ready condition") +
        (stuck.length > 0 ? `; stuck: ${stuckSummary(stuck)}` : ""),
      lastUpdateTime,
    };
  }
  if (converged && stuck.length > 0) {
    // Not a healthy start: these Pods will not become Ready by themselves soon (docs/scenarios.md
    // S24).
    return {
      type: "Progressing",
      status: "True",
      reason: REASON_PODS_STUCK,
      message: `waiting for ${stuck.length} Pod(s) that cannot become Ready by themselves: ` +
        `${stuckSummary(stuck)}; ${REASON_PROGRESS_DEADLINE_EXCEEDED} at ` +
        `${new Date(progress.deadlineAtMs).toISOString()} unless they recover (${step})`,
      lastUpdateTime,
    };
  }
  const reason = converged
    ? "WaitingForReady"
    : c.outdated > 0
    ? "RollingUpdate"
    : c.updated + plan.create.length < r || plan.delete.length > 0 || c.terminating > 0
    ? "Scaling"
    : "Creating";
  return { type: "Progressing", status: "True", reason, message: step, lastUpdateTime };
}
