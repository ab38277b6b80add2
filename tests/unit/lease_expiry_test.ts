/**
 * lib/runtime/lease_expiry.ts: a Lease record runs out a lease duration after it was first seen
 * unchanged on this process's clock, whatever time it carries; a changed record starts again.
 */
import type { Lease } from "kubernetes-types/coordination/v1.d.ts";
import { assert, assertEquals } from "../assert.ts";
import {
  leaseDurationMs,
  runsOutAtMs,
  SeenLeases,
  seeRecord,
  stillRuns,
} from "../../lib/runtime/lease_expiry.ts";

Deno.test("lease expiry: the wait counts from the first sight of a record, on the local clock", () => {
  const first = seeRecord(undefined, "a@1", 15_000, 1_000);
  assertEquals(runsOutAtMs(first), 16_000);
  // The same record seen later: the same wait (not restarted by being seen again).
  const again = seeRecord(first, "a@1", 15_000, 9_000);
  assert(again === first);
  assert(stillRuns(again, 15_999));
  assert(!stillRuns(again, 16_000));
  // A renewal (another key) starts the wait again from its sight.
  const renewed = seeRecord(again, "a@2", 15_000, 12_000);
  assertEquals(runsOutAtMs(renewed), 27_000);
  assert(stillRuns(renewed, 20_000));
});

Deno.test("lease expiry: the record's own duration, else the default", () => {
  assertEquals(leaseDurationMs({ spec: { leaseDurationSeconds: 4 } }, 15), 4_000);
  assertEquals(leaseDurationMs({ spec: {} }, 15), 15_000);
  assertEquals(leaseDurationMs({}, 2), 2_000);
});

Deno.test("lease expiry: SeenLeases keeps each Lease's record and forgets those no longer listed", () => {
  const seen = new SeenLeases();
  const a1 = seen.see("a", "rv1", 10_000, 0);
  seen.see("b", "rv7", 10_000, 0);
  assert(seen.see("a", "rv1", 10_000, 5_000) === a1);
  assertEquals(seen.size, 2);
  seen.keepOnly(new Set(["a"]));
  assertEquals(seen.size, 1);
  // Forgotten, then listed again: a new wait from now (a re-created Lease is a new record).
  assertEquals(runsOutAtMs(seen.see("b", "rv7", 10_000, 6_000)), 16_000);
  seen.forget("a");
  assertEquals(runsOutAtMs(seen.see("a", "rv1", 10_000, 7_000)), 17_000);
});

Deno.test("lease expiry: SeenLeases.seeLease gives the holder while the record runs, by resourceVersion or renewTime", () => {
  const seen = new SeenLeases();
  const lease = (rv: string, renewTime: string, holder = "a"): Lease => ({
    metadata: { name: "l", resourceVersion: rv },
    spec: { holderIdentity: holder, leaseDurationSeconds: 10, renewTime },
  });
  assertEquals(seen.seeLease(lease("1", "t1"), 15, 0).holder, "a");
  assertEquals(seen.seeLease(lease("1", "t1"), 15, 9_999).holder, "a");
  const out = seen.seeLease(lease("1", "t1"), 15, 10_000);
  assertEquals(out.holder, undefined, "unchanged for a lease duration: ran out");
  assertEquals(out.record.sinceMs, 0);
  // A new resourceVersion is a new record; keyed by renewTime, only a renewal is.
  assertEquals(seen.seeLease(lease("2", "t1"), 15, 10_000).holder, "a");
  const byRenew = new SeenLeases();
  byRenew.seeLease(lease("1", "t1"), 15, 0, "renewTime");
  assertEquals(byRenew.seeLease(lease("2", "t1"), 15, 10_000, "renewTime").holder, undefined);
  assertEquals(byRenew.seeLease(lease("3", "t2"), 15, 10_000, "renewTime").holder, "a");
  // No holder: never live.
  assertEquals(new SeenLeases().seeLease(lease("1", "t1", ""), 15, 0).holder, undefined);
});
