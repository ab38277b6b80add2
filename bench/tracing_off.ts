/**
 * The cost of tracing when it is off (issue 29: "no cost when off"): CPU time of the controller's
 * own per-reconcile work — queue, worker, metrics, logger, and with this change the tracing
 * guard — over many keys whose reconcile resolves at once, so that nothing else hides it.
 *
 *   deno run -A bench/tracing_off.ts [--lib DIR] [--keys N] [--repeats R]
 *
 * `--lib` is the folder holding the runtime (default this checkout's `lib/`): give the `lib/` of
 * another revision (e.g. `git archive <rev> lib | tar -x -C /tmp/base`) to compare the same
 * workload on both; the medians and spreads are printed as one JSON line. Run it without
 * `OTEL_DENO` (tracing off); with `OTEL_DENO=true` it measures the on path.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { cpuUsage } from "node:process";

const { values } = parseArgs({
  args: Deno.args,
  options: {
    lib: { type: "string", default: new URL("../lib", import.meta.url).pathname },
    keys: { type: "string", default: "50000" },
    repeats: { type: "string", default: "7" },
  },
});
const keys = Number(values.keys);
const repeats = Number(values.repeats);
const runtime = await import(`${values.lib}/runtime/mod.ts`);
await runtime.setupLogging("info", "json");

/** One pass: `keys` keys through a controller with metrics; CPU ms (user + system) and wall ms. */
async function pass(): Promise<{ cpuMs: number; wallMs: number }> {
  const controller = new runtime.Controller({
    name: "bench",
    reconcile: () => Promise.resolve(runtime.Reconcile.done),
    metrics: new runtime.Metrics(),
    syncPeriodMs: 0,
  });
  const stop = new AbortController();
  let reconciled = 0;
  const done = Promise.withResolvers<void>();
  const orig = controller.queue.done.bind(controller.queue);
  controller.queue.done = (k: string) => {
    orig(k);
    if (++reconciled === keys) done.resolve();
  };
  const c0 = cpuUsage();
  const t0 = performance.now();
  const running = controller.run(stop.signal, 1_000);
  for (let i = 0; i < keys; i++) controller.enqueue(`ns/obj-${i}`);
  await done.promise;
  const wallMs = performance.now() - t0;
  const c = cpuUsage(c0);
  stop.abort();
  await running;
  return { cpuMs: (c.user + c.system) / 1000, wallMs };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
await pass(); // warm-up (JIT)
const runs = [];
for (let i = 0; i < repeats; i++) runs.push(await pass());
const cpu = runs.map((r) => r.cpuMs);
console.log(JSON.stringify({
  lib: values.lib,
  keys,
  repeats,
  cpuMsMedian: Math.round(median(cpu)),
  cpuMsMin: Math.round(Math.min(...cpu)),
  cpuMsMax: Math.round(Math.max(...cpu)),
  usPerReconcile: Number((median(cpu) * 1000 / keys).toFixed(2)),
  wallMsMedian: Math.round(median(runs.map((r) => r.wallMs))),
}));
