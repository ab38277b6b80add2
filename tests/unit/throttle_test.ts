/**
 * Retry-After (S16): the client-wide {@link RetryAfterGate} (no admission before the Retry-After,
 * the window after it, arrival order, waits beyond the bound refused) with an injected clock,
 * and the client against a loopback server: a 429 to one request holds back every other request
 * of the client until its Retry-After has passed (server-side arrival times), and a wait longer
 * than `maxThrottleWaitMs` fails at once with a client-side 429 and sends nothing.
 */
import { assert, assertEquals, assertRejects } from "../assert.ts";
import { KubeClient } from "../../lib/kube/client.ts";
import { ApiError, isThrottled } from "../../lib/kube/errors.ts";
import { CONFIGMAPS } from "../../lib/kube/resources.ts";
import { GATE_WINDOW_OPEN_AT, RetryAfterGate } from "../../lib/kube/throttle.ts";
import { FakeServer } from "./fakeapi.ts";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const tooLong = (ms: number) => new ApiError(429, {}, { retryAfterSeconds: ms / 1000 });

Deno.test("throttle S16: RetryAfterGate admits nothing before the Retry-After, then through a window", async () => {
  const gate = new RetryAfterGate();
  assertEquals(gate.window(), Infinity);
  for (let i = 0; i < 4; i++) await gate.acquire(10_000, tooLong);
  assertEquals(gate.inFlight, 4);
  // One of four in flight is throttled for 150 ms: closed, and the window halves to 2.
  const t0 = performance.now();
  gate.release(0.15);
  assert(gate.closedForMs() > 100);
  const admitted: number[] = [];
  const order: number[] = [];
  const waiters = [0, 1, 2].map((i) =>
    gate.acquire(10_000, tooLong).then(() => {
      admitted.push(performance.now() - t0);
      order.push(i);
    })
  );
  // The three others come back fine; the waiters are held by the closed gate.
  for (let i = 0; i < 3; i++) gate.release();
  await sleep(50);
  assertEquals(admitted, []);
  for (let i = 0; i < 500 && order.length < 2; i++) await sleep(10);
  await sleep(30);
  // After it: two at once (the window), the third once one is released, in arrival order.
  assertEquals(order, [0, 1]);
  for (const t of admitted) assert(t >= 150, `admitted ${t} ms after the 429 (Retry-After 150)`);
  assertEquals(gate.window(), 2);
  gate.release();
  await waiters[2];
  assertEquals(order, [0, 1, 2]);
  gate.release();
  gate.release();
  assertEquals(gate.inFlight, 0);
});

Deno.test("throttle S16: RetryAfterGate refuses waits beyond the bound; the window grows back to unlimited", async () => {
  let now = 0;
  const gate = new RetryAfterGate({ now: () => now, windowStepMs: 1_000 });
  await gate.acquire(0, tooLong);
  await gate.acquire(0, tooLong);
  gate.release(8); // Retry-After 8 s with 2 in flight: window 1
  const err = await assertRejects(() => gate.acquire(5_000, tooLong));
  assert(isThrottled(err) && Math.abs((err as ApiError).retryAfterSeconds! - 8) < 0.01);
  assertEquals(gate.inFlight, 1, "a refused wait takes no slot");
  gate.release();
  now = 8_000;
  assertEquals(gate.closedForMs(), 0);
  assertEquals(gate.window(), 1);
  now = 10_500;
  assertEquals(gate.window(), 3); // one more per second without a 429
  now = 8_000 + (GATE_WINDOW_OPEN_AT - 1) * 1_000;
  assertEquals(gate.window(), Infinity);
});

Deno.test("throttle S16: a 429 to one request holds back every request of the client for its Retry-After", async () => {
  const server = new FakeServer();
  let sentAt = 0;
  server.handler = (_req, path) => {
    if (path.endsWith("/configmaps/first") && sentAt === 0) {
      sentAt = performance.now();
      return new Response("Too many requests, please try again later.\n", {
        status: 429,
        headers: { "Retry-After": "0.4" },
      });
    }
    return undefined;
  };
  const client = new KubeClient(server.config(), { maxRetries: 2 });
  try {
    const first = client.get(CONFIGMAPS, "first", { namespace: "default" }); // 429, then retried
    for (let i = 0; i < 100 && sentAt === 0; i++) await sleep(5);
    await sleep(20);
    assert(client.throttledForMs() > 0, "the gate did not close");
    // Other requests of the same client, other paths and verbs: none before the Retry-After.
    await Promise.all([
      client.get(CONFIGMAPS, "other", { namespace: "default" }),
      client.create(CONFIGMAPS, {
        apiVersion: "v1",
        kind: "ConfigMap",
        metadata: { name: "n", namespace: "default" },
      }),
      client.list(CONFIGMAPS, { namespace: "default" }),
      first,
    ]);
    const after = server.received.filter((r) => r.atMs > sentAt);
    assertEquals(after.length, 4);
    for (const r of after) {
      assert(r.atMs - sentAt >= 400, `${r.method} ${r.path} ${r.atMs - sentAt} ms after the 429`);
    }
  } finally {
    client.close();
    await server.close();
  }
});

Deno.test("throttle S16: a Retry-After beyond maxThrottleWaitMs fails at once with a client-side 429, nothing sent", async () => {
  const server = new FakeServer();
  server.handler = () =>
    new Response("Too many requests", { status: 429, headers: { "Retry-After": "5" } });
  const client = new KubeClient(server.config(), { maxRetries: 3, maxThrottleWaitMs: 1_000 });
  try {
    const t0 = performance.now();
    const e1 = await assertRejects(() => client.get(CONFIGMAPS, "a", { namespace: "default" }));
    // The server's own 429, not retried in place (5 s > 1 s): the caller requeues.
    assert(e1 instanceof ApiError && e1.code === 429 && e1.retryAfterSeconds === 5, String(e1));
    assertEquals(server.received.length, 1);
    const e2 = await assertRejects(() =>
      client.patch(CONFIGMAPS, "a", {}, { namespace: "default" })
    );
    assert(isThrottled(e2), String(e2));
    const ra = (e2 as ApiError).retryAfterSeconds!;
    assert(ra > 4 && ra <= 5, `remaining ${ra} s`);
    assertEquals(server.received.length, 1, "a request was sent while the gate was closed");
    assert(performance.now() - t0 < 1_000, "waited in place");
  } finally {
    client.close();
    await server.close();
  }
});

Deno.test("throttle S16: a client without the gate (the Lease's) is not held back by a 429", async () => {
  const server = new FakeServer();
  let throttled = 0;
  server.handler = (_req, path) => {
    if (path.endsWith("/first") && throttled++ === 0) {
      return new Response("Too many requests", { status: 429, headers: { "Retry-After": "5" } });
    }
    return undefined;
  };
  const client = new KubeClient(server.config(), { maxRetries: 0, retryAfterGate: false });
  try {
    const err = await assertRejects(() =>
      client.get(CONFIGMAPS, "first", { namespace: "default" })
    );
    assert(isThrottled(err));
    assertEquals(client.throttledForMs(), 0);
    await client.get(CONFIGMAPS, "second", { namespace: "default" }); // at once
    assertEquals(server.received.length, 2);
  } finally {
    client.close();
    await server.close();
  }
});
