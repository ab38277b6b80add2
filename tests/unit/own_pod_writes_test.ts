/**
 * OwnPodWrites (lib/appservice/written.ts): the Pods a reconciler created or deleted stand in its
 * view until the cache shows the write (the Pod informer's events), for at most
 * POD_WRITE_TRUST_MS; the plan made from that view neither creates a Pod again nor loses one.
 */
import type { Pod } from "kubernetes-types/core/v1.d.ts";
import { assert, assertEquals } from "../assert.ts";
import { OwnPodWrites, POD_WRITE_TRUST_MS } from "../../lib/appservice/written.ts";
import { planRollout, type RolloutParams } from "../../lib/appservice/rollout.ts";
import { SPEC_HASH_ANNOTATION } from "../../lib/appservice/pods.ts";

const OWNER = "as-uid";
const pod = (name: string, uid: string, o: { hash?: string; owner?: string; del?: string } = {}) =>
  ({
    apiVersion: "v1",
    kind: "Pod",
    metadata: {
      name,
      namespace: "ns",
      uid,
      annotations: { [SPEC_HASH_ANNOTATION]: o.hash ?? "h1" },
      ownerReferences: [{
        apiVersion: "apps.our-org.com/v1",
        kind: "AppService",
        name: "a",
        uid: o.owner ?? OWNER,
        controller: true,
      }],
      ...(o.del ? { deletionTimestamp: o.del } : {}),
    },
  }) as Pod;
const ready = (p: Pod): Pod => ({
  ...p,
  status: { phase: "Running", conditions: [{ type: "Ready", status: "True" }] },
});
const names = (pods: Pod[]) =>
  pods.map((p) =>
    `${p.metadata!.name}/${p.metadata!.uid}${p.metadata!.deletionTimestamp ? "(T)" : ""}`
  ).sort();
const params: RolloutParams = {
  replicas: 3,
  maxSurge: 1,
  maxUnavailable: 0,
  minReadySeconds: 0,
  progressDeadlineSeconds: 600,
} as RolloutParams;
const planOf = (pods: Pod[], hash: string, nowMs: number) =>
  planRollout(params, hash, "a", pods, "Always", nowMs, () => Infinity);

Deno.test("OwnPodWrites: a created Pod stands in the view until the cache shows it", () => {
  const w = new OwnPodWrites();
  const a0 = pod("a-0", "u0");
  const a1 = pod("a-1", "u1");
  assertEquals(w.view("ns/a", OWNER, [a0], 0), { pods: [a0] }, "nothing written: the cache as is");
  w.created("ns/a", a1, 1_000);
  const v = w.view("ns/a", OWNER, [a0], 1_500);
  assertEquals(names(v.pods), ["a-0/u0", "a-1/u1"]);
  assertEquals(v.expiresAtMs, 1_000 + POD_WRITE_TRUST_MS);
  // The cache's add event ends the record: the cache's own object is used from then on.
  const seen = pod("a-1", "u1");
  w.observed("ns/a", seen, false);
  assertEquals(w.size, 0);
  assertEquals(w.view("ns/a", OWNER, [a0, seen], 2_000), { pods: [a0, seen] });
  // Without the event, a cached Pod of its uid ends it too.
  w.created("ns/a", a1, 3_000);
  const shown = w.view("ns/a", OWNER, [a0, seen], 3_001);
  assertEquals(shown.pods, [a0, seen]);
  assertEquals(shown.expiresAtMs, undefined);
  assertEquals(w.size, 0);
});

Deno.test("OwnPodWrites: the add and a removal by someone else both seen between two reconciles: no stand-in", () => {
  const w = new OwnPodWrites();
  const a0 = pod("a-0", "u0");
  w.created("ns/a", a0, 0);
  w.observed("ns/a", a0, false);
  w.observed("ns/a", a0, true);
  assertEquals(w.view("ns/a", OWNER, [], 500).pods, []);
  assertEquals(
    planRollout({ ...params, replicas: 1 }, "h1", "a", [], "Always", 500, () => Infinity).create,
    [0],
    "made again at once",
  );
});

Deno.test("OwnPodWrites: a created Pod is not added while an older Pod of its name is cached", () => {
  const w = new OwnPodWrites();
  const old = pod("a-0", "old", { del: "2026-01-01T00:00:00Z" });
  w.created("ns/a", pod("a-0", "new"), 0);
  assertEquals(names(w.view("ns/a", OWNER, [old], 10).pods), ["a-0/old(T)"]);
  assertEquals(w.size, 1, "kept: the old one's removal is not seen yet");
  // Its removal seen, the new one's add not yet: the created Pod stands in.
  assertEquals(names(w.view("ns/a", OWNER, [], 20).pods), ["a-0/new"]);
});

Deno.test("OwnPodWrites: a deleted Pod the cache shows alive is seen going, until the cache shows it going", () => {
  const w = new OwnPodWrites();
  const a0 = pod("a-0", "u0");
  w.deleted("ns/a", a0, 5_000);
  const v = w.view("ns/a", OWNER, [a0], 5_001);
  assertEquals(names(v.pods), ["a-0/u0(T)"]);
  assertEquals(v.pods[0].metadata!.deletionTimestamp, new Date(5_000).toISOString());
  assert(a0.metadata!.deletionTimestamp === undefined, "the cache's object is not changed");
  // An update without a deletionTimestamp (e.g. a status change) does not end it.
  w.observed("ns/a", a0, false);
  assertEquals(names(w.view("ns/a", OWNER, [a0], 5_002).pods), ["a-0/u0(T)"]);
  // The update that carries the deletionTimestamp does.
  const going = pod("a-0", "u0", { del: "2026-01-01T00:00:00Z" });
  w.observed("ns/a", going, false);
  assertEquals(w.size, 0);
  assertEquals(w.view("ns/a", OWNER, [going], 5_003).pods, [going]);
  // A new Pod of that name (another uid) shows the delete is past.
  w.deleted("ns/a", a0, 0);
  const again = pod("a-0", "u9");
  assertEquals(w.view("ns/a", OWNER, [again], 1).pods, [again]);
  assertEquals(w.size, 0);
});

Deno.test("OwnPodWrites: created and deleted before the cache saw either: the slot stays taken, no second delete", () => {
  const w = new OwnPodWrites();
  const cache = [ready(pod("a-0", "u0", { hash: "h0" })), ready(pod("a-1", "u1", { hash: "h0" }))];
  // A reconcile of spec h1 creates a-2 (surge).
  const a2 = pod("a-2", "u2", { hash: "h1" });
  w.created("ns/a", a2, 0);
  // The next, of spec h2, deletes it at once (outdated, not Ready).
  let v = w.view("ns/a", OWNER, cache, 10);
  const first = planOf(v.pods, "h2", 10);
  assertEquals(first.delete.map((d) => d.pod.metadata!.name), ["a-2"]);
  w.deleted("ns/a", first.delete[0].pod, 20);
  // The cache still lacks a-2 (the apiserver has it, terminating): slot 2 is not free.
  v = w.view("ns/a", OWNER, cache, 30);
  assertEquals(names(v.pods), ["a-0/u0", "a-1/u1", "a-2/u2(T)"]);
  assertEquals(planOf(v.pods, "h2", 30).create.includes(2), false, "no create into slot 2");
  // The cache then shows its add (no deletionTimestamp yet): still going, not deleted again.
  w.observed("ns/a", a2, false);
  v = w.view("ns/a", OWNER, [...cache, a2], 40);
  assertEquals(names(v.pods), ["a-0/u0", "a-1/u1", "a-2/u2(T)"]);
  assertEquals(planOf(v.pods, "h2", 40).delete.map((d) => d.pod.metadata!.name), []);
  // Its removal seen: the record ends.
  w.observed("ns/a", a2, true);
  assertEquals(w.size, 0);
});

Deno.test("OwnPodWrites: records of another owner (an AppService of that name made again) are not used", () => {
  const w = new OwnPodWrites();
  w.created("ns/a", pod("a-0", "u0", { owner: "old-uid" }), 0);
  assertEquals(w.view("ns/a", OWNER, [], 100).pods, []);
  assertEquals(w.size, 0);
});

Deno.test("OwnPodWrites: records expire after POD_WRITE_TRUST_MS; forget drops a key", () => {
  const w = new OwnPodWrites();
  w.created("ns/a", pod("a-0", "u0"), 0);
  assertEquals(w.view("ns/a", OWNER, [], POD_WRITE_TRUST_MS - 1).pods.length, 1);
  assertEquals(w.view("ns/a", OWNER, [], POD_WRITE_TRUST_MS).pods.length, 0, "expired");
  assertEquals(w.size, 0);
  w.created("ns/a", pod("a-0", "u0"), 0);
  w.created("ns/b", pod("b-0", "u1"), 0);
  w.forget("ns/a");
  assertEquals(w.view("ns/a", OWNER, [], 1).pods, []);
  assertEquals(w.view("ns/b", OWNER, [], 1).pods.length, 1, "other keys kept");
  // A forgotten key's Pod events touch nothing.
  w.observed("ns/a", pod("a-0", "u0"), true);
  assertEquals(w.size, 1);
});

Deno.test("OwnPodWrites: a delete answered after the cache showed the Pod removed is not recorded", () => {
  let now = 0;
  const w = new OwnPodWrites(() => now);
  const a0 = pod("a-0", "u0");
  // An unscheduled Pod goes at once: its DELETED event is handled before the delete's answer.
  w.observed("ns/a", a0, true);
  w.deleted("ns/a", a0, 1);
  assertEquals(w.size, 0);
  assertEquals(w.view("ns/a", OWNER, [], 2).pods, [], "the slot is free at once");
  // The memory of removals lasts POD_WRITE_TRUST_MS.
  now = POD_WRITE_TRUST_MS;
  w.observed("ns/a", pod("a-1", "u1"), true);
  w.deleted("ns/a", a0, now);
  assertEquals(w.size, 1, "an old removal no longer counts");
});

Deno.test("OwnPodWrites: expired records of keys not reconciled again are swept as writes are noted", () => {
  const w = new OwnPodWrites(() => 0);
  w.created("ns/gone-away", pod("x-0", "ux"), 0);
  for (let i = 0; i < 300; i++) {
    w.created(`ns/k${i}`, pod(`k${i}-0`, `u${i}`), POD_WRITE_TRUST_MS + i);
  }
  // ns/gone-away was never viewed again, yet its record was swept.
  assertEquals(w.size, 300);
});
