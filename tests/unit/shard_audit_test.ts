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

Deno.test("joinLeaseWrites pairs each stored version with the write that sent it", () => {
  const spec = (holder: string, t: number) => ({
    holderIdentity: holder,
    renewTime: new Date(T + t).toISOString().replace("Z", "000Z"),
  });
  const ev = (user: string, name: string, t: number, sent: unknown, code = 200): AuditEvent => ({
    verb: "update",
    requestURI: `/apis/coordination.k8s.io/v1/namespaces/le/leases/${name}`,
    user: { username: user },
    objectRef: { resource: "leases", namespace: "le", name },
    responseStatus: { code },
    requestReceivedTimestamp: new Date(T + t).toISOString(),
    stageTimestamp: new Date(T + t + 2).toISOString(),
    requestObject: sent === undefined ? undefined : { spec: sent },
  });
  const lease = (holder: string, t: number) => ({ spec: spec(holder, t) });
  const events = [
    ev("a", "op-shard-0", 0, spec("a_1", 0)),
    ev("b", "op-shard-0", 10, spec("b_2", 10), 409), // refused: stores nothing
    ev("a", "op-shard-0", 1_000, spec("", 1_000)),
    ev("a", "op-members-a", 1_000, spec("a_1", 1_000)), // not a shard Lease
  ];
  const join = (evs: AuditEvent[], versions: { spec: unknown }[]) =>
    joinLeaseWrites(evs, new Map([["op-shard-0", versions as never]]), "op", "le", T - 1);
  const ok = join(events, [lease("a_1", 0), lease("", 1_000)]);
  assertEquals(ok.mismatches, []);
  assertEquals(ok.lostAnswers, []);
  assertEquals(ok.writes.map((w) => [w.user, w.holder]), [["a", "a_1"], ["a", ""]]);

  // A writer killed mid-request: the log says 504, the version is stored; it is a's write.
  const killed = [...events, ev("a", "op-shard-0", 2_000, spec("a_1", 2_000), 504)];
  const lost = join(killed, [lease("a_1", 0), lease("", 1_000), lease("a_1", 2_000)]);
  assertEquals(lost.mismatches, []);
  assertEquals(lost.writes.map((w) => [w.user, w.holder]), [["a", "a_1"], ["a", ""], [
    "a",
    "a_1",
  ]]);
  assertEquals(lost.lostAnswers.length, 1);
  assert(
    /version 2 stored by update by a .* -> 504/.test(lost.lostAnswers[0]),
    lost.lostAnswers[0],
  );
  // ... and when the 504 write did not store anything, it is no disagreement either.
  assertEquals(join(killed, [lease("a_1", 0), lease("", 1_000)]).mismatches, []);

  assertEquals(join(events, [lease("a_1", 0)]).mismatches.length, 1);
  assert(
    /update by a .* -> 200 stored no version/.test(join(events, [lease("a_1", 0)]).mismatches[0]),
  );
  const unsent = join(events, [lease("a_1", 0), lease("b_2", 10), lease("", 1_000)]).mismatches;
  assertEquals(unsent.length, 1, unsent.join("\n"));
  assert(/version 1 stored by a refused update by b/.test(unsent[0]), unsent[0]);
  const missing = join(events, [lease("a_1", 0), lease("a_1", 500), lease("", 1_000)]).mismatches;
  assertEquals(missing.length, 1, missing.join("\n"));
  assert(/version 1 \(holder "a_1".*was sent by no write/.test(missing[0]), missing[0]);
  // A version stored by b's write but holding a's identity: not its writer.
  const wrong = join(
    [ev("b", "op-shard-0", 0, spec("a_1", 0))],
    [lease("a_1", 0)],
  ).mismatches;
  assertEquals(wrong, ["op-shard-0: write 0 by b stored holder a_1"]);
  // Without the body (an audit policy at Metadata level for Leases) the join refuses.
  const bare = join([ev("a", "op-shard-0", 0, undefined)], [lease("a_1", 0)]).mismatches;
  assert(bare.some((m) => /no request body/.test(m)), bare.join("\n"));
});
