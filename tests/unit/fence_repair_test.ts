/**
 * lib/runtime/fence_repair.ts and `refusingLease` (lib/kube/errors.ts): which Leases belong to the
 * other mode, and the Lease a Lease-holder policy's refusal names. The repair end to end against
 * the apiserver's policies: tests/e2e/mode_change_test.ts.
 */
import { assert, assertEquals } from "../assert.ts";
import { ApiError, FencedError, refusingLease } from "../../lib/kube/errors.ts";
import { FenceRepair, otherModeLease } from "../../lib/runtime/fence_repair.ts";
import { FakeClock } from "../../lib/runtime/clock.ts";
import { log } from "../../lib/runtime/log.ts";
import type { KubeClient } from "../../lib/kube/client.ts";
import { FakeLeases } from "./fake_leases.ts";

Deno.test("fence repair: the other mode's Leases — shard Leases with one Lease, the one Lease and those beyond N with shards", () => {
  assert(otherModeLease("op-shard-0", "op", 1));
  assert(otherModeLease("op-shard-12", "op", 1));
  assert(!otherModeLease("op", "op", 1));
  assert(otherModeLease("op", "op", 4));
  assert(!otherModeLease("op-shard-3", "op", 4));
  assert(otherModeLease("op-shard-4", "op", 4));
  // Not shard Leases' names, or another election's: never.
  assert(!otherModeLease("op-shard-03", "op", 1));
  assert(!otherModeLease("op-member-00ff", "op", 4));
  assert(!otherModeLease("other-shard-0", "op", 1));
  assert(!otherModeLease("op2", "op", 4));
});

Deno.test("fence repair: the Lease a policy's refusal names, holder included (empty when released)", () => {
  const refusal = (message: string) =>
    new FencedError(
      "NotLeaseHolder",
      "PATCH /x",
      undefined,
      new ApiError(403, { kind: "Status", apiVersion: "v1", code: 403, message }),
    );
  const policy =
    "admission webhook ValidatingAdmissionPolicy 'p' with binding 'p' denied request: ";
  assertEquals(
    refusingLease(refusal(
      `${policy}not the Lease holder: Pod 'replica-a' is not the holder of Lease ops/op-shard-2 (held by '')`,
    )),
    { namespace: "ops", name: "op-shard-2", holder: "" },
  );
  assertEquals(
    refusingLease(refusal(
      `${policy}not the Lease holder: Pod 'a' is not the holder of Lease appservice-system/appservice-operator.apps.our-org.com (held by 'b_0f3a')`,
    )),
    {
      namespace: "appservice-system",
      name: "appservice-operator.apps.our-org.com",
      holder: "b_0f3a",
    },
  );
  assertEquals(refusingLease(refusal(`${policy}something else`)), undefined);
  assertEquals(refusingLease(new FencedError("NotHeld", "PATCH /x")), undefined);
  assertEquals(refusingLease(new Error("x")), undefined);
});

Deno.test("fence repair: a released Lease of the other mode is deleted and every key requeued; a renewed one stays; tracked until gone, read once per lease duration", async () => {
  const api = new FakeLeases();
  const reads: string[] = [];
  const base = api.client();
  const client = {
    ...base,
    get: (rt: unknown, name: string) => {
      reads.push(`${name}@${clock.now()}`);
      return (base.get as (rt: unknown, name: string) => Promise<unknown>)(rt, name);
    },
    delete: base.delete,
  } as unknown as KubeClient;
  const put = (name: string, holder: string) =>
    api.leases.set(name, {
      metadata: { name, namespace: "ops", resourceVersion: String(++api.rv) },
      spec: { holderIdentity: holder, leaseDurationSeconds: 4 },
    });
  put("op-shard-1", ""); // released
  put("op-shard-2", "b_1"); // still renewed by a sharded replica
  const clock = new FakeClock();
  let repaired = 0;
  const repair = new FenceRepair({
    client,
    namespace: "ops",
    id: "op",
    shards: 1,
    leaseDurationSeconds: 4,
    retryPeriodMs: 1_000,
    log: log("test"),
    onRepaired: () => repaired++,
    clock,
  });
  const stop = new AbortController();
  repair.start(stop.signal);
  const refusal = (name: string, holder: string) =>
    new FencedError(
      "NotLeaseHolder",
      "PATCH /x",
      undefined,
      new ApiError(403, {
        message:
          `denied request: not the Lease holder: Pod 'a' is not the holder of Lease ops/${name} (held by '${holder}')`,
      }),
    );
  let renewing = true;
  const settle = async (ms: number) => {
    for (let t = 0; t < ms; t += 100) {
      clock.advance(100);
      // b_1 renews its Lease every second while `renewing` (a new resourceVersion).
      if (renewing && clock.now() % 1_000 === 0 && api.leases.has("op-shard-2")) {
        put("op-shard-2", "b_1");
      }
      for (let i = 0; i < 10; i++) await new Promise((r) => setTimeout(r, 0));
    }
  };
  try {
    repair.refused(refusal("op-shard-1", ""));
    repair.refused(refusal("op-shard-2", "b_1"));
    repair.refused(refusal("op", "b_1")); // this mode's own Lease: not the repair's
    await settle(500);
    assert(!api.leases.has("op-shard-1"), "the released Lease is deleted");
    assert(api.leases.has("op-shard-2"), "the renewed one stays");
    assertEquals(repaired, 1);
    assertEquals(reads.filter((n) => n.startsWith("op@")).length, 0);
    // While renewed it stays, read about once per lease duration (4 s) and no more.
    await settle(12_000);
    assert(api.leases.has("op-shard-2"), "the renewed one stays");
    const readsOfHeld = reads.filter((n) => n.startsWith("op-shard-2")).length;
    assert(readsOfHeld >= 2 && readsOfHeld <= 5, `read ${readsOfHeld} times in 12 s`);
    // Its holder gone (the record unchanged for a lease duration): deleted without another refusal.
    renewing = false;
    for (let i = 0; i < 100 && api.leases.has("op-shard-2"); i++) await settle(100);
    assert(!api.leases.has("op-shard-2"), "the run-out Lease is deleted");
    assertEquals(repaired, 2);
    // Refusals naming it right after (an apiserver's informer catching up): no read, and every
    // key goes once more a retry period later (one requeue for any number of such refusals).
    const readsBefore = reads.length;
    repair.refused(refusal("op-shard-2", "b_1"));
    repair.refused(refusal("op-shard-2", "b_1"));
    await settle(1_500);
    assertEquals(reads.length, readsBefore);
    assertEquals(repaired, 3);
  } finally {
    stop.abort();
    await repair.stopped();
  }
});
