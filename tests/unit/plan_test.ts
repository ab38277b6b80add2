/**
 * The reconcile plan (lib/appservice/plan.ts), a pure function, under property tests over random
 * Pod sets and specs: never more Pods in the slots than `replicas + maxSurge` and never more of
 * the current spec than `replicas`; never fewer available than `replicas - maxUnavailable` because
 * of a rollout's deletes; scaling and rollouts converge in a simulated cluster. And the decisions
 * beside the Pods: the Service and PodDisruptionBudget steps, and what comes after a reconcile
 * (`nextStep`).
 */
import fc from "fast-check";
import type { Pod, Service } from "kubernetes-types/core/v1.d.ts";
import { assert, assertEquals } from "../assert.ts";
import {
  agreedDeletes,
  nextStep,
  plan,
  type PlanInput,
  serviceWrite,
} from "../../lib/appservice/plan.ts";
import { desiredService } from "../../lib/appservice/service.ts";
import { podOrdinal, SPEC_HASH_ANNOTATION, specHash } from "../../lib/appservice/pods.ts";
import { isPodAvailable } from "../../lib/appservice/rollout.ts";
import type { AppService } from "../../lib/appservice/schema.ts";
import type { Refusal } from "../../lib/appservice/rejections.ts";
import { Reconcile } from "../../lib/runtime/controller.ts";

const NOW = Date.parse("2026-01-01T00:00:00Z");
const LONG_AGO = "2000-01-01T00:00:00Z";
const OLD_HASH = "old0000000";

/** An AppService `web` with these rollout fields. */
function appService(
  replicas: number,
  maxSurge: number | string,
  maxUnavailable: number | string,
  minReadySeconds = 0,
  ports = false,
): AppService {
  return {
    apiVersion: "apps.our-org.com/v1",
    kind: "AppService",
    metadata: { name: "web", namespace: "ns", uid: "uid-web", generation: 1 },
    spec: {
      image: "app:2",
      replicas,
      minReadySeconds,
      strategy: { rollingUpdate: { maxSurge, maxUnavailable } },
      ports: ports ? [{ containerPort: 8080, name: "http" }] : undefined,
    },
  } as AppService;
}

/** How a generated Pod is. */
type PodState = "notReady" | "ready" | "readyJustNow" | "failed" | "terminating";

/** A cached Pod of slot `slot`, of the current spec or not, in `state`. */
function pod(slot: number, current: boolean, state: PodState, hash: string, seq = 0): Pod {
  const ready = state === "ready" || state === "readyJustNow";
  return {
    metadata: {
      name: `web-${slot}`,
      uid: `uid-${slot}-${current}-${seq}`,
      annotations: { [SPEC_HASH_ANNOTATION]: current ? hash : OLD_HASH },
      deletionTimestamp: state === "terminating" ? new Date(NOW).toISOString() : undefined,
    },
    status: {
      phase: state === "failed" ? "Failed" : "Running",
      conditions: [{
        type: "Ready",
        status: ready ? "True" : "False",
        lastTransitionTime: state === "readyJustNow" ? new Date(NOW).toISOString() : LONG_AGO,
      }],
    },
  };
}

/** A random spec and Pod set: distinct slots, some past the slot range. */
const scenario = fc.record({
  replicas: fc.integer({ min: 0, max: 8 }),
  maxSurge: fc.oneof(fc.integer({ min: 0, max: 3 }), fc.constantFrom("25%", "50%")),
  maxUnavailable: fc.oneof(fc.integer({ min: 0, max: 3 }), fc.constantFrom("0%", "25%")),
  minReadySeconds: fc.constantFrom(0, 0, 5),
  failedDue: fc.boolean(),
  pods: fc.uniqueArray(
    fc.record({
      slot: fc.integer({ min: 0, max: 13 }),
      current: fc.boolean(),
      state: fc.constantFrom<PodState>(
        "notReady",
        "ready",
        "ready",
        "ready",
        "readyJustNow",
        "failed",
        "terminating",
      ),
    }),
    { selector: (p) => p.slot, maxLength: 12 },
  ),
});

type Scenario = typeof scenario extends fc.Arbitrary<infer T> ? T : never;

/** The plan input of a scenario. */
function input(s: Scenario): PlanInput & { appService: AppService; pods: Pod[] } {
  const as = appService(s.replicas, s.maxSurge, s.maxUnavailable, s.minReadySeconds);
  const hash = specHash(as);
  return {
    appService: as,
    pods: s.pods.map((p) => pod(p.slot, p.current, p.state, hash)),
    pdbs: false,
    nowMs: NOW,
    failureDue: () => s.failedDue ? NOW : Infinity,
  };
}

Deno.test("plan: never more Pods in the slots than replicas + maxSurge, never more of the current spec than replicas", () => {
  fc.assert(
    fc.property(scenario, (s) => {
      const i = input(s);
      const p = plan(i);
      const slots = p.params.replicas + p.params.maxSurge;
      const occupied = new Set(i.pods.map((x) => podOrdinal(i.appService, x)));
      assertEquals(new Set(p.create).size, p.create.length, "a slot created twice");
      for (const slot of p.create) {
        assert(slot < slots, `slot ${slot} past ${slots}`);
        assert(!occupied.has(slot), `slot ${slot} is taken`);
      }
      const inSlots = i.pods.filter((x) => podOrdinal(i.appService, x)! < slots).length;
      assert(inSlots + p.create.length <= Math.max(slots, inSlots), "past the slot bound");
      if (i.pods.every((x) => podOrdinal(i.appService, x)! < slots)) {
        assert(i.pods.length + p.create.length <= slots, "more Pods than replicas + maxSurge");
      }
      // Pods of the current spec that stay (not terminating, not deleted, in the slots) plus the
      // creates never pass replicas.
      const going = new Set(p.rollout.delete.map((d) => d.pod));
      const stay = i.pods.filter((x) =>
        !x.metadata?.deletionTimestamp && !going.has(x) &&
        x.metadata?.annotations?.[SPEC_HASH_ANNOTATION] === p.hash &&
        podOrdinal(i.appService, x)! < slots
      );
      assert(
        stay.length + p.create.length <= p.params.replicas,
        `${stay.length} kept + ${p.create.length} created > ${p.params.replicas}`,
      );
    }),
    { numRuns: 2_000 },
  );
});

Deno.test("plan: a rollout's deletes never leave fewer available than replicas - maxUnavailable", () => {
  fc.assert(
    fc.property(scenario, (s) => {
      const i = input(s);
      const p = plan(i);
      const avail = (x: Pod) => isPodAvailable(x, p.params.minReadySeconds, NOW);
      const going = new Set(p.rollout.delete.map((d) => d.pod));
      const before = i.pods.filter(avail).length;
      const after = i.pods.filter((x) => avail(x) && !going.has(x)).length;
      const bound = p.params.replicas - p.params.maxUnavailable;
      const rolled = p.rollout.delete.filter((d) => d.why === "SpecChanged" && avail(d.pod));
      for (const d of rolled) assert(d.withinBudget, `${d.pod.metadata?.name} not in the budget`);
      if (rolled.length > 0) {
        assert(after >= bound, `${after} available after the rollout's deletes, bound ${bound}`);
      }
      // Only the rollout takes available Pods: availability stays at the bound, or where it was.
      const others = p.rollout.delete.filter((d) => d.why !== "SpecChanged" && avail(d.pod));
      if (others.length === 0) {
        assert(
          after >= Math.min(before, bound),
          `${before} → ${after} available, bound ${bound}`,
        );
      }
    }),
    { numRuns: 2_000 },
  );
});

/**
 * One step of a simulated cluster: the plan's deletes start (terminating), Pods terminating since
 * the last step are gone, creates appear, and every running Pod is Ready (since `nowMs`).
 */
function step(pods: Pod[], p: ReturnType<typeof plan>, nowMs: number, seq: number): Pod[] {
  const going = new Set(p.rollout.delete.map((d) => d.pod));
  const iso = new Date(nowMs).toISOString();
  const next: Pod[] = [];
  for (const x of pods) {
    if (x.metadata?.deletionTimestamp) continue; // gone
    const readyNow = x.status?.phase === "Running" &&
      x.status.conditions?.[0].status !== "True";
    const y: Pod = structuredClone(x);
    if (readyNow) {
      y.status!.conditions = [{ type: "Ready", status: "True", lastTransitionTime: iso }];
    }
    if (going.has(x)) y.metadata = { ...y.metadata, deletionTimestamp: iso };
    next.push(y);
  }
  for (const slot of p.create) next.push(pod(slot, true, "notReady", p.hash, seq));
  return next;
}

Deno.test("plan: scaling and rollouts converge to replicas Pods of the current spec", () => {
  fc.assert(
    fc.property(scenario, (s) => {
      const i = input(s);
      let pods = i.pods;
      let nowMs = NOW;
      const slots = i.appService.spec.replicas! + 20;
      for (let n = 0; n < 4 * slots + 10; n++) {
        const p = plan({ ...i, pods, nowMs, failureDue: () => nowMs });
        // Nothing to do, nothing going, nothing left to become available (a Pod created or made
        // Ready last step; time moves on by more than minReadySeconds per step).
        const settled = p.create.length === 0 && p.rollout.delete.length === 0 &&
          pods.every((x) => isPodAvailable(x, p.params.minReadySeconds, nowMs));
        if (settled) {
          assertEquals(pods.length, p.params.replicas, "settled with the wrong count");
          assert(
            pods.every((x) => x.metadata?.annotations?.[SPEC_HASH_ANNOTATION] === p.hash),
            "settled with Pods of an older spec",
          );
          return;
        }
        nowMs += 10_000;
        pods = step(pods, p, nowMs, n + 1);
      }
      throw new Error(`not settled: ${pods.map((x) => x.metadata?.name).join(",")}`);
    }),
    { numRuns: 1_000 },
  );
});

Deno.test("plan: no creates while a refused create is held; the Service and PodDisruptionBudget steps", () => {
  const as = appService(3, 1, 0, 0, true);
  const refusal: Refusal = { attempts: 1, nextAtMs: NOW + 5_000, message: "refused" } as Refusal;
  const base: PlanInput = { appService: as, pods: [], pdbs: true, nowMs: NOW, failureDue: () => 0 };
  const free = plan(base);
  assertEquals(free.create, [0, 1, 2]);
  assertEquals(free.service.kind, "find");
  assertEquals(free.pdb.kind, "apply", "3 replicas: a budget of at least 1");
  const held = plan({ ...base, createHeld: refusal, serviceHeld: refusal });
  assertEquals(held.create, []);
  assertEquals(held.createHeld, refusal);
  assertEquals(held.service, { kind: "held", refusal });
  const want = desiredService(as)!;
  assertEquals(plan({ ...base, service: want }).service.kind, "current");
  const drifted: Service = structuredClone(want);
  drifted.spec!.ports![0].port = 9999;
  assertEquals(plan({ ...base, service: drifted }).service.kind, "converge");
  const noPorts = appService(3, 1, 0);
  assertEquals(plan({ ...base, appService: noPorts, service: want }).service.kind, "delete");
  assertEquals(plan({ ...base, appService: noPorts }).service.kind, "none");
  const one = appService(1, 1, 0);
  assertEquals(plan({ ...base, appService: one }).pdb.kind, "none", "1 replica: no budget");
  assertEquals(plan({ ...base, pdbs: false }).pdb.kind, "none", "no PodDisruptionBudgets kept");
  // A Service found through the API: created, converged, or adopted with our controller ref.
  assertEquals(serviceWrite(as, undefined, want, false).kind, "apply");
  assertEquals(serviceWrite(as, want, want, false).kind, "none");
  const adopt = serviceWrite(
    as,
    { ...want, metadata: { ...want.metadata, uid: "u1" } },
    want,
    true,
  );
  assert(adopt.kind === "merge");
  const meta = adopt.body.metadata as { uid: string; ownerReferences: { uid: string }[] };
  assertEquals(meta.uid, "u1");
  assertEquals(meta.ownerReferences.map((r) => r.uid), ["uid-web"]);
});

Deno.test("plan: deletes within the budget go only when a plan of the live Pods agrees", () => {
  const as = appService(2, 1, 0);
  const hash = specHash(as);
  const a = pod(0, false, "ready", hash);
  const b = pod(1, false, "notReady", hash);
  const planned = [
    { pod: a, why: "SpecChanged" as const, withinBudget: true },
    { pod: b, why: "SpecChanged" as const, withinBudget: false },
  ];
  assertEquals(agreedDeletes(planned, { delete: [] }).keep, [planned[1]]);
  assertEquals(agreedDeletes(planned, { delete: [planned[0]] }).keep, planned);
});

Deno.test("plan: what comes after a reconcile (nextStep)", () => {
  const base = { failures: [], wakeAtMs: Infinity, statusOutdated: false, nowMs: NOW };
  assertEquals(nextStep(base), { result: Reconcile.done });
  assertEquals(nextStep({ ...base, wakeAtMs: NOW + 2_000 }), { result: Reconcile.after(2_000) });
  assertEquals(nextStep({ ...base, wakeAtMs: NOW - 5 }), { result: Reconcile.after(1) });
  assertEquals(nextStep({ ...base, statusDueAtMs: NOW + 30_000 }), {
    result: Reconcile.after(30_000),
  });
  assertEquals(nextStep({ ...base, statusOutdated: true }), { result: Reconcile.backoff() });
  const refused = { reason: "PodCreateRejected", message: "no", rejected: true };
  assertEquals(nextStep({ ...base, failures: [refused], rejectedDelayMs: 5_000 }), {
    result: Reconcile.after(5_000),
    slowRetry: true,
  });
  assertEquals(
    nextStep({ ...base, failures: [refused], rejectedDelayMs: 5_000, wakeAtMs: NOW + 100 }),
    { result: Reconcile.after(100), slowRetry: true },
  );
  const failed = { reason: "FailedCreatePod", message: "boom" };
  assertEquals(nextStep({ ...base, failures: [refused, failed], rejectedDelayMs: 5_000 }), {
    fail: "no; boom",
  });
});
