/**
 * The readiness rule of an informer ({@link informerCheck}) on a manual clock: not ready until
 * synced; once synced, a run of failed list/watch attempts is tolerated for
 * {@link INFORMER_FAILING_NOT_READY_MS} and reported from then on, naming the last error; the
 * first success makes it ready again.
 */
import { assert, assertEquals } from "../assert.ts";
import { FakeClock } from "../../lib/runtime/clock.ts";
import {
  checksHandler,
  INFORMER_FAILING_NOT_READY_MS,
  informerCheck,
  type InformerStatus,
  type RouteHandler,
  serveRoutes,
} from "../../lib/runtime/health.ts";

/** A reflector's status that the test changes as the reflector would. */
type MutableStatus = { -readonly [K in keyof InformerStatus]: InformerStatus[K] };

/** A synced, healthy status, with `s` on top. */
function status(s: Partial<InformerStatus> = {}): MutableStatus {
  return { hasSynced: true, failedAttempts: 0, state: { phase: "watching" }, ...s };
}

Deno.test("informerCheck: not synced names the last error, else the phase", () => {
  const clock = new FakeClock();
  const r = status({ hasSynced: false, state: { phase: "listing" } });
  const check = informerCheck(r, () => clock.now());
  assertEquals(check(), "not synced (listing)");
  r.lastError = "404 Not Found";
  r.failingSinceMs = clock.now();
  r.failedAttempts = 1;
  assertEquals(check(), "not synced (404 Not Found)");
});

Deno.test("informerCheck: a synced informer is ready through failures shorter than the bound", () => {
  const clock = new FakeClock();
  const r = status();
  const check = informerCheck(r, () => clock.now());
  assertEquals(check(), undefined);
  r.failingSinceMs = clock.now();
  r.failedAttempts = 1;
  r.lastError = "connection refused";
  clock.advance(INFORMER_FAILING_NOT_READY_MS - 1);
  r.failedAttempts = 5;
  assertEquals(check(), undefined);
});

Deno.test("informerCheck: failing for the bound or longer is not ready, naming the error; a success recovers", () => {
  const clock = new FakeClock();
  const r = status();
  const check = informerCheck(r, () => clock.now());
  r.failingSinceMs = clock.now();
  r.failedAttempts = 6;
  r.lastError = "the server could not find the requested resource (404 NotFound)";
  clock.advance(INFORMER_FAILING_NOT_READY_MS);
  assertEquals(
    check(),
    "list/watch failing for 30 s (6 attempts): the server could not find the requested " +
      "resource (404 NotFound)",
  );
  clock.advance(45_000);
  assert(check()?.startsWith("list/watch failing for 75 s"), check());
  // The reflector clears its failure run at the first success.
  r.failingSinceMs = undefined;
  r.failedAttempts = 0;
  r.lastError = undefined;
  assertEquals(check(), undefined);
});

Deno.test("informerCheck: the bound can be given; /readyz lists each failing informer by name", async () => {
  const clock = new FakeClock();
  const failing = status({ failingSinceMs: clock.now(), failedAttempts: 2, lastError: "403" });
  const fine = status();
  clock.advance(1_000);
  const handler = checksHandler({
    "informer-appservices": informerCheck(failing, () => clock.now(), 1_000),
    "informer-pods": informerCheck(fine, () => clock.now(), 1_000),
  });
  const res = await get(handler, "/readyz");
  assertEquals(res.status, 500);
  assertEquals(
    await res.text(),
    "[-]informer-appservices failed: list/watch failing for 1 s (2 attempts): 403\n" +
      "[+]informer-pods ok\n" +
      "healthz check failed\n",
  );
  failing.failingSinceMs = undefined;
  const ok = await get(handler, "/readyz");
  assertEquals([ok.status, await ok.text()], [200, "ok\n"]);
});

/** GET `path` (with its query) of `handler` mounted on `/readyz`, as serveRoutes calls it. */
function get(handler: RouteHandler, path: string): Promise<Response> {
  const url = new URL(path, "http://127.0.0.1");
  return Promise.resolve(handler(url, url.pathname.slice("/readyz".length)));
}

/** Status, content type and body of an answer. */
async function answer(r: Response): Promise<[number, string | null, string]> {
  return [r.status, r.headers.get("content-type"), await r.text()];
}

const TEXT = "text/plain; charset=utf-8";

Deno.test("checksHandler: ?verbose lists every check sorted by name, as controller-runtime's healthz", async () => {
  let apiserver: string | undefined = undefined;
  const handler = checksHandler({ "informer-pods": () => undefined, apiserver: () => apiserver });
  assertEquals(await answer(await get(handler, "/readyz?verbose")), [
    200,
    TEXT,
    "[+]apiserver ok\n[+]informer-pods ok\nhealthz check passed\n",
  ]);
  assertEquals(await answer(await get(handler, "/readyz?verbose=1")), [
    200,
    TEXT,
    "[+]apiserver ok\n[+]informer-pods ok\nhealthz check passed\n",
  ]);
  assertEquals(await answer(await get(handler, "/readyz")), [200, TEXT, "ok\n"]);
  apiserver = "no answer";
  for (const path of ["/readyz", "/readyz?verbose", "/readyz/"]) {
    assertEquals(await answer(await get(handler, path)), [
      500,
      TEXT,
      "[-]apiserver failed: no answer\n[+]informer-pods ok\nhealthz check failed\n",
    ], path);
  }
});

Deno.test("checksHandler: /readyz/<check> runs that check alone; 404 for an unknown one", async () => {
  let apiserver: string | undefined = "no answer for 31 s";
  const handler = checksHandler({ "informer-pods": () => undefined, apiserver: () => apiserver });
  assertEquals(await answer(await get(handler, "/readyz/informer-pods")), [200, TEXT, "ok\n"]);
  assertEquals(await answer(await get(handler, "/readyz/apiserver")), [
    500,
    TEXT,
    "internal server error: no answer for 31 s\n",
  ]);
  apiserver = undefined;
  assertEquals(await answer(await get(handler, "/readyz/apiserver")), [200, TEXT, "ok\n"]);
  for (const path of ["/readyz/nope", "/readyz/toString", "/readyz/informer-pods/x"]) {
    assertEquals((await get(handler, path)).status, 404, path);
  }
});

Deno.test("checksHandler: ?exclude= skips a failing check; an unknown name is warned about", async () => {
  const handler = checksHandler({ "informer-pods": () => undefined, apiserver: () => "down" });
  assertEquals((await get(handler, "/readyz")).status, 500, "positive control: it fails");
  assertEquals(await answer(await get(handler, "/readyz?exclude=apiserver")), [200, TEXT, "ok\n"]);
  assertEquals(await answer(await get(handler, "/readyz?exclude=apiserver&verbose")), [
    200,
    TEXT,
    "[+]apiserver excluded: ok\n[+]informer-pods ok\nhealthz check passed\n",
  ]);
  assertEquals(await answer(await get(handler, "/readyz?exclude=nope&exclude=x")), [
    500,
    TEXT,
    "[-]apiserver failed: down\n[+]informer-pods ok\n" +
    'warn: some health checks cannot be excluded: no matches for "nope","x"\n' +
    "healthz check failed\n",
  ]);
});

Deno.test("serveRoutes: a route answers its path and the paths below it; anything else is 404", async () => {
  const ac = new AbortController();
  const s = serveRoutes({ hostname: "127.0.0.1", port: 0 }, {
    "/healthz": checksHandler({ ping: () => undefined, lease: () => undefined }),
    "/readyz": checksHandler({ apiserver: () => "no answer" }),
  }, ac.signal);
  const get = async (path: string) => {
    const r = await fetch(`http://127.0.0.1:${s.port}${path}`);
    return [r.status, await r.text()];
  };
  try {
    assertEquals(await get("/healthz?verbose"), [
      200,
      "[+]lease ok\n[+]ping ok\nhealthz check passed\n",
    ]);
    assertEquals(await get("/healthz/lease"), [200, "ok\n"]);
    assertEquals(await get("/readyz"), [
      500,
      "[-]apiserver failed: no answer\nhealthz check failed\n",
    ]);
    assertEquals(await get("/readyz/apiserver"), [500, "internal server error: no answer\n"]);
    for (const path of ["/readyz/nope", "/readyzz", "/metrics", "/"]) {
      assertEquals((await get(path))[0], 404, path);
    }
  } finally {
    ac.abort();
    await s.finished;
  }
});
