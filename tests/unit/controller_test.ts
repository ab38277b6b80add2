/**
 * The controller (real {@link Controller} and {@link WorkQueue}, fake reconcile functions):
 * independence of keys and per-key exclusivity (S5), retries with growing backoff and their
 * metrics, reconcile timeout, sync period, fencing, the drain on shutdown (S7), and the error
 * policy: a throttled key requeued after its Retry-After, a fenced one requeued, neither an
 * error (S13, S16).
 */
import fc from "fast-check";
import { assert, assertEquals } from "../assert.ts";
import { FLAGS, parseFlags } from "../../lib/cli.ts";
import { FakeClock } from "../../lib/runtime/clock.ts";
import {
  Controller,
  type ControllerOptions,
  DEFAULT_MAX_CONCURRENT_RECONCILES,
  DEFAULT_SYNC_PERIOD_MS,
  defaultErrorPolicy,
  type ErrorDecision,
  isPanic,
  Reconcile,
  type ReconcileContext,
  TerminalError,
} from "../../lib/runtime/controller.ts";
import { ApiError, FencedError, isFenced } from "../../lib/kube/errors.ts";
import { Metrics } from "../../lib/runtime/metrics.ts";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Polls `cond` every 2 ms, at most `timeoutMs`. */
async function until(what: string, cond: () => boolean, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (let i = 0; i < 100_000; i++) {
    if (cond()) return;
    if (Date.now() > deadline) break;
    await sleep(2);
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
}

/** A promise with its resolve function. */
function gate(): { promise: Promise<void>; open: () => void } {
  let open!: () => void;
  const promise = new Promise<void>((r) => open = r);
  return { promise, open };
}

/** Per-key instrumentation of a fake reconcile: calls, concurrency, maximum concurrency. */
class Probe {
  calls: { key: string; at: number }[] = [];
  inFlight = new Map<string, number>();
  maxPerKey = new Map<string, number>();
  maxTotal = 0;
  completed: string[] = [];

  enter(key: string, at = performance.now()): void {
    this.calls.push({ key, at });
    const n = (this.inFlight.get(key) ?? 0) + 1;
    this.inFlight.set(key, n);
    this.maxPerKey.set(key, Math.max(n, this.maxPerKey.get(key) ?? 0));
    let total = 0;
    for (const v of this.inFlight.values()) total += v;
    this.maxTotal = Math.max(this.maxTotal, total);
  }

  leave(key: string): void {
    this.inFlight.set(key, (this.inFlight.get(key) ?? 1) - 1);
    this.completed.push(key);
  }

  count(key: string): number {
    return this.calls.filter((c) => c.key === key).length;
  }
}

function controller(o: Partial<ControllerOptions> & Pick<ControllerOptions, "reconcile">) {
  return new Controller({ name: "test", syncPeriodMs: 0, ...o });
}

/** Sum of a counter's samples matching `labels`. */
async function counter(
  m: { get(): Promise<{ values: { value: number; labels: Record<string, unknown> }[] }> },
  labels: Record<string, string> = {},
): Promise<number> {
  const got = await m.get();
  return got.values
    .filter((v) => Object.entries(labels).every(([k, x]) => v.labels[k] === x))
    .reduce((s, v) => s + v.value, 0);
}

Deno.test("controller: flags and defaults (--max-concurrent-reconciles 1, --sync-period 10h, --reconcile-timeout)", () => {
  assertEquals(DEFAULT_MAX_CONCURRENT_RECONCILES, 1);
  assertEquals(DEFAULT_SYNC_PERIOD_MS, 36_000_000);
  const names = FLAGS.map((f) => f.name);
  for (const n of ["max-concurrent-reconciles", "sync-period", "reconcile-timeout"]) {
    assert(names.includes(n), `flag --${n} missing`);
  }
  const d = parseFlags([], () => undefined);
  assert(d.kind === "run");
  assertEquals(d.values["max-concurrent-reconciles"], 1);
  assertEquals(d.values["sync-period"], 36_000_000);
  assert((d.values["reconcile-timeout"] as number) > 0);
  const f = parseFlags([
    "--max-concurrent-reconciles=4",
    "--sync-period=30m",
    "--reconcile-timeout=5s",
  ], () => undefined);
  assert(f.kind === "run");
  assertEquals(f.values["max-concurrent-reconciles"], 4);
  assertEquals(f.values["sync-period"], 1_800_000);
  assertEquals(f.values["reconcile-timeout"], 5_000);
});

Deno.test("controller S5: a slow reconcile of A does not delay B (maxConcurrentReconciles 2)", async () => {
  const probe = new Probe();
  const slowA = gate();
  const c = controller({
    maxConcurrentReconciles: 2,
    reconcile: async (key) => {
      probe.enter(key);
      if (key === "ns/a") await slowA.promise;
      probe.leave(key);
      return Reconcile.done;
    },
  });
  const stop = new AbortController();
  const run = c.run(stop.signal, 5_000);
  c.enqueue("ns/a");
  await until("A in flight", () => probe.count("ns/a") === 1);
  const t0 = performance.now();
  c.enqueue("ns/b");
  await until("B done while A runs", () => probe.completed.includes("ns/b"), 1_000);
  assert(performance.now() - t0 < 500, "B waited");
  assertEquals(probe.completed, ["ns/b"]);
  assertEquals(probe.inFlight.get("ns/a"), 1);
  assertEquals(c.activeWorkers, 1);
  // More keys keep flowing past the slow one.
  for (const k of ["ns/c", "ns/d", "ns/e"]) c.enqueue(k);
  await until("C, D, E done", () => probe.completed.length === 4);
  slowA.open();
  await until("A done", () => probe.completed.includes("ns/a"));
  stop.abort();
  await run;
  assertEquals(probe.maxTotal, 2);
});

Deno.test("controller S5: a key is never reconciled twice at once; adds while it runs give one more run", async () => {
  const probe = new Probe();
  let slow = gate();
  const c = controller({
    maxConcurrentReconciles: 4,
    reconcile: async (key) => {
      probe.enter(key);
      if (key === "ns/a") await slow.promise;
      probe.leave(key);
      return Reconcile.done;
    },
  });
  const stop = new AbortController();
  const run = c.run(stop.signal, 5_000);
  c.enqueue("ns/a");
  await until("A in flight", () => probe.count("ns/a") === 1);
  for (let i = 0; i < 10; i++) c.enqueue("ns/a"); // three idle workers could take it: must not
  await sleep(30);
  assertEquals(probe.count("ns/a"), 1);
  assertEquals(c.queue.depth, 0, "a key in flight is not queued");
  const first = slow;
  slow = gate();
  first.open();
  await until("A runs once more", () => probe.count("ns/a") === 2);
  slow.open();
  await until("A done twice", () => probe.completed.filter((k) => k === "ns/a").length === 2);
  await sleep(30);
  assertEquals(probe.count("ns/a"), 2, "the ten adds merged into one run");
  assertEquals(probe.maxPerKey.get("ns/a"), 1);
  stop.abort();
  await run;
});

Deno.test("controller S5: repeated adds of a pending key merge", async () => {
  const probe = new Probe();
  const busy = gate();
  const c = controller({
    maxConcurrentReconciles: 1,
    reconcile: async (key) => {
      probe.enter(key);
      if (key === "ns/busy") await busy.promise;
      probe.leave(key);
      return Reconcile.done;
    },
  });
  const stop = new AbortController();
  const run = c.run(stop.signal, 5_000);
  c.enqueue("ns/busy");
  await until("the only worker is busy", () => probe.count("ns/busy") === 1);
  for (let i = 0; i < 50; i++) {
    c.enqueue("ns/a");
    c.enqueue("ns/b");
  }
  assertEquals(c.queue.depth, 2);
  busy.open();
  await until("A and B done", () => probe.completed.length === 3);
  await sleep(30);
  assertEquals(probe.count("ns/a"), 1);
  assertEquals(probe.count("ns/b"), 1);
  assertEquals(probe.calls.map((x) => x.key), ["ns/busy", "ns/a", "ns/b"], "FIFO order kept");
  stop.abort();
  await run;
});

Deno.test("controller S5 (property): per-key exclusivity, bounded concurrency, every add is seen", async () => {
  await fc.assert(
    fc.asyncProperty(
      fc.integer({ min: 1, max: 4 }),
      fc.array(
        fc.record({
          key: fc.constantFrom("ns/a", "ns/b", "ns/c", "ns/d"),
          pauseMs: fc.integer({ min: 0, max: 3 }),
        }),
        { minLength: 1, maxLength: 25 },
      ),
      fc.array(fc.integer({ min: 0, max: 4 }), { minLength: 4, maxLength: 4 }),
      async (workers, adds, workMs) => {
        const probe = new Probe();
        const keys = ["ns/a", "ns/b", "ns/c", "ns/d"];
        const c = controller({
          maxConcurrentReconciles: workers,
          reconcile: async (key) => {
            probe.enter(key);
            await sleep(workMs[keys.indexOf(key)]);
            probe.leave(key);
            return Reconcile.done;
          },
        });
        const stop = new AbortController();
        const run = c.run(stop.signal, 5_000);
        const lastAdd = new Map<string, number>();
        for (const a of adds) {
          lastAdd.set(a.key, performance.now());
          c.enqueue(a.key);
          if (a.pauseMs) await sleep(a.pauseMs);
        }
        // Every key is reconciled in full after its last add (no add is lost).
        await until(
          "all adds seen",
          () =>
            [...lastAdd].every(([k, t]) =>
              probe.calls.some((x) => x.key === k && x.at >= t) &&
              (probe.inFlight.get(k) ?? 0) === 0
            ) && c.activeWorkers === 0,
          5_000,
        );
        stop.abort();
        await run;
        for (const [k, n] of probe.maxPerKey) assertEquals(n, 1, `key ${k} ran concurrently`);
        assert(probe.maxTotal <= workers, `${probe.maxTotal} > ${workers} workers`);
        // Merging: never more runs of a key than adds of it.
        for (const k of keys) {
          assert(probe.count(k) <= adds.filter((a) => a.key === k).length);
        }
      },
    ),
    { numRuns: 40 },
  );
});

Deno.test("controller: a reconcile that throws is retried with growing delay, counted, and the loop survives", async () => {
  const clock = new FakeClock();
  const metrics = new Metrics();
  const callsAt: number[] = [];
  const FAILURES = 7;
  const c = controller({
    clock,
    metrics,
    reconcile: (key) => {
      if (key !== "ns/flaky") return Promise.resolve(Reconcile.done);
      callsAt.push(clock.now());
      // A synchronous throw and rejections of several kinds: all are caught.
      if (callsAt.length === 1) throw new Error("boom");
      if (callsAt.length === 2) return Promise.reject("a string");
      if (callsAt.length <= FAILURES) {
        return Promise.reject(new TypeError(`fail ${callsAt.length}`));
      }
      return Promise.resolve(Reconcile.done);
    },
  });
  const labels = { name: "test", controller: "test" };
  const stop = new AbortController();
  const run = c.run(stop.signal, 1_000);
  c.enqueue("ns/flaky");
  await until("first call", () => callsAt.length === 1);
  const expected = [5, 10, 20, 40, 80, 160, 320]; // 5 ms doubling (client-go)
  for (let i = 0; i < FAILURES; i++) {
    await until(`retry ${i + 1} scheduled`, () => c.queue.delayed === 1);
    assertEquals(c.queue.numRequeues("ns/flaky"), i + 1);
    clock.advance(expected[i] - 1);
    await sleep(5);
    assertEquals(callsAt.length, i + 1, `retry ${i + 1} came early`);
    clock.advance(1);
    await until(`retry ${i + 1}`, () => callsAt.length === i + 2);
  }
  const gaps = callsAt.slice(1).map((t, i) => t - callsAt[i]);
  assertEquals(gaps, expected);
  await until("success forgets the backoff", () => c.queue.numRequeues("ns/flaky") === 0);
  assertEquals(await counter(metrics.queueRetries, labels), FAILURES);
  assertEquals(await counter(metrics.reconcileErrors, { controller: "test" }), FAILURES);
  // Panics: the thrown string and the five TypeErrors; the plain Error is not one.
  assertEquals(await counter(metrics.reconcilePanics, { controller: "test" }), FAILURES - 1);
  assertEquals(await counter(metrics.terminalReconcileErrors, { controller: "test" }), 0);
  assertEquals(
    await counter(metrics.reconcileTotal, { controller: "test", result: "error" }),
    FAILURES,
  );
  assertEquals(
    await counter(metrics.reconcileTotal, { controller: "test", result: "success" }),
    1,
  );
  const text = await metrics.text();
  assert(
    /^workqueue_retries_total\{name="test",controller="test"\} 7$/m.test(text),
    text.split("\n").filter((l) => l.startsWith("workqueue_retries")).join("\n"),
  );
  // The workers still take keys.
  c.enqueue("ns/other");
  await until("another key", () => c.queue.depth === 0 && c.activeWorkers === 0);
  stop.abort();
  await run;
});

Deno.test("controller: requeue and requeueAfter results", async () => {
  const clock = new FakeClock();
  const calls: number[] = [];
  const c = controller({
    clock,
    reconcile: () => {
      calls.push(clock.now());
      if (calls.length === 1) return Promise.resolve(Reconcile.after(1_000));
      if (calls.length <= 3) return Promise.resolve(Reconcile.backoff());
      return Promise.resolve(Reconcile.done);
    },
  });
  const stop = new AbortController();
  const run = c.run(stop.signal, 1_000);
  c.enqueue("ns/r");
  await until("first", () => calls.length === 1);
  clock.advance(999);
  await sleep(5);
  assertEquals(calls.length, 1);
  clock.advance(1);
  await until("after 1 s", () => calls.length === 2);
  clock.advance(5);
  await until("requeue with backoff 5 ms", () => calls.length === 3);
  clock.advance(10);
  await until("requeue with backoff 10 ms", () => calls.length === 4);
  assertEquals(calls.slice(1).map((t, i) => t - calls[i]), [1_000, 5, 10]);
  stop.abort();
  await run;
});

Deno.test("controller: --reconcile-timeout aborts a slow reconcile; it is an error and retried", async () => {
  const metrics = new Metrics();
  let calls = 0;
  const reasons: unknown[] = [];
  const c = controller({
    metrics,
    reconcileTimeoutMs: 50,
    reconcile: async (_key, ctx) => {
      calls++;
      if (calls > 1) return Reconcile.done;
      await new Promise<void>((resolve) => {
        ctx.signal.addEventListener("abort", () => resolve(), { once: true });
      });
      reasons.push(ctx.signal.reason);
      throw ctx.signal.reason;
    },
  });
  const stop = new AbortController();
  const run = c.run(stop.signal, 1_000);
  const t0 = performance.now();
  c.enqueue("ns/slow");
  await until("retried after the timeout", () => calls === 2, 3_000);
  const took = performance.now() - t0;
  assert(took >= 45 && took < 2_000, `timeout took ${took} ms`);
  assertEquals((reasons[0] as Error)?.name, "TimeoutError");
  assertEquals(await counter(metrics.reconcileErrors), 1);
  assertEquals(await counter(metrics.reconcileTimeouts), 1);
  assertEquals(await counter(metrics.reconcilePanics), 0, "a timeout is not a panic");
  stop.abort();
  await run;
});

Deno.test("controller: controller_runtime_reconcile_timeouts_total counts a bound that ran out, even on success", async () => {
  const metrics = new Metrics();
  const c = controller({
    metrics,
    reconcileTimeoutMs: 30,
    // "slow" ignores its signal and succeeds after the bound; "fast" is done well within it.
    reconcile: async (key) => {
      if (key === "ns/slow") await sleep(80);
      return Reconcile.done;
    },
  });
  const stop = new AbortController();
  const run = c.run(stop.signal, 1_000);
  const results = (result: string) => counter(metrics.reconcileTotal, { result });
  c.enqueue("ns/fast");
  for (let i = 0; i < 200 && await results("success") < 1; i++) await sleep(5);
  assertEquals(await results("success"), 1);
  assertEquals(await counter(metrics.reconcileTimeouts), 0, "a reconcile within its bound");
  c.enqueue("ns/slow");
  for (let i = 0; i < 200 && await results("success") < 2; i++) await sleep(5);
  assertEquals(await results("success"), 2);
  assertEquals(await counter(metrics.reconcileTimeouts, { controller: "test" }), 1);
  assertEquals(await counter(metrics.reconcileErrors), 0, "it succeeded: not an error");
  stop.abort();
  await run;
});

Deno.test("controller: a TerminalError is an error that is not requeued; counted as terminal, not as a panic", async () => {
  const metrics = new Metrics();
  const text0 = await metrics.text();
  const calls: string[] = [];
  const c = controller({
    metrics,
    reconcile: (key) => {
      calls.push(key);
      if (key === "ns/final") {
        throw new TerminalError("spec cannot work", { cause: new Error("x") });
      }
      // An ordinary error the policy below calls terminal.
      if (key === "ns/policy") throw new Error("unsupported");
      return Promise.resolve(Reconcile.done);
    },
    errorPolicy: (err) =>
      err instanceof Error && err.message === "unsupported"
        ? { next: Reconcile.terminal }
        : undefined,
  });
  const zero = (await metrics.text()).split("\n").filter((l) =>
    /^controller_runtime_(terminal_reconcile_errors|reconcile_panics|reconcile_timeouts)_total\{controller="test"\} 0$/
      .test(l)
  );
  assertEquals(zero.length, 3, "each series exists at 0 from the start");
  assert(!text0.includes('controller="test"'), "a Metrics alone has no series");
  const stop = new AbortController();
  const run = c.run(stop.signal, 1_000);
  c.enqueue("ns/final");
  c.enqueue("ns/policy");
  for (let i = 0; i < 200 && await counter(metrics.reconcileErrors) < 2; i++) await sleep(5);
  await sleep(50);
  assertEquals(calls.sort(), ["ns/final", "ns/policy"], "neither was re-added");
  assertEquals(c.queue.delayed, 0);
  assertEquals(await counter(metrics.reconcileErrors), 2);
  assertEquals(await counter(metrics.terminalReconcileErrors, { controller: "test" }), 2);
  assertEquals(await counter(metrics.reconcilePanics), 0);
  assertEquals(await counter(metrics.reconcileTotal, { result: "error" }), 2);
  // The next change of the object brings the key back.
  c.enqueue("ns/final");
  await until("re-enqueued by a change", () => calls.length === 3);
  stop.abort();
  await run;
});

Deno.test("isPanic: engine faults and non-Errors are panics; errors a reconcile reports are not", () => {
  for (
    const e of [new TypeError("x"), new ReferenceError("x"), new RangeError("x"), "s", 1, null]
  ) {
    assert(isPanic(e), String(e));
  }
  const notPanics = [
    new Error("x"),
    new TerminalError("x"),
    new ApiError(500, undefined, { request: "GET /x" }),
    new DOMException("t", "TimeoutError"),
  ];
  for (const e of notPanics) assert(!isPanic(e), String(e));
  assertEquals(defaultErrorPolicy(new TerminalError("x")), { next: Reconcile.terminal });
});

Deno.test("controller: --sync-period adds every known key again", async () => {
  const clock = new FakeClock();
  const seen: string[] = [];
  const c = controller({
    clock,
    syncPeriodMs: 10_000,
    allKeys: () => ["ns/a", "ns/b"],
    reconcile: (key) => {
      seen.push(key);
      return Promise.resolve(Reconcile.done);
    },
  });
  const stop = new AbortController();
  const run = c.run(stop.signal, 1_000);
  await until("first pass over every key", () => seen.length === 2);
  clock.advance(8_999); // the period is jittered within ±10 %
  await sleep(5);
  assertEquals(seen.length, 2);
  clock.advance(2_002);
  await until("second pass", () => seen.length === 4);
  assertEquals(seen.sort(), ["ns/a", "ns/a", "ns/b", "ns/b"]);
  stop.abort();
  await run;
});

Deno.test("controller S7: stop takes no new keys and lets the in-flight reconcile finish", async () => {
  const probe = new Probe();
  const slow = gate();
  let signal: AbortSignal | undefined;
  const c = controller({
    maxConcurrentReconciles: 1,
    reconcile: async (key, ctx: ReconcileContext) => {
      probe.enter(key);
      if (key === "ns/a") {
        signal = ctx.signal;
        await slow.promise;
      }
      probe.leave(key);
      return Reconcile.done;
    },
  });
  const stop = new AbortController();
  let resolved = false;
  const run = c.run(stop.signal, 5_000).then(() => resolved = true);
  c.enqueue("ns/a");
  await until("A in flight", () => probe.count("ns/a") === 1);
  c.enqueue("ns/b");
  c.enqueue("ns/c");
  stop.abort(); // SIGTERM
  c.enqueue("ns/d"); // adds after the stop are ignored
  await sleep(100);
  assertEquals(resolved, false, "run() returned while a reconcile was in flight");
  assert(!signal!.aborted, "the in-flight reconcile was aborted before the grace period");
  slow.open();
  await run;
  assertEquals(probe.completed, ["ns/a"]);
  assertEquals(probe.calls.map((x) => x.key), ["ns/a"], "no key handed out after the stop");
  assert(!signal!.aborted);
  assertEquals(c.activeWorkers, 0);
});

Deno.test("controller S7: past the grace period the in-flight reconcile's signal aborts", async () => {
  let signal: AbortSignal | undefined;
  let finished = false;
  const c = controller({
    maxConcurrentReconciles: 2,
    reconcile: async (_key, ctx) => {
      signal = ctx.signal;
      // A reconcile that would take 60 s, but honours its signal.
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, 60_000);
        ctx.signal.addEventListener("abort", () => {
          clearTimeout(t);
          resolve();
        }, { once: true });
      });
      finished = true;
      if (ctx.signal.aborted) throw ctx.signal.reason;
      return Reconcile.done;
    },
  });
  const stop = new AbortController();
  const run = c.run(stop.signal, 200);
  c.enqueue("ns/stuck");
  await until("in flight", () => signal !== undefined);
  const t0 = performance.now();
  stop.abort();
  await run;
  const took = performance.now() - t0;
  assert(signal!.aborted, "not aborted");
  assert(finished);
  assert(took >= 190 && took < 3_000, `run() took ${took} ms after the stop (grace 200 ms)`);
});

Deno.test("controller: fence() aborts in-flight reconciles at once (lost Lease)", async () => {
  let signal: AbortSignal | undefined;
  const c = controller({
    reconcile: async (_key, ctx) => {
      signal = ctx.signal;
      await new Promise<void>((resolve) => {
        ctx.signal.addEventListener("abort", () => resolve(), { once: true });
      });
      return Reconcile.done;
    },
  });
  const stop = new AbortController();
  const run = c.run(stop.signal, 30_000);
  c.enqueue("ns/a");
  await until("in flight", () => signal !== undefined);
  c.fence();
  assert(signal!.aborted);
  assert(isFenced(signal!.reason) && signal!.reason.reason === "NotHeld", String(signal!.reason));
  stop.abort();
  await run;
});

Deno.test("controller S16: a throttled reconcile is requeued after max(backoff, Retry-After), not an error", async () => {
  const clock = new FakeClock();
  const metrics = new Metrics();
  const calls: number[] = [];
  const c = controller({
    clock,
    metrics,
    reconcile: () => {
      calls.push(clock.now());
      // 429 with Retry-After 8 s (API Priority and Fairness), then 503 with 2 s, then success.
      if (calls.length === 1) {
        return Promise.reject(new ApiError(429, { code: 429 }, { retryAfterSeconds: 8 }));
      }
      if (calls.length === 2) {
        return Promise.reject(new ApiError(503, { code: 503 }, { retryAfterSeconds: 2 }));
      }
      return Promise.resolve(Reconcile.done);
    },
  });
  const stop = new AbortController();
  const run = c.run(stop.signal, 1_000);
  c.enqueue("ns/t");
  await until("first", () => calls.length === 1);
  await until("requeued", () => c.queue.delayed === 1);
  clock.advance(7_999); // the per-key backoff (5 ms) alone would have retried long ago
  await sleep(5);
  assertEquals(calls.length, 1, "retried before the Retry-After");
  clock.advance(1);
  await until("after 8 s", () => calls.length === 2);
  await until("requeued again", () => c.queue.delayed === 1);
  clock.advance(1_999);
  await sleep(5);
  assertEquals(calls.length, 2);
  clock.advance(1);
  await until("after 2 s", () => calls.length === 3);
  assertEquals(calls.slice(1).map((t, i) => t - calls[i]), [8_000, 2_000]);
  assertEquals(await counter(metrics.reconcileErrors, { controller: "test" }), 0);
  assertEquals(
    await counter(metrics.reconcileTotal, { controller: "test", result: "requeue_after" }),
    2,
  );
  assertEquals(await counter(metrics.reconcileTotal, { controller: "test", result: "error" }), 0);
  stop.abort();
  await run;
});

/** The floor of a `backoff` decision (ms); undefined for no decision or another kind. */
function minMs(d: ErrorDecision | undefined): number | undefined {
  return d?.next.kind === "backoff" ? d.next.minMs : undefined;
}

Deno.test("controller: the error policy maps errors to requeue decisions (fenced, throttled, conflict, other)", async () => {
  const fenced = new FencedError("Stale", "PATCH /x", 3_500);
  const f = defaultErrorPolicy(fenced);
  assert(f?.expected && minMs(f) === 0, JSON.stringify(f));
  const t = defaultErrorPolicy(new ApiError(429, {}, { retryAfterSeconds: 3 }));
  assert(t?.expected, "throttled is expected");
  assertEquals(minMs(t), 3_000);
  // A client-side 429 (the Retry-After gate refused to send) is the same.
  const local = new ApiError(429, { reason: "TooManyRequests" }, { retryAfterSeconds: 0.25 });
  assertEquals(minMs(defaultErrorPolicy(local)), 250);
  // 503 only with a Retry-After; without it, an error like any other.
  assertEquals(defaultErrorPolicy(new ApiError(503, {})), undefined);
  assertEquals(
    minMs(defaultErrorPolicy(new ApiError(503, {}, { retryAfterSeconds: 1 }))),
    1_000,
  );
  assert(defaultErrorPolicy(new ApiError(409, { reason: "Conflict", code: 409 }))?.expected);
  assertEquals(defaultErrorPolicy(new Error("boom")), undefined);
  assertEquals(defaultErrorPolicy(new ApiError(422, { reason: "Invalid" })), undefined);

  // Through a controller: a fenced reconcile is requeued with backoff and not counted; a policy
  // of the controller's own decides before the default.
  const clock = new FakeClock();
  const metrics = new Metrics();
  let n = 0;
  const c = controller({
    clock,
    metrics,
    reconcile: () => ++n === 1 ? Promise.reject(fenced) : Promise.resolve(Reconcile.done),
  });
  const stop = new AbortController();
  const run = c.run(stop.signal, 1_000);
  c.enqueue("ns/f");
  await until("requeued", () => c.queue.delayed === 1);
  clock.advance(5);
  await until("retried after the backoff", () => n === 2);
  assertEquals(await counter(metrics.reconcileErrors, { controller: "test" }), 0);
  assertEquals(await counter(metrics.reconcileTotal, { controller: "test", result: "requeue" }), 1);
  stop.abort();
  await run;

  const seen: unknown[] = [];
  const m2 = new Metrics();
  const c2 = controller({
    clock,
    metrics: m2,
    reconcile: () => Promise.reject(new Error("permanent")),
    errorPolicy: (err) => {
      seen.push(err);
      return { next: Reconcile.backoff(60_000), expected: { message: "Later" } };
    },
  });
  const stop2 = new AbortController();
  const run2 = c2.run(stop2.signal, 1_000);
  c2.enqueue("ns/p");
  await until("policy consulted", () => seen.length === 1 && c2.queue.delayed === 1);
  assertEquals(await counter(m2.reconcileErrors, { controller: "test" }), 0);
  stop2.abort();
  await run2;
});

Deno.test("controller: a pass of reconciles that never wait on I/O still lets probes, watches and timers through", async () => {
  // A first pass over objects already as they should be: every reconcile reads only the cache and
  // resolves at once, so the workers' loop is one chain of promise callbacks. Without a turn of
  // the event loop, sockets (the /readyz handler, watch events, Lease answers) wait for the whole
  // pass: measured 0.6 s at 5,000 AppServices and 1.8 s at 10,000 (deno task bench). A timer
  // alone is not enough of a check: Deno runs timers and setImmediate callbacks without polling
  // sockets, so a request to a server in this process is the probe here.
  const keys = Array.from({ length: 400 }, (_, i) => `ns/a${i}`);
  let done = 0;
  const busyMs = 1;
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen: () => {} },
    () => new Response(String(done)),
  );
  const c = controller({
    maxConcurrentReconciles: 4,
    allKeys: () => keys,
    reconcile: () => {
      const until = performance.now() + busyMs;
      while (performance.now() < until) { /* CPU, as a reconcile computing its desired state */ }
      done++;
      return Promise.resolve(Reconcile.done);
    },
  });
  const stop = new AbortController();
  let doneAtTimer = -1;
  const timer = new Promise<void>((resolve) =>
    setTimeout(() => {
      doneAtTimer = done;
      resolve();
    }, 0)
  );
  const probe = fetch(`http://127.0.0.1:${server.addr.port}/`).then((r) => r.text());
  const run = c.run(stop.signal, 1_000);
  await timer;
  const doneAtProbe = Number(await probe);
  await until("the whole pass", () => done === keys.length);
  stop.abort();
  await run;
  await server.shutdown();
  assert(
    doneAtTimer < keys.length / 2,
    `a timer due at the start ran only after ${doneAtTimer} of ${keys.length} reconciles`,
  );
  assert(
    doneAtProbe < keys.length / 2,
    `a request sent at the start was answered only after ${doneAtProbe} of ${keys.length} reconciles`,
  );
});

Deno.test("controller: the work-queue gauges and active workers are right whenever they are read", async () => {
  const metrics = new Metrics();
  const slow = gate();
  const c = controller({
    metrics,
    maxConcurrentReconciles: 1,
    reconcile: async (key) => {
      if (key === "ns/slow") await slow.promise;
      return Reconcile.done;
    },
  });
  const value = async (g: { get(): Promise<{ values: { value: number }[] }> }) =>
    (await g.get()).values[0]?.value;
  const stop = new AbortController();
  const run = c.run(stop.signal, 1_000);
  c.enqueue("ns/slow");
  await until("slow in flight", () => c.activeWorkers === 1);
  c.enqueue("ns/a");
  c.enqueue("ns/b");
  // Read at once, with no timer or reconcile in between: the state of this moment.
  assertEquals(await value(metrics.activeWorkers), 1);
  assertEquals(await value(metrics.queueDepth), 2);
  assert((await value(metrics.longestRunning))! >= 0);
  const text = await metrics.registry.metrics();
  assert(text.includes('workqueue_depth{name="test",controller="test",priority=""} 2'), text);
  slow.open();
  await until("all done", () => c.queue.depth === 0 && c.activeWorkers === 0);
  assertEquals(await value(metrics.activeWorkers), 0);
  assertEquals(await value(metrics.queueDepth), 0);
  stop.abort();
  await run;
});
