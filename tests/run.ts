/**
 * The whole test suite, as `deno task test` (and so `.ci/run`) runs it:
 * 1. static checks — `deno fmt --check`, `deno lint`, `deno check`, CRD freshness — each counted
 *    as one test;
 * 2. a fresh local control plane (tests/cluster) in `.cache/test-cluster`;
 * 3. `deno test` over tests/unit and tests/e2e with the cluster's folder in
 *    `APPSERVICE_TEST_CLUSTER_DIR`;
 * 4. the control plane stopped again, also on failure or Ctrl-C;
 * 5. the closing line `N passed, N failed` (ignored tests are named with their reason and counted
 *    on the line above it; a skipped test never counts as passed), and exit code 1 when
 *    anything failed.
 *
 * Extra arguments go to `deno test` (e.g. `deno task test --filter lifecycle`).
 *
 * @module
 */
import { join } from "node:path";
import { cacheDir, startCluster, stopCluster } from "./cluster/cluster.ts";

const REPO = new URL("../", import.meta.url).pathname.replace(/\/$/, "");
const deno = Deno.execPath();
let passed = 0;
let failed = 0;
let skipped: string[] = [];

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

/**
 * Counts a deno test JUnit report: every test and test step is a `<testcase>`; one with `<failure`
 * or `<error` failed. `<skipped/>` marks two kinds, neither counted as passed: tests left out by
 * `--filter` (no `time` attribute: they never ran) and tests declared `ignore` (a `time`
 * attribute), which are returned by name so the reason in their name is shown.
 */
export function countJunit(
  xml: string,
): { tests: number; failures: number; ignored: string[] } | undefined {
  if (!xml.includes("</testsuites>")) return undefined;
  let tests = 0;
  let failures = 0;
  const ignored: string[] = [];
  for (const m of xml.matchAll(/<testcase\b([^>]*?)(?:\/>|>([\s\S]*?)<\/testcase>)/g)) {
    const attrs = m[1];
    const body = m[2] ?? "";
    if (body.includes("<skipped")) {
      if (/\stime="/.test(attrs)) {
        ignored.push(unescapeXml(/\sname="([^"]*)"/.exec(attrs)?.[1] ?? ""));
      }
      continue;
    }
    tests++;
    if (body.includes("<failure") || body.includes("<error")) failures++;
  }
  return { tests, failures, ignored };
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

async function main(): Promise<number> {
  const extra = Deno.args;
  const quick = extra.length > 0; // a filtered run skips the static checks
  if (!quick) {
    await check("fmt", ["fmt", "--check"]);
    await check("lint", ["lint"]);
    await check("types", ["check", "main.ts", "lib/", "tests/", "scripts/", "bench/", "examples/"]);
    await check("crd-fresh", ["run", "--allow-read", "lib/appservice/crd_gen.ts", "--check"]);
  }

  // Several runs side by side each need their own folder (APPSERVICE_TEST_CLUSTER_DIR).
  const dir = Deno.env.get("APPSERVICE_TEST_CLUSTER_DIR") || join(cacheDir(), "test-cluster");
  const stop = new AbortController();
  const onSig = () => stop.abort();
  Deno.addSignalListener("SIGINT", onSig);
  Deno.addSignalListener("SIGTERM", onSig);
  let started = false;
  try {
    const t0 = performance.now();
    console.log(`starting the local control plane in ${dir} ...`);
    await startCluster({ dir, signal: stop.signal });
    started = true;
    console.log(`control plane up in ${((performance.now() - t0) / 1000).toFixed(1)}s`);
    const junit = join(dir, "junit.xml");
    await Deno.remove(junit).catch(() => {});
    const child = new Deno.Command(deno, {
      args: ["test", "-A", `--junit-path=${junit}`, ...extra, "tests/unit", "tests/e2e"],
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
      passed += counts.tests - counts.failures;
      failed += counts.failures;
      skipped = counts.ignored;
    }
    if (!counts || (!st.success && counts.failures === 0)) {
      failed++;
      console.log(`deno test exited with code ${st.code} without a complete report`);
    }
  } catch (err) {
    failed++;
    console.log(`test run failed: ${(err as Error).message}`);
  } finally {
    if (started || stop.signal.aborted) {
      await stopCluster(dir).catch((err) => console.log(`stopping the cluster: ${err}`));
    }
    Deno.removeSignalListener("SIGINT", onSig);
    Deno.removeSignalListener("SIGTERM", onSig);
  }
  // Skipped (ignored) tests are never counted as passed; each is named with its reason.
  // The closing line is exactly `N passed, N failed` (what CI reads); skips are told just above it.
  for (const name of skipped) console.log(`skipped: ${name}`);
  if (skipped.length) console.log(`${skipped.length} skipped (counted neither passed nor failed)`);
  console.log(`${passed} passed, ${failed} failed`);
  return failed > 0 ? 1 : 0;
}

if (import.meta.main) Deno.exit(await main());
