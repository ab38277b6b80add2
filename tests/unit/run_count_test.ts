/**
 * The suite's closing count (tests/run.ts countJunit): an ignored test (a skipped container test)
 * is never counted as passed and is reported by name; a test left out by --filter is not counted.
 */
import { assertEquals } from "../assert.ts";
import { countJunit } from "../run.ts";

Deno.test("countJunit: ignored tests are listed, not passed; filtered ones are not counted", () => {
  const xml = `<?xml version="1.0" encoding="UTF-8"?>
<testsuites name="deno test" tests="4" failures="1" errors="0" time="0.010">
    <testsuite name="./a_test.ts" tests="4" disabled="2" errors="0" failures="1">
        <testcase name="container (skipped: podman is not installed &amp; runc)" classname="./a_test.ts" time="0.000" line="1" col="6">
            <skipped/>
        </testcase>
        <testcase name="runs" classname="./a_test.ts" time="0.000" line="2" col="6">
        </testcase>
        <testcase name="filtered" classname="./a_test.ts" line="3" col="6">
            <skipped/>
        </testcase>
        <testcase name="fails" classname="./a_test.ts" time="0.001" line="4" col="6">
            <failure message="x">x</failure>
        </testcase>
    </testsuite>
</testsuites>`;
  assertEquals(countJunit(xml), {
    tests: 2,
    failures: 1,
    ignored: ["container (skipped: podman is not installed & runc)"],
  });
  assertEquals(countJunit("<testsuites>"), undefined);
});
