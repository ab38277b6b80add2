/**
 * Run by tests/unit/tracing_test.ts with `OTEL_DENO=true` and an OTLP/JSON endpoint of the test:
 * a controller traces three reconciles (done, after, a thrown error), one of them making a request
 * and queued by two watch events, then the process exits after Deno's exporter had time to send.
 */
import { Controller, Reconcile } from "../../lib/runtime/controller.ts";
import { setupLogging } from "../../lib/runtime/log.ts";
import { enqueueSpan, requestSpan, tracingEnabled } from "../../lib/runtime/tracing.ts";

await setupLogging("info", "json");
if (!tracingEnabled()) throw new Error("tracing is off in the child");
const done = Promise.withResolvers<void>();
let reconciles = 0;
const controller = new Controller({
  name: "traced",
  syncPeriodMs: 0,
  reconcile: async (key, ctx) => {
    if (++reconciles === 3) setTimeout(done.resolve, 0);
    if (key === "ns/ok") {
      // A request under the reconcile: Deno's fetch span of it must nest under ours.
      const scope = requestSpan({ method: "GET", path: "/api/v1/namespaces/ns/pods/p1" });
      if (!scope) throw new Error("no request scope under a reconcile");
      const startedAtMs = performance.timeOrigin + performance.now();
      const r = await scope.run(() => fetch(`${Deno.env.get("OTEL_EXPORTER_OTLP_ENDPOINT")}/p1`));
      await r.body?.cancel();
      scope.end({
        method: "GET",
        path: "/api/v1/namespaces/ns/pods/p1",
        code: String(r.status),
        host: "127.0.0.1:6443",
        startedAtMs,
        durationSeconds: 0.002,
        auditId: "audit-1",
      });
      ctx.logger.info("Reconciled");
      return Reconcile.done;
    }
    if (key === "ns/later") return Reconcile.after(60_000);
    throw new Error("boom");
  },
});
const event = (name: string, keys: string[]) =>
  enqueueSpan({
    controller: "traced",
    event: "update",
    resource: "pods",
    namespace: "ns",
    name,
    resourceVersion: "1",
    keys,
  });
const first = event("first", ["ns/ok"]);
const second = event("second", ["ns/ok"]);
console.log(JSON.stringify({ first: first.spanId, second: second.spanId }));
controller.enqueue("ns/ok", first);
controller.enqueue("ns/ok", second);
controller.enqueue("ns/later");
controller.enqueue("ns/err");
const stop = new AbortController();
const running = controller.run(stop.signal, 1_000);
await done.promise;
stop.abort();
await running;
// OTEL_BSP_SCHEDULE_DELAY is 50 ms in the test: a few periods for the last batch to leave.
await new Promise((r) => setTimeout(r, 500));
