/**
 * Status conditions (lib/runtime/conditions.ts) with apimachinery meta.SetStatusCondition's rules:
 * a new type is appended with a transition time; `lastTransitionTime` moves only when `status`
 * changes; reason, message and observedGeneration are updated; the result says whether anything
 * changed. Property tests: setting the same condition twice changes nothing the second time, and
 * over any sequence of sets the transition time moves exactly when the status changed (or the
 * type was new), one condition per type, and `changed` is true exactly when the list changed.
 */
import fc from "fast-check";
import type { Condition } from "kubernetes-types/meta/v1.d.ts";
import { assert, assertEquals } from "../assert.ts";
import {
  type ConditionInput,
  conditionTimeNow,
  findStatusCondition,
  isStatusConditionFalse,
  isStatusConditionPresentAndEqual,
  isStatusConditionTrue,
  removeStatusCondition,
  setStatusCondition,
} from "../../lib/runtime/conditions.ts";

const T0 = "2026-01-01T00:00:00Z";
const T1 = "2026-01-01T00:01:00Z";
const T2 = "2026-01-01T00:02:00Z";

Deno.test('setStatusCondition: a new type is appended with the time given, message defaulting to ""', () => {
  const cs: Condition[] = [];
  assertEquals(
    setStatusCondition(cs, { type: "Ready", status: "False", reason: "Init" }, T0),
    true,
  );
  assertEquals(
    setStatusCondition(
      cs,
      { type: "Degraded", status: "False", reason: "Ok", message: "m", observedGeneration: 3 },
      T0,
    ),
    true,
  );
  assertEquals(cs, [
    { type: "Ready", status: "False", reason: "Init", message: "", lastTransitionTime: T0 },
    {
      type: "Degraded",
      status: "False",
      reason: "Ok",
      message: "m",
      lastTransitionTime: T0,
      observedGeneration: 3,
    },
  ]);
  // A lastTransitionTime given with a new condition wins over now.
  setStatusCondition(cs, { type: "X", status: "True", reason: "R", lastTransitionTime: T2 }, T1);
  assertEquals(findStatusCondition(cs, "X")?.lastTransitionTime, T2);
});

Deno.test("setStatusCondition: the transition time moves only with status; the rest is updated", () => {
  const cs: Condition[] = [];
  setStatusCondition(cs, { type: "Ready", status: "False", reason: "Init" }, T0);
  // Same condition again: nothing changes.
  assertEquals(
    setStatusCondition(cs, { type: "Ready", status: "False", reason: "Init" }, T1),
    false,
  );
  assertEquals(cs[0].lastTransitionTime, T0);
  // Reason, message and observedGeneration change; the status does not: time kept.
  assertEquals(
    setStatusCondition(cs, {
      type: "Ready",
      status: "False",
      reason: "Waiting",
      message: "1 of 2",
      observedGeneration: 2,
    }, T1),
    true,
  );
  assertEquals(cs[0], {
    type: "Ready",
    status: "False",
    reason: "Waiting",
    message: "1 of 2",
    lastTransitionTime: T0,
    observedGeneration: 2,
  });
  // The status changes: time moves to now.
  assertEquals(
    setStatusCondition(
      cs,
      { type: "Ready", status: "True", reason: "Ok", observedGeneration: 2 },
      T2,
    ),
    true,
  );
  assertEquals([cs[0].status, cs[0].lastTransitionTime, cs[0].message], ["True", T2, ""]);
  // A status change with a time given takes that time.
  setStatusCondition(cs, {
    type: "Ready",
    status: "Unknown",
    reason: "Lost",
    observedGeneration: 2,
    lastTransitionTime: T1,
  }, T2);
  assertEquals(cs[0].lastTransitionTime, T1);
  // observedGeneration dropped (absent = 0): removed from the condition.
  assertEquals(setStatusCondition(cs, { type: "Ready", status: "Unknown", reason: "Lost" }), true);
  assertEquals("observedGeneration" in cs[0], false);
  // ... and absent and 0 are the same generation.
  assertEquals(
    setStatusCondition(cs, {
      type: "Ready",
      status: "Unknown",
      reason: "Lost",
      observedGeneration: 0,
    }),
    false,
  );
});

Deno.test("setStatusCondition: conditions are replaced, never modified (a copied array keeps the cache intact)", () => {
  const cached: Condition[] = [
    { type: "Ready", status: "False", reason: "Init", message: "", lastTransitionTime: T0 },
  ];
  const frozen = structuredClone(cached);
  const copy = [...cached];
  assertEquals(setStatusCondition(copy, { type: "Ready", status: "True", reason: "Ok" }, T1), true);
  assertEquals(cached, frozen);
  assertEquals(copy[0].status, "True");
});

Deno.test("setStatusCondition: without a time, now at whole seconds in UTC", () => {
  const cs: Condition[] = [];
  setStatusCondition(cs, { type: "Ready", status: "True", reason: "Ok" });
  assert(
    /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/.test(cs[0].lastTransitionTime),
    cs[0].lastTransitionTime,
  );
  assertEquals(conditionTimeNow(Date.UTC(2026, 0, 2, 3, 4, 5, 678)), "2026-01-02T03:04:05Z");
});

Deno.test("find / remove / isTrue / isFalse / presentAndEqual", () => {
  const cs: Condition[] = [];
  setStatusCondition(cs, { type: "Ready", status: "True", reason: "Ok" }, T0);
  setStatusCondition(cs, { type: "Degraded", status: "False", reason: "Ok" }, T0);
  setStatusCondition(cs, { type: "Progressing", status: "Unknown", reason: "Hm" }, T0);
  assertEquals(findStatusCondition(cs, "Degraded")?.reason, "Ok");
  assertEquals(findStatusCondition(cs, "Nope"), undefined);
  assertEquals(findStatusCondition(undefined, "Ready"), undefined);
  assertEquals(
    ["Ready", "Degraded", "Progressing", "Nope"].map((t) => [
      isStatusConditionTrue(cs, t),
      isStatusConditionFalse(cs, t),
    ]),
    [[true, false], [false, true], [false, false], [false, false]],
  );
  assertEquals(isStatusConditionTrue(undefined, "Ready"), false);
  assertEquals(isStatusConditionPresentAndEqual(cs, "Progressing", "Unknown"), true);
  assertEquals(removeStatusCondition(cs, "Degraded"), true);
  assertEquals(removeStatusCondition(cs, "Degraded"), false);
  assertEquals(cs.map((c) => c.type), ["Ready", "Progressing"]);
});

const input: fc.Arbitrary<ConditionInput> = fc.record({
  type: fc.constantFrom("Ready", "Progressing", "Degraded"),
  status: fc.constantFrom("True", "False", "Unknown"),
  reason: fc.constantFrom("A", "B"),
  message: fc.option(fc.constantFrom("", "m", "n"), { nil: undefined }),
  observedGeneration: fc.option(fc.integer({ min: 0, max: 3 }), { nil: undefined }),
}, { requiredKeys: ["type", "status", "reason"] });

Deno.test("setStatusCondition (property): setting a condition twice changes nothing the second time", () => {
  fc.assert(fc.property(fc.array(input, { maxLength: 8 }), input, (before, c) => {
    const cs: Condition[] = [];
    before.forEach((b, i) => setStatusCondition(cs, b, `2026-01-01T00:00:0${i}Z`));
    setStatusCondition(cs, c, T1);
    const once = structuredClone(cs);
    assertEquals(setStatusCondition(cs, c, T2), false);
    assertEquals(cs, once);
  }));
});

Deno.test("setStatusCondition (property): the time moves exactly on a new type or a status change; changed is exact", () => {
  fc.assert(fc.property(fc.array(input, { minLength: 1, maxLength: 20 }), (seq) => {
    const cs: Condition[] = [];
    seq.forEach((c, i) => {
      const now = new Date(Date.UTC(2026, 0, 1, 0, 0, i)).toISOString().replace(".000", "");
      const prev = structuredClone(findStatusCondition(cs, c.type));
      const snapshot = structuredClone(cs);
      const changed = setStatusCondition(cs, c, now);
      const got = findStatusCondition(cs, c.type)!;
      assertEquals(cs.filter((x) => x.type === c.type).length, 1);
      assertEquals(
        [got.status, got.reason, got.message, got.observedGeneration ?? 0],
        [c.status, c.reason, c.message ?? "", c.observedGeneration ?? 0],
      );
      const moved = prev === undefined || prev.status !== c.status;
      assertEquals(got.lastTransitionTime, moved ? now : prev!.lastTransitionTime);
      assertEquals(changed, JSON.stringify(snapshot) !== JSON.stringify(cs));
    });
    assertEquals(new Set(cs.map((c) => c.type)).size, cs.length);
  }));
});
