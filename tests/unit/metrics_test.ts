/**
 * Process metrics are true or absent, never a 0 that only means "could not read": under exactly
 * `deno task start`'s permission flags (scripts/compile.ts startFlags, also the binary's) and
 * under `-A`, where `/proc/self` can be read and they must be there.
 */
import { assert, assertEquals } from "../assert.ts";
import { startFlags } from "../../scripts/compile.ts";
import {
  Metrics,
  PROC_SELF_METRICS,
  REST_CLIENT_DURATION_BUCKETS,
  WORKQUEUE_DURATION_BUCKETS,
} from "../../lib/runtime/metrics.ts";
import { BoundedDelayHistogram, EVENT_LOOP_SAMPLE_CAPACITY } from "../../lib/runtime/eventloop.ts";

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

/** The `/metrics` text of a fresh Metrics in a process with exactly `deno task start`'s flags. */
async function metricsUnderStartFlags(): Promise<string> {
  const flags = await startFlags();
  assert(!flags.includes("--allow-all") && !flags.includes("-A"), flags.join(" "));
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", ...flags, `${REPO}tests/fixtures/print_metrics.ts`],
    cwd: REPO,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert(out.success, new TextDecoder().decode(out.stderr));
  return new TextDecoder().decode(out.stdout);
}

Deno.test("metrics under deno task start's permissions: no /proc metric exported as 0", async () => {
  const got = samples(await metricsUnderStartFlags());
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

/**
 * Every metric name the operator exports under `deno task start`'s permissions: those it exported
 * before the event-loop monitor was replaced (dashboards depend on the names), and
 * controller-runtime's added since (panics, terminal errors, timeouts, request durations, the
 * certwatcher's reads).
 */
const EXPORTED_NAMES = [
  "appservice_leader_election_changes_total",
  "appservice_reflector_lists_total",
  "appservice_reflector_relists_total",
  "appservice_reflector_watch_errors_total",
  "appservice_reflector_watches_open",
  "certwatcher_read_certificate_errors_total",
  "certwatcher_read_certificate_total",
  "controller_runtime_active_workers",
  "controller_runtime_max_concurrent_reconciles",
  "controller_runtime_reconcile_errors_total",
  "controller_runtime_reconcile_panics_total",
  "controller_runtime_reconcile_time_seconds",
  "controller_runtime_reconcile_timeouts_total",
  "controller_runtime_reconcile_total",
  "controller_runtime_terminal_reconcile_errors_total",
  "leader_election_master_status",
  "nodejs_active_handles",
  "nodejs_active_handles_total",
  "nodejs_active_requests",
  "nodejs_active_requests_total",
  "nodejs_active_resources",
  "nodejs_active_resources_total",
  "nodejs_eventloop_lag_max_seconds",
  "nodejs_eventloop_lag_mean_seconds",
  "nodejs_eventloop_lag_min_seconds",
  "nodejs_eventloop_lag_p50_seconds",
  "nodejs_eventloop_lag_p90_seconds",
  "nodejs_eventloop_lag_p99_seconds",
  "nodejs_eventloop_lag_seconds",
  "nodejs_eventloop_lag_stddev_seconds",
  "nodejs_external_memory_bytes",
  "nodejs_gc_duration_seconds",
  "nodejs_heap_size_total_bytes",
  "nodejs_heap_size_used_bytes",
  "nodejs_heap_space_size_available_bytes",
  "nodejs_heap_space_size_total_bytes",
  "nodejs_heap_space_size_used_bytes",
  "nodejs_version_info",
  "process_cpu_seconds_total",
  "process_cpu_system_seconds_total",
  "process_cpu_user_seconds_total",
  "process_resident_memory_bytes",
  "process_start_time_seconds",
  "rest_client_request_duration_seconds",
  "rest_client_requests_total",
  "workqueue_adds_total",
  "workqueue_depth",
  "workqueue_longest_running_processor_seconds",
  "workqueue_queue_duration_seconds",
  "workqueue_retries_total",
  "workqueue_unfinished_work_seconds",
  "workqueue_work_duration_seconds",
];

Deno.test("metrics: exactly the metric names exported before", async () => {
  const text = await metricsUnderStartFlags();
  const names = [
    ...new Set(
      text.split("\n").filter((l) => l.startsWith("# TYPE ")).map((l) => l.split(" ")[2]),
    ),
  ].sort();
  assertEquals(names, EXPORTED_NAMES);
});

Deno.test("event-loop histogram: exact min/max/mean/stddev, nearest-rank percentiles, bounded samples", () => {
  const h = new BoundedDelayHistogram(10, () => 0.999999);
  assertEquals([h.min, h.max, h.percentile(50), h.count], [9223372036854775807, 0, 0, 0]);
  assert(Number.isNaN(h.mean) && Number.isNaN(h.stddev));
  for (const v of [4, 1, 3, 2]) h.record(v * 1e6);
  assertEquals([h.min, h.max, h.mean, h.count], [1e6, 4e6, 2.5e6, 4]);
  assertEquals(Math.round(h.stddev), Math.round(Math.sqrt(1.25) * 1e6));
  assertEquals([h.percentile(25), h.percentile(50), h.percentile(90), h.percentile(100)], [
    1e6,
    2e6,
    4e6,
    4e6,
  ]);
  h.reset();
  assertEquals([h.min, h.max, h.count], [9223372036854775807, 0, 0]);
  // Far more samples than kept: min/max/mean stay exact, percentiles come from the reservoir.
  for (let i = 1; i <= 10 * EVENT_LOOP_SAMPLE_CAPACITY; i++) h.record(i);
  assertEquals([h.min, h.max, h.count], [
    1,
    10 * EVENT_LOOP_SAMPLE_CAPACITY,
    10 * EVENT_LOOP_SAMPLE_CAPACITY,
  ]);
  assertEquals(h.mean, (10 * EVENT_LOOP_SAMPLE_CAPACITY + 1) / 2);
  assert(h.percentile(100) <= 10 * EVENT_LOOP_SAMPLE_CAPACITY);
});

Deno.test("event-loop histogram: the timer samples how late it fires and never holds the process", async () => {
  const h = new BoundedDelayHistogram(5);
  assertEquals(h.enable(), true);
  assertEquals(h.enable(), false);
  await new Promise((r) => setTimeout(r, 40));
  const until = performance.now() + 50;
  while (performance.now() < until) { /* block the loop for 50 ms */ }
  await new Promise((r) => setTimeout(r, 20));
  assertEquals(h.disable(), true);
  assertEquals(h.disable(), false);
  assert(h.count >= 3, `count ${h.count}`);
  assert(h.max >= 40e6 && h.max < 1e9, `max ${h.max}: the 50 ms block`);
  assert(h.percentile(50) < 20e6, `p50 ${h.percentile(50)}: a free loop is about on time`);
});

/** The `# TYPE` and the label names of every sample of `name` (its `_bucket` etc. too) in `text`. */
function shape(text: string, name: string): { type?: string; labels: string[] } {
  const type = new RegExp(`^# TYPE ${name} (\\w+)$`, "m").exec(text)?.[1];
  const labels = new Set<string>();
  for (const line of text.split("\n")) {
    const m = new RegExp(`^${name}(?:_bucket|_sum|_count)?\\{([^}]*)\\}`).exec(line);
    for (const pair of m?.[1].split(",") ?? []) labels.add(pair.split("=")[0]);
  }
  return { type, labels: [...labels].sort() };
}

Deno.test("metrics: controller-runtime's types, label names and buckets", async () => {
  const m = new Metrics();
  for (const c of [m.reconcilePanics, m.terminalReconcileErrors, m.reconcileTimeouts]) {
    c.inc({ controller: "c" });
  }
  m.queueDepth.set({ name: "c", controller: "c", priority: "" }, 2);
  m.queueDuration.observe({ name: "c", controller: "c" }, 500);
  m.recordRequest({ method: "GET", code: "200", host: "127.0.0.1:6443", durationSeconds: 0.2 });
  m.recordRequest({ method: "GET", code: "<error>", host: "127.0.0.1:6443", durationSeconds: 9 });
  const text = await m.text();
  const expected: Record<string, { type: string; labels: string[] }> = {
    controller_runtime_reconcile_panics_total: { type: "counter", labels: ["controller"] },
    controller_runtime_terminal_reconcile_errors_total: { type: "counter", labels: ["controller"] },
    controller_runtime_reconcile_timeouts_total: { type: "counter", labels: ["controller"] },
    workqueue_depth: { type: "gauge", labels: ["controller", "name", "priority"] },
    workqueue_queue_duration_seconds: { type: "histogram", labels: ["controller", "le", "name"] },
    rest_client_requests_total: { type: "counter", labels: ["code", "host", "method"] },
    rest_client_request_duration_seconds: { type: "histogram", labels: ["host", "le", "verb"] },
  };
  for (const [name, want] of Object.entries(expected)) assertEquals(shape(text, name), want, name);
  const les = (name: string) =>
    text.split("\n").filter((l) => l.startsWith(`${name}_bucket{`) && l.includes('verb="GET"'))
      .map((l) => /le="([^"]+)"/.exec(l)![1]);
  assertEquals(les("rest_client_request_duration_seconds"), [
    ...REST_CLIENT_DURATION_BUCKETS.map(String),
    "+Inf",
  ]);
  assertEquals(WORKQUEUE_DURATION_BUCKETS.length, 12);
  assertEquals([WORKQUEUE_DURATION_BUCKETS[0], WORKQUEUE_DURATION_BUCKETS[11]], [1e-8, 1000]);
  // 0.2 s falls in le=0.25 and above, 9 s in le=15 and above; 500 s in the 1000 s bucket.
  assert(
    /^rest_client_request_duration_seconds_bucket\{le="0.25",verb="GET",host="127.0.0.1:6443"\} 1$/m
      .test(text),
    text,
  );
  assert(
    /^rest_client_request_duration_seconds_bucket\{le="15",verb="GET",host="127.0.0.1:6443"\} 2$/m
      .test(text),
    text,
  );
  assert(
    /^workqueue_queue_duration_seconds_bucket\{le="1000",name="c",controller="c"\} 1$/m.test(text),
    text,
  );
  assert(
    /^rest_client_requests_total\{code="<error>",method="GET",host="127.0.0.1:6443"\} 1$/m.test(
      text,
    ),
    text,
  );
});

Deno.test("addStateGauge: samples computed at each scrape; a label set left out is gone", async () => {
  const m = new Metrics();
  let samples: [{ kind: string }, number][] = [[{ kind: "a" }, 2], [{ kind: "b" }, 0]];
  m.addStateGauge("example_objects", "Objects by kind", ["kind"], () => samples);
  let text = await m.text();
  assert(text.includes('example_objects{kind="a"} 2'), text);
  assert(text.includes('example_objects{kind="b"} 0'), text);
  samples = [[{ kind: "b" }, 5]];
  text = await m.text();
  assert(!text.includes('example_objects{kind="a"}'), text);
  assert(text.includes('example_objects{kind="b"} 5'), text);
});
