import { assert, assertEquals } from "../assert.ts";
import { requestSpan, requestTarget, tracingEnabled } from "../../lib/runtime/tracing.ts";

Deno.test("requestTarget: the verb, resource, subresource, namespace and name of a request path", () => {
  const cases: [string, string, ReturnType<typeof requestTarget>][] = [
    ["GET", "/api/v1/namespaces/ns/pods", {
      verb: "list",
      resource: "pods",
      subresource: "",
      namespace: "ns",
      name: "",
    }],
    ["GET", "/api/v1/namespaces/ns/pods/p1", {
      verb: "get",
      resource: "pods",
      subresource: "",
      namespace: "ns",
      name: "p1",
    }],
    ["POST", "/api/v1/namespaces/ns/pods", {
      verb: "create",
      resource: "pods",
      subresource: "",
      namespace: "ns",
      name: "",
    }],
    ["PATCH", "/apis/apps.our-org.com/v1/namespaces/ns/appservices/web/status", {
      verb: "patch",
      resource: "appservices",
      subresource: "status",
      namespace: "ns",
      name: "web",
    }],
    ["PUT", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/op", {
      verb: "update",
      resource: "leases",
      subresource: "",
      namespace: "kube-system",
      name: "op",
    }],
    ["DELETE", "/api/v1/namespaces/ns/pods/p1", {
      verb: "delete",
      resource: "pods",
      subresource: "",
      namespace: "ns",
      name: "p1",
    }],
    ["DELETE", "/api/v1/namespaces/ns/pods", {
      verb: "deletecollection",
      resource: "pods",
      subresource: "",
      namespace: "ns",
      name: "",
    }],
    ["GET", "/api/v1/namespaces", {
      verb: "list",
      resource: "namespaces",
      subresource: "",
      namespace: "",
      name: "",
    }],
    ["GET", "/api/v1/namespaces/ns", {
      verb: "get",
      resource: "namespaces",
      subresource: "",
      namespace: "ns",
      name: "ns",
    }],
    ["PUT", "/api/v1/namespaces/ns/finalize", {
      verb: "update",
      resource: "namespaces",
      subresource: "finalize",
      namespace: "ns",
      name: "ns",
    }],
    ["GET", "/api/v1/nodes/n1", {
      verb: "get",
      resource: "nodes",
      subresource: "",
      namespace: "",
      name: "n1",
    }],
    ["POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", {
      verb: "create",
      resource: "selfsubjectreviews",
      subresource: "",
      namespace: "",
      name: "",
    }],
    ["GET", "/version", { verb: "list", resource: "", subresource: "", namespace: "", name: "" }],
  ];
  for (const [method, path, want] of cases) {
    assertEquals(requestTarget(method, path), want, `${method} ${path}`);
  }
});

Deno.test("tracingEnabled: Deno's tracing decides (OTEL_DENO=true, OTEL_SDK_DISABLED not true)", () => {
  const env = (k: string) => Deno.env.get(k)?.toLowerCase();
  const on = env("OTEL_SDK_DISABLED") !== "true" &&
    (env("OTEL_DENO_TRACING") ?? env("OTEL_DENO")) === "true";
  assertEquals(tracingEnabled(), on);
  // Off, or outside any span: no scope, the request is sent as it is.
  assertEquals(requestSpan({ method: "GET", path: "/api/v1/pods" }), undefined);
});

/** One span of an OTLP/JSON export, with its attributes as plain values. */
interface JsonSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  links?: { traceId: string; spanId: string }[];
  status?: { code?: number; message?: string };
  attrs: Record<string, unknown>;
}

/** A plain value of an OTLP/JSON attribute value. */
function plain(v: Record<string, unknown>): unknown {
  if ("stringValue" in v) return v.stringValue;
  if ("boolValue" in v) return v.boolValue;
  if ("intValue" in v) return Number(v.intValue);
  if ("doubleValue" in v) return v.doubleValue;
  if ("arrayValue" in v) {
    return ((v.arrayValue as { values?: Record<string, unknown>[] }).values ?? []).map(plain);
  }
  return undefined;
}

Deno.test("tracing on (a child process with OTEL_DENO=true): reconcile spans, request spans, links, log ids", async () => {
  // The OTLP/JSON endpoint: what Deno's exporter sends, on 127.0.0.1.
  const spans: JsonSpan[] = [];
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, async (req) => {
    if (new URL(req.url).pathname === "/p1") return Response.json({}, { status: 404 });
    const body = await req.json();
    if (new URL(req.url).pathname === "/v1/traces") {
      for (const rs of body.resourceSpans ?? []) {
        for (const ss of rs.scopeSpans ?? []) {
          for (const s of ss.spans ?? []) {
            const attrs = Object.fromEntries(
              (s.attributes ?? []).map((a: { key: string; value: Record<string, unknown> }) => [
                a.key,
                plain(a.value),
              ]),
            );
            spans.push({ ...s, attrs });
          }
        }
      }
    }
    return Response.json({});
  });
  try {
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", new URL("./tracing_child.ts", import.meta.url).pathname],
      env: {
        OTEL_DENO: "true",
        OTEL_DENO_METRICS: "false",
        OTEL_SDK_DISABLED: "false",
        OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
        OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${server.addr.port}`,
        OTEL_BSP_SCHEDULE_DELAY: "50",
      },
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
      signal: AbortSignal.timeout(60_000),
    }).output();
    const stderr = new TextDecoder().decode(out.stderr);
    assert(out.success, stderr);
    const causes = JSON.parse(new TextDecoder().decode(out.stdout).trim().split("\n")[0]);
    const reconcile = (key: string) => {
      const r = spans.find((s) => s.name === "reconcile" && s.attrs.key === key);
      assert(r, `no reconcile span of ${key} among ${spans.map((s) => s.name)}`);
      return r;
    };
    const ok = reconcile("ns/ok");
    assertEquals(ok.attrs.controller, "traced");
    assertEquals(ok.attrs.namespace, "ns");
    assertEquals(ok.attrs.name, "ok");
    assertEquals(ok.attrs.result, "success");
    assertEquals(ok.attrs.requeue, false);
    assertEquals(ok.parentSpanId ?? "", "");
    // The first of the two events that queued the waiting key is linked, the second folded.
    assertEquals(ok.links?.map((l) => l.spanId), [causes.first]);
    const get = spans.find((s) => s.name === "get pods");
    assert(get, "no request span");
    assertEquals(get.traceId, ok.traceId);
    assertEquals(get.parentSpanId, ok.spanId);
    assertEquals(get.kind, 3); // client
    assertEquals(get.attrs.verb, "get");
    assertEquals(get.attrs.name, "p1");
    assertEquals(get.attrs.code, "404");
    assertEquals(get.attrs.auditID, "audit-1");
    assertEquals(get.status?.code, 2); // ERROR: an answer of 400 or more
    // Deno's own span of the fetch, nested under ours.
    const fetchSpan = spans.find((s) => s.parentSpanId === get.spanId);
    assert(fetchSpan, "Deno's fetch span is not under the request span");
    assertEquals(fetchSpan.attrs["url.path"], "/p1");

    const later = reconcile("ns/later");
    assertEquals(later.attrs.result, "requeue_after");
    assertEquals(later.attrs.requeue, true);
    assertEquals(later.attrs.requeueAfterMs, 60_000);
    assertEquals(later.links ?? [], []);

    const err = reconcile("ns/err");
    assertEquals(err.attrs.result, "error");
    assertEquals(err.attrs.requeue, true);
    assertEquals(err.status?.code, 2);
    assertEquals(err.status?.message, "boom");

    // Log lines of a traced reconcile carry its trace and span ids.
    const lines = stderr.split("\n").filter((l) => l.startsWith("{")).map((l) => JSON.parse(l));
    const reconciled = lines.find((l) => l.message === "Reconciled");
    assertEquals(reconciled?.properties.traceID, ok.traceId);
    assertEquals(reconciled?.properties.spanID, ok.spanId);
    const failed = lines.find((l) => l.message === "Reconciler error");
    assertEquals(failed?.properties.traceID, err.traceId);
  } finally {
    await server.shutdown();
  }
});
