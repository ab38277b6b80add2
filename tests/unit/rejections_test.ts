/**
 * The slow retry of refused writes (S19 at write time), on an injected clock: at most 5 attempts
 * in the first minute, then doubling to the work queue's cap; a new generation is tried at once;
 * what a refusal is.
 */
import fc from "fast-check";
import { assert, assertEquals } from "../assert.ts";
import { ApiError } from "../../lib/kube/errors.ts";
import {
  isQuotaRefusal,
  isWriteRejection,
  REJECTED_WRITE_FIRST_RETRY_MS,
  REJECTED_WRITE_MAX_RETRY_MS,
  RejectedWrites,
} from "../../lib/appservice/rejections.ts";

/** Attempt times (ms) of a write refused every time, reconciled every `everyMs`. */
function attempts(everyMs: number, untilMs: number): number[] {
  let t = 0;
  const r = new RejectedWrites(() => t);
  const out: number[] = [];
  for (; t <= untilMs; t += everyMs) {
    if (r.held("ns/a", 1, "pod-create")) continue;
    out.push(t);
    r.refused("ns/a", 1, "pod-create", "quota exceeded");
  }
  return out;
}

Deno.test("rejections: at most 5 attempts in the first minute, however often the key is reconciled", () => {
  fc.assert(
    fc.property(fc.integer({ min: 1, max: 5_000 }), (everyMs) => {
      const first = attempts(everyMs, 60_000);
      assert(first.length <= 5, `${first.length} attempts: ${first}`);
      assert(first.length >= 3, `too slow: ${first}`);
    }),
    { seed: 19, numRuns: 200 },
  );
  // Reconciled every 10 ms: attempts at 0, 5, 15, 35, 75 s...
  assertEquals(attempts(10, 80_000), [0, 5_000, 15_000, 35_000, 75_000]);
});

Deno.test("rejections: the delay doubles up to the work queue's cap", () => {
  let t = 0;
  const r = new RejectedWrites(() => t);
  const delays: number[] = [];
  for (let i = 0; i < 12; i++) {
    const x = r.refused("ns/a", 1, "service", "denied");
    delays.push(x.nextAtMs - t);
    t = x.nextAtMs;
  }
  assertEquals(delays[0], REJECTED_WRITE_FIRST_RETRY_MS);
  for (let i = 1; i < delays.length; i++) {
    assertEquals(delays[i], Math.min(2 * delays[i - 1], REJECTED_WRITE_MAX_RETRY_MS));
  }
  assertEquals(delays.at(-1), REJECTED_WRITE_MAX_RETRY_MS);
});

Deno.test("rejections: a new generation, success or a deleted AppService forgets", () => {
  let t = 0;
  const r = new RejectedWrites(() => t);
  r.refused("ns/a", 1, "pod-create", "denied");
  r.refused("ns/a", 1, "service", "denied");
  assert(r.held("ns/a", 1, "pod-create"));
  assertEquals(r.nextDelayMs("ns/a"), REJECTED_WRITE_FIRST_RETRY_MS);
  t = 1_000;
  assertEquals(r.nextDelayMs("ns/a"), REJECTED_WRITE_FIRST_RETRY_MS - 1_000);
  assertEquals(r.held("ns/a", 2, "pod-create"), undefined, "a new generation is tried at once");
  assertEquals(r.held("ns/a", 2, "service"), undefined);
  assertEquals(r.nextDelayMs("ns/a"), undefined);
  r.refused("ns/a", 2, "service", "denied");
  r.succeeded("ns/a", "service");
  assertEquals(r.size, 0);
  r.refused("ns/b", 1, "service", "denied");
  r.forget("ns/b");
  assertEquals(r.size, 0);
  assertEquals(r.held("ns/b", 1, "service"), undefined);
});

Deno.test("rejections: refusals are 400, 403, 413 and 422; not conflicts, throttling or a terminating namespace", () => {
  for (const code of [400, 403, 413, 422]) assert(isWriteRejection(new ApiError(code)), `${code}`);
  for (const code of [404, 409, 429, 500, 503]) {
    assert(!isWriteRejection(new ApiError(code)), `${code}`);
  }
  assert(!isWriteRejection(new Error("network")));
  const terminating = new ApiError(403, {
    reason: "Forbidden",
    details: { causes: [{ reason: "NamespaceTerminating" }] }, // StatusCause.Type is `reason` in JSON
  });
  assert(!isWriteRejection(terminating));
});

Deno.test("rejections: a ResourceQuota change releases the creates a quota refused in its namespace (S24)", () => {
  let t = 0;
  const r = new RejectedWrites(() => t);
  r.refused("ns/a", 1, "pod-create", "exceeded quota", true);
  r.refused("ns/b", 1, "pod-create", "denied by policy");
  r.refused("other/c", 1, "pod-create", "exceeded quota", true);
  t = 1_000;
  assert(r.held("ns/a", 1, "pod-create"));
  assertEquals(r.releaseQuota("ns"), ["ns/a"]);
  assertEquals(r.held("ns/a", 1, "pod-create"), undefined, "released");
  assert(r.held("ns/b", 1, "pod-create"), "a policy's refusal stays held");
  assert(r.held("other/c", 1, "pod-create"), "another namespace stays held");
  // Refused again: the attempt count is kept, so the next wait is the next slow step.
  const again = r.refused("ns/a", 1, "pod-create", "exceeded quota", true);
  assertEquals(again.attempts, 2);
  assertEquals(again.nextAtMs, 1_000 + 2 * REJECTED_WRITE_FIRST_RETRY_MS);
});

Deno.test("rejections: a quota refusal is told by the quota admission's words", () => {
  const forbidden = (message: string) =>
    new ApiError(403, { reason: "Forbidden", code: 403, message });
  assert(isQuotaRefusal(forbidden(
    'pods "q-1" is forbidden: exceeded quota: pods, requested: pods=1, used: pods=1, limited: pods=1',
  )));
  assert(isQuotaRefusal(forbidden(
    'pods "q-1" is forbidden: failed quota: compute: must specify limits.cpu for: app',
  )));
  assert(!isQuotaRefusal(forbidden('pods "q-1" is forbidden: denied by policy')));
  assert(!isQuotaRefusal(new ApiError(422, { reason: "Invalid", code: 422, message: "quota" })));
});

Deno.test("rejections: a quota change while the refused attempt was in flight releases it (S24)", () => {
  let t = 0;
  const r = new RejectedWrites(() => t);
  // Attempt 1 starts at 0; the quota changes at 50 (nothing recorded yet); refused at 100.
  t = 50;
  assertEquals(r.releaseQuota("ns"), []);
  t = 100;
  r.refused("ns/a", 1, "pod-create", "exceeded quota", true, 0);
  assertEquals(r.held("ns/a", 1, "pod-create"), undefined, "released by the change in flight");
  assertEquals(r.nextDelayMs("ns/a"), 1);
  // Refused again by an attempt that started after the change: held for the slow retry.
  r.refused("ns/a", 1, "pod-create", "exceeded quota", true, 100);
  assert(r.held("ns/a", 1, "pod-create"));
  assertEquals(r.nextDelayMs("ns/a"), 2 * REJECTED_WRITE_FIRST_RETRY_MS);
  // A policy's refusal is not released by a quota change.
  r.refused("ns/b", 1, "pod-create", "denied", false, 0);
  assert(r.held("ns/b", 1, "pod-create"));
});
