/**
 * Traces of reconciles (OpenTelemetry), on Deno's built-in OpenTelemetry: one `reconcile` span per
 * reconcile, a child span per apiserver request made under it, and an
 * `enqueue` span per watch event that put a key in a work queue, linked from the reconcile that
 * took the key ({@link enqueueSpan}). Request spans come from {@link requestSpan}, given to a
 * client as its `requestScope`.
 *
 * On and off: tracing is on exactly when Deno's is, which Deno decides at start-up from the
 * standard environment: `OTEL_DENO=true` (or `OTEL_DENO_TRACING=true`) and not
 * `OTEL_SDK_DISABLED=true`; Deno exports OTLP http/protobuf to `OTEL_EXPORTER_OTLP_ENDPOINT`
 * (default `http://localhost:4318`) under `OTEL_SERVICE_NAME`. {@link tracingEnabled} asks Deno
 * once (a span of Deno's tracer records only when its tracing is on), so a binary made by
 * `deno compile`, whose switch Deno fixes at compile time, is told the truth too.
 *
 * Contract when off: no span, no context object and no OpenTelemetry call per reconcile, request
 * or event; callers test {@link tracingEnabled} (a cached boolean) first.
 *
 * @module
 */
import {
  type Attributes,
  type Context,
  context,
  type Link,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  SpanStatusCode,
  trace,
  type Tracer,
} from "@opentelemetry/api";
import type { RequestInfo, RequestScope } from "../kube/transport.ts";

/**
 * Which span: its trace id (32 hex digits), span id (16 hex digits) and W3C trace flags, the
 * fields of an OpenTelemetry span context that a link needs.
 */
export interface SpanRef {
  /** Trace id, 32 lowercase hex digits. */
  readonly traceId: string;
  /** Span id, 16 lowercase hex digits. */
  readonly spanId: string;
  /** W3C trace flags (1: sampled). */
  readonly traceFlags: number;
}

/** The instrumentation scope of the runtime's spans (the tracer's name). */
export const TRACER_NAME = "appservice-operator/runtime";

/** The tracer when tracing is on; undefined before the first {@link tracingEnabled} or when off. */
let tracer: Tracer | undefined;
/** {@link tracingEnabled}'s answer, once asked. */
let enabled: boolean | undefined;

/**
 * Whether reconciles are traced: whether Deno's OpenTelemetry tracing is on in this process
 * (see the module doc). Asked of Deno once, then a cached boolean.
 */
export function tracingEnabled(): boolean {
  if (enabled === undefined) {
    const t = trace.getTracer(TRACER_NAME);
    // Never ended, so never exported: it only tells whether Deno records spans.
    enabled = t.startSpan("tracing-probe", {}, ROOT_CONTEXT).isRecording();
    tracer = enabled ? t : undefined;
  }
  return enabled;
}

/** The tracer; only called once {@link tracingEnabled} said yes. */
function theTracer(): Tracer {
  return tracer ?? trace.getTracer(TRACER_NAME);
}

/** What {@link enqueueSpan} records of the watch event that enqueued keys. */
export interface EnqueueEvent {
  /** The controller whose queue the keys went to. */
  controller: string;
  /** `add`, `update` or `delete` (the cache change). */
  event: "add" | "update" | "delete";
  /** The changed object's resource (plural), e.g. `pods`. */
  resource: string;
  /** The changed object's namespace ("" for cluster-scoped). */
  namespace: string;
  /** The changed object's name. */
  name: string;
  /** The changed object's resourceVersion. */
  resourceVersion: string;
  /** The keys enqueued. */
  keys: readonly string[];
}

/**
 * Records a watch event that enqueued `e.keys` as an `enqueue` span (a trace of its own, ended at
 * once) and returns its span context, for the queue to keep beside the keys and the reconcile to
 * link to. Only call it when {@link tracingEnabled}.
 */
export function enqueueSpan(e: EnqueueEvent): SpanRef {
  const span = theTracer().startSpan("enqueue", {
    kind: SpanKind.INTERNAL,
    attributes: {
      controller: e.controller,
      event: e.event,
      resource: e.resource,
      namespace: e.namespace,
      name: e.name,
      resourceVersion: e.resourceVersion,
      keys: [...e.keys],
    },
  }, ROOT_CONTEXT);
  span.end();
  const { traceId, spanId, traceFlags } = span.spanContext();
  return { traceId, spanId, traceFlags };
}

/** What {@link startReconcileSpan} records at the start of a reconcile. */
export interface ReconcileSpanStart {
  /** The controller's name. */
  controller: string;
  /** The key, `namespace/name` (or `name`). */
  key: string;
  /** The key's namespace ("" for a cluster-scoped primary). */
  namespace: string;
  /** The key's name. */
  name: string;
  /** The reconcile's id (as in its log lines). */
  reconcileID: string;
  /** The span context of the watch event that enqueued the key, if one did. */
  enqueuedBy?: SpanRef;
}

/** A reconcile's span and the context to run the reconcile in (the span active). */
export interface ReconcileSpan {
  /** The `reconcile` span; {@link endReconcileSpan} ends it. */
  span: Span;
  /** The active context with `span` in it. */
  context: Context;
  /** The trace id (32 hex digits), for the reconcile's log lines. */
  traceID: string;
  /** The span id (16 hex digits), for the reconcile's log lines. */
  spanID: string;
}

/**
 * Starts the `reconcile` span of one reconcile (a root span: a reconcile starts a trace), linked
 * to `s.enqueuedBy` when given. Only call it when {@link tracingEnabled}.
 */
export function startReconcileSpan(s: ReconcileSpanStart): ReconcileSpan {
  const links: Link[] = s.enqueuedBy
    ? [{ context: s.enqueuedBy, attributes: { "link.reason": "enqueued-by" } }]
    : [];
  const span = theTracer().startSpan("reconcile", {
    kind: SpanKind.INTERNAL,
    attributes: {
      controller: s.controller,
      key: s.key,
      namespace: s.namespace,
      name: s.name,
      reconcileID: s.reconcileID,
    },
    links,
  }, ROOT_CONTEXT);
  const sc = span.spanContext();
  return {
    span,
    context: trace.setSpan(ROOT_CONTEXT, span),
    traceID: sc.traceId,
    spanID: sc.spanId,
  };
}

/** How a reconcile ended, for {@link endReconcileSpan}. */
export interface ReconcileSpanEnd {
  /** The `result` label of `controller_runtime_reconcile_total`. */
  result: "success" | "error" | "requeue" | "requeue_after";
  /** Whether the key was re-added (after a delay or with backoff). */
  requeue: boolean;
  /** The delay before it is taken again (ms), when known. */
  requeueAfterMs?: number;
  /** The error's one-line text, for `result` `error`. */
  error?: string;
}

/** Sets the outcome on a reconcile's span (status ERROR for `error`) and ends it. */
export function endReconcileSpan(s: ReconcileSpan, e: ReconcileSpanEnd): void {
  s.span.setAttribute("result", e.result);
  s.span.setAttribute("requeue", e.requeue);
  if (e.requeueAfterMs !== undefined) {
    s.span.setAttribute("requeueAfterMs", Math.round(e.requeueAfterMs));
  }
  if (e.result === "error") {
    s.span.setStatus({ code: SpanStatusCode.ERROR, message: e.error });
  }
  s.span.end();
}

/** Runs `fn` with the reconcile's span active, so the requests it makes are its children. */
export function withReconcileSpan<T>(s: ReconcileSpan, fn: () => T): T {
  return context.with(s.context, fn);
}

/** What an apiserver request path names (Kubernetes' request info, as the apiserver parses it). */
export interface RequestTarget {
  /** The Kubernetes verb: get, list, create, update, patch, delete, deletecollection. */
  verb: string;
  /** The resource (plural), "" when the path names none (e.g. `/version`). */
  resource: string;
  /** The subresource, e.g. `status`; "" when none. */
  subresource: string;
  /** The namespace, "" when none (a Namespace's own path: its name, as the apiserver reads it). */
  namespace: string;
  /** The object's name, "" for a collection. */
  name: string;
}

/**
 * The Kubernetes verb, resource, subresource, namespace and name of a request (`method` and the
 * path without its query), as the apiserver reads `/api/v1/...` and `/apis/<group>/<version>/...`;
 * a GET of a collection is `list` (a watch is a `list` too: the query that says so is not in the
 * path).
 */
export function requestTarget(method: string, path: string): RequestTarget {
  const parts = path.split("/").filter((p) => p !== "");
  let rest: string[] = [];
  if (parts[0] === "api" && parts.length >= 2) rest = parts.slice(2);
  else if (parts[0] === "apis" && parts.length >= 3) rest = parts.slice(3);
  let namespace = "";
  // As the apiserver's request info: a Namespace's own path names it as the namespace too, and
  // `status` and `finalize` after it are its subresources, not resources in it.
  if (rest[0] === "namespaces" && rest.length >= 2) {
    namespace = rest[1];
    if (rest.length >= 3 && rest[2] !== "status" && rest[2] !== "finalize") rest = rest.slice(2);
  }
  const [resource = "", name = "", subresource = ""] = rest;
  const collection = name === "";
  const verbs: Record<string, string> = {
    GET: collection ? "list" : "get",
    POST: "create",
    PUT: "update",
    PATCH: "patch",
    DELETE: collection ? "deletecollection" : "delete",
  };
  return {
    verb: verbs[method] ?? method.toLowerCase(),
    resource,
    subresource,
    namespace,
    name,
  };
}

/** The attributes of a request span known before it is sent. */
function requestAttributes(t: RequestTarget, method: string, path: string): Attributes {
  return {
    "http.request.method": method,
    "url.path": path,
    verb: t.verb,
    resource: t.resource,
    ...(t.subresource ? { subresource: t.subresource } : {}),
    ...(t.namespace ? { namespace: t.namespace } : {}),
    ...(t.name ? { name: t.name } : {}),
  };
}

/**
 * A client's `requestScope` (lib/kube `ClientOptions.requestScope`): each apiserver request sent
 * while a span is active (a reconcile's) becomes a client span
 * `<verb> <resource>[/<subresource>]` (e.g. `patch appservices/status`), its child, active while
 * `fetch` is called (so Deno's own fetch span nests under it) and ended with the attempt's
 * outcome; undefined — nothing — when tracing is off or no span is active (the requests of
 * reflectors and the Lease are not traced here). Status ERROR for an answer of 400 or more or no
 * answer (OpenTelemetry's HTTP client convention).
 */
export function requestSpan(req: Pick<RequestInfo, "method" | "path">): RequestScope | undefined {
  if (!tracingEnabled()) return undefined;
  if (!trace.getActiveSpan()) return undefined;
  const t = requestTarget(req.method, req.path);
  const what = t.subresource ? `${t.resource}/${t.subresource}` : t.resource;
  const span = theTracer().startSpan(`${t.verb} ${what || req.path}`, {
    kind: SpanKind.CLIENT,
    attributes: requestAttributes(t, req.method, req.path),
  });
  const ctx = trace.setSpan(context.active(), span);
  return {
    run: (send) => context.with(ctx, send),
    end: (info) => {
      const code = Number(info.code);
      span.setAttributes({
        "server.address": info.host,
        code: info.code,
        auditID: info.auditId,
        ...(Number.isFinite(code) ? { "http.response.status_code": code } : {}),
      });
      if (!Number.isFinite(code) || code >= 400) {
        span.setStatus({ code: SpanStatusCode.ERROR, message: info.code });
      }
      span.end();
    },
  };
}
