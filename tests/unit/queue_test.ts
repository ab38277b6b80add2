import fc from "fast-check";
import { assert, assertEquals } from "../assert.ts";
import { FakeClock } from "../../lib/runtime/clock.ts";
import { HIGH_PRIORITY_RUN, WorkQueue } from "../../lib/runtime/queue.ts";

Deno.test("queue: a pending key added again is merged", async () => {
  const q = new WorkQueue({ clock: new FakeClock() });
  q.add("ns/a");
  q.add("ns/a");
  q.add("ns/b");
  assertEquals(q.depth, 2);
  assertEquals(await q.get(), "ns/a");
  assertEquals(await q.get(), "ns/b");
  assertEquals(q.depth, 0);
});

Deno.test("queue: a key in flight is not handed out twice, and runs again after done", async () => {
  const q = new WorkQueue({ clock: new FakeClock() });
  q.add("k");
  assertEquals(await q.get(), "k");
  q.add("k"); // added while processing: dirty, not queued
  assertEquals(q.depth, 0);
  let got: string | undefined = "none";
  const p = q.get().then((k) => got = k);
  await Promise.resolve();
  assertEquals(got, "none");
  q.done("k");
  await p;
  assertEquals(got, "k");
});

Deno.test("queue: completed counts finished keys only (a done() of a key not in flight is not one)", async () => {
  const q = new WorkQueue({ clock: new FakeClock() });
  q.add("a");
  q.add("b");
  q.done("a"); // not taken yet
  assertEquals(q.completed, 0);
  q.done((await q.get())!);
  q.done((await q.get())!);
  q.done("b"); // twice
  assertEquals(q.completed, 2);
});

Deno.test("queue: per-key exponential backoff 5ms doubling, capped, forget resets", () => {
  const clock = new FakeClock();
  const q = new WorkQueue({ clock, qps: 0, maxDelayMs: 1_000_000 });
  const delays = Array.from({ length: 5 }, () => q.addRateLimited("k"));
  assertEquals(delays, [5, 10, 20, 40, 80]);
  assertEquals(q.numRequeues("k"), 5);
  q.forget("k");
  assertEquals(q.addRateLimited("k"), 5);
  for (let i = 0; i < 40; i++) q.addRateLimited("x");
  assertEquals(q.addRateLimited("x"), 1_000_000);
});

Deno.test("queue: overall token bucket (10/s, burst 100) bounds retries across keys", () => {
  const q = new WorkQueue({ clock: new FakeClock() });
  const delays = Array.from({ length: 110 }, (_, i) => q.addRateLimited(`k${i}`));
  assert(delays.slice(0, 100).every((d) => d === 5));
  // The 101st retry waits for a token: 100 ms at 10 per second.
  assertEquals(Math.round(delays[100]), 100);
  assertEquals(Math.round(delays[109]), 1000);
});

Deno.test("queue: addAfter keeps the earliest delay and fires on the clock", async () => {
  const clock = new FakeClock();
  const q = new WorkQueue({ clock });
  q.addAfter("k", 1000);
  q.addAfter("k", 200);
  q.addAfter("k", 5000);
  assertEquals(q.delayed, 1);
  clock.advance(199);
  assertEquals(q.depth, 0);
  clock.advance(1);
  assertEquals(q.depth, 1);
  assertEquals(await q.get(), "k");
  clock.advance(10_000);
  assertEquals(q.depth, 0);
});

Deno.test("queue: shutDown stops handing out keys; drain waits for in-flight work", async () => {
  const clock = new FakeClock();
  const q = new WorkQueue({ clock });
  q.add("a");
  q.add("b");
  assertEquals(await q.get(), "a");
  q.shutDown();
  assertEquals(await q.get(), undefined);
  const drained = q.drain(1000);
  q.done("a");
  assertEquals(await drained, true);
  q.add("c"); // ignored after shutdown
  assertEquals(q.depth, 1); // "b" stays queued, never handed out
});

Deno.test("queue: drain gives up after its grace period", async () => {
  const clock = new FakeClock();
  const q = new WorkQueue({ clock });
  q.add("x");
  await q.get();
  q.shutDown();
  const d = q.drain(500);
  clock.advance(500);
  assertEquals(await d, false);
});

/** Property: under any interleaving of add/get/done, no key is in flight twice, no add is lost. */
Deno.test("queue: property — exclusive per key, adds never lost, duplicates merged", async () => {
  type Op = { t: "add"; k: number; high: boolean } | { t: "get" } | { t: "done"; i: number };
  const op = fc.oneof(
    fc.record({
      t: fc.constant("add" as const),
      k: fc.integer({ min: 0, max: 4 }),
      high: fc.boolean(),
    }),
    fc.record({ t: fc.constant("get" as const) }),
    fc.record({ t: fc.constant("done" as const), i: fc.nat() }),
  );
  await fc.assert(
    fc.asyncProperty(fc.array(op, { maxLength: 200 }), async (ops: Op[]) => {
      const q = new WorkQueue({ clock: new FakeClock() });
      const inFlight: string[] = [];
      // A key "owes" a run when added after its last hand-out began.
      const owed = new Set<string>();
      for (const o of ops) {
        if (o.t === "add") {
          q.add(`k${o.k}`, o.high ? "high" : "normal");
          owed.add(`k${o.k}`);
        } else if (o.t === "get") {
          if (q.depth === 0) continue;
          const k = (await q.get())!;
          if (inFlight.includes(k)) throw new Error(`${k} handed out twice`);
          inFlight.push(k);
          owed.delete(k);
        } else if (inFlight.length > 0) {
          const k = inFlight.splice(o.i % inFlight.length, 1)[0];
          q.done(k);
        }
        if (q.depth > 5) throw new Error("duplicates not merged");
      }
      // Finish everything: every owed key must still come out.
      for (const k of inFlight.splice(0)) q.done(k);
      for (let guard = 0; q.depth > 0 && guard < 100; guard++) {
        const k = (await q.get())!;
        owed.delete(k);
        q.done(k);
      }
      if (owed.size > 0) throw new Error(`lost adds: ${[...owed]}`);
    }),
    { numRuns: 300 },
  );
});

Deno.test("queue S16: addRateLimited waits the larger of the backoff and a minimum (Retry-After)", () => {
  const clock = new FakeClock();
  const q = new WorkQueue({ clock, qps: 0 });
  assertEquals(q.addRateLimited("k", 8_000), 8_000); // backoff 5 ms < Retry-After 8 s
  assertEquals(q.addRateLimited("k"), 10);
  assertEquals(q.addRateLimited("k", 1), 20); // the backoff is larger
  assertEquals(q.numRequeues("k"), 3);
  assertEquals(q.delayed, 1);
});

Deno.test("queue priority: high keys go before normal ones, each lane in order", async () => {
  const q = new WorkQueue({ clock: new FakeClock() });
  q.add("n1");
  q.add("h1", "high");
  q.add("n2");
  q.add("h2", "high");
  assertEquals(q.depth, 4);
  assertEquals(q.depthHigh, 2);
  const got = [];
  for (let i = 0; i < 4; i++) got.push(await q.get());
  assertEquals(got, ["h1", "h2", "n1", "n2"]);
});

Deno.test("queue priority: a pending normal key added high moves up; a high one never moves down", async () => {
  const q = new WorkQueue({ clock: new FakeClock() });
  q.add("a");
  q.add("b");
  q.add("b", "high"); // moves up, not duplicated
  q.add("c", "high");
  q.add("c"); // stays high
  assertEquals(q.depth, 3);
  assertEquals(q.depthHigh, 2);
  assertEquals([await q.get(), await q.get(), await q.get()], ["b", "c", "a"]);
});

Deno.test("queue priority: a key added high while in flight is queued high after done", async () => {
  const q = new WorkQueue({ clock: new FakeClock() });
  q.add("k");
  assertEquals(await q.get(), "k");
  q.add("n");
  q.add("k"); // dirty, normal
  q.add("k", "high"); // dirty, now high
  q.done("k");
  assertEquals(q.depthHigh, 1);
  assertEquals(await q.get(), "k");
  assertEquals(await q.get(), "n");
  // Control: added only normal while in flight, it is queued normal (behind "m").
  q.done("k");
  q.done("n");
  q.add("k");
  assertEquals(await q.get(), "k");
  q.add("m");
  q.add("k");
  q.done("k");
  assertEquals(q.depthHigh, 0);
  assertEquals([await q.get(), await q.get()], ["m", "k"]);
});

Deno.test("queue priority: after HIGH_PRIORITY_RUN high keys in a row a waiting normal key goes", async () => {
  const q = new WorkQueue({ clock: new FakeClock() });
  q.add("n1");
  q.add("n2");
  for (let i = 0; i < 2 * HIGH_PRIORITY_RUN + 2; i++) q.add(`h${i}`, "high");
  const got: string[] = [];
  for (let i = 0; i < 2 * HIGH_PRIORITY_RUN + 4; i++) got.push((await q.get())!);
  const run = Array.from({ length: HIGH_PRIORITY_RUN }, (_, i) => `h${i}`);
  const run2 = Array.from({ length: HIGH_PRIORITY_RUN }, (_, i) => `h${i + HIGH_PRIORITY_RUN}`);
  assertEquals(got, [
    ...run,
    "n1",
    ...run2,
    "n2",
    `h${2 * HIGH_PRIORITY_RUN}`,
    `h${2 * HIGH_PRIORITY_RUN + 1}`,
  ]);
  assertEquals(q.depth, 0);
});

Deno.test("queue priority: dropWhere and depthWhere see both lanes", () => {
  const q = new WorkQueue({ clock: new FakeClock() });
  q.add("a/1");
  q.add("a/2", "high");
  q.add("b/1", "high");
  assertEquals(q.depthWhere((k) => k.startsWith("a/")), 2);
  assertEquals(q.dropWhere((k) => k.startsWith("a/")), 2);
  assertEquals(q.depth, 1);
  assertEquals(q.depthHigh, 1);
});
