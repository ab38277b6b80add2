/**
 * OwnPodWrites (lib/appservice/written.ts): the Pods a reconciler created or deleted stand in its
 * view until the cache shows the write, for at most POD_WRITE_TRUST_MS.
 */
import type { Pod } from "kubernetes-types/core/v1.d.ts";
import { assert, assertEquals } from "../assert.ts";
import { OwnPodWrites, POD_WRITE_TRUST_MS } from "../../lib/appservice/written.ts";

const pod = (name: string, uid: string, deletionTimestamp?: string): Pod => ({
  apiVersion: "v1",
  kind: "Pod",
  metadata: { name, namespace: "ns", uid, ...(deletionTimestamp ? { deletionTimestamp } : {}) },
});
const names = (pods: Pod[]) => pods.map((p) => `${p.metadata!.name}/${p.metadata!.uid}`).sort();

Deno.test("OwnPodWrites: a created Pod stands in the view until the cache shows it", () => {
  const w = new OwnPodWrites();
  const a0 = pod("a-0", "u0");
  const a1 = pod("a-1", "u1");
  assertEquals(w.view("ns/a", [a0], 0), { pods: [a0] }, "nothing written: the cache as is");
  w.created("ns/a", a1, 1_000);
  const v = w.view("ns/a", [a0], 1_500);
  assertEquals(names(v.pods), ["a-0/u0", "a-1/u1"]);
  assertEquals(v.expiresAtMs, 1_000 + POD_WRITE_TRUST_MS);
  // The cache caught up: the record goes and the cache's own object is used.
  const seen = pod("a-1", "u1");
  const caught = w.view("ns/a", [a0, seen], 2_000);
  assertEquals(caught.pods, [a0, seen]);
  assertEquals(caught.expiresAtMs, undefined);
  assertEquals(w.size, 0);
});

Deno.test("OwnPodWrites: a created Pod is not added while an older Pod of its name is cached", () => {
  const w = new OwnPodWrites();
  const old = pod("a-0", "old", "2026-01-01T00:00:00Z");
  w.created("ns/a", pod("a-0", "new"), 0);
  assertEquals(names(w.view("ns/a", [old], 10).pods), ["a-0/old"]);
  assertEquals(w.size, 1, "kept: the old one's delete is not seen yet");
  // Its delete seen, the new one's add not yet: the created Pod stands in.
  assertEquals(names(w.view("ns/a", [], 20).pods), ["a-0/new"]);
});

Deno.test("OwnPodWrites: a deleted Pod the cache shows alive is seen going; dropped once shown", () => {
  const w = new OwnPodWrites();
  const a0 = pod("a-0", "u0");
  w.deleted("ns/a", a0, 5_000);
  const v = w.view("ns/a", [a0], 5_001);
  assertEquals(v.pods.length, 1);
  assertEquals(v.pods[0].metadata!.deletionTimestamp, new Date(5_000).toISOString());
  assert(a0.metadata!.deletionTimestamp === undefined, "the cache's object is not changed");
  // The cache shows the deletion (a deletionTimestamp, or gone): dropped.
  const going = pod("a-0", "u0", "2026-01-01T00:00:00Z");
  assertEquals(w.view("ns/a", [going], 5_002).pods, [going]);
  assertEquals(w.size, 0);
  w.deleted("ns/a", a0, 0);
  assertEquals(w.view("ns/a", [], 1).pods, []);
  assertEquals(w.size, 0);
  // A new Pod of that name (another uid) is not the deleted one.
  w.deleted("ns/a", a0, 0);
  const again = pod("a-0", "u9");
  assertEquals(w.view("ns/a", [again], 1).pods, [again]);
});

Deno.test("OwnPodWrites: records expire after POD_WRITE_TRUST_MS; forget drops a key", () => {
  const w = new OwnPodWrites();
  w.created("ns/a", pod("a-0", "u0"), 0);
  assertEquals(w.view("ns/a", [], POD_WRITE_TRUST_MS - 1).pods.length, 1);
  assertEquals(w.view("ns/a", [], POD_WRITE_TRUST_MS).pods.length, 0, "expired");
  assertEquals(w.size, 0);
  w.created("ns/a", pod("a-0", "u0"), 0);
  w.created("ns/b", pod("b-0", "u1"), 0);
  w.forget("ns/a");
  assertEquals(w.view("ns/a", [], 1).pods, []);
  assertEquals(w.view("ns/b", [], 1).pods.length, 1, "other keys kept");
});
