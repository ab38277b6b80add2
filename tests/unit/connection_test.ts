/**
 * Connection health ({@link ConnectionHealth}) on a manual clock: failing at the first request
 * without an answer, probing while failing, reporting a long episode once, recovering at the
 * first answer. Then the client's stall rule against a loopback HTTP server that never answers
 * some requests: when a later request gets through, a request and a watch stuck on dead
 * connections are ended (the read sent again, the watch restarted), a watch that kept receiving
 * is left alone.
 */
import { assert, assertEquals } from "../assert.ts";
import { ConnectionHealth, type HealthEvent } from "../../lib/kube/connection.ts";
import { KubeClient, STALLED_REQUEST_MIN_MS } from "../../lib/kube/client.ts";
import {
  ApiError,
  FencedError,
  isUnreachable,
  NetworkError,
  UnreachableError,
} from "../../lib/kube/errors.ts";
import { logAttemptFailure, outageLogLevel } from "../../lib/runtime/controller.ts";
import type { Logger } from "../../lib/runtime/log.ts";
import { CONFIGMAPS } from "../../lib/kube/resources.ts";
import { WatchIdleError, WatchRestartError } from "../../lib/kube/watch.ts";
import { FakeClock } from "../../lib/runtime/clock.ts";

const tick = () => new Promise((r) => setTimeout(r, 0));

Deno.test("connection health: failing at the first failure, probes every 2–3 s, one report after 10 s, recovered at the first answer", async () => {
  const clock = new FakeClock();
  const health = new ConnectionHealth({ timers: clock, random: () => 0 });
  const events: HealthEvent[] = [];
  health.onEvent((ev) => events.push(ev));
  const probes: number[] = [];
  let answer = false;
  health.setProbe(() => {
    probes.push(clock.now());
    const sent = clock.now();
    // The probe goes through the client, which reports its outcome like any request.
    if (answer) health.succeeded(sent);
    else health.failed(new Error("probe: no answer"));
    return answer ? Promise.resolve() : Promise.reject(new Error("no answer"));
  });
  try {
    health.succeeded(clock.now());
    assert(health.healthy);
    assertEquals(events, []);
    const start = clock.now();
    health.failed(new TypeError("connection reset"));
    assertEquals(health.failingSinceMs, start);
    assertEquals(events.map((e) => e.type), ["failing"]);
    for (let i = 0; i < 6; i++) {
      clock.advance(2_000);
      await tick();
    }
    // Probes every 2 s (random 0), each after the previous one settled.
    assertEquals(probes.map((t) => t - start), [2_000, 4_000, 6_000, 8_000, 10_000, 12_000]);
    const still = events.filter((e) => e.type === "stillFailing");
    assertEquals(still.length, 1, "reported once");
    assertEquals(still[0].type === "stillFailing" && still[0].failures, 5);
    answer = true;
    clock.advance(2_000);
    await tick();
    assert(health.healthy);
    const rec = events.at(-1)!;
    assert(rec.type === "recovered");
    assertEquals(rec.recovery.failingSinceMs, start);
    assertEquals(rec.recovery.sentAtMs, start + 14_000);
    assertEquals(rec.reported, true);
    // Healthy again: no more probes.
    clock.advance(60_000);
    await tick();
    assertEquals(probes.length, 7);
    assertEquals(clock.pendingTimers, 0);
  } finally {
    health.close();
  }
});

Deno.test("connection health: a short episode is not reported; nothing is sent while healthy; close stops everything", async () => {
  const clock = new FakeClock();
  const health = new ConnectionHealth({ timers: clock, random: () => 0.5 });
  const events: string[] = [];
  health.onEvent((ev) => events.push(ev.type));
  let probes = 0;
  health.setProbe(() => {
    probes++;
    return Promise.resolve();
  });
  health.failed(new TypeError("connection refused"));
  clock.advance(1_000);
  health.succeeded(clock.now());
  assertEquals(events, ["failing", "recovered"]);
  assertEquals(probes, 0, "probed before 2–3 s");
  clock.advance(120_000);
  await tick();
  assertEquals(probes, 0);
  health.failed(new TypeError("connection refused"));
  health.close();
  clock.advance(120_000);
  await tick();
  assertEquals(probes, 0);
  assertEquals(clock.pendingTimers, 0);
});

/** A loopback HTTP server: `/version` answers; the first GET of configmap `stuck` and every watch never do. */
/** A client of a loopback test server: a token, namespace default, no retries. */
function loopbackClient(server: string, o: { requestTimeoutMs?: number } = {}): KubeClient {
  return new KubeClient({
    server,
    auth: { kind: "token", token: "t" },
    namespace: "default",
    source: "test",
  }, { maxRetries: 0, ...o });
}

function server() {
  const release = Promise.withResolvers<void>();
  let stuckGets = 0;
  let watches = 0;
  const s = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
    const url = new URL(req.url);
    if (url.pathname === "/version") return Response.json({ gitVersion: "v1.36.3" });
    if (url.pathname.endsWith("/configmaps/stuck")) {
      if (stuckGets++ === 0) await release.promise;
      return Response.json({ apiVersion: "v1", kind: "ConfigMap", metadata: { name: "stuck" } });
    }
    if (url.searchParams.get("watch") === "true") {
      watches++;
      const n = watches;
      // Watch 1: headers, then nothing. Watch 2: headers, then a bookmark every 100 ms.
      const body = new ReadableStream<Uint8Array>({
        async pull(c) {
          if (n === 1) return await release.promise;
          await new Promise((r) => setTimeout(r, 100));
          c.enqueue(new TextEncoder().encode(
            JSON.stringify({ type: "BOOKMARK", object: { metadata: { resourceVersion: "9" } } }) +
              "\n",
          ));
        },
      });
      return new Response(body);
    }
    return new Response("not found", { status: 404 });
  });
  return {
    url: `http://127.0.0.1:${s.addr.port}`,
    async close() {
      release.resolve();
      await s.shutdown();
    },
  };
}

Deno.test("client: once a later request gets through, a stuck read is sent again and a silent watch restarted; a live watch is left alone", async () => {
  const srv = server();
  const client = loopbackClient(srv.url);
  const stop = new AbortController();
  const opened = [Promise.withResolvers<void>(), Promise.withResolvers<void>()];
  const collect = async (label: string, n: number) => {
    try {
      const o = { namespace: "default", signal: stop.signal, onOpen: () => opened[n].resolve() };
      for await (const _ of client.watchBatches(CONFIGMAPS, o)) { /* */ }
      return `${label}: ended`;
    } catch (err) {
      if (stop.signal.aborted) return `${label}: stopped`;
      return `${label}: ${err instanceof WatchRestartError ? `restart ${err.why}` : err}`;
    }
  };
  try {
    // Both watches accepted (their headers are answers) before the path fails.
    const silent = collect("silent", 0);
    await opened[0].promise;
    const live = collect("live", 1);
    await opened[1].promise;
    const stuck = client.get(CONFIGMAPS, "stuck", { namespace: "default" });
    await new Promise((r) => setTimeout(r, 50));
    // Some request got no answer: the path is failing from now on.
    client.health.failed(new TypeError("connection reset"));
    await new Promise((r) => setTimeout(r, STALLED_REQUEST_MIN_MS + 100));
    // A request sent now gets its answer: the path is back.
    await client.raw("/version");
    assert(client.health.healthy);
    assertEquals((await stuck).metadata?.name, "stuck");
    assertEquals(await silent, "silent: restart stalled");
    // The live watch received bookmarks after the failure: not restarted.
    const first = await Promise.race([live, new Promise((r) => setTimeout(() => r("open"), 300))]);
    assertEquals(first, "open");
  } finally {
    stop.abort();
    client.close();
    await srv.close();
  }
});

Deno.test("client: a silent watch's idle bound asks idleIsFailure when it fires: false leaves the health alone, true tells it the path failed", async () => {
  const release = Promise.withResolvers<void>();
  // Every watch: headers, then nothing (a stream owed no bookmark, or a dead one).
  const s = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, (req) => {
    if (new URL(req.url).pathname === "/version") return Response.json({ gitVersion: "v1.36.3" });
    return new Response(new ReadableStream({ pull: () => release.promise }));
  });
  const client = loopbackClient(`http://127.0.0.1:${s.addr.port}`);
  const idle = async (failure: boolean) => {
    const asked: string[] = [];
    let opened = false;
    const o = {
      namespace: "default",
      idleTimeoutMs: 200,
      onOpen: () => opened = true,
      idleIsFailure: () => {
        asked.push(opened ? "after open" : "before open");
        return failure;
      },
    };
    try {
      for await (const _ of client.watchBatches(CONFIGMAPS, o)) { /* */ }
      return { asked, end: "ended" };
    } catch (err) {
      return { asked, end: err instanceof WatchIdleError ? "idle" : String(err) };
    }
  };
  try {
    const episodes = client.health.episodes;
    assertEquals(await idle(false), { asked: ["after open"], end: "idle" });
    assert(client.health.healthy, "a silence owed nothing was taken for a failure");
    assertEquals(client.health.episodes, episodes);
    assertEquals(await idle(true), { asked: ["after open"], end: "idle" });
    assert(!client.health.healthy, "a missed bookmark was not a failure of the path");
    assertEquals(client.health.episodes, episodes + 1);
  } finally {
    release.resolve();
    client.close();
    await s.shutdown();
  }
});

Deno.test("client: a WatchList without an answer fails like a list at the request timeout; a plain watch waits for its idle bound", async () => {
  const release = Promise.withResolvers<void>();
  const s = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async () => {
    await release.promise; // never answers (an apiserver whose etcd stalls)
    return new Response("", { status: 503 });
  });
  const client = loopbackClient(`http://127.0.0.1:${s.addr.port}`, { requestTimeoutMs: 200 });
  const open = async (sendInitialEvents: boolean) => {
    const o = { namespace: "default", idleTimeoutMs: 60_000, sendInitialEvents };
    try {
      for await (const _ of client.watchBatches(CONFIGMAPS, o)) { /* */ }
      return "ended";
    } catch (err) {
      return err instanceof NetworkError ? `${err.kind}: ${err.message}` : String(err);
    }
  };
  try {
    const plain = open(false);
    const wl = await open(true);
    assertEquals(
      wl,
      "timeout: GET /api/v1/namespaces/default/configmaps (watch list): no answer within 0.2 s",
    );
    const first = await Promise.race([plain, new Promise((r) => setTimeout(() => r("open"), 300))]);
    assertEquals(first, "open");
  } finally {
    release.resolve();
    client.close();
    await s.shutdown();
  }
});

Deno.test("client: an answer whose body breaks off is a failure of the path (health told, UnreachableError); a 2xx write's unread body is not needed", async () => {
  const enc = new TextEncoder();
  /** Answers with headers and the first bytes of a body, then breaks it (or, `slow`, stalls). */
  const s = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, (req) => {
    const path = new URL(req.url).pathname;
    if (path === "/version") return Response.json({ gitVersion: "v1.36.3" });
    if (path.endsWith("/notjson")) return new Response("{not json", { status: 200 });
    const slow = path.endsWith("/slow");
    const body = new ReadableStream<Uint8Array>({
      async start(c) {
        c.enqueue(enc.encode('{"metadata":{"name":"half"'));
        await new Promise((r) => setTimeout(r, slow ? 1_500 : 50));
        c.error(new Error("cut by the test"));
      },
    });
    return new Response(body, { headers: { "content-type": "application/json" } });
  });
  const client = loopbackClient(`http://127.0.0.1:${s.addr.port}`, { requestTimeoutMs: 500 });
  const later = () => new Promise((r) => setTimeout(r, 5));
  const failure = async (p: Promise<unknown>) => {
    try {
      await p;
    } catch (err) {
      return err;
    }
    throw new Error("expected a failure");
  };
  try {
    const ns = { namespace: "default" };
    // A read: the broken body is an UnreachableError and the path is failing.
    const read = await failure(client.get(CONFIGMAPS, "half", ns));
    assert(isUnreachable(read), `an UnreachableError, got ${read}`);
    assertEquals((read as NetworkError).kind, "unreachable");
    assert(/broke while the answer was read/.test(String(read)), String(read));
    assert(!client.health.healthy, "the health was told");
    await later(); // a request sent after the failure ends the episode
    await client.raw("/version");
    assert(client.health.healthy, "recovered at the next answer");
    // A body still incomplete at the request's timeout: kind `timeout`.
    const slow = await failure(client.get(CONFIGMAPS, "slow", ns));
    assert(isUnreachable(slow), `an UnreachableError, got ${slow}`);
    assertEquals((slow as NetworkError).kind, "timeout");
    assert(!client.health.healthy);
    await later(); // a request sent after the failure ends the episode
    await client.raw("/version");
    // A write answered 2xx whose body nobody reads: done; the path is still reported failing.
    const written = await client.patch(CONFIGMAPS, "half", {}, {
      ...ns,
      type: "merge",
      response: "none",
    });
    assertEquals(written, undefined);
    assert(!client.health.healthy, "the broken connection was reported");
    await later(); // a request sent after the failure ends the episode
    await client.raw("/version");
    // The caller's abort mid-answer: its reason, unchanged, and nothing said about the path.
    const stop = new AbortController();
    const aborted = failure(client.get(CONFIGMAPS, "slow", { ...ns, signal: stop.signal }));
    await new Promise((r) => setTimeout(r, 100));
    stop.abort(new Error("the caller stopped"));
    assertEquals(String(await aborted), "Error: the caller stopped");
    assert(client.health.healthy, "a caller's abort is not a failure of the path");
    // The caller's own deadline mid-answer: its TimeoutError, and the path is failing.
    const deadline = await failure(
      client.get(CONFIGMAPS, "slow", { ...ns, signal: AbortSignal.timeout(100) }),
    );
    assertEquals((deadline as Error).name, "TimeoutError");
    assert(!client.health.healthy, "the caller's deadline mid-answer was told to the health");
    await later();
    await client.raw("/version");
    // Positive control: a complete answer that is not JSON is the answer's fault, not the path's.
    const bad = await failure(client.get(CONFIGMAPS, "notjson", ns));
    assert(bad instanceof SyntaxError, `a SyntaxError, got ${bad}`);
    assert(client.health.healthy, "a malformed answer is still an answer");
  } finally {
    client.close();
    await s.shutdown();
  }
});

Deno.test("connection health: an answer to a request sent before the failure does not end the episode; one sent after does", () => {
  const clock = new FakeClock();
  const health = new ConnectionHealth({ timers: clock, random: () => 0 });
  const events: string[] = [];
  health.onEvent((ev) => events.push(ev.type));
  try {
    const before = clock.now();
    clock.advance(100);
    health.failed(new TypeError("connection reset"));
    // Answers already on their way when the connections were cut: the path is still failing.
    health.succeeded(before);
    health.succeeded(clock.now());
    assert(!health.healthy, "a stale answer ended the episode");
    assert(health.claimReport(), "the episode's report is still to be claimed once");
    clock.advance(1);
    health.succeeded(clock.now());
    assert(health.healthy);
    assertEquals(events, ["failing", "recovered"]);
    // With the episode count noted at send (as the transport does), times are not compared: a
    // wall clock stepped back neither keeps the path failing nor lets a stale answer end it.
    const begun = health.episodes;
    health.failed(new TypeError("connection reset"));
    assertEquals(health.episodes, begun + 1);
    health.succeeded(clock.now() + 60_000, begun);
    assert(!health.healthy, "an answer to a request sent before the episode ended it");
    health.succeeded(0, begun + 1);
    assert(health.healthy, "an answer to a request sent in the episode (clock stepped back)");
  } finally {
    health.close();
  }
});

Deno.test("outageLogLevel and logAttemptFailure: the first failure to reach the apiserver reports the outage, the rest are quiet, answers are not the outage's", () => {
  const clock = new FakeClock();
  const health = new ConnectionHealth({ timers: clock, random: () => 0 });
  const lines: [string, Record<string, unknown>][] = [];
  const logger = {
    debug: (_m: string, p: Record<string, unknown>) => lines.push(["debug", p]),
    warn: (_m: string, p: Record<string, unknown>) => lines.push(["warn", p]),
  } as unknown as Logger;
  const down = new UnreachableError("GET /x", "127.0.0.1:6443", undefined, "connection refused");
  try {
    // Healthy and not unreachable: as usual.
    assertEquals(outageLogLevel(new Error("boom"), health), "other");
    assertEquals(outageLogLevel(down, undefined), "other");
    health.failed(down);
    logAttemptFailure(logger, "Lease attempt failed", down, health, { lease: "ns/l" });
    logAttemptFailure(logger, "Lease attempt failed", down, health, { lease: "ns/l" });
    assertEquals(lines.map(([level]) => level), ["warn", "debug"]);
    assert(typeof lines[0][1].outage === "string", "the report names the outage");
    assertEquals(lines[0][1].lease, "ns/l");
    // A fenced write is never the outage's.
    assertEquals(outageLogLevel(new FencedError("NotHeld", "PUT /x"), health), "other");
    // An answer (an ApiError) during the outage is not the outage's.
    const answer = new ApiError(500, { code: 500, message: "etcd timeout" });
    assertEquals(outageLogLevel(answer, health), "other");
  } finally {
    health.close();
  }
});
