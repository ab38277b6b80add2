/**
 * WrittenVersions (lib/runtime/written.ts): a reconcile after the reconciler's own write starts
 * from the answered object while the cache still holds a version that write replaced.
 */
import { assertEquals } from "../assert.ts";
import type { KubeObject } from "../../lib/kube/client.ts";
import { MAX_REPLACED_VERSIONS, WrittenVersions } from "../../lib/runtime/written.ts";

const obj = (rv: string, uid = "u1", status = ""): KubeObject & { status?: string } => ({
  apiVersion: "v1",
  kind: "ConfigMap",
  metadata: { name: "a", namespace: "ns", uid, resourceVersion: rv },
  status,
});

Deno.test("WrittenVersions: the answered object while the cache lags; the cache once it caught up or moved on", () => {
  const w = new WrittenVersions();
  const v1 = obj("1");
  const v2 = obj("2", "u1", "finalizer");
  const v3 = obj("3", "u1", "status");
  assertEquals(w.newest("ns/a", v1), v1, "nothing written: the cache");
  w.note("ns/a", v1, v2);
  w.note("ns/a", v2, v3); // writes in a row: both replaced versions are known
  assertEquals(w.newest("ns/a", v1), v3, "cache at the first replaced version");
  assertEquals(w.newest("ns/a", v2), v3, "cache at the second");
  assertEquals(w.size, 1);
  // The cache caught up: the record goes.
  assertEquals(w.newest("ns/a", v3), v3);
  assertEquals(w.size, 0);
  assertEquals(w.newest("ns/a", v1), v1, "forgotten once caught up");
  // Another writer moved it on: the cache wins.
  w.note("ns/a", v1, v2);
  const other = obj("9");
  assertEquals(w.newest("ns/a", other), other);
  // A new object of the same name (another uid) is never replaced by the old one's answer.
  w.note("ns/a", v1, v2);
  const recreated = obj("1", "u2");
  assertEquals(w.newest("ns/a", recreated), recreated);
  w.note("ns/a", v1, v2);
  w.forget("ns/a");
  assertEquals(w.newest("ns/a", v1), v1);
});

Deno.test("WrittenVersions: replaced versions are bounded per key", () => {
  const w = new WrittenVersions();
  let prev = obj("0");
  const first = prev;
  for (let i = 1; i <= MAX_REPLACED_VERSIONS + 1; i++) {
    const next = obj(String(i));
    w.note("ns/a", prev, next);
    prev = next;
  }
  // The oldest replaced version was dropped: a cache that far behind is not waited for.
  assertEquals(w.newest("ns/a", first), first);
});
