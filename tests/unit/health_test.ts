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
  const res = handler();
  assertEquals(res.status, 500);
  assertEquals(
    await res.text(),
    "[-]informer-appservices failed: list/watch failing for 1 s (2 attempts): 403\n",
  );
  failing.failingSinceMs = undefined;
  const ok = handler();
  assertEquals([ok.status, await ok.text()], [200, "ok\n"]);
});
