/**
 * The REST client's layers below the verbs (docs/design/client.md), on their pure parts: the retry
 * policy (lib/kube/retry.ts: which outcomes are sent again and after how long) and the transport's
 * classification of an attempt (lib/kube/transport.ts: which failure, which typed error, the
 * Retry-After header, the Status of an error answer); then the typed network errors a real
 * request gets from a loopback port nothing listens on and from a server that never answers.
 */
import fc from "fast-check";
import { assert, assertEquals } from "../assert.ts";
import { KubeClient } from "../../lib/kube/client.ts";
import {
  isNetworkError,
  isUnreachable,
  NetworkError,
  networkErrorIn,
  UnreachableError,
} from "../../lib/kube/errors.ts";
import { CONFIGMAPS } from "../../lib/kube/resources.ts";
import { afterAnswer, afterFailure, backoffMs, type RetryState } from "../../lib/kube/retry.ts";
import {
  answerStatus,
  type AttemptSignals,
  classifyFailure,
  type Failure,
  fetchFailureKind,
  parseRetryAfter,
  StalledRequestError,
} from "../../lib/kube/transport.ts";
import { WatchRestartError } from "../../lib/kube/watch.ts";

const state = (o: Partial<RetryState> = {}): RetryState => ({
  attempt: 0,
  maxRetries: 5,
  retriedAuth: false,
  retriedStalled: false,
  ...o,
});
const GET = { method: "GET" };
const WATCH = { method: "GET", stream: true };
const PATCH = { method: "PATCH" };
const route = { host: "127.0.0.1:6443" };
const unreachable = () => new UnreachableError("GET /x", "h", undefined, "r");

/** One failure of each type. */
const failures: Record<Failure["type"], Failure> = {
  aborted: { type: "aborted", deadline: false, error: new Error("stop") },
  fenced: { type: "fenced", error: new Error("fenced") },
  stalled: { type: "stalled", error: new Error("stalled") },
  closed: { type: "closed", cause: new Error("closed"), error: unreachable() },
  network: { type: "network", kind: "refused", cause: new Error("refused"), error: unreachable() },
};

Deno.test("retry policy: after a failure, reads are retried with backoff, writes and watches are not; abort and fence are final", () => {
  const { aborted, fenced, stalled, closed, network } = failures;
  for (const req of [GET, WATCH, PATCH]) {
    assertEquals(afterFailure(aborted, req, state()), { type: "fail" });
    assertEquals(afterFailure(fenced, req, state()), { type: "fail" });
    // Never left the process: safe to send again whatever the method, while retries are left.
    assertEquals(afterFailure(closed, req, state()), { type: "retry", delayMs: 0 });
    assertEquals(afterFailure(closed, req, state({ attempt: 5 })), { type: "fail" });
  }
  assertEquals(afterFailure(network, GET, state({ attempt: 2 })), {
    type: "retry",
    delayMs: 800,
  });
  assertEquals(afterFailure(network, GET, state({ attempt: 5 })), { type: "fail" });
  assertEquals(afterFailure(network, PATCH, state()), { type: "fail" });
  assertEquals(afterFailure(network, WATCH, state()), { type: "fail" });
  // The stall rule: a read once more at once and for free; a write and a watch fail.
  assertEquals(afterFailure(stalled, GET, state({ attempt: 5 })), {
    type: "retry",
    delayMs: 0,
    free: true,
  });
  assertEquals(afterFailure(stalled, GET, state({ retriedStalled: true })), { type: "fail" });
  assertEquals(afterFailure(stalled, PATCH, state()), { type: "fail" });
  assertEquals(afterFailure(stalled, WATCH, state()), { type: "fail" });
});

Deno.test("retry policy: after an error answer: 401 once, throttled answers for every method, 5xx (not 501) for reads", () => {
  const o = { maxThrottleWaitMs: 10_000, gated: true };
  const ungated = { ...o, gated: false };
  assertEquals(afterAnswer({ status: 401 }, PATCH, state(), o), {
    type: "retry",
    delayMs: 0,
    refreshCredential: true,
  });
  assertEquals(afterAnswer({ status: 401 }, PATCH, state({ retriedAuth: true }), o), {
    type: "fail",
  });
  // With a gate, the gate waits out the Retry-After (no sleep here); without one, this request.
  assertEquals(afterAnswer({ status: 429, retryAfter: 2 }, PATCH, state(), o), {
    type: "retry",
    delayMs: 0,
  });
  assertEquals(afterAnswer({ status: 429, retryAfter: 2 }, PATCH, state(), ungated), {
    type: "retry",
    delayMs: 2_000,
  });
  assertEquals(afterAnswer({ status: 429, retryAfter: 0 }, GET, state(), o), {
    type: "retry",
    delayMs: 50,
  });
  assertEquals(afterAnswer({ status: 503, retryAfter: 1 }, PATCH, state(), o).type, "retry");
  // Longer than the caller accepts: handed back at once.
  assertEquals(afterAnswer({ status: 429, retryAfter: 11 }, GET, state(), o), { type: "fail" });
  assertEquals(afterAnswer({ status: 429, retryAfter: 1 }, GET, state({ attempt: 5 }), o), {
    type: "fail",
  });
  // Without a Retry-After: back off (at least 50 ms); 5xx only for reads that are not watches.
  assertEquals(afterAnswer({ status: 429 }, GET, state({ attempt: 1 }), o), {
    type: "retry",
    delayMs: 400,
  });
  assertEquals(afterAnswer({ status: 500 }, GET, state(), o), { type: "retry", delayMs: 200 });
  assertEquals(afterAnswer({ status: 503 }, PATCH, state(), o), { type: "fail" });
  assertEquals(afterAnswer({ status: 501 }, GET, state(), o), { type: "fail" });
  assertEquals(afterAnswer({ status: 500 }, WATCH, state(), o), { type: "fail" });
  assertEquals(afterAnswer({ status: 404 }, GET, state(), o), { type: "fail" });
  assertEquals(afterAnswer({ status: 409 }, PATCH, state(), o), { type: "fail" });
});

Deno.test("retry policy: no retry counts past maxRetries but the stall rule's one and the 401's one; backoff 200 ms doubling to 5 s", () => {
  assertEquals([0, 1, 2, 3, 4, 5, 10].map(backoffMs), [200, 400, 800, 1600, 3200, 5000, 5000]);
  const method = fc.constantFrom("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE");
  const st = fc.record({
    attempt: fc.nat(8),
    maxRetries: fc.nat(8),
    retriedAuth: fc.boolean(),
    retriedStalled: fc.boolean(),
  });
  fc.assert(
    fc.property(
      fc.constantFrom(...Object.values(failures)),
      method,
      fc.boolean(),
      st,
      (f, m, stream, s) => {
        const d = afterFailure(f, { method: m, stream }, s);
        if (d.type === "fail") return;
        assert(d.free || s.attempt < s.maxRetries, `${f.type} ${m} ${JSON.stringify(s)}`);
        assert(f.type !== "aborted" && f.type !== "fenced");
        assert(d.delayMs >= 0 && d.delayMs <= 5_000);
      },
    ),
  );
  fc.assert(
    fc.property(
      fc.integer({ min: 400, max: 599 }),
      fc.option(fc.double({ min: 0, max: 400, noNaN: true }), { nil: undefined }),
      method,
      fc.boolean(),
      st,
      fc.boolean(),
      (status, retryAfter, m, stream, s, gated) => {
        const o = { maxThrottleWaitMs: 10_000, gated };
        const d = afterAnswer({ status, retryAfter }, { method: m, stream }, s, o);
        if (d.type === "fail") return;
        if (d.refreshCredential) return assert(status === 401 && !s.retriedAuth);
        assert(s.attempt < s.maxRetries, `${status} ${m} ${JSON.stringify(s)}`);
        assert(retryAfter === undefined || retryAfter <= 10, "waits longer than accepted");
        assert(d.delayMs >= 0 && d.delayMs <= 10_000);
      },
    ),
  );
});

/** Signals of an attempt, each aborted or not. */
function signals(aborted: Partial<Record<keyof AttemptSignals, unknown>>): AttemptSignals {
  const make = (k: keyof AttemptSignals) => {
    const c = new AbortController();
    if (k in aborted) c.abort(aborted[k]);
    return c.signal;
  };
  return {
    caller: make("caller"),
    late: make("late"),
    fence: make("fence"),
    stall: make("stall"),
    timeout: make("timeout"),
  };
}

Deno.test("transport: a failed attempt is classified caller first, then fence, stall rule, closed client, path", () => {
  const fetchErr = new TypeError("fetch failed", {
    cause: new Error(
      "error sending request for url (https://127.0.0.1:6443/x): client error (Connect): " +
        "tcp connect error: Connection refused (os error 111)",
    ),
  });
  const timeoutReason = new DOMException("Signal timed out.", "TimeoutError");
  const req = { method: "GET", path: "/api/v1/pods" };
  const stop = new Error("shutdown");
  const fenced = new Error("not the Lease holder");
  const stalled = new StalledRequestError();
  // Every signal aborted: the caller's comes first.
  const all = { caller: stop, late: fenced, fence: fenced, stall: stalled, timeout: timeoutReason };
  assertEquals(classifyFailure(fetchErr, signals(all), req, route), {
    type: "aborted",
    deadline: false,
    error: stop,
  });
  const deadline = classifyFailure(fetchErr, signals({ caller: timeoutReason }), req, route);
  assertEquals(deadline.type === "aborted" && deadline.deadline, true);
  const { caller: _, ...noCaller } = all;
  assertEquals(classifyFailure(fetchErr, signals(noCaller), req, route), {
    type: "fenced",
    error: fenced,
  });
  // The stall rule: a typed NetworkError for a request, a WatchRestartError for a watch.
  const s = classifyFailure(
    fetchErr,
    signals({ stall: stalled, timeout: timeoutReason }),
    req,
    route,
  );
  assert(s.type === "stalled" && s.error instanceof NetworkError, JSON.stringify(s));
  assertEquals([s.error.kind, s.error.method, s.error.path], ["stalled", "GET", "/api/v1/pods"]);
  assertEquals(s.error.message, `GET /api/v1/pods: ${stalled.message}`);
  assertEquals(s.error.cause, stalled);
  const w = classifyFailure(fetchErr, signals({ stall: stalled }), { ...req, stream: true }, route);
  assert(w.type === "stalled" && w.error instanceof WatchRestartError);
  assertEquals(w.error.why, "stalled");
  // The HTTP client was closed before the request left.
  const closed = classifyFailure(new Deno.errors.BadResource("closed"), signals({}), req, route);
  assertEquals(closed.type, "closed");
  // The path: the request timeout, else what fetch says.
  const t = classifyFailure(timeoutReason, signals({ timeout: timeoutReason }), req, route);
  assert(t.type === "network" && t.error instanceof UnreachableError);
  assertEquals([t.kind, t.error.kind], ["timeout", "timeout"]);
  const r = classifyFailure(fetchErr, signals({}), req, { ...route, proxy: "http://p:3128 (X)" });
  assert(r.type === "network");
  assertEquals(r.kind, "refused");
  assertEquals(
    r.error.message,
    "GET /api/v1/pods: cannot reach 127.0.0.1:6443 through proxy http://p:3128 (X): " +
      "client error (Connect): tcp connect error: Connection refused (os error 111)",
  );
  assertEquals(r.error.cause, fetchErr);
});

Deno.test("transport: fetch failures by kind; Retry-After in seconds or as a date; the Status of an error answer", () => {
  const wrap = (m: string) => new TypeError("fetch failed", { cause: new Error(m) });
  assertEquals(
    [
      "client error (Connect): tcp connect error: Connection refused (os error 111)",
      "client error (Connect): invalid peer certificate: UnknownIssuer",
      "client error (Connect): received corrupt message of type InvalidContentType",
      "client error (Connect): dns error: failed to lookup address information: Name unknown",
      "connection reset by peer",
    ].map((m) => fetchFailureKind(wrap(m))),
    ["refused", "tls", "tls", "dns", "unreachable"],
  );
  assertEquals(parseRetryAfter(null), undefined);
  assertEquals(parseRetryAfter("3"), 3);
  assertEquals(parseRetryAfter("-1"), 0);
  assertEquals(parseRetryAfter("soon"), undefined);
  const now = Date.parse("2026-01-01T00:00:00Z");
  assertEquals(parseRetryAfter("Thu, 01 Jan 2026 00:00:07 GMT", now), 7);
  assertEquals(parseRetryAfter("Wed, 31 Dec 2025 23:00:00 GMT", now), 0);
  const st = { kind: "Status", reason: "NotFound", code: 404, message: "x not found" } as const;
  assertEquals(answerStatus(404, "Not Found", JSON.stringify(st)), st);
  assertEquals(answerStatus(404, "Not Found", "404 page not found\n"), {
    message: "404 page not found",
    code: 404,
  });
  assertEquals(answerStatus(502, "Bad Gateway", ""), { message: "Bad Gateway", code: 502 });
  assertEquals(answerStatus(500, "x", '{"kind":"Other"}'), {
    message: '{"kind":"Other"}',
    code: 500,
  });
});

Deno.test("network errors: found by kind through a cause chain; UnreachableError is one", () => {
  const u = new UnreachableError("PATCH /api/v1/x", "h:1", undefined, "refused", {
    kind: "refused",
  });
  assertEquals([u.kind, u.method, u.path, u.reason], ["refused", "PATCH", "/api/v1/x", "refused"]);
  assertEquals(u.name, "UnreachableError");
  assertEquals(u.message, "PATCH /api/v1/x: cannot reach h:1: refused");
  const wrapped = new Error("reconcile failed", { cause: u });
  assertEquals(networkErrorIn(wrapped), u);
  assert(isNetworkError(wrapped, "refused", "timeout"));
  assert(!isNetworkError(wrapped, "stalled"));
  assert(isUnreachable(wrapped));
  const stalled = new NetworkError("stalled", { method: "GET", path: "/x" }, "no answer");
  assert(isNetworkError(stalled) && !isUnreachable(stalled));
  assert(!isNetworkError(new Error("GET /x: cannot reach h: refused")));
});

function client(server: string, requestTimeoutMs = 30_000): KubeClient {
  return new KubeClient(
    { server, auth: { kind: "token", token: "t" }, namespace: "default", source: "test" },
    { maxRetries: 0, requestTimeoutMs, proxyEnvironment: { raw: {} } },
  );
}

Deno.test("client: a refused connection is an UnreachableError of kind refused; no answer within the timeout one of kind timeout", async () => {
  // A loopback port nobody listens on: listen, note the port, close.
  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (l.addr as Deno.NetAddr).port;
  l.close();
  const refused = client(`http://127.0.0.1:${port}`);
  const release = Promise.withResolvers<void>();
  const s = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async () => {
    await release.promise;
    return new Response("", { status: 503 });
  });
  const silent = client(`http://127.0.0.1:${s.addr.port}`, 200);
  try {
    const e1 = await refused.get(CONFIGMAPS, "a", { namespace: "default" }).catch((e) => e);
    assert(e1 instanceof UnreachableError, String(e1));
    assertEquals([e1.kind, e1.method, e1.path], [
      "refused",
      "GET",
      "/api/v1/namespaces/default/configmaps/a",
    ]);
    const e2 = await silent.get(CONFIGMAPS, "a", { namespace: "default" }).catch((e) => e);
    assert(e2 instanceof UnreachableError, String(e2));
    assertEquals(e2.kind, "timeout");
  } finally {
    release.resolve();
    refused.close();
    silent.close();
    await s.shutdown();
  }
});
