/**
 * The suite's count (tests/run.ts): tests and steps apart, from a real deno test JUnit report of
 * a tiny suite (tests/fixtures/junit/tiny_suite.ts: a passing and a failing step, an ignored and
 * a filtered test), and the runner's arguments.
 */
import { assertEquals } from "../assert.ts";
import { countJunit, parseArgs } from "../run.ts";

const REPORT = new URL("../fixtures/junit/report.xml", import.meta.url);

Deno.test("countJunit: tests and steps apart; ignored tests skipped by name; filtered ones not counted", async () => {
  assertEquals(countJunit(await Deno.readTextFile(REPORT)), {
    // "with steps" fails once (its failing step), "passes alone" passes; the filtered one is absent.
    tests: { passed: 1, failed: 1, skipped: 1 },
    steps: { passed: 1, failed: 1, skipped: 0 },
    ignored: ["container (skipped: podman is not installed & runc)"],
  });
  assertEquals(countJunit("<testsuites>"), undefined);
});

Deno.test("parseArgs: arguments pass through to deno test; only --no-static drops the static checks", () => {
  assertEquals(parseArgs(["--filter", "lifecycle", "--fail-fast"]), {
    staticChecks: true,
    denoTest: ["--filter", "lifecycle", "--fail-fast"],
  });
  assertEquals(parseArgs(["--no-static", "--filter", "x"]), {
    staticChecks: false,
    denoTest: ["--filter", "x"],
  });
});
