/**
 * The sharding e2e test's checker (tests/e2e/shard_audit.ts) on synthetic records: it must find a
 * write to a shard its writer did not hold, a write after a release, a takeover before the lease
 * ran out, and a join that does not match; and accept what a correct run looks like. The e2e's
 * "zero violations" is only worth something because these fail.
 */
import { assert, assertEquals } from "../assert.ts";
import {
  fenceViolations,
  fnv1a64,
  holdIntervals,
  joinLeaseWrites,
  type LeaseWrite,
  type NamespacedWrite,
  namespacesPerShard,
  shardOfNamespace,
} from "../e2e/shard_audit.ts";
import type { AuditEvent } from "../../lib/testing/mod.ts";

const LEASE_MS = 4_000;
const T = Date.parse("2026-01-01T00:00:00Z");

/** A Lease write of `user` on `shard` at `t` ms after T (completed 2 ms later). */
const lw = (shard: number, user: string, holder: string, t: number): LeaseWrite => ({
  shard,
  user,
  holder,
  receivedMs: T + t,
  completedMs: T + t + 2,
});
/** A write of `user` in `namespace` at `t` ms after T. */
const nw = (user: string, namespace: string, t: number): NamespacedWrite => ({
  user,
  namespace,
  receivedMs: T + t,
  what: `patch ${namespace}`,
});
/** Namespaces named by their shard: "ns0" is in shard 0, and so on. */
const shardOf = (ns: string) => Number(ns.slice(2));

Deno.test("fnv1a64 is Go's FNV-1a (known vectors) and the shards split as the contract says", () => {
  // Go: fnv.New64a() of "" and "a" (hash/fnv's test vectors).
  assertEquals(fnv1a64(""), 0xcbf29ce484222325n);
  assertEquals(fnv1a64("a"), 0xaf63dc4c8601ec8cn);
  assertEquals(shardOfNamespace("a", 1), 0);
  // 0xaf63… is in the upper half of 2 and in shard 2 of 3 (bounds 0x5555…, 0xaaaa…).
  assertEquals(shardOfNamespace("a", 2), 1);
  assertEquals(shardOfNamespace("a", 3), 2);
  const names = namespacesPerShard("x", 6, 2);
  assertEquals(names.map((ns) => ns.length), [2, 2, 2, 2, 2, 2]);
  for (const [k, ns] of names.entries()) {
    for (const n of ns) assertEquals(shardOfNamespace(n, 6), k);
  }
});

Deno.test("a correct run: acquisitions, renewals, a release and a takeover after expiry pass", () => {
  const { intervals, overlaps } = holdIntervals([
    lw(0, "a", "a_00000001", 0),
    lw(0, "a", "a_00000001", 1_000),
    lw(0, "a", "", 2_000), // release
    lw(0, "b", "b_00000002", 2_100),
    lw(1, "c", "c_00000003", 0),
    lw(1, "c", "c_00000003", 1_000), // then c crashes
    lw(1, "b", "b_00000002", 1_000 + LEASE_MS + 500),
  ], LEASE_MS);
  assertEquals(overlaps, []);
  assertEquals(intervals.map((i) => [i.shard, i.user, i.end]), [
    [0, "a", "released"],
    [0, "b", "expired"],
    [1, "c", "taken"],
    [1, "b", "expired"],
  ]);
  const check = fenceViolations(intervals, [
    nw("a", "ns0", 500),
    nw("a", "ns0", 1_999),
    nw("b", "ns0", 2_500),
    nw("c", "ns1", 4_000), // after its last renewal, before its lease ran out
    nw("b", "ns1", 6_000),
  ], shardOf);
  assertEquals(check.violations, []);
  assertEquals([...check.checked], [["a", 2], ["b", 2], ["c", 1]]);
});

Deno.test("synthetic violations are found: wrong shard, after release, before acquisition, takeover", () => {
  const { intervals, overlaps } = holdIntervals([
    lw(0, "a", "a_00000001", 0),
    lw(0, "a", "", 2_000),
    lw(1, "b", "b_00000002", 0),
    lw(1, "b", "b_00000002", 1_000),
    lw(1, "c", "c_00000003", 2_000), // taken while b's lease runs until 5,000
  ], LEASE_MS);
  assertEquals(overlaps.length, 1);
  assert(/shard 1: c wrote its Lease/.test(overlaps[0]), overlaps[0]);
  const check = fenceViolations(intervals, [
    nw("a", "ns1", 500), // a never held shard 1
    nw("a", "ns0", 2_001), // after its release
    nw("c", "ns1", 1_500), // before its acquisition
    nw("b", "ns1", 2_500), // after c took it
    nw("a", "ns0", 1), // before its acquisition completed (0 + 2 ms)
  ], shardOf);
  assertEquals(check.violations.length, 5, check.violations.join("\n"));
  assert(/held then by b/.test(check.violations[0]), check.violations[0]);
});

Deno.test("a handover marker ends the previous hold; a write with the marker opens none", () => {
  const { intervals } = holdIntervals([
    lw(0, "a", "a_00000001", 0),
    lw(0, "b", "handover:b.00000002.1234abcd", LEASE_MS + 100),
    lw(0, "b", "b_00000002", LEASE_MS + 300),
  ], LEASE_MS);
  assertEquals(intervals.map((i) => [i.user, i.end]), [["a", "taken"], ["b", "expired"]]);
  const check = fenceViolations(intervals, [nw("b", "ns0", LEASE_MS + 200)], shardOf);
  assertEquals(check.violations.length, 1);
});

Deno.test("joinLeaseWrites pairs audit writes with watched versions and says when they disagree", () => {
  const ev = (user: string, name: string, t: number, code = 200): AuditEvent => ({
    verb: "update",
    requestURI: `/apis/coordination.k8s.io/v1/namespaces/le/leases/${name}`,
    user: { username: user },
    objectRef: { resource: "leases", namespace: "le", name },
    responseStatus: { code },
    requestReceivedTimestamp: new Date(T + t).toISOString(),
    stageTimestamp: new Date(T + t + 2).toISOString(),
  });
  const lease = (holder: string) => ({ spec: { holderIdentity: holder } });
  const events = [
    ev("a", "op-shard-0", 0),
    ev("b", "op-shard-0", 10, 409), // a failed write stores nothing
    ev("a", "op-shard-0", 1_000),
    ev("a", "op-members-a", 1_000), // not a shard Lease
  ];
  const ok = joinLeaseWrites(
    events,
    new Map([["op-shard-0", [lease("a_1"), lease("")]]]),
    "op",
    "le",
    T - 1,
  );
  assertEquals(ok.mismatches, []);
  assertEquals(ok.writes.map((w) => [w.user, w.holder]), [["a", "a_1"], ["a", ""]]);
  const short = joinLeaseWrites(
    events,
    new Map([["op-shard-0", [lease("a_1")]]]),
    "op",
    "le",
    T - 1,
  );
  assertEquals(short.mismatches, ["op-shard-0: 2 writes in the audit log, 1 versions"]);
  const wrong = joinLeaseWrites(
    events,
    new Map([["op-shard-0", [lease("b_2"), lease("a_1")]]]),
    "op",
    "le",
    T - 1,
  );
  assertEquals(wrong.mismatches, ["op-shard-0: write 0 by a stored holder b_2"]);
});
