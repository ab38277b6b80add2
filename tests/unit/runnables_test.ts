/**
 * Runnable groups (lib/runtime/runnables.ts): groups start in their order and stop in the reverse
 * one, each finished before the next stops; a group started ahead is not started twice; a
 * start-up failure stops what was started and is rethrown; `whenAborted`.
 */
import { assert, assertEquals, assertRejects } from "../assert.ts";
import { type Runnable, RunnableGroups, whenAborted } from "../../lib/runtime/runnables.ts";

const ORDER = ["servers", "caches", "election", "controllers"] as const;

/** A runnable that records its start, the abort of its signal and its stop in `log`. */
function recorder(name: string, log: string[], o: { fail?: boolean; slowStopMs?: number } = {}) {
  let signal: AbortSignal | undefined;
  const r: Runnable = {
    name,
    start: async (s) => {
      signal = s;
      await new Promise((r) => setTimeout(r, 1));
      if (o.fail) throw new Error(`${name} cannot start`);
      log.push(`start ${name}`);
      s.addEventListener("abort", () => log.push(`abort ${name}`), { once: true });
    },
    stopped: async () => {
      assert(signal?.aborted, `${name} stopped before its signal aborted`);
      await new Promise((r) => setTimeout(r, o.slowStopMs ?? 0));
      log.push(`stopped ${name}`);
    },
  };
  return r;
}

Deno.test("runnables: start servers → caches → election → controllers, stop in reverse, each finished before the next", async () => {
  const log: string[] = [];
  const groups = new RunnableGroups(ORDER);
  // Added out of order: the group order decides, members keep theirs.
  groups.add("controllers", recorder("c1", log, { slowStopMs: 20 }));
  groups.add("election", recorder("e", log));
  groups.add("caches", recorder("i1", log));
  groups.add("caches", recorder("i2", log));
  groups.add("servers", recorder("s", log));
  await groups.start();
  assertEquals(log, ["start s", "start i1", "start i2", "start e", "start c1"]);
  log.length = 0;
  await groups.stop();
  assertEquals(log, [
    "abort c1",
    "stopped c1", // waited for (20 ms) before the election group is stopped
    "abort e",
    "stopped e",
    "abort i1",
    "abort i2",
    "stopped i1",
    "stopped i2",
    "abort s",
    "stopped s",
  ]);
  log.length = 0;
  await groups.stop();
  assertEquals(log, [], "stopped twice");
});

Deno.test("runnables: a group started ahead (caches beside the start gate) is not started again", async () => {
  const log: string[] = [];
  const groups = new RunnableGroups(ORDER);
  groups.add("caches", recorder("i", log));
  groups.add("servers", recorder("s", log));
  groups.add("controllers", recorder("c", log));
  await groups.start("caches");
  assertEquals(log, ["start i"]);
  await groups.start("servers");
  await groups.start();
  assertEquals(log, ["start i", "start s", "start c"]);
  await groups.stop();
  assertEquals(log.slice(3), [
    "abort c",
    "stopped c",
    "abort i",
    "stopped i",
    "abort s",
    "stopped s",
  ]);
});

Deno.test("runnables: a start-up failure stops what was started (reverse order) and is rethrown", async () => {
  const log: string[] = [];
  const groups = new RunnableGroups(ORDER);
  groups.add("caches", recorder("i", log));
  groups.add("servers", recorder("health", log));
  groups.add("servers", recorder("metrics", log, { fail: true }));
  groups.add("controllers", recorder("c", log));
  await groups.start("caches");
  const err = await assertRejects(() => groups.start());
  assertEquals((err as Error).message, "metrics cannot start");
  // The failed member is not stopped (it started nothing); the controllers never started.
  assertEquals(log, [
    "start i",
    "start health",
    "abort i",
    "stopped i",
    "abort health",
    "stopped health",
  ]);
  assert(!log.includes("start c"));
});

Deno.test("runnables: whenAborted resolves on abort, at once for an aborted signal", async () => {
  const c = new AbortController();
  let done = false;
  const p = whenAborted(c.signal).then(() => done = true);
  await new Promise((r) => setTimeout(r, 1));
  assert(!done);
  c.abort();
  await p;
  assert(done);
  await whenAborted(AbortSignal.abort());
});
