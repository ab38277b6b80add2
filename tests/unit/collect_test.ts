import v8 from "node:v8";
import vm from "node:vm";
import { assert, assertEquals } from "../assert.ts";
import {
  collectGarbage,
  exposedGc,
  type GcFunction,
  IDLE_GC_LOOKS,
  IDLE_GC_MIN_GROWTH_BYTES,
  IDLE_GC_MIN_INTERVAL_MS,
  idleCollectionDue,
} from "../../lib/runtime/collect.ts";

const MiB = 2 ** 20;
const due = {
  idleLooks: IDLE_GC_LOOKS,
  sinceLastMs: IDLE_GC_MIN_INTERVAL_MS,
  reconcilesSinceLast: 0,
  heapUsedBytes: 20 * MiB,
  liveAfterLastBytes: 15 * MiB,
};

Deno.test("collect: an idle collection needs idle looks, the interval and enough new heap", () => {
  assert(idleCollectionDue(due));
  assert(!idleCollectionDue({ ...due, idleLooks: IDLE_GC_LOOKS - 1 }), "busy a moment ago");
  assert(!idleCollectionDue({ ...due, sinceLastMs: IDLE_GC_MIN_INTERVAL_MS - 1 }), "too soon");
  // A small growth (probes, bookmarks at rest) earns nothing, in bytes or as a share of the live.
  assert(!idleCollectionDue({ ...due, heapUsedBytes: due.liveAfterLastBytes + MiB }));
  assert(
    !idleCollectionDue({
      ...due,
      liveAfterLastBytes: 100 * MiB,
      heapUsedBytes: 100 * MiB + IDLE_GC_MIN_GROWTH_BYTES + MiB,
    }),
    "3 MiB on 100 MiB live is under 10%",
  );
  assert(idleCollectionDue({ ...due, liveAfterLastBytes: 100 * MiB, heapUsedBytes: 111 * MiB }));
  // After work, any growth or none: what was live at the last collection (requests in flight)
  // is garbage by now, which the growth does not show.
  const afterWork = { ...due, reconcilesSinceLast: 3, liveAfterLastBytes: 100 * MiB };
  assert(idleCollectionDue({ ...afterWork, heapUsedBytes: 100 * MiB }));
  assert(
    !idleCollectionDue({ ...afterWork, sinceLastMs: 1_000 }),
    "after work, still the interval",
  );
  assert(!idleCollectionDue({ ...afterWork, idleLooks: 1 }), "after work, still idle looks");
  // A heap smaller than after the last collection (V8 collected by itself) earns nothing.
  assert(!idleCollectionDue({ ...due, heapUsedBytes: 10 * MiB }));
});

Deno.test("collect: the memory-reducing collection frees garbage and gives its pages back", () => {
  // `deno test` runs without --expose-gc; Node's recipe exposes it at run time.
  v8.setFlagsFromString("--expose-gc");
  const gc = exposedGc() ?? vm.runInNewContext("gc") as GcFunction;
  collectGarbage(gc);
  const before = Deno.memoryUsage();
  let garbage: unknown[] | undefined = Array.from(
    { length: 200_000 },
    (_, i) => ({ name: `pod-${i}`, labels: { app: `a${i % 7}` } }),
  );
  assertEquals(garbage.length, 200_000);
  garbage = undefined;
  const grown = Deno.memoryUsage();
  assert(grown.heapUsed > before.heapUsed + 8 * MiB, "the garbage is in the heap");
  const live = collectGarbage(gc);
  const after = Deno.memoryUsage();
  assert(Math.abs(live - after.heapUsed) < MiB, "returns the heap in use right after");
  assert(after.heapUsed < before.heapUsed + 2 * MiB, `heap used ${after.heapUsed} after`);
  assert(after.heapTotal < grown.heapTotal - 8 * MiB, "emptied pages are no longer committed");
});
