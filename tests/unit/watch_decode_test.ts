/**
 * decodeWatchStream (lib/kube/watch.ts) on a ReadableStream the test controls: frame boundaries
 * anywhere in the chunks, ERROR frames as typed errors, and the idle bound. Then the reflector
 * over such decoded streams (a scripted client, a fake clock): what it does when a stream ends at
 * once, fails midway, goes idle or is restarted by the client, when the connection recovers
 * during a backoff, and with WatchList; when its backoff resets (S15) and when it is deaf (S14).
 */
import { assert, assertEquals, assertRejects } from "../assert.ts";
import {
  decodeWatchBatches,
  decodeWatchStream,
  type ObjectWatchEvent,
  WatchIdleError,
  WatchRestartError,
} from "../../lib/kube/watch.ts";
import { ConnectionHealth } from "../../lib/kube/connection.ts";
import { ApiError, isGone } from "../../lib/kube/errors.ts";
import type { KubeClient } from "../../lib/kube/client.ts";
import { FakeClock } from "../../lib/runtime/clock.ts";
import { Reflector, type ReflectorEvent } from "../../lib/runtime/reflector.ts";
import { Store } from "../../lib/runtime/store.ts";

interface Obj {
  metadata: { name?: string; resourceVersion: string; annotations?: Record<string, string> };
  data?: Record<string, string>;
}

const enc = new TextEncoder();

/** A body stream fed by hand; `cancelled` tells whether the decoder released it. */
function body() {
  let ctl!: ReadableStreamDefaultController<Uint8Array>;
  let cancelled = false;
  const stream = new ReadableStream<Uint8Array>({
    start(c) {
      ctl = c;
    },
    cancel() {
      cancelled = true;
    },
  });
  return {
    stream,
    push: (chunk: string | Uint8Array) =>
      ctl.enqueue(typeof chunk === "string" ? enc.encode(chunk) : chunk),
    close: () => ctl.close(),
    get cancelled() {
      return cancelled;
    },
  };
}

const frame = (type: string, name: string, rv: string, extra: Record<string, unknown> = {}) =>
  JSON.stringify({ type, object: { metadata: { name, resourceVersion: rv }, ...extra } }) + "\n";

async function collect(it: AsyncGenerator<ObjectWatchEvent<Obj>>): Promise<string[]> {
  const out: string[] = [];
  for await (const ev of it) {
    out.push(`${ev.type} ${ev.object.metadata.name} ${ev.object.metadata.resourceVersion}`);
  }
  return out;
}

Deno.test("watch decode: a frame split across many chunks, even inside a UTF-8 character", async () => {
  const b = body();
  const text = frame("ADDED", "grüße-✓", "10", { data: { k: "ünïcødé ✓" } }) +
    frame("MODIFIED", "b", "11");
  const bytes = enc.encode(text);
  // One byte per chunk: every boundary, including the middle of multi-byte characters.
  for (const byte of bytes) b.push(new Uint8Array([byte]));
  b.close();
  const events: ObjectWatchEvent<Obj>[] = [];
  for await (const ev of decodeWatchStream<Obj>(b.stream, 0, () => {})) events.push(ev);
  assertEquals(events.map((e) => e.type), ["ADDED", "MODIFIED"]);
  assertEquals(events[0].object.metadata.name, "grüße-✓");
  assertEquals(events[0].object.data, { k: "ünïcødé ✓" });
  assertEquals(events[1].object.metadata.resourceVersion, "11");
});

Deno.test("watch decode: several frames in one chunk, a frame ending in the next, blank lines", async () => {
  const b = body();
  const all = frame("ADDED", "a", "1") + frame("MODIFIED", "a", "2") + "\n" +
    frame("BOOKMARK", "", "3") + frame("DELETED", "a", "4");
  const cut = all.length - 7;
  b.push(all.slice(0, cut));
  b.push(all.slice(cut));
  b.close();
  assertEquals(await collect(decodeWatchStream<Obj>(b.stream, 0, () => {})), [
    "ADDED a 1",
    "MODIFIED a 2",
    "BOOKMARK  3",
    "DELETED a 4",
  ]);
});

Deno.test("watch decode: an ERROR frame is thrown as ApiError 410 after the events before it", async () => {
  const b = body();
  b.push(frame("ADDED", "a", "5"));
  b.push(
    JSON.stringify({
      type: "ERROR",
      object: {
        kind: "Status",
        apiVersion: "v1",
        status: "Failure",
        message: "too old resource version: 5 (812)",
        reason: "Expired",
        code: 410,
      },
    }) + "\n" + frame("ADDED", "never", "6"),
  );
  const seen: string[] = [];
  const err = await assertRejects(async () => {
    for await (const ev of decodeWatchStream<Obj>(b.stream, 0, () => {})) {
      seen.push(ev.object.metadata.name!);
    }
  }, /410 Expired: too old resource version/);
  assertEquals(seen, ["a"]);
  assert(err instanceof ApiError, "not an ApiError");
  assertEquals((err as ApiError).code, 410);
  assertEquals((err as ApiError).reason, "Expired");
  assert(isGone(err), "isGone");
  assert(b.cancelled, "the body was not released after the error");
});

Deno.test("watch decode: no byte within the idle bound → onIdle once, WatchIdleError, body released", async () => {
  const b = body();
  b.push(frame("ADDED", "a", "1"));
  let idleCalls = 0;
  const seen: string[] = [];
  const err = await assertRejects(async () => {
    for await (const ev of decodeWatchStream<Obj>(b.stream, 50, () => idleCalls++)) {
      seen.push(ev.object.metadata.name!);
    }
  }, /delivered nothing for 50 ms/);
  assert(err instanceof WatchIdleError, `not a WatchIdleError: ${err}`);
  assertEquals((err as WatchIdleError).idleMs, 50);
  assertEquals(idleCalls, 1);
  assertEquals(seen, ["a"]);
  assert(b.cancelled, "the body was not released");
});

Deno.test("watch decode: every chunk re-arms the idle bound; a normal end is no error", async () => {
  const b = body();
  let idleCalls = 0;
  const it = decodeWatchStream<Obj>(b.stream, 1_000, () => idleCalls++);
  const feeder = (async () => {
    // 12 chunks 100 ms apart: 1.2 s in all, longer than the bound, but never 1 s without a byte.
    const text = frame("ADDED", "slow", "7");
    const parts = [text.slice(0, 5), text.slice(5, 20), text.slice(20), ...Array(9).fill("\n")];
    for (const p of parts) {
      await new Promise((r) => setTimeout(r, 100));
      b.push(p);
    }
    b.close();
  })();
  assertEquals(await collect(it), ["ADDED slow 7"]);
  await feeder;
  assertEquals(idleCalls, 0);
});

Deno.test("watch decode: a consumer that stops early releases the body", async () => {
  const b = body();
  b.push(frame("ADDED", "a", "1") + frame("ADDED", "b", "2"));
  for await (const ev of decodeWatchStream<Obj>(b.stream, 10_000, () => {})) {
    assertEquals(ev.object.metadata.name, "a");
    break;
  }
  assert(b.cancelled, "the body was not released");
});

Deno.test("watch decode: batches hold the complete frames of each chunk, in order, never empty", async () => {
  const b = body();
  const f = [frame("ADDED", "a", "1"), frame("MODIFIED", "a", "2"), frame("ADDED", "b", "3")];
  // Chunk 1: two frames and a blank line; chunk 2: a blank line and the start of the third frame
  // (no complete frame: no batch); chunk 3: the rest of it.
  b.push(f[0] + f[1] + "\n");
  b.push("\r\n" + f[2].slice(0, 10));
  b.push(f[2].slice(10));
  b.close();
  const batches: string[][] = [];
  for await (const batch of decodeWatchBatches<Obj>(b.stream, 0, () => {})) {
    batches.push(
      batch.map((e) => `${e.type} ${e.object.metadata.name} ${e.object.metadata.resourceVersion}`),
    );
  }
  assertEquals(batches, [["ADDED a 1", "MODIFIED a 2"], ["ADDED b 3"]]);
});

Deno.test("watch decode: a byte stream (as a fetch body) is read into one reused buffer, frames intact", async () => {
  // 300 frames of ~1 KiB in chunks of 100 KiB and 7,777 bytes: frames and UTF-8 characters split
  // anywhere, and the 100 KiB chunks are larger than the 64 KiB read buffer (read in pieces).
  const text = Array.from(
    { length: 300 },
    (_, i) => frame("MODIFIED", `cm-${i}`, String(1000 + i), { data: { v: "✓".repeat(300) } }),
  ).join("");
  const bytes = enc.encode(text);
  const sizes = [100 * 1024, 7_777];
  let off = 0, pulls = 0, cancelled = false;
  const stream = new ReadableStream<Uint8Array>({
    type: "bytes",
    pull(c) {
      if (off >= bytes.length) return c.close();
      const n = sizes[pulls++ % 2];
      c.enqueue(bytes.slice(off, off + n));
      off += n;
    },
    cancel() {
      cancelled = true;
    },
  });
  const seen: string[] = [];
  for await (const ev of decodeWatchStream<Obj>(stream, 10_000, () => {})) {
    seen.push(`${ev.object.metadata.name}@${ev.object.metadata.resourceVersion}`);
    assertEquals(ev.object.data?.v, "✓".repeat(300));
    if (seen.length === 250) break;
  }
  assertEquals(seen, Array.from({ length: 250 }, (_, i) => `cm-${i}@${1000 + i}`));
  assert(cancelled, "the body was not released");
});

Deno.test("watch decode: an ERROR frame in the middle of a chunk yields the frames before it first", async () => {
  const b = body();
  const gone = JSON.stringify({ type: "ERROR", object: { code: 410, reason: "Expired" } }) + "\n";
  b.push(frame("ADDED", "a", "1") + frame("ADDED", "b", "2") + gone + frame("ADDED", "c", "3"));
  const batches: string[][] = [];
  const err = await assertRejects(async () => {
    for await (const batch of decodeWatchBatches<Obj>(b.stream, 0, () => {})) {
      batches.push(batch.map((e) => e.object.metadata.name!));
    }
  });
  assert(isGone(err), `not a 410: ${err}`);
  assertEquals(batches, [["a", "b"]]);
  assert(b.cancelled, "the body was not released after the error");
});

Deno.test("watch decode: a 1.4 MiB object (near etcd's limit) in 16 KiB chunks, then a small one", async () => {
  const big = 'ü✓\r\n"x'.repeat(200_000); // ~1.4 MiB of UTF-8, escapes included
  const bytes = enc.encode(
    frame("ADDED", "big", "1", { data: { v: big } }) + frame("ADDED", "s", "2"),
  );
  const chunks: Uint8Array[] = [];
  for (let off = 0; off < bytes.length; off += 16 * 1024) {
    chunks.push(bytes.slice(off, off + 16 * 1024));
  }
  const b = body();
  for (const c of chunks) b.push(c);
  b.close();
  const seen: ObjectWatchEvent<Obj>[] = [];
  for await (const ev of decodeWatchStream<Obj>(b.stream, 0, () => {})) seen.push(ev);
  assertEquals(seen.map((e) => e.object.metadata.name), ["big", "s"]);
  assertEquals(seen[0].object.data?.v, big);
});

Deno.test("watch decode: a frame that never ends is bounded (MAX_WATCH_FRAME_CHARS)", async () => {
  const b = body();
  const mib = "x".repeat(1024 * 1024);
  const feeder = (async () => {
    // At most 80 pushes; the decoder gives up after 64 MiB without a newline.
    for (let i = 0; i < 80 && !b.cancelled; i++) {
      b.push(mib);
      await new Promise((r) => setTimeout(r, 0));
    }
  })();
  await assertRejects(async () => {
    for await (const _ of decodeWatchBatches<Obj>(b.stream, 0, () => {})) { /* none */ }
  }, /longer than 67108864 characters/);
  await feeder;
  assert(b.cancelled, "the body was not released");
});

// ---------------------------------------------------------------------------------------------
// The reflector over decoded streams: a client whose watch() yields what the test scripts.

/** One scripted watch: the frames it sends, then how it ends. */
interface ScriptedWatch {
  frames: string;
  /**
   * "close": normal end; "fail": a network error mid-stream; "hang": open until aborted;
   * "idle": silent past the idle bound; "restart": ended by the client (stalled connection);
   * "refused": no answer at all (the watch is never accepted).
   */
  end: "close" | "fail" | "hang" | "idle" | "restart" | "refused";
}

/**
 * A stand-in for KubeClient: listPages answers `listed` in pages of `pageSize` (all in one page by
 * default), noting what the page handler had done before each next page; each watch() plays the
 * next script.
 */
class ScriptedClient {
  watchCalls: { resourceVersion?: string; sendInitialEvents?: boolean }[] = [];
  /** `idleIsFailure` of each watch that ended idle, as asked when its bound fired. */
  idleIsFailure: (boolean | undefined)[] = [];
  lists = 0;
  /** The client's connection health, when a test wants one. */
  health?: ConnectionHealth;
  /** Per page requested: how many pages the handler had been given and had returned from. */
  pagesDoneBeforeRequest: number[] = [];
  pageSize = Infinity;
  constructor(readonly listed: Obj[], readonly listRv: string, readonly scripts: ScriptedWatch[]) {}

  async listPages(
    _rt: unknown,
    _o: unknown,
    onPage: (page: { metadata: { resourceVersion: string }; items: Obj[] }) => void,
  ) {
    this.lists++;
    let done = 0;
    const n = Math.max(1, Math.ceil(this.listed.length / this.pageSize));
    for (let i = 0; i < n; i++) {
      this.pagesDoneBeforeRequest.push(done);
      await new Promise((r) => setTimeout(r, 0));
      const items = this.listed.slice(i * this.pageSize, (i + 1) * this.pageSize);
      await onPage({ metadata: { resourceVersion: this.listRv }, items });
      done++;
    }
    return { resourceVersion: this.listRv, pages: n, items: this.listed.length };
  }

  async *watchBatches(
    _rt: unknown,
    o: {
      resourceVersion?: string;
      sendInitialEvents?: boolean;
      idleIsFailure?: boolean | (() => boolean);
      signal?: AbortSignal;
      onOpen?: () => void;
    },
  ): AsyncGenerator<ObjectWatchEvent<Obj>[]> {
    this.watchCalls.push({
      resourceVersion: o.resourceVersion,
      sendInitialEvents: o.sendInitialEvents,
    });
    // A macrotask per call, so that a reconnect loop can never starve the test's timers.
    await new Promise((r) => setTimeout(r, 0));
    const s = this.scripts.shift() ?? { frames: "", end: "hang" };
    if (s.end === "refused") throw new TypeError("connection refused (scripted)");
    o.onOpen?.();
    const b = body();
    b.push(s.frames);
    if (s.end === "close" || s.end === "idle" || s.end === "restart") b.close();
    if (s.end === "fail") b.push("{not json, as when a connection dies mid-frame}\n");
    const onAbort = () => b.close();
    // Stopped while this call waited for its macrotask: the listener below would never fire.
    if (o.signal?.aborted) b.close();
    o.signal?.addEventListener("abort", onAbort, { once: true });
    try {
      yield* decodeWatchBatches<Obj>(b.stream, 0, () => {});
      if (s.end === "idle") {
        const f = o.idleIsFailure;
        this.idleIsFailure.push(typeof f === "function" ? f() : f);
        throw new WatchIdleError(75_000);
      }
      if (s.end === "restart") throw new WatchRestartError("stalled", "scripted");
    } finally {
      o.signal?.removeEventListener("abort", onAbort);
    }
  }
}

function runReflector(
  client: ScriptedClient,
  o: { useWatchList?: boolean } = {},
) {
  const clock = new FakeClock();
  const store = new Store<Obj>({ freeze: true });
  const calls: string[] = [];
  store.addHandler({
    add: (x) => calls.push(`add ${x.metadata.name}@${x.metadata.resourceVersion}`),
    update: (_, x) => calls.push(`update ${x.metadata.name}@${x.metadata.resourceVersion}`),
    delete: (x) => calls.push(`delete ${x.metadata.name}`),
  });
  const events: ReflectorEvent[] = [];
  const reflector = new Reflector<Obj>({
    client: client as unknown as KubeClient,
    resource: { apiVersion: "v1", kind: "ConfigMap", plural: "configmaps", namespaced: true },
    store,
    clock,
    random: () => 0,
    useWatchList: o.useWatchList,
    onEvent: (ev) => events.push(ev),
  });
  const ctl = new AbortController();
  const done = reflector.run(ctl.signal);
  const settle = () => new Promise((r) => setTimeout(r, 30));
  return {
    reflector,
    store,
    calls,
    events,
    clock,
    settle,
    async stop() {
      ctl.abort();
      await done;
    },
  };
}

Deno.test("reflector: the list goes into the store page by page, each page before the next is asked", async () => {
  const listed = ["a", "b", "c", "d", "e"].map((n, i) => ({
    metadata: { name: n, resourceVersion: String(i + 1) },
  }));
  const client = new ScriptedClient(listed, "10", [{ frames: "", end: "hang" }]);
  client.pageSize = 2;
  const r = runReflector(client);
  try {
    // Until the watch after the list is open (bounded: a slow machine needs more than one settle).
    for (let i = 0; i < 100 && client.watchCalls.length === 0; i++) await r.settle();
    assert(r.reflector.hasSynced, "not synced");
    assertEquals(client.pagesDoneBeforeRequest, [0, 1, 2]);
    assertEquals(r.calls, ["add a@1", "add b@2", "add c@3", "add d@4", "add e@5"]);
    const listedEv = r.events.find((e) => e.type === "listed");
    assertEquals(listedEv, {
      type: "listed",
      resourceVersion: "10",
      items: 5,
      pages: 3,
      added: 5,
      updated: 0,
      deleted: 0,
    });
    assertEquals(client.watchCalls.map((c) => c.resourceVersion), ["10"]);
  } finally {
    await r.stop();
  }
});

Deno.test("reflector: a watch that ends at once without events backs off, no reconnect loop", async () => {
  const client = new ScriptedClient([], "10", [
    { frames: "", end: "close" },
    { frames: "", end: "close" },
  ]);
  const r = runReflector(client);
  try {
    await r.settle();
    await r.settle();
    // Time does not move: a tight loop would have called watch() many times by now.
    assertEquals(client.watchCalls.length, 1);
    const errors = r.events.filter((e) => e.type === "error");
    assertEquals(errors.length, 1);
    assert(/very short watch/.test(String((errors[0] as { error: Error }).error)));
    assertEquals((errors[0] as { retryInMs: number }).retryInMs, 800);
    r.clock.advance(800);
    await r.settle();
    assertEquals(client.watchCalls.length, 2);
    assertEquals(
      (r.events.filter((e) => e.type === "error")[1] as { retryInMs: number }).retryInMs,
      1600,
    );
    assertEquals(client.lists, 1);
  } finally {
    await r.stop();
  }
});

Deno.test("reflector: a failed watch resumes from the last event it applied, none applied twice", async () => {
  const client = new ScriptedClient([{ metadata: { name: "a", resourceVersion: "5" } }], "10", [
    { frames: frame("MODIFIED", "a", "11") + frame("BOOKMARK", "", "12"), end: "fail" },
    { frames: frame("ADDED", "b", "13"), end: "hang" },
  ]);
  const r = runReflector(client);
  try {
    await r.settle();
    assertEquals(r.calls, ["add a@5", "update a@11"]);
    r.clock.advance(1_000); // past the first backoff step
    await r.settle();
    assertEquals(client.watchCalls.map((c) => c.resourceVersion), ["10", "12"]);
    assertEquals(r.calls, ["add a@5", "update a@11", "add b@13"]);
    assertEquals(client.lists, 1);
  } finally {
    await r.stop();
  }
});

Deno.test("reflector: WatchList — events after the initial-events-end bookmark reach the store", async () => {
  const end = JSON.stringify({
    type: "BOOKMARK",
    object: {
      metadata: { resourceVersion: "7", annotations: { "k8s.io/initial-events-end": "true" } },
    },
  }) + "\n";
  const client = new ScriptedClient([], "1", [{
    frames: frame("ADDED", "a", "5") + frame("ADDED", "b", "6") + end +
      frame("MODIFIED", "a", "8") + frame("DELETED", "b", "9") + frame("ADDED", "c", "10"),
    end: "hang",
  }]);
  const r = runReflector(client, { useWatchList: true });
  try {
    await r.settle();
    assert(r.reflector.hasSynced, "not synced");
    assertEquals(client.lists, 0);
    assertEquals(client.watchCalls, [{ resourceVersion: undefined, sendInitialEvents: true }]);
    assertEquals(r.calls, ["add a@5", "add b@6", "update a@8", "delete b", "add c@10"]);
    assertEquals(r.store.keys().sort(), ["a", "c"]);
  } finally {
    await r.stop();
  }
});

const errorsOf = (events: ReflectorEvent[]) =>
  events.filter((e) => e.type === "error") as Extract<ReflectorEvent, { type: "error" }>[];

Deno.test("reflector: a watch that delivered data and then broke resets the backoff; one that delivered nothing does not (S15)", async () => {
  const delivered = new ScriptedClient([], "10", [
    { frames: frame("ADDED", "a", "11"), end: "fail" },
    { frames: frame("MODIFIED", "a", "12"), end: "fail" },
    { frames: frame("MODIFIED", "a", "13"), end: "fail" },
    { frames: frame("MODIFIED", "a", "14"), end: "fail" },
  ]);
  const silent = new ScriptedClient([], "10", [
    { frames: "", end: "fail" },
    { frames: "", end: "fail" },
    { frames: "", end: "fail" },
    { frames: "", end: "fail" },
  ]);
  const cases: [ScriptedClient, number[]][] = [
    [delivered, [800, 800, 800, 800]],
    [silent, [800, 1600, 3200, 6400]],
  ];
  for (const [client, want] of cases) {
    const r = runReflector(client);
    try {
      for (let i = 0; i < 4; i++) {
        await r.settle();
        r.clock.advance(errorsOf(r.events)[i]?.retryInMs ?? 0);
      }
      await r.settle();
      assertEquals(errorsOf(r.events).map((e) => e.retryInMs), want);
      assertEquals(client.watchCalls.length, 5);
      assertEquals(client.lists, 1);
    } finally {
      await r.stop();
    }
  }
});

Deno.test("reflector: a watch that missed the bookmark cadence is deaf until a watch is accepted again; no backoff for the idle, no relist (S14)", async () => {
  const client = new ScriptedClient([], "10", [
    // A bookmark first: this apiserver sends them, so the silence after it missed one.
    { frames: frame("BOOKMARK", "", "10") + frame("ADDED", "a", "11"), end: "idle" },
    { frames: "", end: "refused" },
    { frames: "", end: "hang" },
  ]);
  const r = runReflector(client);
  try {
    await r.settle();
    // Idle: reconnected at once (no backoff), but that attempt got no answer.
    assertEquals(r.events.filter((e) => e.type === "idle").length, 1);
    assertEquals(client.watchCalls.map((c) => c.resourceVersion), ["10", "11"]);
    assert(r.reflector.deaf, "not deaf after the idle bound");
    assertEquals(client.idleIsFailure, [true], "the client was not told the path failed");
    assert(
      /missed the apiserver's bookmarks/.test(r.reflector.deaf.reason),
      r.reflector.deaf.reason,
    );
    assertEquals(errorsOf(r.events).map((e) => e.retryInMs), [800]);
    r.clock.advance(800);
    await r.settle();
    assertEquals(client.watchCalls.map((c) => c.resourceVersion), ["10", "11", "11"]);
    assertEquals(r.reflector.deaf, undefined, "still deaf once a watch was accepted");
    assertEquals(client.lists, 1);
    assertEquals(r.calls, ["add a@11"]);
  } finally {
    await r.stop();
  }
});

Deno.test("reflector: without bookmarks (no watch cache) an idle watch is reopened quietly: not deaf, not a failure of the path, no relist", async () => {
  const client = new ScriptedClient([], "10", [
    { frames: frame("ADDED", "a", "11"), end: "idle" },
    { frames: "", end: "hang" },
  ]);
  const r = runReflector(client);
  try {
    await r.settle();
    const idle = r.events.filter((e) => e.type === "idle");
    assertEquals(idle.length, 1);
    assertEquals((idle[0] as { quiet: boolean }).quiet, true);
    assertEquals(client.watchCalls.map((c) => c.resourceVersion), ["10", "11"]);
    assertEquals(client.idleIsFailure, [false]);
    assertEquals(r.reflector.deaf, undefined, "a quiet stream is not deafness");
    assertEquals(errorsOf(r.events).length, 0);
    assertEquals(client.lists, 1);
  } finally {
    await r.stop();
  }
});

Deno.test("reflector: a watch reopened after a stream with bookmarks owes none: its idle is quiet, not deaf, not a failure of the path", async () => {
  const client = new ScriptedClient([], "10", [
    // Bookmarks came, then the server timeout: the next watch resumes from the last one's
    // resourceVersion, and the apiserver sends it none until its cache moves past it.
    { frames: frame("ADDED", "a", "11") + frame("BOOKMARK", "", "12"), end: "close" },
    { frames: "", end: "idle" },
    { frames: "", end: "hang" },
  ]);
  const r = runReflector(client);
  try {
    await r.settle();
    assertEquals(client.watchCalls.map((c) => c.resourceVersion), ["10", "12", "12"]);
    const idle = r.events.filter((e) => e.type === "idle");
    assertEquals(idle.map((e) => (e as { quiet: boolean }).quiet), [true]);
    assertEquals(client.idleIsFailure, [false]);
    assertEquals(r.reflector.deaf, undefined);
    assertEquals(errorsOf(r.events).length, 0);
    assertEquals(client.lists, 1);
  } finally {
    await r.stop();
  }
});

Deno.test("reflector: a watch ended by the client (stalled connection) resumes at once from the last resourceVersion", async () => {
  const client = new ScriptedClient([], "10", [
    { frames: frame("ADDED", "a", "11") + frame("BOOKMARK", "", "15"), end: "restart" },
    { frames: frame("MODIFIED", "a", "16"), end: "hang" },
  ]);
  const r = runReflector(client);
  try {
    await r.settle();
    assertEquals(client.watchCalls.map((c) => c.resourceVersion), ["10", "15"]);
    assertEquals(r.events.filter((e) => e.type === "restart").length, 1);
    assertEquals(errorsOf(r.events).length, 0);
    assertEquals(r.calls, ["add a@11", "update a@16"]);
    assertEquals(client.lists, 1);
  } finally {
    await r.stop();
  }
});

Deno.test("reflector: the connection recovering wakes a reflector waiting in backoff", async () => {
  const client = new ScriptedClient([], "10", [
    { frames: "", end: "refused" },
    { frames: "", end: "refused" },
    { frames: "", end: "hang" },
  ]);
  const r = runReflector(client);
  client.health = new ConnectionHealth({ timers: r.clock });
  try {
    await r.settle();
    assertEquals(errorsOf(r.events).map((e) => e.retryInMs), [800]);
    const calls = client.watchCalls.length;
    // Another request fails, then one gets through: the path is back.
    client.health.failed(new TypeError("connection refused"));
    client.health.succeeded(r.clock.now() + 1); // sent after the failure
    await r.settle();
    assertEquals(client.watchCalls.length, calls + 1, "not woken by the recovery");
  } finally {
    await r.stop();
    client.health.close();
  }
});

Deno.test("decodeWatchBatches: a stop signal ends a silent stream at once with its reason (positive control: without it the read still waits)", async () => {
  const reason = new Error("stopped by the consumer");
  const stop = new AbortController();
  const b = body();
  const it = decodeWatchBatches<Obj>(b.stream, 0, () => {}, undefined, stop.signal);
  b.push(frame("ADDED", "a", "1"));
  assertEquals((await it.next()).value?.length, 1);
  // Control: the next read waits on a stream that sends nothing.
  const pending = it.next();
  const settled = await Promise.race([
    pending.then(() => "settled", () => "settled"),
    new Promise((r) => setTimeout(() => r("waiting"), 50)),
  ]);
  assertEquals(settled, "waiting");
  stop.abort(reason);
  let timer: ReturnType<typeof setTimeout> | undefined;
  const err = await Promise.race([
    pending.then(() => "ended without an error", (e) => e),
    new Promise((r) => timer = setTimeout(() => r("still waiting after 2 s"), 2000)),
  ]);
  clearTimeout(timer);
  if (err !== reason) await it.return(undefined); // release the stream (the old behaviour)
  assert(err === reason, `got: ${err}`);
  assert(b.cancelled, "the body was cancelled");
});

/**
 * Runs `fn` with `setTimeout` counted; returns how many timers it made and how many delays were
 * above what a timer can hold (2^31 - 1 ms: Deno, as browsers and Node, then fires at once).
 */
async function countingTimers(
  fn: () => Promise<void>,
): Promise<{ made: number; overflow: number }> {
  const real = globalThis.setTimeout;
  const seen = { made: 0, overflow: 0 };
  globalThis.setTimeout = ((cb: () => void, ms?: number) => {
    seen.made++;
    if ((ms ?? 0) > 2 ** 31 - 1) seen.overflow++;
    return real(cb, ms);
  }) as typeof setTimeout;
  try {
    await fn();
  } finally {
    globalThis.setTimeout = real;
  }
  return seen;
}

Deno.test("watch decode: the idle bound is one timer per bound, not one per chunk", async () => {
  const b = body();
  const text = frame("ADDED", "busy", "9");
  const { made } = await countingTimers(async () => {
    const it = decodeWatchStream<Obj>(b.stream, 5_000, () => {});
    // 200 chunks, all well within the bound.
    for (let i = 0; i < 200; i++) b.push(i < text.length ? text[i] : "\n");
    b.push(text.slice(200));
    b.close();
    assertEquals(await collect(it), ["ADDED busy 9"]);
  });
  assert(made <= 2, `${made} timers for 201 chunks`);
});

Deno.test("watch decode: an idle bound longer than a timer can hold is waited for, not fired at once", async () => {
  const b = body();
  let idleCalls = 0;
  const { made, overflow } = await countingTimers(async () => {
    const it = decodeWatchStream<Obj>(b.stream, 2 ** 32, () => idleCalls++);
    const feeder = (async () => {
      await new Promise((r) => setTimeout(r, 100));
      b.push(frame("ADDED", "late", "3"));
      b.close();
    })();
    assertEquals(await collect(it), ["ADDED late 3"]);
    await feeder;
  });
  assertEquals(idleCalls, 0);
  assertEquals(overflow, 0, "a timer was asked for more than 2^31 - 1 ms");
  assert(made <= 3, `${made} timers in 100 ms`);
});
