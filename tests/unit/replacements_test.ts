/**
 * The growing delay before a failed Pod is replaced (replacements.ts), on an injected clock: the
 * first failure at once, then 10 s doubling to 5 min; the same Pod seen again keeps its answer; a
 * new spec or a long quiet period starts again.
 */
import { assertEquals } from "../assert.ts";
import {
  POD_REPLACE_BACKOFF_MAX_MS,
  POD_REPLACE_BACKOFF_RESET_MS,
  PodReplacements,
} from "../../lib/appservice/replacements.ts";

Deno.test("replacements: 0, 10, 20, 40 s ... capped at 5 min; the same Pod keeps its answer", () => {
  let t = 1_000;
  const r = new PodReplacements(() => t);
  const delays: number[] = [];
  for (let i = 0; i < 10; i++) {
    const f = r.failed("ns/a", 0, `uid-${i}`, "h1");
    t += 3_000;
    assertEquals(r.failed("ns/a", 0, `uid-${i}`, "h1"), f, "seen again: same answer");
    delays.push(f.delayMs);
    t = f.dueMs + 1_000; // replaced when due; the new Pod fails a second later
  }
  assertEquals(delays, [
    0,
    10_000,
    20_000,
    40_000,
    80_000,
    160_000,
    300_000,
    300_000,
    300_000,
    300_000,
  ]);
  assertEquals(Math.max(...delays), POD_REPLACE_BACKOFF_MAX_MS);
});

Deno.test("replacements: per ordinal; a new spec or a quiet period starts again; forget", () => {
  let t = 0;
  const r = new PodReplacements(() => t);
  r.failed("ns/a", 0, "a", "h1");
  assertEquals(r.failed("ns/a", 0, "b", "h1").failures, 2);
  assertEquals(r.failed("ns/a", 1, "c", "h1").failures, 1, "another ordinal counts alone");
  assertEquals(r.failed("ns/a", 0, "d", "h2").delayMs, 0, "a Pod of a new spec: at once");
  t += POD_REPLACE_BACKOFF_RESET_MS;
  assertEquals(r.failed("ns/a", 0, "e", "h2").failures, 1, "quiet for long: counts from 1");
  r.forget("ns/a");
  assertEquals(r.size, 0);
});
