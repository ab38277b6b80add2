/**
 * Time bounds that end with their work (lib/kube/deadline.ts): a {@link deadline} aborts as
 * `AbortSignal.timeout` does and can be cleared; the client clears each request's bound once its
 * answer has been read, and the controller each reconcile's bound once the reconcile has ended, so
 * no timer (and nothing it holds) outlives the work it bounded.
 *
 * @module
 */
import { assert, assertEquals, assertRejects } from "../assert.ts";
import { deadline } from "../../lib/kube/deadline.ts";
import { isTimeout } from "../../lib/kube/transport.ts";
import { KubeClient } from "../../lib/kube/client.ts";
import { ApiError } from "../../lib/kube/errors.ts";
import { CONFIGMAPS } from "../../lib/kube/resources.ts";
import { Controller, Reconcile } from "../../lib/runtime/controller.ts";
import { FakeServer } from "./fakeapi.ts";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Records the timers started with a delay of exactly `ms` and which of them were cleared, by
 * wrapping the global setTimeout/clearTimeout (the real timers still run). `restore()` undoes it.
 */
function timersOf(ms: number) {
  const realSet = globalThis.setTimeout;
  const realClear = globalThis.clearTimeout;
  const started = new Set<unknown>();
  const cleared = new Set<unknown>();
  const fired = new Set<unknown>();
  // deno-lint-ignore no-explicit-any
  (globalThis as any).setTimeout = (fn: () => void, delay?: number) => {
    if (delay !== ms) return realSet(fn, delay);
    const id = realSet(() => {
      fired.add(id);
      fn();
    }, delay);
    started.add(id);
    return id;
  };
  // deno-lint-ignore no-explicit-any
  (globalThis as any).clearTimeout = (id?: any) => {
    if (started.has(id)) cleared.add(id);
    realClear(id);
  };
  return {
    started,
    cleared,
    fired,
    /** Started, neither cleared nor fired. */
    pending: () => [...started].filter((id) => !cleared.has(id) && !fired.has(id)).length,
    restore() {
      globalThis.setTimeout = realSet;
      globalThis.clearTimeout = realClear;
      for (const id of started) realClear(id as number);
    },
  };
}

Deno.test("deadline: aborts with a TimeoutError after its bound, as AbortSignal.timeout does", async () => {
  const d = deadline(20);
  assert(!d.signal.aborted);
  for (let i = 0; i < 100 && !d.signal.aborted; i++) await sleep(5);
  assert(d.signal.aborted, "aborted after its bound");
  assert(isTimeout(d.signal.reason), String(d.signal.reason));
  assertEquals((d.signal.reason as DOMException).name, "TimeoutError");
  d.clear(); // after firing: a no-op
  // The same reason as the platform's own bound (what transport.ts and controller.ts tell apart).
  const platform = AbortSignal.timeout(1);
  for (let i = 0; i < 100 && !platform.aborted; i++) await sleep(5);
  assertEquals(isTimeout(platform.reason), isTimeout(d.signal.reason));
});

Deno.test("deadline: a cleared bound never aborts, and clear() is idempotent", async () => {
  const fired = deadline(20);
  const d = deadline(20);
  d.clear();
  d.clear();
  // Positive control: a bound of the same length that is not cleared fires in the same wait.
  for (let i = 0; i < 100 && !fired.signal.aborted; i++) await sleep(5);
  assert(fired.signal.aborted, "the control fired");
  await sleep(30);
  assert(!d.signal.aborted, "the cleared bound did not fire");
});

Deno.test("client: every request's time bound is cleared once its answer has been read", async () => {
  const REQUEST_TIMEOUT_MS = 43_210; // a delay no other timer of the client uses
  const server = new FakeServer();
  server.handler = (req) => {
    const url = new URL(req.url);
    if (url.pathname.endsWith("/missing")) {
      return new Response(
        JSON.stringify({ kind: "Status", apiVersion: "v1", status: "Failure", code: 404 }),
        { status: 404, headers: { "Content-Type": "application/json" } },
      );
    }
    const cm = { metadata: { name: "a", namespace: "ns", uid: "u1", resourceVersion: "7" } };
    const body = req.method === "GET" && !url.pathname.endsWith("/a")
      ? { kind: "ConfigMapList", metadata: { resourceVersion: "7" }, items: [cm] }
      : cm;
    return new Response(JSON.stringify(body), {
      status: 200,
      headers: { "Content-Type": "application/json" },
    });
  };
  const timers = timersOf(REQUEST_TIMEOUT_MS);
  const client = new KubeClient(server.config(), { requestTimeoutMs: REQUEST_TIMEOUT_MS });
  try {
    const cm = { metadata: { name: "a", namespace: "ns" } };
    await client.get(CONFIGMAPS, "a", { namespace: "ns" });
    await client.list(CONFIGMAPS, { namespace: "ns" });
    await client.create(CONFIGMAPS, cm);
    await client.create(CONFIGMAPS, cm, { response: "none" });
    await client.create(CONFIGMAPS, cm, { response: "metadata" });
    await client.patch(CONFIGMAPS, "a", {}, { namespace: "ns", response: "none" });
    const err = await assertRejects(() => client.get(CONFIGMAPS, "missing", { namespace: "ns" }));
    assert(err instanceof ApiError && err.code === 404, String(err));
    // Positive control: the requests did start bounds of that length, one per request.
    assertEquals(timers.started.size, 7, "one bound per request");
    assertEquals(timers.pending(), 0, "no bound outlives its answer");
    assertEquals(timers.fired.size, 0);
  } finally {
    timers.restore();
    client.close();
    await server.close();
  }
});

Deno.test("controller: each reconcile's time bound is cleared when the reconcile ends", async () => {
  const RECONCILE_TIMEOUT_MS = 54_321;
  const timers = timersOf(RECONCILE_TIMEOUT_MS);
  let calls = 0;
  const c = new Controller({
    name: "test",
    syncPeriodMs: 0,
    reconcileTimeoutMs: RECONCILE_TIMEOUT_MS,
    reconcile: async (key) => {
      calls++;
      await sleep(1);
      if (key === "ns/fails") throw new Error("boom");
      return Reconcile.done;
    },
  });
  const stop = new AbortController();
  const run = c.run(stop.signal, 1_000);
  try {
    for (let i = 0; i < 20; i++) c.enqueue(`ns/a${i}`);
    c.enqueue("ns/fails");
    for (let i = 0; i < 400 && calls < 21; i++) await sleep(5);
    assert(calls >= 21, `reconciled ${calls} times`);
    await sleep(10);
    // Positive control: each reconcile started a bound of that length.
    assert(timers.started.size >= 21, `bounds started: ${timers.started.size}`);
    assertEquals(timers.pending(), 0, "no bound outlives its reconcile");
  } finally {
    stop.abort();
    await run;
    timers.restore();
  }
});
