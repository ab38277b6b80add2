/**
 * The whole test suite, as `deno task test` (and so `.ci/run`) runs it:
 * 1. static checks — `deno fmt --check`, `deno lint`, `deno check`, CRD freshness — each counted
 *    as one test (left out only with `--no-static`);
 * 2. a fresh local control plane (`startControlPlane` of lib/testing, the `./testing` entry module)
 *    in `.cache/test-cluster`;
 * 3. `deno test` over tests/unit, tests/e2e and examples/ (the example controllers' own tests,
 *    which start control planes of their own) with the suite cluster's folder in
 *    `APPSERVICE_TEST_CLUSTER_DIR`;
 * 4. the control plane stopped again, also on failure or Ctrl-C;
 * 5. the test steps counted on one line (`steps: N passed, N failed, N skipped`), then the
 *    closing line `N passed, N failed, N skipped` counting tests only (each static check, each
 *    `Deno.test`; a test with a failing step is one failed test; an ignored test is named with its
 *    reason and counted as skipped, never passed; a test left out by `--filter` is not counted),
 *    and exit code 1 when anything failed.
 *
 * Extra arguments go to `deno test` (e.g. `deno task test --filter lifecycle`); `--no-static`
 * (taken by this runner) leaves out the static checks.
 *
 * @module
 */
import { join } from "node:path";
import { type ControlPlane, startControlPlane, stopCluster } from "../lib/testing/mod.ts";
import { stateDir } from "./cluster/cluster.ts";

const REPO = new URL("../", import.meta.url).pathname.replace(/\/$/, "");
const deno = Deno.execPath();
let passed = 0;
let failed = 0;
let skipped: string[] = [];
let steps = { passed: 0, failed: 0, skipped: 0 };

async function check(name: string, args: string[]): Promise<void> {
  const t0 = performance.now();
  const out = await new Deno.Command(deno, { args, cwd: REPO, stdout: "piped", stderr: "piped" })
    .output();
  const secs = ((performance.now() - t0) / 1000).toFixed(1);
  if (out.success) {
    passed++;
    console.log(`check ${name} ... ok (${secs}s)`);
  } else {
    failed++;
    console.log(`check ${name} ... FAILED (${secs}s)`);
    const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
    console.log(text.split("\n").slice(-40).join("\n"));
  }
}

/** Passed, failed and skipped (ignored) counts. */
export interface Tally {
  /** Ran and passed. */
  passed: number;
  /** Ran and failed (a test with a failing step fails too). */
  failed: number;
  /** Declared `ignore` (their names are in {@link JunitCounts.ignored}); never passed. */
  skipped: number;
}

/** What a deno test JUnit report says, tests and steps apart. */
export interface JunitCounts {
  /** `Deno.test` cases. */
  tests: Tally;
  /** `t.step` cases, at any depth. */
  steps: Tally;
  /** Names of the ignored tests (their reason is in the name). */
  ignored: string[];
}

/**
 * Counts a deno test JUnit report; undefined when it is incomplete. Deno writes every test and
 * every test step as a `<testcase>`, a step named `<parent> > <step>` after its parent in the same
 * `<testsuite>`, so a testcase is a step when its name extends another testcase's name of that
 * suite by ` > `. One with `<failure` or `<error` failed. `<skipped/>` marks two kinds: those left
 * out by `--filter` (no `time` attribute: they never ran), not counted at all, and those declared
 * `ignore` (a `time` attribute), counted as skipped.
 */
export function countJunit(xml: string): JunitCounts | undefined {
  if (!xml.includes("</testsuites>")) return undefined;
  const counts: JunitCounts = {
    tests: { passed: 0, failed: 0, skipped: 0 },
    steps: { passed: 0, failed: 0, skipped: 0 },
    ignored: [],
  };
  for (const suite of xml.matchAll(/<testsuite\b[^>]*>([\s\S]*?)<\/testsuite>/g)) {
    const cases = [...suite[1].matchAll(/<testcase\b([^>]*?)(?:\/>|>([\s\S]*?)<\/testcase>)/g)]
      .map((m) => ({
        name: unescapeXml(/\sname="([^"]*)"/.exec(m[1])?.[1] ?? ""),
        ran: /\stime="/.test(m[1]),
        body: m[2] ?? "",
      }));
    const names = new Set(cases.map((c) => c.name));
    const isStep = (name: string) => {
      for (let i = name.indexOf(" > "); i > 0; i = name.indexOf(" > ", i + 1)) {
        if (names.has(name.slice(0, i))) return true;
      }
      return false;
    };
    for (const c of cases) {
      const step = isStep(c.name);
      const tally = step ? counts.steps : counts.tests;
      if (c.body.includes("<skipped")) {
        if (!c.ran) continue;
        tally.skipped++;
        if (!step) counts.ignored.push(c.name);
      } else if (c.body.includes("<failure") || c.body.includes("<error")) tally.failed++;
      else tally.passed++;
    }
  }
  return counts;
}

/** The runner's own arguments taken out of `args`; the rest go to `deno test`. */
export function parseArgs(args: string[]): { staticChecks: boolean; denoTest: string[] } {
  return {
    staticChecks: !args.includes("--no-static"),
    denoTest: args.filter((a) => a !== "--no-static"),
  };
}

function unescapeXml(s: string): string {
  return s.replace(/&quot;/g, '"').replace(/&apos;/g, "'").replace(/&lt;/g, "<").replace(
    /&gt;/g,
    ">",
  ).replace(/&amp;/g, "&");
}

function readJunit(path: string): ReturnType<typeof countJunit> {
  try {
    return countJunit(Deno.readTextFileSync(path));
  } catch {
    return undefined;
  }
}

/** `./scripts/test --help`: what the runner takes, before it starts anything. */
const USAGE = `usage: ./scripts/test [--no-static] [deno test arguments]

Runs the static checks (fmt, lint, types, CRD freshness; --no-static leaves them out), starts the
local control plane (APPSERVICE_TEST_CLUSTER_DIR: its folder, default <repo>/.cache/test-cluster;
binaries from APPSERVICE_CACHE_DIR, built from pinned Go modules when missing), runs every test
(unit and end-to-end) and ends with "N passed, N failed, N skipped". Other arguments go to
deno test, e.g. --filter "finalizer policy" to run the tests of that name.`;

async function main(): Promise<number> {
  if (Deno.args.includes("--help") || Deno.args.includes("-h")) {
    console.log(USAGE);
    return 0;
  }
  const { staticChecks, denoTest: extra } = parseArgs(Deno.args);
  if (staticChecks) {
    await check("fmt", ["fmt", "--check"]);
    await check("lint", ["lint"]);
    await check("types", ["check", "main.ts", "lib/", "tests/", "scripts/", "bench/", "examples/"]);
    await check("crd-fresh", ["run", "--allow-read", "lib/appservice/crd_gen.ts", "--check"]);
    await check("fence-policy-fresh", [
      "run",
      "--allow-read",
      "lib/appservice/fence_policy_gen.ts",
      "--check",
    ]);
  }

  // Several runs side by side each need their own folder (APPSERVICE_TEST_CLUSTER_DIR).
  const dir = Deno.env.get("APPSERVICE_TEST_CLUSTER_DIR") || join(stateDir(), "test-cluster");
  const stop = new AbortController();
  const onSig = () => stop.abort();
  Deno.addSignalListener("SIGINT", onSig);
  Deno.addSignalListener("SIGTERM", onSig);
  let plane: ControlPlane | undefined;
  try {
    const t0 = performance.now();
    console.log(`starting the local control plane in ${dir} ...`);
    plane = await startControlPlane({ dir, signal: stop.signal });
    console.log(`control plane up in ${((performance.now() - t0) / 1000).toFixed(1)}s`);
    const junit = join(dir, "junit.xml");
    await Deno.remove(junit).catch(() => {});
    const child = new Deno.Command(deno, {
      args: [
        "test",
        "-A",
        `--junit-path=${junit}`,
        ...extra,
        "tests/unit",
        "tests/e2e",
        "examples",
      ],
      cwd: REPO,
      // Plain text (no ANSI colours) when the output goes to a file or a pipe.
      env: Deno.stdout.isTerminal()
        ? { APPSERVICE_TEST_CLUSTER_DIR: dir }
        : { APPSERVICE_TEST_CLUSTER_DIR: dir, NO_COLOR: "1" },
      stdin: "null",
    }).spawn();
    const onAbort = () => {
      try {
        child.kill("SIGTERM");
      } catch { /* gone */ }
    };
    stop.signal.addEventListener("abort", onAbort);
    const st = await child.status;
    stop.signal.removeEventListener("abort", onAbort);
    const counts = readJunit(junit);
    if (counts) {
      passed += counts.tests.passed;
      failed += counts.tests.failed;
      skipped = counts.ignored;
      steps = counts.steps;
    }
    if (!counts || (!st.success && counts.tests.failed === 0)) {
      failed++;
      console.log(`deno test exited with code ${st.code} without a complete report`);
    }
  } catch (err) {
    failed++;
    console.log(`test run failed: ${(err as Error).message}`);
  } finally {
    if (plane || stop.signal.aborted) {
      await (plane ? plane.stop() : stopCluster(dir)).catch((err) =>
        console.log(`stopping the cluster: ${err}`)
      );
    }
    Deno.removeSignalListener("SIGINT", onSig);
    Deno.removeSignalListener("SIGTERM", onSig);
  }
  // Skipped (ignored) tests are never counted as passed; each is named with its reason. The
  // closing line counts tests only (what CI reads); the steps are counted on the line above it.
  for (const name of skipped) console.log(`skipped: ${name}`);
  console.log(`steps: ${steps.passed} passed, ${steps.failed} failed, ${steps.skipped} skipped`);
  console.log(`${passed} passed, ${failed} failed, ${skipped.length} skipped`);
  return failed > 0 ? 1 : 0;
}

if (import.meta.main) Deno.exit(await main());
