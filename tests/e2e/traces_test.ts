/**
 * Traces of reconciles (issue 29) against a real OpenTelemetry Collector: the pinned `otelcol`
 * (tests/cluster/build_otelcol.sh: the OTLP receiver and the contrib file exporter) listens on
 * 127.0.0.1 and writes what it receives to JSON files; the operator runs with the standard
 * environment (`OTEL_DENO=true`, `OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_SERVICE_NAME`), and one
 * AppService is created and becomes Ready. The exported spans must show:
 * - a `reconcile` span of the AppService's key with controller, key, namespace, name,
 *   reconcileID, result and requeue;
 * - under it, in the same trace, a client span per apiserver request it made (verb, resource,
 *   status code), among them the creation of its Pods;
 * - a link from a reconcile of the key to the `enqueue` span of the watch event that queued it;
 * - a log line of that reconcile ("Created Pod") carrying the reconcile's trace and span ids.
 *
 * The control: the same operator without `OTEL_DENO` (the endpoint still set) reconciles a
 * second AppService to Ready, and nothing of its service name reaches the collector, and its
 * log lines carry no trace id. Every address is 127.0.0.1; every wait is bounded.
 */
import { assert, assertEquals } from "../assert.ts";
import { APPSERVICES } from "../../lib/appservice/schema.ts";
import { builtPath, freePort } from "../cluster/host.ts";
import {
  admin,
  appService,
  dropNamespace,
  getAs,
  installCrd,
  logsOf,
  newNamespace,
  type Operator,
  startOperator,
  waitFor,
} from "./harness.ts";
import { spawnTool } from "./tool_process.ts";

/** An OTLP/JSON attribute value (the file exporter's JSON is OTLP's JSON encoding). */
interface AnyValue {
  stringValue?: string;
  intValue?: string | number;
  boolValue?: boolean;
  doubleValue?: number;
  arrayValue?: { values?: AnyValue[] };
}

/** One exported span, as the file exporter writes it. */
interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind?: number;
  startTimeUnixNano: string;
  endTimeUnixNano: string;
  attributes?: { key: string; value: AnyValue }[];
  links?: { traceId: string; spanId: string; attributes?: { key: string; value: AnyValue }[] }[];
  status?: { code?: number; message?: string };
}

/** A span with its resource's `service.name`, its scope and its attributes as plain values. */
interface Span extends OtlpSpan {
  service: string;
  scope: string;
  attrs: Record<string, unknown>;
}

/** A plain value of an OTLP attribute value. */
function plain(v: AnyValue): unknown {
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.intValue !== undefined) return Number(v.intValue);
  if (v.boolValue !== undefined) return v.boolValue;
  if (v.doubleValue !== undefined) return v.doubleValue;
  if (v.arrayValue) return (v.arrayValue.values ?? []).map(plain);
  return undefined;
}

/** Every span in the file exporter's output (one JSON document a line); [] before the first. */
function readSpans(file: string): Span[] {
  let text = "";
  try {
    text = Deno.readTextFileSync(file);
  } catch {
    return [];
  }
  const out: Span[] = [];
  for (const line of text.split("\n")) {
    if (!line.trim()) continue;
    const doc = JSON.parse(line) as {
      resourceSpans?: {
        resource?: { attributes?: { key: string; value: AnyValue }[] };
        scopeSpans?: { scope?: { name?: string }; spans?: OtlpSpan[] }[];
      }[];
    };
    for (const rs of doc.resourceSpans ?? []) {
      const service = plain(
        rs.resource?.attributes?.find((a) => a.key === "service.name")?.value ?? {},
      );
      for (const ss of rs.scopeSpans ?? []) {
        for (const s of ss.spans ?? []) {
          const attrs = Object.fromEntries(
            (s.attributes ?? []).map((a) => [a.key, plain(a.value)]),
          );
          out.push({ ...s, service: String(service), scope: ss.scope?.name ?? "", attrs });
        }
      }
    }
  }
  return out;
}

/** A collector run by {@link startCollector}. */
interface Collector {
  /** `http://127.0.0.1:<port>`, its OTLP/HTTP endpoint. */
  endpoint: string;
  /** The file its traces are written to. */
  tracesFile: string;
  /** Its logs so far. */
  logs(): string;
  /** SIGTERM (SIGKILL after 30 s). */
  stop(): Promise<number>;
}

/**
 * Starts the pinned collector: OTLP over HTTP on a free 127.0.0.1 port, traces to
 * `<dir>/traces.json`, metrics and logs (Deno exports its runtime metrics too) to
 * `<dir>/other.json`; waits (at most 60 s) until the receiver answers.
 */
async function startCollector(dir: string): Promise<Collector> {
  const otelcol = await builtPath("build_otelcol.sh");
  const port = freePort();
  const tracesFile = `${dir}/traces.json`;
  const config = {
    receivers: { otlp: { protocols: { http: { endpoint: `127.0.0.1:${port}` } } } },
    exporters: {
      "file/traces": { path: tracesFile, flush_interval: "100ms" },
      "file/other": { path: `${dir}/other.json`, flush_interval: "1s" },
    },
    service: {
      // The collector's own telemetry would listen on :8888; none here.
      telemetry: { metrics: { level: "none" } },
      pipelines: {
        traces: { receivers: ["otlp"], exporters: ["file/traces"] },
        metrics: { receivers: ["otlp"], exporters: ["file/other"] },
        logs: { receivers: ["otlp"], exporters: ["file/other"] },
      },
    },
  };
  const configFile = `${dir}/config.json`;
  // JSON is YAML: the collector's file provider reads it as is.
  Deno.writeTextFileSync(configFile, JSON.stringify(config));
  const tool = spawnTool(otelcol, [`--config=file:${configFile}`]);
  const endpoint = `http://127.0.0.1:${port}`;
  const c: Collector = {
    endpoint,
    tracesFile,
    logs: tool.logs,
    stop: tool.stop,
  };
  try {
    await waitFor("collector's OTLP receiver", async () => {
      if (tool.exited()) throw new Error("exited");
      // An empty OTLP/JSON export: 200 once the receiver is up.
      const r = await fetch(`${endpoint}/v1/traces`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: "{}",
        signal: AbortSignal.timeout(5_000),
      });
      await r.body?.cancel();
      return r.status === 200;
    }, 60_000);
  } catch (err) {
    await c.stop();
    throw new Error(
      `otelcol did not start: ${(err as Error).message}\n${tool.logs().slice(-3000)}`,
    );
  }
  return c;
}

/** The attributes of the reconcile's log line that tie it to a span. */
function traceIdsOf(op: Operator, message: string, reconcileIDs: Set<string>) {
  return logsOf(op, message).map((l) => l.properties ?? {}).filter((p) =>
    reconcileIDs.has(String(p.reconcileID))
  );
}

Deno.test("traces: a reconcile is exported as a span tree to a real OpenTelemetry Collector; off, nothing is", async (t) => {
  await installCrd();
  const c = await admin();
  const ns = await newNamespace("traces");
  const dir = await Deno.makeTempDir({ prefix: "otelcol-e2e-" });
  let collector: Collector | undefined;
  let op: Operator | undefined;
  const onService = `appservice-operator-e2e-${ns}`;
  const offService = `${onService}-off`;
  try {
    collector = await startCollector(dir);
    const otelEnv = {
      OTEL_EXPORTER_OTLP_ENDPOINT: collector.endpoint,
      // Export batches every 200 ms rather than Deno's default 5 s.
      OTEL_BSP_SCHEDULE_DELAY: "200",
    };

    await t.step("on: the reconcile of an AppService is a span tree", async () => {
      op = await startOperator([`--watch-namespace=${ns}`], {
        ...otelEnv,
        OTEL_DENO: "true",
        OTEL_SERVICE_NAME: onService,
      });
      await op.waitReady();
      await c.create(APPSERVICES as never, appService(ns, "web", { image: "nginx:1.27" }));
      await waitFor("web Ready", async () => (await getAs(ns, "web")).status?.ready, 90_000);
      const key = `${ns}/web`;
      const file = collector!.tracesFile;

      // The reconcile that created the Pods, with its requests, is exported.
      // The reconcile that created the Pods and the one that wrote the Ready status, each with
      // its requests, are exported.
      const childrenOf = (spans: Span[], r: Span) =>
        spans.filter((s) =>
          s.traceId === r.traceId && s.parentSpanId === r.spanId &&
          s.scope === "appservice-operator/runtime"
        );
      const found = await waitFor("reconcile spans of the key: create pods, patch status", () => {
        const spans = readSpans(file).filter((s) => s.service === onService);
        const reconciles = spans.filter((s) => s.name === "reconcile" && s.attrs.key === key);
        const withChild = (name: string) =>
          reconciles.find((r) => childrenOf(spans, r).some((s) => s.name === name));
        const r = withChild("create pods");
        const status = withChild("patch appservices/status");
        return r && status ? { spans, r, children: childrenOf(spans, r), status } : undefined;
      }, 60_000);
      const statusPatch = childrenOf(found.spans, found.status).find((s) =>
        s.name === "patch appservices/status"
      )!;
      assertEquals(statusPatch.attrs.verb, "patch");
      assertEquals(statusPatch.attrs.subresource, "status");
      assertEquals(statusPatch.attrs.name, "web");
      assertEquals(statusPatch.traceId, found.status.traceId);
      const { spans, r, children } = found;
      assertEquals(logsOf(op, "Tracing reconciles (OpenTelemetry)").length, 1);
      assertEquals(r.attrs.controller, "appservice");
      assertEquals(r.attrs.namespace, ns);
      assertEquals(r.attrs.name, "web");
      assert(typeof r.attrs.reconcileID === "string" && r.attrs.reconcileID !== "");
      assert(
        ["success", "requeue", "requeue_after", "error"].includes(String(r.attrs.result)),
        `result ${r.attrs.result}`,
      );
      assertEquals(typeof r.attrs.requeue, "boolean");
      assert(!r.parentSpanId, "a reconcile starts its trace");
      for (const s of children) {
        assertEquals(s.traceId, r.traceId);
        assertEquals(s.kind, 3, `${s.name} is a client span`); // SPAN_KIND_CLIENT
        assert(typeof s.attrs.verb === "string" && typeof s.attrs.resource === "string");
        assert(/^\d{3}$/.test(String(s.attrs.code)), `${s.name}: code ${s.attrs.code}`);
        assert(BigInt(s.startTimeUnixNano) >= BigInt(r.startTimeUnixNano) - 1_000_000n);
      }
      const create = children.find((s) => s.name === "create pods")!;
      assertEquals(create.attrs.verb, "create");
      assertEquals(create.attrs.resource, "pods");
      assertEquals(create.attrs.namespace, ns);
      assertEquals(create.attrs.code, "201");
      assertEquals(create.attrs["http.response.status_code"], 201);
      // Deno's own span of the same fetch nests under it (the request span is active around it).
      const denoFetch = spans.find((s) => s.parentSpanId === create.spanId && s.scope === "deno");
      assert(denoFetch, "Deno's fetch span is not under the create pods span");
      assertEquals(denoFetch.traceId, r.traceId);

      // A reconcile of the key links to the enqueue span of a watch event that queued it.
      const enqueues = new Map(
        spans.filter((s) => s.name === "enqueue").map((s) => [`${s.traceId}/${s.spanId}`, s]),
      );
      const linked = spans.filter((s) => s.name === "reconcile" && s.attrs.key === key)
        .flatMap((s) => (s.links ?? []).map((l) => enqueues.get(`${l.traceId}/${l.spanId}`)))
        .filter((e) => e !== undefined);
      assert(linked.length > 0, "no reconcile of the key links to an exported enqueue span");
      for (const e of linked) {
        assert((e.attrs.keys as string[]).includes(key), `enqueue keys ${e.attrs.keys}`);
        assert(["add", "update", "delete"].includes(String(e.attrs.event)));
      }
      assert(
        linked.some((e) => e.attrs.resource === "appservices" && e.attrs.event === "add"),
        "the AppService's creation enqueued its key",
      );

      // The reconcile's log lines carry its trace and span ids.
      const lines = traceIdsOf(op, "Created Pod", new Set([String(r.attrs.reconcileID)]));
      assert(lines.length > 0, "no Created Pod line of the reconcile that created Pods");
      for (const p of lines) {
        assertEquals(p.traceID, r.traceId);
        assertEquals(p.spanID, r.spanId);
      }
      // What docs/library.md shows: every reconcile of the key exported so far, in order.
      const all = readSpans(file).filter((s) =>
        s.service === onService && s.name === "reconcile" && s.attrs.key === key
      ).sort((a, b) => Number(BigInt(a.startTimeUnixNano) - BigInt(b.startTimeUnixNano)));
      console.log(all.map((x) => tree(x, readSpans(file))).join("\n"));
      assertEquals(await op.stop(), 0);
      op = undefined;
    });

    await t.step(
      "off: without OTEL_DENO nothing is exported and logs carry no trace id",
      async () => {
        // The first step's operator, should it have failed before stopping it.
        await op?.stop();
        op = await startOperator([`--watch-namespace=${ns}`], {
          ...otelEnv,
          OTEL_DENO: "false",
          OTEL_SERVICE_NAME: offService,
        });
        await op.waitReady();
        await c.create(APPSERVICES as never, appService(ns, "off", { image: "nginx:1.27" }));
        await waitFor("off Ready", async () => (await getAs(ns, "off")).status?.ready, 90_000);
        assertEquals(logsOf(op, "Tracing reconciles (OpenTelemetry)").length, 0);
        const created = logsOf(op, "Created Pod");
        assert(created.length > 0, "the operator reconciled nothing");
        for (const l of created) assertEquals(l.properties?.traceID, undefined);
        // Ten export periods of the on run: anything sent would be in the file by now.
        await new Promise((r) => setTimeout(r, 2_000));
        assertEquals(await op.stop(), 0);
        op = undefined;
        const spans = readSpans(collector!.tracesFile);
        assert(spans.some((s) => s.service === onService), "the control reads the same file");
        assertEquals(spans.filter((s) => s.service === offService).length, 0);
      },
    );
  } finally {
    if (op) await op.stop();
    await collector?.stop();
    await dropNamespace(ns);
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
});

/**
 * The span tree under `root` as indented lines: name, its attributes of interest and duration;
 * with the links of the root (docs/library.md shows one).
 */
function tree(root: Span, spans: Span[]): string {
  const ms = (s: Span) =>
    (Number(BigInt(s.endTimeUnixNano) - BigInt(s.startTimeUnixNano)) / 1e6).toFixed(1);
  const show = (s: Span) => {
    const keys = ["controller", "key", "result", "requeue", "verb", "resource", "code"];
    const attrs = keys.filter((k) => s.attrs[k] !== undefined).map((k) => `${k}=${s.attrs[k]}`);
    return `${s.name} [${ms(s)} ms] ${attrs.join(" ")}`;
  };
  const lines = [show(root)];
  for (const l of root.links ?? []) {
    const e = spans.find((s) => s.traceId === l.traceId && s.spanId === l.spanId);
    lines.push(
      `  ~> link: ${e ? `${e.name} event=${e.attrs.event} resource=${e.attrs.resource}` : "?"}`,
    );
  }
  const walk = (parent: Span, depth: number) => {
    const kids = spans.filter((s) =>
      s.traceId === parent.traceId && s.parentSpanId === parent.spanId
    )
      .sort((a, b) => Number(BigInt(a.startTimeUnixNano) - BigInt(b.startTimeUnixNano)));
    for (const k of kids) {
      lines.push(
        `${"  ".repeat(depth)}${show(k)}${k.scope === "deno" ? " (Deno's fetch span)" : ""}`,
      );
      walk(k, depth + 1);
    }
  };
  walk(root, 1);
  return lines.join("\n");
}
