/**
 * The slow retry of refused writes (S19 at write time), on an injected clock: at most 5 attempts
 * in the first minute, then doubling to the work queue's cap; a new generation is tried at once;
 * what a refusal is.
 */
import fc from "fast-check";
import { assert, assertEquals } from "../assert.ts";
import { ApiError } from "../../lib/kube/errors.ts";
import {
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
