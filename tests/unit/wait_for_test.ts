/**
 * The end-to-end harness's `waitFor`: any throw of the predicate means "not yet", except a failed
 * assertion, which fails at once (an `assert` inside a predicate must be able to fail a test).
 */
import { assert, assertEquals, assertRejects, isAssertionError } from "../assert.ts";
import { waitFor } from "../e2e/harness.ts";

Deno.test("waitFor: a failed assertion in the predicate is rethrown at once", async () => {
  let calls = 0;
  const t0 = Date.now();
  const err = await assertRejects(() =>
    waitFor(
      "never",
      () => {
        calls++;
        assert(false, "held the finalizer");
      },
      5_000,
      10,
    )
  );
  assert(isAssertionError(err), String(err));
  assertEquals(err.message, "held the finalizer");
  assertEquals(calls, 1);
  assert(Date.now() - t0 < 1_000);
  const deep = await assertRejects(() => waitFor("never", () => assertEquals(1, 2), 5_000, 10));
  assert(isAssertionError(deep), String(deep));
});

Deno.test("waitFor: other errors mean not yet, until the value comes or the time is up", async () => {
  let calls = 0;
  assertEquals(
    await waitFor(
      "third call",
      () => {
        if (++calls < 3) throw new Error("not yet");
        return "done";
      },
      5_000,
      1,
    ),
    "done",
  );
  await assertRejects(
    () =>
      waitFor(
        "never",
        () => {
          throw new Error("still not");
        },
        50,
        10,
      ),
    /timed out after 50 ms waiting for never; last: still not/,
  );
});
