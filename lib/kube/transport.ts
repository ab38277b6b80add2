/**
 * The transport layer of the REST client: one attempt of one request. It builds the headers,
 * combines the abort signals (the caller's, the request timeout, the stall rule's, the write
 * fence's), checks the write fence at the moment of sending, hands the request to `fetch`, and
 * turns what happened into a typed {@link Attempt}: an answer (any HTTP status), or a
 * {@link Failure} saying why none came, with the error to throw. It keeps the requests and
 * watches in flight for the stall rule ({@link InFlightRequests}) and tells the connection
 * health about every outcome. Whether to try again is the retry layer's (retry.ts); the layers
 * and a request's path are described in docs/design/client.md.
 *
 * The write fence (docs/scenarios.md S13): a request that is not a read (POST, PUT, PATCH,
 * DELETE) is checked with its {@link WriteFence} synchronously immediately before it is handed to
 * `fetch`, after every wait (token bucket, Retry-After gate, credential refresh: all in the layers
 * above), and once more in the microtask after: a closed fence throws and nothing is sent, or
 * aborts the write before the event loop writes it. The fence's `signal` aborts a write still in
 * flight when leadership ends.
 *
 * @module
 */
import type { ConnectionHealth, Recovery } from "./connection.ts";
import {
  type FencedError,
  NetworkError,
  type NetworkErrorKind,
  networkErrorReason,
  type Status,
  UnreachableError,
} from "./errors.ts";
import { type Deadline, deadline } from "./deadline.ts";
import type { RawRequest } from "./params.ts";
import { WatchRestartError } from "./watch.ts";

/**
 * Decides, at the moment a write is sent, whether it may leave this process (docs/scenarios.md
 * docs/scenarios.md S13). Called synchronously immediately before a POST, PUT, PATCH or DELETE is handed to
 * `fetch`; it must throw (e.g. `FencedError` from errors.ts) to refuse, and must not block. Reads
 * are never checked.
 */
export interface WriteFence {
  /**
   * Throws when writes may not leave now.
   * @param method HTTP verb
   * @param path request path, for the error message
   */
  check(method: string, path: string): void;
  /**
   * Aborted when the fence closes for good (leadership lost): the client aborts its writes in
   * flight with its reason. One still waiting to be written (a new connection's handshake, or a
   * process resumed from a pause) is then never sent; one already written may have taken effect.
   */
  readonly signal?: AbortSignal;
  /**
   * The signal of one write, when the fence's scope depends on the request (a sharded replica:
   * the fence of the shard of the path's namespace). Used instead of {@link signal} when present;
   * `undefined` falls back to {@link signal}.
   * @param method HTTP verb
   * @param path request path
   */
  signalFor?(method: string, path: string): AbortSignal | undefined;
  /**
   * Told when the apiserver refused a write this fence let leave, by a Lease-holder admission
   * policy (a `FencedError` of reason `NotLeaseHolder`, which the client then throws): feedback
   * for the fence's owner, e.g. to find a Lease that blocks the writes (lib/runtime/fence_repair.ts).
   * Must not throw or block.
   * @param err the refusal
   */
  refused?(err: FencedError): void;
}

/** What {@link ClientOptions.onRequest} is told about each finished HTTP request. */
export interface RequestInfo {
  /** HTTP verb, e.g. `GET`. */
  method: string;
  /** Request path without the query, e.g. `/api/v1/namespaces/ns/pods`. */
  path: string;
  /** HTTP status code as a string, or `<error>` when no answer came. */
  code: string;
  /** host:port of the apiserver. */
  host: string;
  /** Wall-clock time (epoch ms, fractional) when the request was handed to `fetch`. */
  startedAtMs: number;
  /** Seconds from sending to headers received. */
  durationSeconds: number;
  /** The answer's `Retry-After`, in seconds, when it had one. */
  retryAfterSeconds?: number;
  /**
   * The `Audit-ID` this request was sent with (a random UUID per attempt): the apiserver records
   * it as the request's `auditID` in its audit log.
   */
  auditId: string;
}

/**
 * What runs around one attempt when {@link ClientOptions.requestScope} opens one (tracing: a span
 * of the request, active while `fetch` is called, so that what `fetch` itself records nests under
 * it). Should not throw; what it throws is handled as below.
 */
export interface RequestScope {
  /**
   * Calls `send` (the attempt's `fetch`) once, synchronously, and returns what it returns. An
   * error `run` throws itself (or a `run` that returns without calling `send`: a TypeError) ends
   * the attempt: a `fetch` already started is aborted, {@link end} is told `<error>`, and the
   * error reaches the caller of the request unchanged — not taken for a connection failure, not
   * retried, not counted by the client's health.
   */
  run<T>(send: () => T): T;
  /** The attempt ended: what {@link ClientOptions.onRequest} is told. */
  end(info: RequestInfo): void;
}

/**
 * A request as the sending layers (retry.ts, this module) carry it: the verb's {@link RawRequest}
 * and the `Accept` header to send (default `application/json`), e.g. {@link METADATA_ACCEPT}.
 */
export interface OutgoingRequest extends RawRequest {
  /** The `Accept` header; default `application/json`. */
  accept?: string;
}

/**
 * `Accept` of a request whose caller reads only the answer's metadata: the apiserver answers a
 * `PartialObjectMetadata` (meta.k8s.io/v1: `metadata` only, no spec or status) for any object it
 * would have answered, and a `Status` as it is, as client-go's metadata client asks
 * (k8s.io/client-go/metadata). Every endpoint of kube-apiserver and of the apiservers built on
 * k8s.io/apiserver honours it for get, create, update, patch and delete (`transformResponseObject`
 * in k8s.io/apiserver/pkg/endpoints/handlers/response.go); plain JSON is the fallback.
 */
export const METADATA_ACCEPT =
  "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1, application/json";

/** Methods that are reads: never fenced, retried after connection errors and 5xx. */
export const IDEMPOTENT: ReadonlySet<string> = new Set(["GET", "HEAD"]);

/**
 * When the path to the apiserver recovers, a request sent before the one that got through and
 * still without an answer after this long (ms) is presumed to sit on a dead connection and is
 * ended (the stall rule, see {@link InFlightRequests.endStalled}). A request ended by mistake is
 * only sent again; the choice of the bound is in docs/design/client.md.
 */
export const STALLED_REQUEST_MIN_MS = 1_000;

/** A request or watch in flight, for the stall rule. Times in ms since the epoch. */
export interface InFlight {
  /** Ends it (with a {@link StalledRequestError} or a {@link WatchRestartError}). */
  ctl: AbortController;
  /** When it was sent. */
  sentAtMs: number;
  /** Last time bytes came (watches: headers, then every chunk). */
  lastByteMs: number;
  /** The health's failing episodes begun when it was sent ({@link ConnectionHealth.episodes}). */
  episodes?: number;
}

/** Why the client ended a request: the stall rule. */
export class StalledRequestError extends Error {
  /** The abort reason of a request ended by the stall rule. */
  constructor() {
    super("no answer on a connection presumed dead: a later request to the apiserver got through");
    this.name = "StalledRequestError";
  }
}

/**
 * The requests sent and not yet answered, and the watch streams open, of one client: what the
 * stall rule ends at a recovery of the path.
 */
export class InFlightRequests {
  /** Requests sent and not yet answered (headers). */
  readonly requests: Set<InFlight> = new Set();
  /** Watch streams open (headers received). */
  readonly watches: Set<InFlight> = new Set();

  /**
   * The stall rule at a recovery: a request sent before the one that got through and still
   * without an answer after {@link STALLED_REQUEST_MIN_MS} is ended with a
   * {@link StalledRequestError}; a watch that received nothing since the failures began is ended
   * with {@link WatchRestartError} `stalled` (its consumer resumes it at once).
   * @param r the recovery; `nowMs` the current time (ms since the epoch)
   */
  endStalled(r: Recovery, nowMs: number = Date.now()): void {
    for (const e of this.requests) {
      if (e.sentAtMs < r.sentAtMs && nowMs - e.sentAtMs >= STALLED_REQUEST_MIN_MS) {
        e.ctl.abort(new StalledRequestError());
      }
    }
    const since = new Date(r.failingSinceMs).toISOString();
    for (const w of this.watches) {
      if (w.lastByteMs < r.failingSinceMs) {
        w.ctl.abort(
          new WatchRestartError(
            "stalled",
            `nothing received since the connection to the apiserver failed at ${since}`,
          ),
        );
      }
    }
  }

  /** Ends every open watch with `reason` (e.g. the credentials changed). */
  restartWatches(reason: WatchRestartError): void {
    for (const w of this.watches) w.ctl.abort(reason);
  }
}

/**
 * Why an attempt got no answer, with the error the request fails with if it is not tried again:
 * - `aborted`: the caller's signal (`deadline`: its reason is a timeout, the caller's own time
 *   bound ran out); `error` is the signal's reason;
 * - `fenced`: the write fence aborted the write in flight; `error` is the fence's reason;
 * - `stalled`: the stall rule ended it; `error` is a {@link WatchRestartError} for a watch, else a
 *   {@link NetworkError} of kind `stalled`;
 * - `closed`: the HTTP client was closed before the request left (safe to send again);
 * - `network`: the path failed (`kind` says how); `error` is an {@link UnreachableError}.
 */
export type Failure =
  | { type: "aborted"; deadline: boolean; error: unknown }
  | { type: "fenced"; error: unknown }
  | { type: "stalled"; error: Error }
  | { type: "closed"; cause: unknown; error: UnreachableError }
  | {
    type: "network";
    kind: Exclude<NetworkErrorKind, "stalled">;
    cause: unknown;
    error: UnreachableError;
  };

/** The signals an attempt was sent with, read after `fetch` failed to classify the failure. */
export interface AttemptSignals {
  /** The caller's. */
  caller?: AbortSignal;
  /** The fence's check just after `fetch` (see the module doc). */
  late?: AbortSignal;
  /** The fence's own: aborted when leadership ends. */
  fence?: AbortSignal;
  /** The stall rule's. */
  stall: AbortSignal;
  /** The request timeout's (none for a watch). */
  timeout?: AbortSignal;
}

/** What a failure's message names besides the request: the apiserver and the proxy, if any. */
export interface Route {
  /** host:port of the apiserver. */
  host: string;
  /** The proxy used (`url (source)`), if any. */
  proxy?: string;
}

/** Whether an abort reason is a timeout (AbortSignal.timeout's DOMException). */
export const isTimeout = (reason: unknown): boolean =>
  reason instanceof DOMException && reason.name === "TimeoutError";

/**
 * How a failed `fetch` failed, from the innermost message of its cause chain (Deno's fetch gives
 * a `TypeError` whose causes carry hyper's and rustls' texts): `refused`, `tls`, `dns`, else
 * `unreachable`. The one place such texts are read; everything else branches on the kind.
 */
export function fetchFailureKind(err: unknown): "refused" | "tls" | "dns" | "unreachable" {
  const why = networkErrorReason(err);
  if (/connection refused/i.test(why)) return "refused";
  if (/dns error|failed to lookup address/i.test(why)) return "dns";
  if (/certificate|tls|handshake|corrupt message|InvalidContentType/i.test(why)) return "tls";
  return "unreachable";
}

/**
 * Classifies a failed attempt (pure: reads only the signals' state and `err`). The caller's
 * abort comes first, then the fence, then the stall rule, then a closed HTTP client, then the
 * path itself.
 * @param err what `fetch` threw
 * @param s the signals the attempt was sent with
 * @param req the request (its method, path and whether it is a watch)
 * @param route the apiserver and proxy, for the message of an {@link UnreachableError}
 */
export function classifyFailure(
  err: unknown,
  s: AttemptSignals,
  req: Pick<RawRequest, "method" | "path" | "stream">,
  route: Route,
): Failure {
  const label = `${req.method} ${req.path}`;
  if (s.caller?.aborted) {
    return { type: "aborted", deadline: isTimeout(s.caller.reason), error: s.caller.reason };
  }
  if (s.late?.aborted) return { type: "fenced", error: s.late.reason };
  if (s.fence?.aborted) return { type: "fenced", error: s.fence.reason };
  if (s.stall.aborted) {
    const why = (s.stall.reason as Error).message;
    return {
      type: "stalled",
      error: req.stream
        ? new WatchRestartError("stalled", `${label}: ${why}`)
        : new NetworkError("stalled", req, why, why, { cause: s.stall.reason }),
    };
  }
  const kind = s.timeout?.aborted ? "timeout" : fetchFailureKind(err);
  const error = new UnreachableError(label, route.host, route.proxy, networkErrorReason(err), {
    cause: err,
    kind,
  });
  if (err instanceof Deno.errors.BadResource) return { type: "closed", cause: err, error };
  return { type: "network", kind, cause: err, error };
}

/**
 * Seconds to wait from a `Retry-After` header: delta-seconds, or an HTTP date (from `nowMs`);
 * never negative; undefined when absent or unreadable.
 */
export function parseRetryAfter(h: string | null, nowMs: number = Date.now()): number | undefined {
  if (!h) return undefined;
  const n = Number(h);
  if (Number.isFinite(n)) return Math.max(0, n);
  const t = Date.parse(h);
  return Number.isNaN(t) ? undefined : Math.max(0, (t - nowMs) / 1000);
}

/**
 * The `metav1.Status` of an error answer: the body when it is one, else one made of its first 200
 * characters (e.g. `404 page not found` for a type the apiserver does not serve) or the status
 * text.
 */
export function answerStatus(code: number, statusText: string, text: string): Status {
  try {
    const parsed = JSON.parse(text);
    if (parsed?.kind === "Status") return parsed;
  } catch { /* not JSON */ }
  return { message: text.trim().slice(0, 200) || statusText, code };
}

/** One attempt: an answer (any status), or a failure. */
export type Attempt =
  | { type: "answer"; resp: Response; retryAfter?: number }
  | { type: "failure"; failure: Failure };

/** What one attempt is sent with (the credential is the caller's, taken and released by it). */
export interface AttemptSpec {
  /** The request. */
  req: OutgoingRequest;
  /** Its URL with the query. */
  url: URL;
  /** The JSON body, serialized. */
  body?: string;
  /** The `Authorization` header, if any. */
  authorization?: string;
  /** The HTTP client (TLS trust, client certificate, proxy). */
  httpClient: Deno.HttpClient;
  /** The write fence, for a write (reads are never checked). */
  fence?: WriteFence;
}

/** Options of {@link Transport}. */
export interface TransportOptions {
  /** User-Agent header. */
  userAgent: string;
  /** Per-request timeout for non-watch requests (ms). */
  requestTimeoutMs: number;
  /** The apiserver and proxy, for messages and {@link RequestInfo.host}. */
  route: Route;
  /** Health of the path: told of every answer and every failure of the path. */
  health: ConnectionHealth;
  /** Called when a request got no answer (after the health was told): e.g. re-read credentials. */
  onNoAnswer?: () => void;
  /** Drops pooled connections (after a timeout, they may be dead). */
  resetConnections: () => void;
  /** See {@link ClientOptions.onRequest}. */
  onRequest?: (info: RequestInfo) => void;
  /** See {@link ClientOptions.requestScope}. */
  requestScope?: (req: Pick<RequestInfo, "method" | "path">) => RequestScope | undefined;
  /** See {@link ClientOptions.onSendWrite}. */
  onSendWrite?: (info: Pick<RequestInfo, "method" | "path" | "startedAtMs" | "auditId">) => void;
}

/** Sends single attempts; see the module doc. */
export class Transport {
  /** Requests and watches in flight, for the stall rule. */
  readonly inFlight: InFlightRequests = new InFlightRequests();
  #o: TransportOptions;
  /** The time bound of each answer whose body is still to be read ({@link Transport.settle}). */
  #bounds = new WeakMap<Response, Deadline>();

  /** A transport with the given options. */
  constructor(o: TransportOptions) {
    this.#o = o;
  }

  /**
   * The body of an answer that {@link Transport.send} returned has been read to its end or
   * cancelled: drops the request's time bound (lib/kube/deadline.ts). Without it the bound runs
   * out by itself `requestTimeoutMs` after sending, aborting nothing that is still running.
   * Idempotent; unknown responses are ignored.
   */
  settle(resp: Response): void {
    const bound = this.#bounds.get(resp);
    if (!bound) return;
    this.#bounds.delete(resp);
    bound.clear();
  }

  /** A request got no answer: tell the health tracker (and `onNoAnswer`). */
  failed(err: unknown): void {
    this.#o.health.failed(err);
    this.#o.onNoAnswer?.();
  }

  /**
   * Sends one attempt and waits for its response headers. Rejects only when the write fence
   * refuses the write before it is handed to `fetch` (nothing was sent), or with the error of the
   * request scope's `run` ({@link RequestScope.run}); every other outcome is resolved as an
   * {@link Attempt}. An answer's time bound keeps running while its body is read: whoever reads
   * the body calls {@link Transport.settle} after it.
   */
  async send(a: AttemptSpec): Promise<Attempt> {
    const { req } = a;
    const stall = new AbortController();
    // Covers the body too: cleared by settle() once the caller has read it.
    const bound = req.stream ? undefined : deadline(this.#o.requestTimeoutMs);
    const timeout = bound?.signal;
    // Writes in flight stop with the fence; and once more just after fetch() (below).
    const late = a.fence ? new AbortController() : undefined;
    const signals: AttemptSignals = {
      caller: req.signal,
      late: late?.signal,
      fence: a.fence?.signalFor?.(req.method, req.path) ?? a.fence?.signal,
      stall: stall.signal,
      timeout,
    };
    const headers = this.#headers(a);
    // The write fence, synchronously: from here to fetch() nothing awaits (docs/scenarios.md S13).
    a.fence?.check(req.method, req.path);
    const started = performance.now();
    this.#sendingWrite(req, started, headers["Audit-ID"]);
    const entry: InFlight = {
      ctl: stall,
      sentAtMs: Date.now(),
      lastByteMs: 0,
      episodes: this.#o.health.episodes,
    };
    this.inFlight.requests.add(entry);
    let scope: RequestScope | undefined;
    try {
      scope = this.#o.requestScope?.(req);
    } catch { /* tracing must not break requests */ }
    let resp: Response;
    let sending: Promise<Response> | undefined;
    const send = () =>
      sending = fetch(a.url, {
        method: req.method,
        headers,
        body: a.body,
        signal: AbortSignal.any(
          Object.values(signals).filter((s): s is AbortSignal => s !== undefined),
        ),
        client: a.httpClient,
      });
    try {
      if (!scope) send();
      else {
        scope.run(send);
        if (!sending) throw new TypeError("requestScope: run returned without calling send");
      }
    } catch (err) {
      // The hook's own error (fetch() only returns a promise): the caller's, unchanged.
      stall.abort(err);
      bound?.clear();
      sending?.catch(() => {});
      this.inFlight.requests.delete(entry);
      this.#record(req, "<error>", started, headers["Audit-ID"], scope);
      throw err;
    }
    try {
      if (a.fence && late) this.#checkAgainSoon(a.fence, req, late);
      resp = await sending!;
    } catch (err) {
      this.inFlight.requests.delete(entry);
      this.#record(req, "<error>", started, headers["Audit-ID"], scope);
      const failure = classifyFailure(err, signals, req, this.#o.route);
      bound?.clear();
      return { type: "failure", failure };
    }
    this.inFlight.requests.delete(entry);
    if (bound) this.#bounds.set(resp, bound);
    return this.#answered(req, resp, entry, started, headers["Audit-ID"], scope);
  }

  /**
   * The body of an answer broke off while it was read (its headers had come, so the health was
   * told of an answer): the path failed after all, and a connection cut mid-answer is as often
   * the first sign of an outage as a refused connect. Tells the health and returns the error to
   * throw: an {@link UnreachableError} (kind `timeout` when the request's own time bound ran out,
   * which also drops pooled connections) for a failure of the path; `err` unchanged for anything
   * else (the caller's abort, the write fence's, a body that is not JSON). The caller's own
   * deadline running out mid-answer is told to the health too, and its reason returned as it is.
   * @param req the request whose answer was being read
   * @param err what reading the body threw (Deno's fetch: a `TypeError` such as `error reading a
   *   body from connection`; a `TimeoutError` from the request's timeout signal)
   */
  bodyFailed(req: Pick<RawRequest, "method" | "path" | "signal">, err: unknown): unknown {
    if (req.signal?.aborted) {
      // The caller's own deadline ran out mid-answer: a failure of the path, as when it runs out
      // before the headers (Transport.report); the caller gets its own reason either way.
      if (isTimeout(req.signal.reason)) {
        this.failed(
          new NetworkError("timeout", req, "no complete answer before the caller's deadline"),
        );
        this.#o.resetConnections();
      }
      return err;
    }
    const timeout = isTimeout(err);
    if (!(err instanceof TypeError) && !timeout) return err;
    const reason = timeout
      ? `no complete answer within ${this.#o.requestTimeoutMs / 1000} s`
      : `the connection broke while the answer was read: ${networkErrorReason(err)}`;
    const error = new UnreachableError(
      `${req.method} ${req.path}`,
      this.#o.route.host,
      this.#o.route.proxy,
      reason,
      { cause: err, kind: timeout ? "timeout" : "unreachable" },
    );
    this.failed(error);
    if (timeout) this.#o.resetConnections();
    return error;
  }

  /**
   * Tells the health of a failure and drops pooled connections when they may be dead (a timeout).
   * A `closed` failure that will be sent again says nothing about the path.
   */
  report(f: Failure, req: RawRequest, retrying: boolean): void {
    if (f.type === "aborted" && f.deadline) {
      // The caller's own time bound (e.g. a Lease renewal's deadline) ran out without an
      // answer: that is a failure of the path; a shutdown is not.
      this.failed(new NetworkError("timeout", req, "no answer before the caller's deadline"));
      this.#o.resetConnections();
    } else if (f.type === "network" && f.kind === "timeout") {
      const s = this.#o.requestTimeoutMs / 1000;
      this.failed(new NetworkError("timeout", req, `no answer within ${s} s`));
      this.#o.resetConnections();
    } else if (f.type === "network" || (f.type === "closed" && !retrying)) {
      this.failed(f.cause);
    }
  }

  #headers(a: AttemptSpec): Record<string, string> {
    // Our own audit ID (the apiserver keeps a client's Audit-ID: k8s.io/apiserver
    // pkg/endpoints/filters/with_auditid.go), so that client logs and the audit log meet even
    // when no answer comes.
    const headers: Record<string, string> = {
      "Accept": a.req.accept ?? "application/json",
      "User-Agent": this.#o.userAgent,
      "Audit-ID": crypto.randomUUID(),
    };
    if (a.authorization) headers["Authorization"] = a.authorization;
    if (a.body !== undefined) headers["Content-Type"] = a.req.contentType ?? "application/json";
    return headers;
  }

  /** The `onSendWrite` hook, for a write that passed the fence. */
  #sendingWrite(req: RawRequest, started: number, auditId: string): void {
    if (IDEMPOTENT.has(req.method) || !this.#o.onSendWrite) return;
    try {
      this.#o.onSendWrite({
        method: req.method,
        path: req.path,
        startedAtMs: performance.timeOrigin + started,
        auditId,
      });
    } catch { /* logs must not break requests */ }
  }

  /**
   * The fence once more in the next microtask: the request is written when the event loop next
   * runs its connection; should this process stop before that (SIGSTOP, a long pause), the code
   * after the stop sees the fence closed and cancels it, and an unwritten request is never sent.
   */
  #checkAgainSoon(fence: WriteFence, req: RawRequest, late: AbortController): void {
    queueMicrotask(() => {
      try {
        fence.check(req.method, req.path);
      } catch (err) {
        late.abort(err);
      }
    });
  }

  #answered(
    req: RawRequest,
    resp: Response,
    entry: InFlight,
    started: number,
    auditId: string,
    scope: RequestScope | undefined,
  ): Attempt {
    this.#o.health.succeeded(entry.sentAtMs, entry.episodes);
    const retryAfter = parseRetryAfter(resp.headers.get("Retry-After"));
    this.#record(req, String(resp.status), started, auditId, scope, retryAfter);
    return { type: "answer", resp, retryAfter };
  }

  #record(
    req: RawRequest,
    code: string,
    startedMs: number,
    auditId: string,
    scope: RequestScope | undefined,
    retryAfterSeconds?: number,
  ): void {
    if (!this.#o.onRequest && !scope) return;
    const info: RequestInfo = {
      method: req.method,
      path: req.path,
      code,
      host: this.#o.route.host,
      startedAtMs: performance.timeOrigin + startedMs,
      durationSeconds: (performance.now() - startedMs) / 1000,
      retryAfterSeconds,
      auditId,
    };
    try {
      scope?.end(info);
    } catch { /* tracing must not break requests */ }
    try {
      this.#o.onRequest?.(info);
    } catch { /* metrics must not break requests */ }
  }
}
