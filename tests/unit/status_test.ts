/**
 * Why a Pod is stuck (S18), as pure functions of Pod objects: the cause of each kubelet, scheduler
 * and Pod reason (one line each), the container state kept in status, the Ready condition's stable
 * choice and count, which causes are new occurrences (Events), and the namespace-terminating
 * answer as the apiserver sends it (S21).
 */
import type { ContainerStatus, Pod, PodCondition } from "kubernetes-types/core/v1.d.ts";
import { assert, assertEquals } from "../assert.ts";
import { ApiError, isNamespaceClosed, isNamespaceTerminating } from "../../lib/kube/errors.ts";
import { TerminatingNamespaces } from "../../lib/runtime/namespaces.ts";
import { type RolloutCounts, rolloutParams } from "../../lib/appservice/rollout.ts";
import type { AppServiceStatusT } from "../../lib/appservice/schema.ts";
import {
  awaitsScheduler,
  causeSignature,
  conditionReason,
  containerEntries,
  COSMETIC_STATUS_INTERVAL_MS,
  holdRolloutStep,
  isRolloutStep,
  newCauses,
  podCause,
  podStatuses,
  progressingCondition,
  readyCondition,
  ROLLOUT_STEP_HOLD_MS,
  ROLLOUT_STEP_MAX_HOLD_MS,
  rolloutStepDueMs,
  statusChanged,
  statusState,
  statusWriteAtMs,
  stuckDegradedCondition,
  stuckTerminating,
  TERMINATING_STUCK_AFTER_MS,
} from "../../lib/appservice/status.ts";

const scheduled: PodCondition = { type: "PodScheduled", status: "True" };

function pod(name: string, status: Pod["status"], uid = `${name}-uid`): Pod {
  return { metadata: { name, uid }, spec: { containers: [{ name: "app" }] }, status };
}
function withContainer(cs: Partial<ContainerStatus>, phase = "Pending"): Pod["status"] {
  return {
    phase,
    conditions: [scheduled, { type: "Ready", status: "False", reason: "ContainersNotReady" }],
    containerStatuses: [{
      name: "app",
      image: "x:1",
      imageID: "",
      ready: false,
      restartCount: 0,
      ...cs,
    }],
  };
}
const waiting = (reason: string, message?: string) => ({ waiting: { reason, message } });
const terminated = (reason: string | undefined, exitCode: number, signal?: number) => ({
  terminated: { reason, exitCode, signal },
});

/** One line per cause: the Pod's status and the expected reason, stuck flag and message part. */
const CASES: { status: Pod["status"]; reason: string; stuck: boolean; says: string }[] = [
  {
    status: withContainer({ state: waiting("ImagePullBackOff", 'Back-off pulling image "x:1"') }),
    reason: "ImagePullBackOff",
    stuck: true,
    says: 'Back-off pulling image "x:1"',
  },
  {
    status: withContainer({ state: waiting("ErrImagePull", "not found") }),
    reason: "ErrImagePull",
    stuck: true,
    says: "not found",
  },
  {
    status: withContainer({ state: waiting("ErrImageNeverPull", "never pull") }),
    reason: "ErrImageNeverPull",
    stuck: true,
    says: "never pull",
  },
  {
    status: withContainer({ state: waiting("InvalidImageName", "bad") }),
    reason: "InvalidImageName",
    stuck: true,
    says: "bad",
  },
  {
    status: withContainer({ state: waiting("CreateContainerConfigError", 'secret "s" not found') }),
    reason: "CreateContainerConfigError",
    stuck: true,
    says: 'secret "s" not found',
  },
  {
    status: withContainer({ state: waiting("CreateContainerError", "no command") }),
    reason: "CreateContainerError",
    stuck: true,
    says: "no command",
  },
  {
    status: withContainer({ state: waiting("RunContainerError", "exec failed") }),
    reason: "RunContainerError",
    stuck: true,
    says: "exec failed",
  },
  {
    status: withContainer({
      state: waiting("CrashLoopBackOff", "back-off 10s"),
      lastState: terminated("OOMKilled", 137),
      restartCount: 3,
    }, "Running"),
    reason: "CrashLoopBackOff",
    stuck: true,
    says: "back-off 10s; last terminated: OOMKilled, exit code 137",
  },
  {
    status: withContainer({ state: terminated("OOMKilled", 137) }, "Running"),
    reason: "OOMKilled",
    stuck: true,
    says: "exit code 137",
  },
  {
    status: withContainer({ state: terminated("Error", 2) }, "Running"),
    reason: "Error",
    stuck: true,
    says: "container app terminated with exit code 2",
  },
  {
    status: withContainer({ state: terminated(undefined, 143, 15) }, "Running"),
    reason: "Error",
    stuck: true,
    says: "exit code 143 (signal 15)",
  },
  {
    status: withContainer({ state: terminated("ContainerCannotRun", 128) }, "Running"),
    reason: "ContainerCannotRun",
    stuck: true,
    says: "exit code 128",
  },
  {
    status: {
      phase: "Pending",
      conditions: [{
        type: "PodScheduled",
        status: "False",
        reason: "Unschedulable",
        message: "0/3 nodes are available: 3 Insufficient cpu.",
      }],
    },
    reason: "Unschedulable",
    stuck: true,
    says: "Insufficient cpu",
  },
  {
    status: {
      phase: "Pending",
      conditions: [{
        type: "PodScheduled",
        status: "False",
        reason: "SchedulingGated",
        message: "gated",
      }],
    },
    reason: "SchedulingGated",
    stuck: true,
    says: "gated",
  },
  {
    status: {
      phase: "Failed",
      reason: "Evicted",
      message: "The node was low on resource: memory.",
    },
    reason: "Evicted",
    stuck: true,
    says: "low on resource",
  },
  {
    status: withContainer({ state: waiting("ContainerCreating") }),
    reason: "ContainerCreating",
    stuck: false,
    says: "",
  },
  {
    status: withContainer({ state: terminated("Completed", 0) }, "Running"),
    reason: "ContainersNotReady",
    stuck: false,
    says: "",
  },
  {
    status: withContainer({ state: { running: { startedAt: "2026-01-01T00:00:00Z" } } }, "Running"),
    reason: "ContainersNotReady",
    stuck: false,
    says: "",
  },
  { status: undefined, reason: "PodPending", stuck: false, says: "" },
];

Deno.test("podCause: every kubelet, scheduler and Pod reason, one line each", () => {
  for (const k of CASES) {
    const c = podCause(pod("web-0", k.status));
    assert(c, `no cause for ${k.reason}`);
    assertEquals(c.reason, k.reason);
    assertEquals(c.stuck, k.stuck, k.reason);
    assert(c.message.includes(k.says), `${k.reason}: "${c.message}" lacks "${k.says}"`);
  }
});

Deno.test("podCause: a Ready Pod or one being deleted has none", () => {
  const ready = pod("web-0", {
    phase: "Running",
    conditions: [scheduled, { type: "Ready", status: "True" }],
  });
  assertEquals(podCause(ready), undefined);
  const stuck = pod("web-0", withContainer({ state: waiting("ImagePullBackOff") }));
  const going = {
    ...stuck,
    metadata: { ...stuck.metadata, deletionTimestamp: "2026-01-01T00:00:00Z" },
  };
  assertEquals(podCause(going), undefined);
});

Deno.test("podStatuses: container state, last termination, restart count; reason only when stuck", () => {
  const p = pod(
    "web-0",
    withContainer({
      state: waiting("CrashLoopBackOff", "back-off 20s"),
      lastState: terminated("Error", 1),
      restartCount: 2,
    }, "Running"),
  );
  const [e] = podStatuses([p]);
  assertEquals(e.reason, "CrashLoopBackOff");
  assertEquals(e.restartCount, 2);
  assertEquals(e.containers, [{
    name: "app",
    ready: false,
    restartCount: 2,
    state: { waiting: { reason: "CrashLoopBackOff", message: "back-off 20s" } },
    lastState: { terminated: { reason: "Error", exitCode: 1 } },
  }]);
  const starting = podStatuses([
    pod("web-1", withContainer({ state: waiting("ContainerCreating") })),
  ]);
  assertEquals(starting[0].reason, undefined);
  assertEquals(starting[0].containers?.[0].state, { waiting: { reason: "ContainerCreating" } });
  // A long kubelet message is cut, so the status stays small.
  const long = pod("web-2", withContainer({ state: waiting("ErrImagePull", "x".repeat(5_000)) }));
  assert(podStatuses([long])[0].message!.length <= 512);
  assert(containerEntries(long)[0].state!.waiting!.message!.length <= 512);
});

Deno.test("readyCondition: first stuck Pod by ordinal, the reason, the Pod and a count", () => {
  const pods = [
    pod("web-10", withContainer({ state: waiting("CrashLoopBackOff", "back-off") }, "Running")),
    pod("web-2", withContainer({ state: waiting("ImagePullBackOff", "pull x:1") })),
    pod("web-1", withContainer({ state: waiting("ContainerCreating") })),
    pod("web-3", withContainer({ state: waiting("ImagePullBackOff", "pull x:1") })),
  ];
  const c = readyCondition(pods, 0, 11, false);
  assertEquals(c.status, "False");
  assertEquals(c.reason, "ImagePullBackOff");
  assertEquals(
    c.message,
    "ImagePullBackOff: web-2: pull x:1 (0/11 Pods ready; 3 stuck: ImagePullBackOff web-2, " +
      "web-3; CrashLoopBackOff web-10)",
  );
  // The same Pods in another order give the same condition (stable: no status write).
  assertEquals(readyCondition([...pods].reverse(), 0, 11, false), c);
  assertEquals(readyCondition([pods[2]], 0, 1, false).reason, "ReplicasNotReady");
  assertEquals(readyCondition([], 1, 1, true).reason, "AllReplicasReady");
  // A rollout: the count is of every Ready Pod, with how many are at the current spec.
  const rolling = readyCondition([], 3, 3, false, { updated: 1, outdated: 2 });
  assertEquals(rolling.reason, "RollingUpdate");
  assertEquals(rolling.message, "3/3 Pods ready, 1/3 at the current spec");
  assertEquals(
    readyCondition([], 2, 3, false, { updated: 1, outdated: 2 }).reason,
    "ReplicasNotReady",
  );
  // A missing Pod is not "at another spec".
  assertEquals(readyCondition([], 1, 2, false, { updated: 1 }).message, "1/2 Pods ready");
  assertEquals(conditionReason("Out of cpu!"), "Outofcpu");
  assertEquals(conditionReason("---"), "PodNotReady");
});

Deno.test("podCause: a Pod that ended: Completed (not restarted unless Always), PodFailed", () => {
  const done = withContainer({ state: terminated("Completed", 0) }, "Succeeded");
  const never = { ...pod("job-0", done), spec: { containers: [], restartPolicy: "Never" } };
  assertEquals(podCause(never), {
    reason: "Completed",
    message: "every container exited with exit code 0; not restarted (restartPolicy Never)",
    stuck: true,
  });
  assertEquals(podCause(pod("web-0", done))?.message, "every container exited with exit code 0");
  assertEquals(podCause(pod("web-1", { phase: "Failed" })), {
    reason: "PodFailed",
    message: "",
    stuck: true,
  });
});

Deno.test("stuckTerminating: named 30 s past the grace period, with what holds it", () => {
  const at = "2026-01-01T00:00:00Z";
  const p: Pod = {
    metadata: { name: "web-0", uid: "u", deletionTimestamp: at, finalizers: ["x.io/hold"] },
    spec: { containers: [], nodeName: "n1" },
  };
  const t = Date.parse(at);
  assertEquals(podCause(p), undefined, "without a clock: not judged");
  assertEquals(podCause(p, t + TERMINATING_STUCK_AFTER_MS - 1), undefined);
  const c = podCause(p, t + TERMINATING_STUCK_AFTER_MS)!;
  assertEquals(c.reason, "PodStuckTerminating");
  assert(c.message.includes("x.io/hold") && c.message.includes(at), c.message);
  // The same text later (no status write per reconcile).
  assertEquals(podCause(p, t + 10 * TERMINATING_STUCK_AFTER_MS), c);
  const lost = { ...p, metadata: { ...p.metadata, finalizers: [] } };
  assert(stuckTerminating(lost, t + 60_000)!.message.includes("Node n1"));
  const rc = readyCondition([p], 1, 2, false, { nowMs: t + 60_000 });
  assertEquals(rc.reason, "PodStuckTerminating");
  assert(rc.message.startsWith("PodStuckTerminating: web-0: being deleted since"), rc.message);
});

Deno.test("newCauses: a new reason or a new restart is an occurrence; the same state is not", () => {
  const backoff = pod("web-0", withContainer({ state: waiting("ImagePullBackOff") }));
  const pull = pod("web-0", withContainer({ state: waiting("ErrImagePull") }));
  const first = newCauses([backoff], new Map(), undefined);
  assertEquals(first.occurrences.map((o) => o.cause.reason), ["ImagePullBackOff"]);
  const same = newCauses([backoff], first.signatures, undefined);
  assertEquals(same.occurrences, []);
  const flip = newCauses([pull], same.signatures, undefined);
  assertEquals(flip.occurrences.map((o) => o.cause.reason), ["ErrImagePull"]);
  const back = newCauses([backoff], flip.signatures, undefined);
  assertEquals(back.occurrences.map((o) => o.cause.reason), ["ImagePullBackOff"]);
  // CrashLoopBackOff again after one more restart.
  const crash = (n: number) =>
    pod("web-1", withContainer({ state: waiting("CrashLoopBackOff"), restartCount: n }, "Running"));
  const c1 = newCauses([crash(1)], new Map(), undefined);
  assertEquals(newCauses([crash(1)], c1.signatures, undefined).occurrences, []);
  assertEquals(newCauses([crash(2)], c1.signatures, undefined).occurrences.length, 1);
  // After a restart of the operator (nothing seen yet) a cause already in status is not new...
  const stored = podStatuses([backoff]);
  assertEquals(newCauses([backoff], undefined, stored).occurrences, []);
  assertEquals(newCauses([pull], undefined, stored).occurrences.length, 1);
  // ...but a Pod recreated under the same name is.
  const recreated = pod("web-0", withContainer({ state: waiting("ImagePullBackOff") }), "new-uid");
  assertEquals(newCauses([recreated], first.signatures, stored).occurrences.length, 1);
  assertEquals(first.signatures.get("web-0-uid"), causeSignature("ImagePullBackOff", 0));
});

Deno.test("statusChanged: the same stuck state twice is no change (S9)", () => {
  const p = pod("web-0", withContainer({ state: waiting("ImagePullBackOff", "m") }));
  const s = { podStatuses: podStatuses([p]), conditions: [] };
  assert(!statusChanged(structuredClone(s), { ...s, lastReconciliation: "later" }));
});

Deno.test("namespace refusals: the apiserver's 403 NamespaceTerminating and 404 namespaces", () => {
  // As kube-apiserver v1.36 answers (the cause type is serialized as `reason`).
  const terminating = new ApiError(403, {
    kind: "Status",
    status: "Failure",
    reason: "Forbidden",
    message: 'pods "x" is forbidden: unable to create new content in namespace ns because it ' +
      "is being terminated",
    details: {
      name: "x",
      kind: "pods",
      causes: [{
        reason: "NamespaceTerminating",
        message: "namespace ns is being terminated",
        field: "metadata.namespace",
      }],
    },
    code: 403,
  });
  const gone = new ApiError(404, {
    kind: "Status",
    status: "Failure",
    reason: "NotFound",
    message: 'namespaces "ns" not found',
    details: { name: "ns", kind: "namespaces" },
    code: 404,
  });
  const rbac = new ApiError(403, {
    reason: "Forbidden",
    code: 403,
    message: "is being terminated",
  });
  const podGone = new ApiError(404, { reason: "NotFound", code: 404, details: { kind: "pods" } });
  assert(isNamespaceTerminating(terminating));
  assert(!isNamespaceTerminating(rbac), "branch on the cause, not the message");
  assert(isNamespaceClosed(gone) && isNamespaceClosed(terminating));
  assert(!isNamespaceClosed(podGone) && !isNamespaceClosed(rbac));

  const members = new Map([["ns", ["a", "b"]]]);
  const gate = new TerminatingNamespaces((ns) => members.get(ns) ?? []);
  assert(!gate.observe("ns", "a", rbac));
  assertEquals(gate.size, 0);
  assert(gate.observe("ns", "a", terminating));
  assert(gate.has("ns", "a") && gate.has("ns", "b"), "every member is held back");
  assert(!gate.has("ns", "c"), "an object made later (a new namespace of that name) is not");
  gate.forget("ns", "a");
  gate.forget("ns", "b");
  assertEquals(gate.size, 0, "the entry goes with its last object");
});

Deno.test("stuckDegradedCondition: Degraded names the stuck Pods, not a healthy start (S24)", () => {
  const crash = (n: number, restarts: number, backOff: string) =>
    pod(
      `web-${n}`,
      withContainer({
        restartCount: restarts,
        state: waiting("CrashLoopBackOff", `back-off ${backOff} restarting failed container=app`),
        lastState: terminated("Error", 1),
      }, "Running"),
    );
  const unschedulable = pod("web-2", {
    phase: "Pending",
    conditions: [{
      type: "PodScheduled",
      status: "False",
      reason: "Unschedulable",
      message: "0/4 nodes are available: 4 Insufficient cpu.",
    }],
  });
  const d = stuckDegradedCondition([crash(1, 3, "40s"), unschedulable, crash(0, 3, "40s")])!;
  assertEquals(d.status, "True");
  assertEquals(d.reason, "CrashLoopBackOff");
  assertEquals(
    d.message,
    "3 Pod(s) cannot become Ready: CrashLoopBackOff web-0, web-1; Unschedulable web-2",
  );
  // Another crash (restart count, back-off text) does not change it.
  assertEquals(
    stuckDegradedCondition([crash(1, 4, "1m20s"), unschedulable, crash(0, 5, "2m40s")]),
    d,
  );
  // A config error names itself.
  const config = pod("web-0", withContainer({ state: waiting("CreateContainerConfigError", "x") }));
  assertEquals(stuckDegradedCondition([config])?.reason, "CreateContainerConfigError");
  // Starting normally, Ready, or completed: no failure.
  const starting = pod("web-0", withContainer({ state: waiting("ContainerCreating") }));
  const done = pod("web-0", { phase: "Succeeded" });
  done.spec!.restartPolicy = "Never";
  assertEquals(stuckDegradedCondition([starting, done]), undefined);
});

Deno.test("progressingCondition: stuck Pods are named with the deadline, then ProgressDeadlineExceeded (S24)", () => {
  const params = rolloutParams({ image: "x", replicas: 2 } as never);
  const counts = {
    total: 2,
    updated: 2,
    updatedAvailable: 0,
    outdated: 0,
    terminating: 0,
    ready: 0,
    available: 0,
  } as RolloutCounts;
  const stuck = [{
    name: "web-0",
    cause: { reason: "CrashLoopBackOff", message: "", stuck: true },
  }];
  const progress = { lastProgressMs: 0, deadlineAtMs: 600_000 };
  const plan = { create: [], delete: [] };
  const p = progressingCondition(counts, plan, params, "h", true, progress, 1_000, stuck);
  assertEquals([p.status, p.reason], ["True", "PodsStuck"]);
  assert(p.message.includes("CrashLoopBackOff web-0"), p.message);
  assert(p.message.includes("ProgressDeadlineExceeded at 1970-01-01T00:10:00.000Z"), p.message);
  const healthy = progressingCondition(counts, plan, params, "h", true, progress, 1_000);
  assertEquals(healthy.reason, "WaitingForReady");
  const late = progressingCondition(counts, plan, params, "h", true, progress, 600_000, stuck);
  assertEquals([late.status, late.reason], ["False", "ProgressDeadlineExceeded"]);
  assert(late.message.includes("stuck: CrashLoopBackOff web-0"), late.message);
});

Deno.test("statusWriteAtMs: state at once; counters and messages at most once per interval (S24)", () => {
  const cond = (type: string, status: "True" | "False", reason: string, message: string) => ({
    type,
    status,
    reason,
    message,
    lastTransitionTime: "2026-01-01T00:00:00Z",
    observedGeneration: 1,
  });
  const base = (restarts: number, message: string, readyReplicas = 0): AppServiceStatusT => ({
    ready: false,
    replicas: 2,
    readyReplicas,
    observedGeneration: 1,
    lastReconciliation: new Date(100_000).toISOString(),
    conditions: [cond("Ready", "False", "CrashLoopBackOff", message)],
    podStatuses: [{ name: "web-0", phase: "Running", ready: false, restartCount: restarts }],
  });
  const stored = base(3, "back-off 40s");
  // Only the restart count and the message: not before 30 s after the last write.
  const cosmetic = base(4, "back-off 1m20s");
  assertEquals(statusState(stored), statusState(cosmetic));
  assertEquals(statusWriteAtMs(stored, cosmetic, 110_000), 100_000 + COSMETIC_STATUS_INTERVAL_MS);
  assertEquals(statusWriteAtMs(stored, cosmetic, 140_000), 140_000);
  // A state change (a Pod Ready, a reason, a condition's status): at once.
  assertEquals(statusWriteAtMs(stored, base(4, "x", 1), 101_000), 101_000);
  const reason = { ...cosmetic, conditions: [cond("Ready", "False", "Error", "x")] };
  assertEquals(statusWriteAtMs(stored, reason, 101_000), 101_000);
  // No stored write time: at once; a clock behind the last write waits at most the interval.
  assertEquals(statusWriteAtMs({ ...stored, lastReconciliation: undefined }, cosmetic, 5), 5);
  assertEquals(statusWriteAtMs(stored, cosmetic, 0), COSMETIC_STATUS_INTERVAL_MS);
});

Deno.test("isRolloutStep: a healthy rollout's steps may be held; Ready, failures and stuck Pods not", () => {
  const cond = (type: string, status: "True" | "False", reason: string) => ({
    type,
    status,
    reason,
    message: "",
    lastTransitionTime: "2026-01-01T00:00:00Z",
  });
  const status = (progressing: string, degraded = "AsExpected", stuckPod = false) =>
    ({
      conditions: [
        cond("Ready", "False", "PodNotReady"),
        cond("Progressing", "True", progressing),
        cond("Degraded", degraded === "AsExpected" ? "False" : "True", degraded),
      ],
      podStatuses: [{
        name: "web-0",
        phase: "Pending",
        ready: false,
        restartCount: 0,
        ...(stuckPod ? { reason: "ImagePullBackOff" } : {}),
      }],
    }) as AppServiceStatusT;
  for (const step of ["Creating", "Scaling", "RollingUpdate", "WaitingForReady"]) {
    assert(isRolloutStep(status(step)), step);
  }
  assert(!isRolloutStep(status("PodsStuck")), "stuck Pods");
  assert(!isRolloutStep(status("Creating", "FailedCreatePod")), "a failure");
  assert(
    !isRolloutStep(status("WaitingForReady", "AsExpected", true)),
    "a Pod with a stuck reason",
  );
  const done = status("Creating");
  done.conditions = [
    cond("Ready", "True", "AllReplicasReady"),
    cond("Progressing", "False", "Complete"),
  ];
  assert(!isRolloutStep(done), "converged");
  assert(!isRolloutStep({}), "no conditions");
  assert(ROLLOUT_STEP_HOLD_MS > 0 && ROLLOUT_STEP_HOLD_MS < COSMETIC_STATUS_INTERVAL_MS);
});

Deno.test("rolloutStepDueMs: the hold runs from its last start, within the longest hold", () => {
  const hold = ROLLOUT_STEP_HOLD_MS;
  // Started once at 0: due one hold later.
  assertEquals(rolloutStepDueMs(0, 0, 0), hold);
  assertEquals(rolloutStepDueMs(0, 0, hold - 1), hold);
  // Restarted at 3 s (a Pod still waiting for its Node then): due one hold after that.
  assertEquals(rolloutStepDueMs(0, 3_000, 3_000), 3_000 + hold);
  // Restarted again and again: never later than the longest hold after the first computation.
  const late = ROLLOUT_STEP_MAX_HOLD_MS - 500;
  assertEquals(rolloutStepDueMs(0, late, late), ROLLOUT_STEP_MAX_HOLD_MS);
  assert(rolloutStepDueMs(0, 20_000, 20_000) <= 20_000, "past the longest hold: due now");
  // A clock that went back: no longer than one hold from now.
  assertEquals(rolloutStepDueMs(50_000, 50_000, 10_000), 10_000 + hold);
  assert(ROLLOUT_STEP_MAX_HOLD_MS > ROLLOUT_STEP_HOLD_MS);
});

Deno.test("awaitsScheduler: an unbound Pod not reported unschedulable, alive", () => {
  const unbound = pod("web-0", { phase: "Pending" });
  const bound: Pod = {
    ...pod("web-1", { phase: "Pending" }),
    spec: { containers: [], nodeName: "n1" },
  };
  const unschedulable = pod("web-2", {
    phase: "Pending",
    conditions: [{ type: "PodScheduled", status: "False", reason: "Unschedulable" }],
  });
  const deleting: Pod = {
    ...unbound,
    metadata: { ...unbound.metadata, deletionTimestamp: "2026-01-01T00:00:00Z" },
  };
  assert(awaitsScheduler([bound, unbound]), "one Pod waits for its Node");
  assert(!awaitsScheduler([bound]), "all bound");
  assert(!awaitsScheduler([unschedulable]), "unschedulable is stuck, not waiting");
  assert(!awaitsScheduler([deleting]), "a Pod being deleted waits for nothing");
  assert(!awaitsScheduler([]), "no Pods");
});

Deno.test("holdRolloutStep: the hold runs from the binding, within the longest hold", () => {
  const hold = ROLLOUT_STEP_HOLD_MS;
  // t=0: the Pod just created (unbound): due one hold later.
  let r = holdRolloutStep(undefined, true, 0);
  assertEquals(r.dueMs, hold);
  // t=2 s: the requeue sees it still waiting: the hold starts again.
  r = holdRolloutStep(r.held, true, 2_000);
  assertEquals(r.dueMs, 2_000 + hold);
  // t=3.9 s: the binding's event, all bound: the hold starts once more, from the binding.
  r = holdRolloutStep(r.held, false, 3_900);
  assertEquals(r.dueMs, 3_900 + hold);
  // t=4 s: the earlier requeue, still all bound: the due time does not move.
  r = holdRolloutStep(r.held, false, 4_000);
  assertEquals(r.dueMs, 3_900 + hold);
  // Waiting on and on: written at the longest hold after the first computation.
  let w = holdRolloutStep(undefined, true, 0);
  for (let t = 1_000; t < 20_000; t += 1_000) w = holdRolloutStep(w.held, true, t);
  assert(w.dueMs <= ROLLOUT_STEP_MAX_HOLD_MS, `due ${w.dueMs}`);
  // Bound from the start (a rollout step of Pods already placed): one hold from the first.
  const b = holdRolloutStep(holdRolloutStep(undefined, false, 0).held, false, 1_500);
  assertEquals(b.dueMs, hold);
  // The clock went back 60 s: the longest hold counts from now, not from a future first time.
  let c = holdRolloutStep(undefined, true, 100_000);
  for (let t = 40_000; t < 60_000; t += 1_000) c = holdRolloutStep(c.held, true, t);
  assert(c.dueMs <= 40_000 + ROLLOUT_STEP_MAX_HOLD_MS, `due ${c.dueMs} after the clock went back`);
});
