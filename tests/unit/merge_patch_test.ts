/**
 * JSON merge patches from two states (lib/runtime/merge_patch.ts). Properties over random
 * null-free JSON objects: applying the patch to `before` as RFC 7386 section 2 applies one gives
 * `after`; the patch is empty exactly when the two are equal as JSON (so an unchanged object is
 * never written). Examples: arrays are sent whole, a removed member is `null`, `null` and
 * `undefined` count as absent.
 */
import fc from "fast-check";
import { assertEquals } from "../assert.ts";
import { jsonEqual, type JsonObject, mergePatch } from "../../lib/runtime/merge_patch.ts";

const isObject = (v: unknown): v is JsonObject =>
  typeof v === "object" && v !== null && !Array.isArray(v);

/** RFC 7386 section 2, MergePatch(Target, Patch), written from the RFC's pseudocode. */
function applyMergePatch(target: unknown, patch: unknown): unknown {
  if (!isObject(patch)) return patch;
  const out: JsonObject = isObject(target) ? { ...target } : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else out[k] = applyMergePatch(out[k], v);
  }
  return out;
}

Deno.test("mergePatch: changed members, null for removed ones, arrays whole, nothing for equal", () => {
  const before = {
    metadata: { name: "a", labels: { x: "1", y: "2" }, resourceVersion: "5" },
    spec: { ports: [{ port: 80 }, { port: 443 }], replicas: 2 },
  };
  const after = {
    metadata: { name: "a", labels: { x: "1", z: "3" }, resourceVersion: "5" },
    spec: { ports: [{ port: 80 }, { port: 8443 }], replicas: 2, paused: false },
  };
  assertEquals(mergePatch(before, after), {
    metadata: { labels: { y: null, z: "3" } },
    spec: { ports: [{ port: 80 }, { port: 8443 }], paused: false },
  });
  assertEquals(mergePatch(before, structuredClone(before)), {});
  // null and undefined are absent: nothing to send for them.
  assertEquals(mergePatch({ a: 1 }, { a: 1, b: undefined, c: null }), {});
  assertEquals(mergePatch({ a: 1, b: null }, { a: 1 }), {});
  assertEquals(mergePatch({ a: { b: 1 } }, { a: 2 }), { a: 2 });
  assertEquals(mergePatch({ a: 2 }, { a: { b: 1 } }), { a: { b: 1 } });
  assertEquals(mergePatch({ a: [1] }, {}), { a: null });
});

Deno.test("jsonEqual: member order and undefined members aside; arrays in order", () => {
  assertEquals(jsonEqual({ a: 1, b: [1, { c: "x" }] }, { b: [1, { c: "x" }], a: 1 }), true);
  assertEquals(jsonEqual({ a: 1, b: undefined }, { a: 1 }), true);
  assertEquals(jsonEqual([1, 2], [2, 1]), false);
  assertEquals(jsonEqual({ a: null }, { a: undefined }), false);
  assertEquals(jsonEqual([], {}), false);
  assertEquals(jsonEqual("1", 1), false);
});

/** Null-free JSON objects over few member names, so that states share and differ in members. */
const json = fc.letrec<{ obj: JsonObject; value: unknown }>((tie) => ({
  obj: fc.dictionary(fc.constantFrom("a", "b", "c", "d"), tie("value"), {
    maxKeys: 4,
    noNullPrototype: true,
  }),
  value: fc.oneof(
    { depthSize: "small" },
    fc.integer({ min: 0, max: 3 }),
    fc.constantFrom("x", "y", ""),
    fc.boolean(),
    fc.array(fc.oneof(fc.integer({ min: 0, max: 2 }), tie("obj")), { maxLength: 3 }),
    tie("obj"),
  ),
})).obj;

Deno.test("mergePatch (property): applying the patch to before gives after", () => {
  fc.assert(
    fc.property(json, json, (before, after) => {
      assertEquals(applyMergePatch(before, mergePatch(before, after)), after);
    }),
    { numRuns: 500 },
  );
});

Deno.test("mergePatch (property): empty exactly when equal as JSON", () => {
  fc.assert(
    fc.property(json, json, (before, after) => {
      assertEquals(Object.keys(mergePatch(before, after)).length === 0, jsonEqual(before, after));
      assertEquals(mergePatch(before, structuredClone(before)), {});
    }),
    { numRuns: 500 },
  );
});
