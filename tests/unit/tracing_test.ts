import { assertEquals } from "../assert.ts";
import { requestTarget, traceRequest, tracingEnabled } from "../../lib/runtime/tracing.ts";

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
  // Off, a request outside any span is ignored without error; on, too (no active span).
  traceRequest({
    method: "GET",
    path: "/api/v1/pods",
    code: "200",
    host: "127.0.0.1:6443",
    startedAtMs: Date.now(),
    durationSeconds: 0.001,
    auditId: "a",
  });
});
