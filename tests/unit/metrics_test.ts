/**
 * Process metrics are true or absent, never a 0 that only means "could not read": under exactly
 * `deno task start`'s permission flags (scripts/compile.ts startFlags, also the binary's) and
 * under `-A`, where `/proc/self` can be read and they must be there.
 */
import { assert, assertEquals } from "../assert.ts";
import { startFlags } from "../../scripts/compile.ts";
import { Metrics, PROC_SELF_METRICS } from "../../lib/runtime/metrics.ts";

const REPO = new URL("../../", import.meta.url).pathname;

/** Samples of an exposition text: metric name (with labels) → value. */
function samples(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split("\n")) {
    const m = /^([a-zA-Z_:][\w:]*(?:\{[^}]*\})?) (\S+)$/.exec(line);
    if (m) out.set(m[1], Number(m[2]));
  }
  return out;
}

/** Metrics that must always be exported with a positive value (Deno gives them any permission). */
const ALWAYS_POSITIVE = [
  "process_resident_memory_bytes",
  "process_start_time_seconds",
  "process_cpu_seconds_total",
  "nodejs_heap_size_total_bytes",
  "nodejs_heap_size_used_bytes",
];

Deno.test("metrics under deno task start's permissions: no /proc metric exported as 0", async () => {
  const flags = await startFlags();
  assert(!flags.includes("--allow-all") && !flags.includes("-A"), flags.join(" "));
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", ...flags, `${REPO}tests/fixtures/print_metrics.ts`],
    cwd: REPO,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  const stderr = new TextDecoder().decode(out.stderr);
  assert(out.success, stderr);
  const got = samples(new TextDecoder().decode(out.stdout));
  for (const name of ALWAYS_POSITIVE) assert((got.get(name) ?? 0) > 0, `${name}: ${got.get(name)}`);
  // Deno opens /proc only with --allow-all: these cannot be read, so they are not exported.
  for (const name of PROC_SELF_METRICS) assertEquals(got.get(name), undefined, name);
});

Deno.test({
  name: "metrics with -A on Linux: the /proc metrics are exported, each above 0",
  ignore: Deno.build.os !== "linux",
  fn: async () => {
    const got = samples(await new Metrics().text());
    for (const name of [...ALWAYS_POSITIVE, ...PROC_SELF_METRICS]) {
      assert((got.get(name) ?? 0) > 0, `${name}: ${got.get(name)}`);
    }
  },
});
