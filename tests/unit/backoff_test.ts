/**
 * The reflector's backoff ({@link Backoff}) on an injected clock and random source: 800 ms
 * doubling, jittered by up to +100 % below the cap and at the cap (S15: capped delays without
 * jitter fell into a flapping link's drops in lockstep), never above 30 s, reset by a success
 * and after 2 healthy minutes.
 */
import fc from "fast-check";
import { assert, assertEquals } from "../assert.ts";
import {
  Backoff,
  REFLECTOR_BACKOFF_INITIAL_MS,
  REFLECTOR_BACKOFF_MAX_MS,
  REFLECTOR_BACKOFF_RESET_MS,
} from "../../lib/runtime/backoff.ts";

function reflectorBackoff(random: () => number, now = () => 0): Backoff {
  return new Backoff({
    initialMs: REFLECTOR_BACKOFF_INITIAL_MS,
    maxMs: REFLECTOR_BACKOFF_MAX_MS,
    resetAfterMs: REFLECTOR_BACKOFF_RESET_MS,
    random,
    now,
  });
}

Deno.test("backoff: 800 ms doubling; at the cap the delay still varies and never exceeds 30 s", () => {
  const low = reflectorBackoff(() => 0);
  assertEquals(
    Array.from({ length: 8 }, () => low.next()),
    [800, 1600, 3200, 6400, 12800, 15000, 15000, 15000],
  );
  const high = reflectorBackoff(() => 0.999999);
  const seq = Array.from({ length: 8 }, () => high.next());
  assert(seq.every((d) => d <= REFLECTOR_BACKOFF_MAX_MS), `${seq}`);
  assert(seq[7] > 29_999, `${seq}`);
  const mid = reflectorBackoff(() => 0.5);
  assertEquals(mid.next(), 1200);
});

Deno.test("backoff: every delay lies in [base, 2 × base) with base capped at max / 2 — property", () => {
  fc.assert(fc.property(
    fc.array(fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }), {
      minLength: 1,
      maxLength: 30,
    }),
    (draws) => {
      let i = 0;
      const b = reflectorBackoff(() => draws[i]);
      for (i = 0; i < draws.length; i++) {
        const base = Math.min(800 * 2 ** i, REFLECTOR_BACKOFF_MAX_MS / 2);
        const d = b.next();
        if (!(d >= base && d < 2 * base + 1e-9 && d <= REFLECTOR_BACKOFF_MAX_MS)) return false;
      }
      return true;
    },
  ));
});

Deno.test("backoff: capped delays of clients that failed together spread over [15 s, 30 s)", () => {
  // 50 reflectors, each at its cap after 10 failures, with their own random source.
  let seed = 42;
  const random = () => (seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) / 2 ** 31;
  const delays = Array.from({ length: 50 }, () => {
    const b = reflectorBackoff(random);
    for (let i = 0; i < 10; i++) b.next();
    return b.next();
  });
  const spread = Math.max(...delays) - Math.min(...delays);
  assert(spread > 10_000, `capped delays spread over only ${spread} ms`);
  assert(delays.every((d) => d >= 15_000 && d <= 30_000), `${delays}`);
});

Deno.test("backoff: reset() starts again at 800 ms; so does a step after 2 healthy minutes", () => {
  let now = 0;
  const b = reflectorBackoff(() => 0, () => now);
  for (let i = 0; i < 6; i++) b.next();
  assertEquals(b.steps, 6);
  b.reset();
  assertEquals(b.next(), 800);
  assertEquals(b.next(), 1600);
  now += REFLECTOR_BACKOFF_RESET_MS;
  assertEquals(b.next(), 800);
});
