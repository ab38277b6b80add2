/**
 * The rollout planner (lib/appservice/rollout.ts): parameters resolved as Deployment resolves
 * them, and its invariants under a simulated cluster whose cache lags behind (property tests):
 * never more Pods than `replicas + maxSurge`, never fewer available than `replicas -
 * maxUnavailable`, convergence to the new spec, a never-Ready spec leaving the old Pods serving,
 * and a rollback at once; and the PodDisruptionBudget it keeps (lib/appservice/disruption.ts).
 */
import fc from "fast-check";
import type { Pod } from "kubernetes-types/core/v1.d.ts";
import { assert, assertEquals } from "../assert.ts";
import { SPEC_HASH_ANNOTATION } from "../../lib/appservice/pods.ts";
import {
  desiredPdb,
  FIRST_RESYNC_DELAY_MS,
  MAX_RESYNC_DELAY_MS,
  pdbMatches,
  resyncDelayMs,
  syncFailure,
} from "../../lib/appservice/disruption.ts";
import type { AppService } from "../../lib/appservice/schema.ts";
import {
  isPodAvailable,
  madeProgress,
  planRollout,
  type RolloutParams,
  rolloutParams,
  scaledValue,
  slotCount,
} from "../../lib/appservice/rollout.ts";

Deno.test("rollout: parameters resolve as Deployment's (surge up, unavailable down, never both 0)", () => {
  assertEquals(scaledValue("25%", 1, true), 1);
  assertEquals(scaledValue("25%", 4, true), 1);
  assertEquals(scaledValue("25%", 5, true), 2);
  assertEquals(scaledValue("25%", 5, false), 1);
  assertEquals(scaledValue(3, 5, false), 3);
  const d = rolloutParams({ image: "a:1", replicas: 4 });
  assertEquals([d.maxSurge, d.maxUnavailable, d.minReadySeconds, d.progressDeadlineSeconds], [
    1,
    0,
    0,
    600,
  ]);
  const one = rolloutParams({ image: "a:1" });
  assertEquals([one.replicas, one.maxSurge, one.maxUnavailable], [1, 1, 0]);
  const zero = rolloutParams({
    image: "a:1",
    replicas: 3,
    strategy: { rollingUpdate: { maxSurge: 0, maxUnavailable: "10%" } },
  });
  assertEquals(
    [zero.maxSurge, zero.maxUnavailable],
    [0, 1],
    "both 0 after rounding: 1 unavailable",
  );
  const capped = rolloutParams({
    image: "a:1",
    replicas: 2,
    strategy: { rollingUpdate: { maxUnavailable: 7 } },
  });
  assertEquals(capped.maxUnavailable, 2);
  assertEquals(slotCount(d), 5);
});

const READY_SINCE_EVER = "2000-01-01T00:00:00Z";

/** A cached Pod: name, spec hash, Ready since (ISO) or not Ready, terminating or not. */
function pod(name: string, hash: string, readySince?: string, terminating = false): Pod {
  return {
    metadata: {
      name,
      uid: `uid-${name}-${hash}`,
      annotations: { [SPEC_HASH_ANNOTATION]: hash },
      deletionTimestamp: terminating ? "2000-01-01T00:00:00Z" : undefined,
    },
    status: {
      phase: "Running",
      conditions: [{
        type: "Ready",
        status: readySince ? "True" : "False",
        lastTransitionTime: readySince ?? READY_SINCE_EVER,
      }],
    },
  };
}

const NOW = Date.parse("2026-01-01T00:00:00Z");
const plan = (p: RolloutParams, pods: Pod[], hash = "b") =>
  planRollout(p, hash, "web", pods, "Always", NOW, () => Infinity);

Deno.test("rollout: surge first; an old Pod goes only once a new one is available", () => {
  const p = rolloutParams({ image: "a:1", replicas: 1 });
  const old = pod("web-0", "a", READY_SINCE_EVER);
  let x = plan(p, [old]);
  assertEquals(x.create, [1], "the new Pod in the free slot");
  assertEquals(x.delete, [], "the old Pod stays");
  x = plan(p, [old, pod("web-1", "b")]);
  assertEquals([x.create, x.delete], [[], []], "new Pod not Ready: wait");
  x = plan(p, [old, pod("web-1", "b", READY_SINCE_EVER)]);
  assertEquals(x.delete.map((d) => [d.pod.metadata?.name, d.why, d.withinBudget]), [
    ["web-0", "SpecChanged", true],
  ]);
  assertEquals(x.counts.available, 2);
});

Deno.test("rollout: minReadySeconds holds the old Pod and says when to look again", () => {
  const p = rolloutParams({ image: "a:1", replicas: 1, minReadySeconds: 10 });
  const since = new Date(NOW - 4_000).toISOString();
  const x = plan(p, [pod("web-0", "a", READY_SINCE_EVER), pod("web-1", "b", since)]);
  assertEquals(x.delete, []);
  assertEquals(x.nextAvailableAtMs, NOW + 6_000);
  assert(!isPodAvailable(pod("web-1", "b", since), 10, NOW));
  assert(isPodAvailable(pod("web-1", "b", since), 4, NOW));
  assert(!isPodAvailable(pod("web-1", "b", READY_SINCE_EVER, true), 0, NOW), "terminating");
});

Deno.test("rollout: outdated Pods that are not Ready go at once (a rollback is immediate)", () => {
  const p = rolloutParams({ image: "a:1", replicas: 2 });
  // Rolled back to "a": the "b" Pod never became Ready.
  const x = plan(p, [
    pod("web-0", "a", READY_SINCE_EVER),
    pod("web-1", "a", READY_SINCE_EVER),
    pod("web-2", "b"),
  ], "a");
  assertEquals(x.delete.map((d) => [d.pod.metadata?.name, d.withinBudget]), [["web-2", false]]);
  assertEquals(x.create, []);
});

Deno.test("rollout: scale down removes out-of-range slots and extra current Pods, not Ready first", () => {
  const p = rolloutParams({ image: "a:1", replicas: 2 }); // 3 slots
  const x = plan(p, [
    pod("web-0", "b", READY_SINCE_EVER),
    pod("web-1", "b"),
    pod("web-2", "b", READY_SINCE_EVER),
    pod("web-5", "b", READY_SINCE_EVER),
  ]);
  assertEquals(x.delete.map((d) => [d.pod.metadata?.name, d.why]).sort(), [
    ["web-1", "ScaledDown"],
    ["web-5", "ScaledDown"],
  ]);
});

Deno.test("rollout: a failed Pod's replacement waits for its slot and goes back into it", () => {
  const p = rolloutParams({ image: "a:1", replicas: 2 }); // slots 0, 1, 2
  const failed = (terminating: boolean) => {
    const x = pod("web-2", "b", undefined, terminating);
    x.status!.phase = "Failed";
    return x;
  };
  const ok = pod("web-1", "b", READY_SINCE_EVER);
  const due = () => NOW - 1;
  let x = planRollout(p, "b", "web", [ok, failed(false)], "Always", NOW, due, new Set([2]));
  assertEquals(x.delete.map((d) => [d.pod.metadata?.name, d.why]), [["web-2", "PodFailed"]]);
  assertEquals(x.create, [], "not elsewhere while it is there");
  x = planRollout(p, "b", "web", [ok, failed(true)], "Always", NOW, due, new Set([2]));
  assertEquals(x.create, [], "nor while it terminates");
  x = planRollout(p, "b", "web", [ok], "Always", NOW, due, new Set([2]));
  assertEquals(x.create, [2], "back into its slot, where its failures are counted");
  const held = planRollout(p, "b", "web", [ok, failed(false)], "Always", NOW, () => NOW + 5);
  assertEquals([held.delete, held.create, held.held.length], [[], [], 1], "held until due");
});

Deno.test("rollout: progress is Deployment's (more updated, ready or available; fewer old)", () => {
  const a = { replicas: 4, updatedReplicas: 1, readyReplicas: 4, availableReplicas: 4 };
  assert(!madeProgress(a, a));
  assert(madeProgress(a, { ...a, updatedReplicas: 2, replicas: 5 }));
  assert(madeProgress(a, { ...a, replicas: 3 }), "an old Pod went");
  assert(!madeProgress(a, { ...a, readyReplicas: 3 }));
  assert(madeProgress(undefined, a));
});

// ---------------------------------------------------------------------------------------------
// Property tests: a simulated cluster (the truth) and a cache that lags behind it.

interface SimPod {
  slot: number;
  hash: string;
  uid: string;
  readySinceMs?: number;
  terminating: boolean;
}

/** One action of the simulation. */
type Step = "reconcile" | "ready" | "gone" | "tick";

class Sim {
  truth = new Map<number, SimPod>();
  /** Snapshots of the truth as Pods, oldest first; the cache reads one of them. */
  history: Pod[][] = [];
  cacheAt = 0;
  nowMs = NOW;
  uid = 0;
  maxTotal = 0;
  minAvailable = Infinity;
  constructor(public p: RolloutParams, public hash: string, public broken: Set<string>) {
    for (let s = 0; s < p.replicas; s++) {
      this.truth.set(s, {
        slot: s,
        hash,
        uid: `u${this.uid++}`,
        readySinceMs: NOW - 3_600_000,
        terminating: false,
      });
    }
    this.snap();
  }
  toPod(x: SimPod): Pod {
    const ready = x.readySinceMs !== undefined;
    return {
      metadata: {
        name: `web-${x.slot}`,
        uid: x.uid,
        annotations: { [SPEC_HASH_ANNOTATION]: x.hash },
        deletionTimestamp: x.terminating ? new Date(this.nowMs).toISOString() : undefined,
      },
      status: {
        phase: "Running",
        conditions: [{
          type: "Ready",
          status: ready ? "True" : "False",
          lastTransitionTime: new Date(x.readySinceMs ?? NOW).toISOString(),
        }],
      },
    };
  }
  pods(): Pod[] {
    return [...this.truth.values()].map((x) => this.toPod(x));
  }
  snap() {
    this.history.push(this.pods());
    const pods = this.pods();
    this.maxTotal = Math.max(this.maxTotal, pods.length);
    const avail = pods.filter((x) => isPodAvailable(x, this.p.minReadySeconds, this.nowMs)).length;
    this.minAvailable = Math.min(this.minAvailable, avail);
  }
  /** One reconcile on a cache `lag` snapshots behind (never behind what it read before). */
  reconcile(lag: number) {
    this.cacheAt = Math.max(this.cacheAt, this.history.length - 1 - lag);
    const view = this.history[this.cacheAt];
    const x = planRollout(this.p, this.hash, "web", view, "Always", this.nowMs, () => Infinity);
    for (const slot of x.create) {
      if (this.truth.has(slot)) continue; // AlreadyExists
      this.truth.set(slot, { slot, hash: this.hash, uid: `u${this.uid++}`, terminating: false });
      this.snap();
    }
    // Budget deletions only where a consistent read agrees (reconcile.ts does the same).
    const live = planRollout(
      this.p,
      this.hash,
      "web",
      this.pods(),
      "Always",
      this.nowMs,
      () => Infinity,
    );
    const agreed = new Set(
      live.delete.filter((d) => d.withinBudget).map((d) => d.pod.metadata?.uid),
    );
    for (const d of x.delete) {
      if (d.withinBudget && !agreed.has(d.pod.metadata?.uid)) continue;
      const t = [...this.truth.values()].find((y) => y.uid === d.pod.metadata?.uid);
      if (!t || t.terminating) continue; // gone, or already being deleted
      t.terminating = true;
      this.snap();
    }
  }
  step(s: Step, pick: number, lag: number) {
    if (s === "reconcile") return this.reconcile(lag);
    if (s === "tick") {
      this.nowMs += 1_000;
      return this.snap();
    }
    const cands = [...this.truth.values()].filter((y) =>
      s === "gone" ? y.terminating : !y.terminating && y.readySinceMs === undefined &&
        !this.broken.has(y.hash)
    );
    if (cands.length === 0) return;
    const y = cands[pick % cands.length];
    if (s === "gone") this.truth.delete(y.slot);
    else y.readySinceMs = this.nowMs;
    this.snap();
  }
  /** Everything that can happen happens, with an up-to-date cache, until nothing changes. */
  settle() {
    for (let i = 0; i < 400; i++) {
      this.reconcile(0);
      for (const y of [...this.truth.values()]) {
        if (y.terminating) this.truth.delete(y.slot);
        else if (y.readySinceMs === undefined && !this.broken.has(y.hash)) {
          y.readySinceMs = this.nowMs;
        }
      }
      this.nowMs += 1_000;
      this.snap();
    }
  }
  count(hash: string, available?: boolean): number {
    return this.pods().filter((x) =>
      x.metadata?.annotations?.[SPEC_HASH_ANNOTATION] === hash && !x.metadata.deletionTimestamp &&
      (available === undefined ||
        isPodAvailable(x, this.p.minReadySeconds, this.nowMs) === available)
    ).length;
  }
}

const arbParams = fc.record({
  replicas: fc.integer({ min: 1, max: 10 }),
  maxSurge: fc.oneof(fc.integer({ min: 0, max: 4 }), fc.constantFrom("0%", "25%", "50%", "100%")),
  maxUnavailable: fc.oneof(
    fc.integer({ min: 0, max: 3 }),
    fc.constantFrom("0%", "25%", "50%"),
  ),
  minReadySeconds: fc.integer({ min: 0, max: 3 }),
});
/** A drawn set of spec fields. */
type ArbParams = {
  replicas: number;
  maxSurge: number | string;
  maxUnavailable: number | string;
  minReadySeconds: number;
};
const arbSteps = fc.array(
  fc.tuple(
    fc.constantFrom<Step>("reconcile", "reconcile", "ready", "gone", "tick"),
    fc.nat(20),
    fc.nat(6),
  ),
  { minLength: 20, maxLength: 300 },
);

function paramsOf(a: ArbParams): RolloutParams {
  return rolloutParams({
    image: "a:1",
    replicas: a.replicas,
    minReadySeconds: a.minReadySeconds,
    strategy: { rollingUpdate: { maxSurge: a.maxSurge, maxUnavailable: a.maxUnavailable } },
  });
}

Deno.test("rollout property: slots bound the Pods, availability never below replicas - maxUnavailable, converges", () => {
  fc.assert(
    fc.property(arbParams, arbSteps, (a, steps) => {
      const p = paramsOf(a);
      const sim = new Sim(p, "a", new Set());
      sim.hash = "b"; // the spec changes
      for (const [s, pick, lag] of steps) sim.step(s, pick, lag);
      sim.settle();
      assert(sim.maxTotal <= slotCount(p), `${sim.maxTotal} Pods > ${slotCount(p)} slots`);
      assert(
        sim.minAvailable >= p.replicas - p.maxUnavailable,
        `available fell to ${sim.minAvailable} < ${p.replicas - p.maxUnavailable}`,
      );
      assertEquals(sim.count("b", true), p.replicas, "all new Pods available");
      assertEquals(sim.count("a"), 0, "no old Pod left");
      assertEquals(sim.truth.size, p.replicas);
    }),
    { numRuns: 300, seed: 20261202 },
  );
});

Deno.test("rollout property: a never-Ready spec keeps the old Pods serving; reverting rolls back", () => {
  fc.assert(
    fc.property(arbParams, arbSteps, (a, steps) => {
      const p = paramsOf(a);
      const sim = new Sim(p, "a", new Set(["b"]));
      sim.hash = "b";
      for (const [s, pick, lag] of steps) sim.step(s, pick, lag);
      sim.settle();
      assert(sim.maxTotal <= slotCount(p));
      assert(sim.minAvailable >= p.replicas - p.maxUnavailable);
      assert(sim.count("a", true) >= p.replicas - p.maxUnavailable);
      sim.hash = "a"; // rolled back
      sim.settle();
      assertEquals(sim.count("a", true), p.replicas);
      assertEquals(sim.count("b"), 0, "the never-Ready Pods are gone");
    }),
    { numRuns: 300, seed: 20261203 },
  );
});

Deno.test("disruption budget: for 2+ replicas the rollout's maxUnavailable, at least 1; explicit; off", () => {
  const as = (spec: Record<string, unknown>) =>
    ({
      apiVersion: "apps.our-org.com/v1",
      kind: "AppService",
      metadata: { name: "web", namespace: "ns", uid: "u" },
      spec: { image: "a:1", ...spec },
    }) as AppService;
  const budget = (spec: Record<string, unknown>) => {
    const a = as(spec);
    return desiredPdb(a, rolloutParams(a.spec))?.spec?.maxUnavailable;
  };
  assertEquals(budget({}), undefined, "one replica: none");
  assertEquals(budget({ replicas: 2 }), 1);
  assertEquals(budget({ replicas: 4, strategy: { rollingUpdate: { maxUnavailable: 2 } } }), 2);
  assertEquals(budget({ podDisruptionBudget: { maxUnavailable: 0 } }), 0, "asked for: kept");
  assertEquals(budget({ replicas: 3, podDisruptionBudget: { enabled: false } }), undefined);
  const pdb = desiredPdb(as({ replicas: 3 }), rolloutParams({ image: "a:1", replicas: 3 }))!;
  assert(pdbMatches(pdb, pdb));
  assert(!pdbMatches({ ...pdb, spec: { ...pdb.spec, maxUnavailable: 2 } }, pdb));
});

Deno.test("disruption budget: SyncFailed is recognised; resyncs back off from 5 s to 5 min", () => {
  const cond = (status: string, reason: string, message = "m") =>
    ({
      status: { conditions: [{ type: "DisruptionAllowed", status, reason, message }] },
    }) as unknown as Parameters<typeof syncFailure>[0];
  assertEquals(
    syncFailure(cond("False", "SyncFailed", 'no matches for kind "AppService"')),
    'no matches for kind "AppService"',
  );
  assertEquals(syncFailure(cond("False", "InsufficientPods")), undefined, "a budget at its limit");
  assertEquals(syncFailure(cond("True", "SufficientPods")), undefined);
  assertEquals(syncFailure({}), undefined, "not computed yet");
  assertEquals(resyncDelayMs(0), FIRST_RESYNC_DELAY_MS);
  assertEquals(resyncDelayMs(1), 2 * FIRST_RESYNC_DELAY_MS);
  fc.assert(fc.property(fc.nat(100), (n) => {
    const d = resyncDelayMs(n);
    return d >= FIRST_RESYNC_DELAY_MS && d <= MAX_RESYNC_DELAY_MS &&
      resyncDelayMs(n + 1) >= d;
  }));
  assertEquals(resyncDelayMs(50), MAX_RESYNC_DELAY_MS);
});
