/**
 * A thin Kubernetes REST client on Deno's `fetch` and `Deno.createHttpClient`: the verbs get, list
 * (one page or all pages), create, update, patch (JSON, merge, strategic merge, server-side apply),
 * delete and watch, typed errors from `metav1.Status`, `Retry-After` for 429/503, retries of
 * idempotent reads, an optional client-side token bucket, a write fence, and a request hook for
 * metrics.
 *
 * Rules followed: Kubernetes API concepts (paging with `limit`/`continue`, watch, bookmarks, patch
 * content types, server-side apply `fieldManager`/`force`) and client-go `rest.Request`
 * (`Retry-After` honoured up to `maxRetries`, reads retried on connection errors, a 401 makes the
 * credential be fetched again once).
 *
 * Retry-After is client-wide (S16): a 429, or a 503 with `Retry-After`, closes a "not before" gate
 * ({@link RetryAfterGate}) for every later request of this client until the Retry-After has
 * passed, not only for the request that got it, and then reopens it through a small window of
 * concurrent requests that widens while no more 429s come. API Priority and Fairness classifies
 * requests by user into one priority level and computes one Retry-After per level (k8s.io/apiserver
 * pkg/util/flowcontrol/dropped_requests_tracker.go: 1 s, doubled up to 32 s while the level keeps
 * dropping requests), so the other requests of the same client would be rejected too. A request
 * waits at the gate up to {@link ClientOptions.maxThrottleWaitMs}; one that would wait longer
 * fails at once with a client-side 429 (`retryAfterSeconds` = the remaining wait, nothing sent),
 * so that a work queue can requeue its key for then instead of holding a worker.
 *
 * The write fence (S13): every request that is not a read (POST, PUT, PATCH, DELETE) is checked
 * with the {@link WriteFence} synchronously immediately before it is handed to `fetch`, after every
 * wait (token bucket, Retry-After gate, credential refresh). A closed fence throws (e.g.
 * `FencedError`) and nothing is sent. What remains is a request already handed to `fetch` when the
 * process stops: it leaves when the process runs again (see README, "Fenced writes").
 *
 * Connection health ({@link ConnectionHealth}): every request reports whether an answer came.
 * When the path to the apiserver recovers after failures, what still waits on a dead connection
 * is ended and sent again: a request sent before the one that got through, still without an
 * answer after {@link STALLED_REQUEST_MIN_MS} (a read is sent again once at no cost to its
 * retries; a write fails with a network error, as it would at its timeout), and a watch that has
 * received nothing since the failures began ({@link WatchRestartError} `stalled`: its consumer
 * resumes it at once). A change of the CA or client certificate files (see credentials.ts) ends
 * every watch the same way (`credentials`), so that they reconnect with the new material.
 *
 * @module
 */
import type { ObjectMeta } from "kubernetes-types/meta/v1.d.ts";
import type { ClusterConfig } from "./config.ts";
import { ConnectionHealth, type Recovery, UnreachableError } from "./connection.ts";
import { CREDENTIAL_FILE_CHECK_MS, CredentialProvider } from "./credentials.ts";
import {
  ApiError,
  ConfigError,
  fencedByServer,
  isGone,
  networkErrorReason,
  type Status,
} from "./errors.ts";
import {
  chooseProxy,
  denoProxy,
  describeProxy,
  type ProxyChoice,
  type ProxyEnvironment,
  takeProxyEnvironment,
} from "./proxy.ts";
import { resourcePath, type ResourceType } from "./resources.ts";
import { RetryAfterGate, sleep, TokenBucket } from "./throttle.ts";
import {
  decodeWatchBatches,
  type ObjectWatchEvent,
  WatchIdleError,
  WatchRestartError,
} from "./watch.ts";

/** Any Kubernetes object. */
export interface KubeObject {
  /** `group/version` of the object's type, e.g. `v1` or `apps/v1` (absent in some list items). */
  apiVersion?: string;
  /** Kind of the object, e.g. `Pod`. */
  kind?: string;
  /** Standard object metadata (name, namespace, uid, resourceVersion, labels, ownerReferences...). */
  metadata?: ObjectMeta;
}

/** A list answer: items plus `metadata.resourceVersion` and `metadata.continue`. */
export interface ObjectList<T> {
  /** `group/version` of the list, e.g. `v1`. */
  apiVersion?: string;
  /** Kind of the list, e.g. `PodList`. */
  kind?: string;
  /** `resourceVersion` to watch from; `continue` token of the next page, if any. */
  metadata: { resourceVersion?: string; continue?: string; remainingItemCount?: number };
  /** The objects of this page. */
  items: T[];
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
 * Decides, at the moment a write is sent, whether it may leave this process (S13). Called
 * synchronously immediately before a POST, PUT, PATCH or DELETE is handed to `fetch`; it must
 * throw (e.g. `FencedError` from errors.ts) to refuse, and must not block. Reads are never checked.
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
}

/** Options of {@link KubeClient}. */
export interface ClientOptions {
  /** User-Agent header, e.g. `appservice-operator/0.1.0`. */
  userAgent?: string;
  /** Client-side rate limit in requests per second; 0 (default) disables it. */
  qps?: number;
  /** Token bucket size; default 2×qps. */
  burst?: number;
  /** Retries after 429/503 (with `Retry-After`) and of reads after connection errors; default 5. */
  maxRetries?: number;
  /** Per-request timeout for non-watch requests (ms); default 30,000. */
  requestTimeoutMs?: number;
  /**
   * Longest wait (ms) for the Retry-After gate a request accepts (see the module doc); one that
   * would wait longer fails at once with a client-side 429. Default
   * {@link MAX_THROTTLE_WAIT_MS}.
   */
  maxThrottleWaitMs?: number;
  /**
   * Whether a throttled answer holds back every request of this client (the Retry-After gate,
   * see the module doc); default true. The Lease's own client turns it off: its attempts keep
   * their own pace (the renew deadline), so that throttled reconcilers never cost the Lease.
   */
  retryAfterGate?: boolean;
  /** Checked before every write is sent (see {@link WriteFence}); default none. */
  writeFence?: WriteFence;
  /** Called after every HTTP request (metrics). Must not throw. */
  onRequest?: (info: RequestInfo) => void;
  /**
   * Called synchronously right before a write (POST, PUT, PATCH, DELETE) is handed to `fetch`,
   * after the write fence passed it; `durationSeconds`, `code` and `retryAfterSeconds` are not
   * known yet. For logs that must survive the process stopping right after (S13). Must not throw.
   */
  onSendWrite?: (info: Pick<RequestInfo, "method" | "path" | "startedAtMs" | "auditId">) => void;
  /**
   * Health of the path to the apiserver, shared by the clients of one apiserver (e.g. the
   * reconcilers' and the Lease's); default one of this client's own, closed with it.
   */
  health?: ConnectionHealth;
  /**
   * The environment's proxy variables; default {@link takeProxyEnvironment} (read once per
   * process and removed from its environment, so that Deno applies no proxy implicitly). The
   * proxy of the apiserver is chosen from these and the kubeconfig's `proxy-url` as client-go
   * chooses it ({@link chooseProxy}).
   */
  proxyEnvironment?: ProxyEnvironment;
}

/**
 * Default of {@link ClientOptions.maxThrottleWaitMs} (ms): API Priority and Fairness starts at a
 * Retry-After of 1 s and doubles it while throttling lasts (dropped_requests_tracker.go), so 1 s to
 * 8 s are waited in place; longer ones hand the work back to the caller (a work queue requeues the
 * key for then) instead of holding a reconcile worker for up to 32 s.
 */
export const MAX_THROTTLE_WAIT_MS = 10_000;

/**
 * Largest Retry-After honoured (s), so a broken header cannot stop the client for good. API
 * Priority and Fairness sends at most 32 (`maxRetryAfter` in dropped_requests_tracker.go).
 */
export const MAX_RETRY_AFTER_SECONDS = 300;

/** Common options of one call. */
export interface CallOptions {
  /** Namespace for namespaced resources. */
  namespace?: string;
  /** Aborts the request. */
  signal?: AbortSignal;
}

/** Options of a list call (one page). */
export interface ListOptions extends CallOptions {
  /** Label selector (Kubernetes label selector syntax, e.g. `app=a,tier!=db`). */
  labelSelector?: string;
  /** Field selector, e.g. `metadata.name=x` or `status.phase=Running`. */
  fieldSelector?: string;
  /** Page size; the apiserver returns at most this many items and a `continue` token. */
  limit?: number;
  /** Token from the previous page. */
  continue?: string;
  /** "" or unset: from etcd (consistent); "0": any cached version. */
  resourceVersion?: string;
  /** How `resourceVersion` is matched (Kubernetes API concepts, "Resource versions"). */
  resourceVersionMatch?: "NotOlderThan" | "Exact";
}

/** Options of a watch call. */
export interface WatchOptions extends CallOptions {
  /** Label selector (Kubernetes label selector syntax). */
  labelSelector?: string;
  /** Field selector, e.g. `metadata.name=x`. */
  fieldSelector?: string;
  /** Start after this resourceVersion. */
  resourceVersion?: string;
  /** Ask for BOOKMARK events (they carry only a resourceVersion). */
  allowWatchBookmarks?: boolean;
  /** Server-side timeout of the watch (seconds). */
  timeoutSeconds?: number;
  /** WatchList (KEP-3157): the initial state comes as ADDED events, ended by a bookmark. */
  sendInitialEvents?: boolean;
  /** With `sendInitialEvents`: `NotOlderThan` (the only value the apiserver accepts then). */
  resourceVersionMatch?: "NotOlderThan";
  /** Client idle bound: no byte for this long (ms) ends the stream with WatchIdleError; 0: none. */
  idleTimeoutMs?: number;
  /**
   * Whether silence past `idleTimeoutMs` is a failure of the path (default true): the stream
   * should have carried bytes (the apiserver sends this watch bookmarks), so its connection is
   * presumed dead, the connection health is told and pooled connections are dropped. False for a
   * stream that may rightly be quiet (an apiserver that sends no bookmarks): it is only ended,
   * and reopening it is the liveness check.
   */
  idleIsFailure?: boolean;
  /**
   * Bound on the response headers (ms); default `idleTimeoutMs`. Past it the watch ends with
   * WatchIdleError, a failure of the path. kube-apiserver answers a watch's headers at once (up
   * to ~3 s for a resourceVersion its watch cache has not reached yet), so a short bound makes the
   * reopening of a quiet stream a quick liveness check.
   */
  headersTimeoutMs?: number;
  /** Called when the response headers arrive (the apiserver accepted the watch). Must not throw. */
  onOpen?: () => void;
}

/** Patch flavours and their content types (Kubernetes API concepts, "Patch operations"). */
export const PATCH_CONTENT_TYPES = {
  json: "application/json-patch+json",
  merge: "application/merge-patch+json",
  strategic: "application/strategic-merge-patch+json",
  apply: "application/apply-patch+yaml",
} as const;

/** Options of a patch call. */
export interface PatchOptions extends CallOptions {
  /** Patch flavour; default `merge`. */
  type?: keyof typeof PATCH_CONTENT_TYPES;
  /** Field manager name (required by the apiserver for `apply`). */
  fieldManager?: string;
  /** Server-side apply: take ownership of conflicting fields. */
  force?: boolean;
  /** e.g. `status`. */
  subresource?: string;
}

/** Options of a create or update call. */
export interface WriteOptions extends CallOptions {
  /** Field manager recorded in managedFields. */
  fieldManager?: string;
  /** e.g. `status` (an update of the status subresource). */
  subresource?: string;
  /** Server-side dry run (`dryRun=All`): admission and validation run, nothing is stored. */
  dryRun?: boolean;
}

/** Options of a delete call (DeleteOptions). */
export interface DeleteOptions extends CallOptions {
  /** How dependents are deleted (garbage collector); the apiserver's default per resource when unset. */
  propagationPolicy?: "Foreground" | "Background" | "Orphan";
  /** Seconds before the object is deleted for good (Pods: termination grace); 0 = at once. */
  gracePeriodSeconds?: number;
  /** Delete only if the object still has this uid / resourceVersion (else 409 Conflict). */
  preconditions?: { uid?: string; resourceVersion?: string };
}

interface RawRequest {
  method: string;
  path: string;
  query?: Record<string, string | number | boolean | undefined>;
  body?: unknown;
  contentType?: string;
  signal?: AbortSignal;
  /** Watch: no request timeout, body is streamed. */
  stream?: boolean;
  /** No retry of any kind (the health probe). */
  noRetry?: boolean;
}

const IDEMPOTENT = new Set(["GET", "HEAD"]);

/** The gate of a client with `retryAfterGate: false`: always open. */
const NO_GATE: Pick<RetryAfterGate, "closedForMs" | "acquire" | "release"> = {
  closedForMs: () => 0,
  acquire: () => Promise.resolve(),
  release: () => {},
};

/**
 * When the path to the apiserver recovers, a request sent before the one that got through and
 * still without an answer after this long (ms) is presumed to sit on a dead connection and is
 * ended (see the module doc). An apiserver answers all but the largest list pages well within a
 * second, and a request ended by mistake is only sent again.
 */
export const STALLED_REQUEST_MIN_MS = 1_000;

/** A request or watch in flight, for the stall rule. Times in ms since the epoch. */
interface InFlight {
  ctl: AbortController;
  sentAtMs: number;
  /** Last time bytes came (watches: headers, then every chunk). */
  lastByteMs: number;
}

/** Why the client ended a request: the stall rule (see the module doc). */
class StalledRequestError extends Error {
  constructor() {
    super("no answer on a connection presumed dead: a later request to the apiserver got through");
    this.name = "StalledRequestError";
  }
}

/** Whether an abort reason is a timeout (AbortSignal.timeout's DOMException). */
const isTimeout = (reason: unknown) =>
  reason instanceof DOMException && reason.name === "TimeoutError";

function parseRetryAfter(h: string | null): number | undefined {
  if (!h) return undefined;
  const n = Number(h);
  if (Number.isFinite(n)) return Math.max(0, n);
  const t = Date.parse(h);
  return Number.isNaN(t) ? undefined : Math.max(0, (t - Date.now()) / 1000);
}

/**
 * The REST client. One instance per apiserver connection; safe for concurrent use.
 * All methods throw {@link ApiError} for error answers, `ConfigError` when the credential cannot be
 * produced, and the signal's reason when aborted.
 */
export class KubeClient {
  /** The resolved connection. */
  readonly config: ClusterConfig;
  /** The proxy requests to the apiserver go through, or direct (see proxy.ts). */
  readonly proxy: ProxyChoice;
  /** The environment's proxy variables this client was given (or took). */
  readonly proxyEnvironment: ProxyEnvironment;
  #creds: CredentialProvider;
  #opts:
    & Required<
      Omit<
        ClientOptions,
        | "onRequest"
        | "writeFence"
        | "onSendWrite"
        | "retryAfterGate"
        | "health"
        | "proxyEnvironment"
      >
    >
    & Pick<ClientOptions, "onRequest" | "onSendWrite">;
  #bucket: TokenBucket;
  #host: string;
  #fence?: WriteFence;
  #gate: Pick<RetryAfterGate, "closedForMs" | "acquire" | "release">;
  /** Health of the path to the apiserver (see {@link ConnectionHealth}). */
  readonly health: ConnectionHealth;
  #ownsHealth: boolean;
  #unsubscribe: (() => void)[] = [];
  /** Requests sent and not yet answered (headers). */
  #requests = new Set<InFlight>();
  /** Watch streams open (headers received). */
  #watches = new Set<InFlight>();
  #fileCheckTimer?: ReturnType<typeof setTimeout>;

  /**
   * A client of the apiserver `config` names; no request is sent until a verb is called.
   * @param config the resolved connection ({@link loadClusterConfig})
   * @param opts see {@link ClientOptions}
   */
  constructor(config: ClusterConfig, opts: ClientOptions = {}) {
    this.config = config;
    this.proxyEnvironment = opts.proxyEnvironment ?? takeProxyEnvironment();
    try {
      this.proxy = chooseProxy(config.server, config.proxyUrl, this.proxyEnvironment);
    } catch (err) {
      throw new ConfigError(`${config.source}: ${(err as Error).message}`);
    }
    this.#creds = new CredentialProvider(config, Date.now, {
      proxy: denoProxy(this.proxy),
      execEnv: this.proxyEnvironment.raw,
    });
    this.health = opts.health ?? new ConnectionHealth();
    this.#ownsHealth = !opts.health;
    this.health.setProbe((signal) => this.#probe(signal));
    this.#unsubscribe.push(
      this.health.onRecovered((r) => this.#endStalled(r)),
      this.#creds.onTlsChange((c) =>
        this.#restartWatches(
          new WatchRestartError("credentials", `${c.changed.join(", ")} changed`),
        )
      ),
    );
    this.#opts = {
      userAgent: opts.userAgent ?? "appservice-operator",
      qps: opts.qps ?? 0,
      burst: opts.burst ?? Math.max(1, Math.ceil((opts.qps ?? 0) * 2)),
      maxRetries: opts.maxRetries ?? 5,
      requestTimeoutMs: opts.requestTimeoutMs ?? 30_000,
      maxThrottleWaitMs: opts.maxThrottleWaitMs ?? MAX_THROTTLE_WAIT_MS,
      onRequest: opts.onRequest,
      onSendWrite: opts.onSendWrite,
    };
    this.#bucket = new TokenBucket(this.#opts.qps, this.#opts.burst);
    this.#host = new URL(config.server).host;
    this.#fence = opts.writeFence;
    this.#gate = opts.retryAfterGate === false ? NO_GATE : new RetryAfterGate();
  }

  /** Releases the HTTP clients, and the health tracker when it is this client's own. */
  close(): void {
    for (const u of this.#unsubscribe.splice(0)) u();
    clearTimeout(this.#fileCheckTimer);
    this.#creds.close();
    if (this.#ownsHealth) this.health.close();
  }

  /**
   * Reads the credential files again now (see credentials.ts); resolves true when the CA or
   * client certificate changed (the watches are then restarted with the new material).
   */
  checkCredentialFiles(): Promise<boolean> {
    return this.#creds.checkFiles();
  }

  /** Why the last re-read of a credential file was not adopted, if it was not. */
  get credentialFileError(): string | undefined {
    return this.#creds.lastFileError;
  }

  /** A request got no answer: tell the health tracker, and check the credential files soon. */
  #failed(err: unknown): void {
    this.health.failed(err);
    this.#creds.recheckAfterFailure();
  }

  /** The stall rule at a recovery (see the module doc). */
  #endStalled(r: Recovery): void {
    // Idle pooled connections may have died with the path (no FIN, no RST): a later request
    // taken from the pool would wait on one until its timeout. New requests get new ones.
    this.#creds.resetConnections();
    const now = Date.now();
    for (const e of this.#requests) {
      if (e.sentAtMs < r.sentAtMs && now - e.sentAtMs >= STALLED_REQUEST_MIN_MS) {
        e.ctl.abort(new StalledRequestError());
      }
    }
    const since = new Date(r.failingSinceMs).toISOString();
    for (const w of this.#watches) {
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

  #restartWatches(reason: WatchRestartError): void {
    for (const w of this.#watches) w.ctl.abort(reason);
  }

  /**
   * Checks the credential files every {@link CREDENTIAL_FILE_CHECK_MS} while a watch is open:
   * requests check them anyway, but a replica at rest sends none, and its watches must move to
   * rotated material too.
   */
  #armFileCheck(): void {
    if (!this.#creds.hasFiles || this.#fileCheckTimer !== undefined) return;
    if (this.#watches.size === 0) return;
    const dueMs = this.#creds.lastCheckMs + CREDENTIAL_FILE_CHECK_MS - Date.now();
    this.#fileCheckTimer = setTimeout(async () => {
      this.#fileCheckTimer = undefined;
      if (this.#watches.size === 0) return;
      await this.#creds.checkFiles();
      this.#armFileCheck();
    }, Math.max(0, dueMs));
  }

  /** One `GET /version` without retries: the health probe. */
  async #probe(signal: AbortSignal): Promise<void> {
    const resp = await this.#send({ method: "GET", path: "/version", signal, noRetry: true });
    await resp.body?.cancel();
  }

  /**
   * Sets (or with `undefined` removes) the {@link WriteFence} every later write is checked with,
   * e.g. the Lease holder's fence once leader election starts. The Lease's own client must not
   * have one.
   */
  setWriteFence(fence: WriteFence | undefined): void {
    this.#fence = fence;
  }

  /**
   * Milliseconds until the Retry-After gate opens (0 when open): how long any request of this
   * client would wait now.
   */
  throttledForMs(): number {
    return this.#gate.closedForMs();
  }

  /**
   * Takes a slot of the Retry-After gate. A wait longer than `maxThrottleWaitMs` is not taken: it
   * throws a client-side 429 with the remaining wait (nothing is sent).
   */
  #acquireGate(label: string, signal?: AbortSignal): Promise<void> {
    return this.#gate.acquire(this.#opts.maxThrottleWaitMs, (waitMs) =>
      new ApiError(429, {
        kind: "Status",
        status: "Failure",
        reason: "TooManyRequests",
        code: 429,
        message: `not sent: the apiserver asked this client to wait ${
          Math.ceil(waitMs / 1000)
        } s more (Retry-After)`,
      }, { retryAfterSeconds: waitMs / 1000, request: label }), signal);
  }

  /**
   * Sends one request with retries (see module doc) and returns the successful Response.
   * @throws ApiError for a non-2xx answer after retries.
   */
  async #send(req: RawRequest): Promise<Response> {
    const url = new URL(this.config.server + req.path);
    for (const [k, v] of Object.entries(req.query ?? {})) {
      if (v !== undefined && v !== "") url.searchParams.set(k, String(v));
    }
    const label = `${req.method} ${req.path}`;
    const body = req.body === undefined ? undefined : JSON.stringify(req.body);
    const isWrite = !IDEMPOTENT.has(req.method);
    const maxRetries = req.noRetry ? 0 : this.#opts.maxRetries;
    let retriedAuth = false;
    let retriedStalled = false;
    for (let attempt = 0;; attempt++) {
      await this.#bucket.wait(req.signal);
      let cred: Awaited<ReturnType<CredentialProvider["get"]>> | undefined;
      // The gate again after the credential: another request may have met a 429 meanwhile.
      for (let i = 0; i < 100 && !cred; i++) {
        await this.#acquireGate(label, req.signal);
        try {
          cred = await this.#creds.get(req.signal);
        } catch (err) {
          this.#gate.release();
          throw err;
        }
        if (this.#gate.closedForMs() > 0) {
          this.#gate.release();
          cred.release();
          cred = undefined;
        }
      }
      if (!cred) throw new Error(`${label}: the Retry-After gate kept closing`);
      // Our own audit ID (the apiserver keeps a client's Audit-ID: k8s.io/apiserver
      // pkg/endpoints/filters/with_auditid.go), so that client logs and the audit log meet even
      // when no answer comes.
      const auditId = crypto.randomUUID();
      const headers: Record<string, string> = {
        "Accept": "application/json",
        "User-Agent": this.#opts.userAgent,
        "Audit-ID": auditId,
      };
      if (cred.authorization) headers["Authorization"] = cred.authorization;
      if (body !== undefined) headers["Content-Type"] = req.contentType ?? "application/json";
      // `own` ends the request under the stall rule (see #endStalled).
      const own = new AbortController();
      const signals: AbortSignal[] = [own.signal];
      if (req.signal) signals.push(req.signal);
      const timeout = req.stream ? undefined : AbortSignal.timeout(this.#opts.requestTimeoutMs);
      if (timeout) signals.push(timeout);
      const fence = isWrite ? this.#fence : undefined;
      // Writes in flight stop with the fence; and once more just after fetch() (below).
      const late = fence ? new AbortController() : undefined;
      if (fence?.signal) signals.push(fence.signal);
      if (late) signals.push(late.signal);
      // The write fence, synchronously: from here to fetch() nothing awaits (S13).
      try {
        fence?.check(req.method, req.path);
      } catch (err) {
        this.#gate.release();
        cred.release();
        throw err;
      }
      const started = performance.now();
      if (isWrite && this.#opts.onSendWrite) {
        try {
          this.#opts.onSendWrite({
            method: req.method,
            path: req.path,
            startedAtMs: performance.timeOrigin + started,
            auditId,
          });
        } catch { /* logs must not break requests */ }
      }
      const entry: InFlight = { ctl: own, sentAtMs: Date.now(), lastByteMs: 0 };
      this.#requests.add(entry);
      let resp: Response;
      try {
        const sending = fetch(url, {
          method: req.method,
          headers,
          body,
          signal: AbortSignal.any(signals),
          client: cred.httpClient,
        });
        // The request is written when the event loop next runs its connection; should this
        // process stop before that (SIGSTOP, a long pause), the code after the stop sees the
        // fence closed and cancels it, and an unwritten request is never sent.
        if (fence && late) {
          queueMicrotask(() => {
            try {
              fence.check(req.method, req.path);
            } catch (err) {
              late.abort(err);
            }
          });
        }
        resp = await sending;
      } catch (err) {
        this.#requests.delete(entry);
        this.#gate.release();
        cred.release();
        this.#record(req, "<error>", started, auditId);
        if (req.signal?.aborted) {
          // The caller's own time bound (e.g. a Lease renewal's deadline) ran out without an
          // answer: that is a failure of the path; a shutdown is not.
          if (isTimeout(req.signal.reason)) {
            this.#failed(new Error(`${label}: no answer before the caller's deadline`));
            this.#creds.resetConnections();
          }
          throw req.signal.reason;
        }
        // Stopped by the write fence (S13): nothing to say about the path.
        if (late?.signal.aborted) throw late.signal.reason;
        if (fence?.signal?.aborted) throw fence.signal.reason;
        if (own.signal.aborted) {
          // The stall rule ended it: it sat on a dead connection while a later request got an
          // answer. A watch is resumed by its consumer; a read is sent again once, a write fails
          // as at its timeout (it may or may not have reached the apiserver).
          if (req.stream) {
            throw new WatchRestartError("stalled", `${label}: ${own.signal.reason.message}`);
          }
          if (IDEMPOTENT.has(req.method) && !retriedStalled) {
            retriedStalled = true;
            attempt--;
            continue;
          }
          throw new Error(`${label}: ${own.signal.reason.message}`, { cause: own.signal.reason });
        }
        // The HTTP client was closed between get() and fetch() (the provider was closed): the
        // request never left, so it is safe to send again whatever its method.
        if (err instanceof Deno.errors.BadResource && attempt < maxRetries) continue;
        this.#failed(
          timeout?.aborted
            ? new Error(`${label}: no answer within ${this.#opts.requestTimeoutMs / 1000} s`)
            : err,
        );
        // No answer within the request timeout: the pooled connections may be dead (a network
        // path that drops packets); the next attempt, and every later request, gets a new one
        // (see resetConnections).
        if (timeout?.aborted) this.#creds.resetConnections();
        if (IDEMPOTENT.has(req.method) && !req.stream && attempt < maxRetries) {
          await sleep(Math.min(200 * 2 ** attempt, 5_000), req.signal);
          continue;
        }
        throw new UnreachableError(
          label,
          this.#host,
          this.proxy.url ? describeProxy(this.proxy) : undefined,
          networkErrorReason(err),
          { cause: err },
        );
      }
      this.#requests.delete(entry);
      cred.release();
      this.health.succeeded(entry.sentAtMs);
      const retryAfter = parseRetryAfter(resp.headers.get("Retry-After"));
      const throttled = resp.status === 429 || (resp.status === 503 && retryAfter !== undefined);
      this.#gate.release(
        throttled && retryAfter !== undefined
          ? Math.min(retryAfter, MAX_RETRY_AFTER_SECONDS)
          : undefined,
      );
      this.#record(req, String(resp.status), started, auditId, retryAfter);
      if (resp.ok) return resp;
      const text = await resp.text().catch(() => "");
      let status: Status | undefined;
      try {
        const parsed = JSON.parse(text);
        if (parsed?.kind === "Status") status = parsed;
      } catch { /* not JSON */ }
      // A plain-text body (e.g. "404 page not found\n" for a type the apiserver does not serve).
      if (!status) {
        status = { message: text.trim().slice(0, 200) || resp.statusText, code: resp.status };
      }
      if (resp.status === 401 && !retriedAuth) {
        retriedAuth = true;
        this.#creds.invalidate();
        continue;
      }
      const retryable = throttled ||
        (IDEMPOTENT.has(req.method) && !req.stream && resp.status >= 500 && resp.status !== 501);
      // A Retry-After longer than the gate's bound goes back to the caller at once.
      const waitable = retryAfter === undefined ||
        retryAfter * 1000 <= this.#opts.maxThrottleWaitMs;
      if (retryable && waitable && attempt < maxRetries) {
        // With a Retry-After the gate at the top of the loop waits it out (without a gate, this
        // request alone waits it); without one, back off.
        if (retryAfter === undefined) {
          await sleep(Math.max(Math.min(200 * 2 ** attempt, 5_000), 50), req.signal);
        } else if (this.#gate === NO_GATE || retryAfter < 0.05) {
          await sleep(Math.max(retryAfter * 1000, 50), req.signal);
        }
        continue;
      }
      // The Lease-holder admission policy's refusal is a fenced write, not an API error.
      throw fencedByServer(
        new ApiError(resp.status, status, { retryAfterSeconds: retryAfter, request: label }),
      );
    }
  }

  #record(
    req: RawRequest,
    code: string,
    startedMs: number,
    auditId: string,
    retryAfterSeconds?: number,
  ): void {
    if (!this.#opts.onRequest) return;
    try {
      this.#opts.onRequest({
        method: req.method,
        path: req.path,
        code,
        host: this.#host,
        startedAtMs: performance.timeOrigin + startedMs,
        durationSeconds: (performance.now() - startedMs) / 1000,
        retryAfterSeconds,
        auditId,
      });
    } catch { /* metrics must not break requests */ }
  }

  async #json<T>(req: RawRequest): Promise<T> {
    const resp = await this.#send(req);
    return await resp.json() as T;
  }

  /** GET any path (e.g. `/version`, `/readyz`) and decode JSON. */
  raw<T>(path: string, signal?: AbortSignal): Promise<T> {
    return this.#json<T>({ method: "GET", path, signal });
  }

  /** Reads one object. @throws ApiError 404 NotFound when absent. */
  get<T extends KubeObject>(rt: ResourceType, name: string, o: CallOptions = {}): Promise<T> {
    return this.#json<T>({ method: "GET", path: resourcePath(rt, o.namespace, name), ...o });
  }

  /** Lists one page. Without `namespace`, lists across all namespaces. */
  list<T extends KubeObject>(rt: ResourceType, o: ListOptions = {}): Promise<ObjectList<T>> {
    return this.#json<ObjectList<T>>({
      method: "GET",
      path: resourcePath(rt, o.namespace),
      signal: o.signal,
      query: {
        labelSelector: o.labelSelector,
        fieldSelector: o.fieldSelector,
        limit: o.limit,
        continue: o.continue,
        resourceVersion: o.resourceVersion,
        resourceVersionMatch: o.resourceVersionMatch,
      },
    });
  }

  /**
   * Lists page by page (`limit` items each, default 500, as client-go's pager) and hands each page
   * to `onPage` as it arrives, fetching the next only once `onPage` has returned (or its promise
   * resolved) and the page is let go: a caller that caches what it needs of a page and drops the
   * rest holds one page's decoded answer at a time, never the whole list. Every page belongs to
   * the snapshot of the first (its `metadata.resourceVersion`; later pages are read with
   * `continue` only). At most 100,000 pages. Resolves that resourceVersion and the counts.
   *
   * A continue token expires when etcd compacts past the snapshot of the first page (every 5 min
   * by default; more often under load): a later page is answered 410 Gone. Starting again from
   * the first page could fail the same way for ever while compaction goes on, so, as client-go's
   * pager does (`FullListIfExpired`), the list is then read once more in one piece (no `limit`,
   * the caller's `resourceVersion`): `onExpired` is called first (the pages already handed over
   * belong to an older snapshot than what follows: a store replacing its contents starts over),
   * then `onPage` once with the whole list. The counts and the resourceVersion are then those of
   * the full list; `expired` says it happened.
   * @param onExpired told (with the 410) when a continue token expired, before the full list
   * @throws ApiError 410 when the first page, or the full list, is itself answered 410 (the
   *   caller's resourceVersion is gone); what `onPage` throws.
   */
  async listPages<T extends KubeObject>(
    rt: ResourceType,
    o: ListOptions,
    onPage: (page: ObjectList<T>) => void | Promise<void>,
    onExpired?: (err: ApiError) => void,
  ): Promise<{ resourceVersion: string; pages: number; items: number; expired: boolean }> {
    let cont: string | undefined;
    let rv: string | undefined;
    let pages = 0;
    let items = 0;
    do {
      let page: ObjectList<T> | undefined;
      try {
        page = await this.list<T>(rt, {
          ...o,
          limit: o.limit ?? 500,
          continue: cont,
          resourceVersion: cont ? undefined : o.resourceVersion,
          resourceVersionMatch: cont ? undefined : o.resourceVersionMatch,
        });
      } catch (err) {
        if (!cont || !(err instanceof ApiError) || !isGone(err)) throw err;
        onExpired?.(err);
        let full: ObjectList<T> | undefined = await this.list<T>(rt, {
          ...o,
          limit: undefined,
          continue: undefined,
        });
        const n = full.items?.length ?? 0;
        const fullRv = full.metadata?.resourceVersion ?? "";
        await onPage(full);
        full = undefined;
        return { resourceVersion: fullRv, pages: pages + 1, items: n, expired: true };
      }
      pages++;
      rv ??= page.metadata?.resourceVersion ?? "";
      items += page.items?.length ?? 0;
      cont = page.metadata?.continue || undefined;
      await onPage(page);
      // Let this page go before the next request is awaited (a suspended async function keeps
      // what its variables still point at).
      page = undefined;
    } while (cont && pages < 100_000);
    return { resourceVersion: rv ?? "", pages, items, expired: false };
  }

  /**
   * Lists every page ({@link listPages}) and returns all items with the resourceVersion of the
   * snapshot they belong to (the first page's, or the full list's after an expired continue
   * token).
   * @throws ApiError 410 when the caller's resourceVersion is gone.
   */
  async listAll<T extends KubeObject>(
    rt: ResourceType,
    o: ListOptions = {},
  ): Promise<{ items: T[]; resourceVersion: string; pages: number }> {
    let items: T[] = [];
    const r = await this.listPages<T>(rt, o, (page) => {
      for (const it of page.items ?? []) items.push(it);
    }, () => {
      items = [];
    });
    return { items, resourceVersion: r.resourceVersion, pages: r.pages };
  }

  /** Creates an object in `namespace` (or the object's own). @throws ApiError 409 AlreadyExists. */
  create<T extends KubeObject>(rt: ResourceType, obj: T, o: WriteOptions = {}): Promise<T> {
    const ns = o.namespace ?? obj.metadata?.namespace;
    return this.#json<T>({
      method: "POST",
      path: resourcePath(rt, ns),
      body: obj,
      signal: o.signal,
      query: { fieldManager: o.fieldManager, dryRun: o.dryRun ? "All" : undefined },
    });
  }

  /** Replaces an object (PUT); `metadata.resourceVersion` makes it conditional (409 Conflict). */
  update<T extends KubeObject>(rt: ResourceType, obj: T, o: WriteOptions = {}): Promise<T> {
    const ns = o.namespace ?? obj.metadata?.namespace;
    return this.#json<T>({
      method: "PUT",
      path: resourcePath(rt, ns, obj.metadata?.name ?? "", o.subresource),
      body: obj,
      signal: o.signal,
      query: { fieldManager: o.fieldManager },
    });
  }

  /**
   * Patches an object. `type` picks the content type; `apply` is server-side apply and needs
   * `fieldManager`. A JSON patch `test` op gives a precondition (422 Invalid... when it fails).
   */
  patch<T extends KubeObject>(
    rt: ResourceType,
    name: string,
    patch: unknown,
    o: PatchOptions = {},
  ): Promise<T> {
    const type = o.type ?? "merge";
    return this.#json<T>({
      method: "PATCH",
      path: resourcePath(rt, o.namespace, name, o.subresource),
      body: patch,
      contentType: PATCH_CONTENT_TYPES[type],
      signal: o.signal,
      query: {
        fieldManager: o.fieldManager,
        force: type === "apply" && o.force ? true : undefined,
      },
    });
  }

  /** Deletes an object; answers the object (with deletionTimestamp) or a Status. */
  delete(rt: ResourceType, name: string, o: DeleteOptions = {}): Promise<KubeObject | Status> {
    const body: Record<string, unknown> = { apiVersion: "v1", kind: "DeleteOptions" };
    if (o.propagationPolicy) body.propagationPolicy = o.propagationPolicy;
    if (o.gracePeriodSeconds !== undefined) body.gracePeriodSeconds = o.gracePeriodSeconds;
    if (o.preconditions) body.preconditions = o.preconditions;
    return this.#json({
      method: "DELETE",
      path: resourcePath(rt, o.namespace, name),
      body,
      signal: o.signal,
    });
  }

  /**
   * Opens a watch and yields its events until the server ends the stream (normal at
   * `timeoutSeconds`). ERROR frames are thrown as ApiError (410: relist); a silent stream past
   * `idleTimeoutMs` throws WatchIdleError. Breaking out of the loop closes the connection.
   * {@link watchBatches} flattened; see there.
   */
  async *watch<T extends KubeObject>(
    rt: ResourceType,
    o: WatchOptions = {},
  ): AsyncGenerator<ObjectWatchEvent<T>> {
    for await (const batch of this.watchBatches<T>(rt, o)) {
      for (const ev of batch) yield ev;
    }
  }

  /**
   * Opens a watch and yields its events in batches (every frame of one chunk of the body, in
   * order; see {@link decodeWatchBatches}) until the server ends the stream (normal at
   * `timeoutSeconds`). ERROR frames are thrown as ApiError (410: relist) after the events before
   * them; a silent stream past `idleTimeoutMs` throws WatchIdleError. Breaking out of the loop
   * closes the connection. Bulk consumers (the reflector) use this to pay one async step per
   * chunk instead of one per event.
   *
   * The idle bound also covers the wait for the response headers (a request sent into a stalled
   * connection otherwise waits forever: watches have no request timeout); a WatchList
   * (`sendInitialEvents`) waits for its headers at most the request timeout, as a list would, and
   * then fails with a plain Error (the apiserver answers only once it can serve a consistent
   * state: one whose etcd stalls does not answer at all). A WatchIdleError
   * drops the pooled connections ({@link CredentialProvider.resetConnections}) so that the next
   * watch does not go into a pooled connection on the same stalled path. A watch ended by the
   * client throws {@link WatchRestartError} (see the module doc): resume it at once.
   */
  async *watchBatches<T extends KubeObject>(
    rt: ResourceType,
    o: WatchOptions = {},
  ): AsyncGenerator<ObjectWatchEvent<T>[]> {
    const ctl = new AbortController();
    const onAbort = () => ctl.abort(o.signal?.reason);
    o.signal?.addEventListener("abort", onAbort, { once: true });
    const idleMs = o.idleTimeoutMs ?? 0;
    // A WatchList's headers come only once the apiserver has the state to send (its watch cache
    // caught up with etcd's current revision), as a list's answer does: that wait is bounded like
    // a list, by the request timeout, and failing it is a failed request, not an idle watch.
    const listMs = this.#opts.requestTimeoutMs;
    const noInitialEvents = o.sendInitialEvents && (idleMs === 0 || listMs < idleMs)
      ? new Error(
        `GET ${resourcePath(rt, o.namespace)} (watch list): no answer within ${listMs / 1000} s`,
      )
      : undefined;
    const headersMs = noInitialEvents ? listMs : (o.headersTimeoutMs ?? idleMs);
    const headersTimer = headersMs > 0
      ? setTimeout(() => ctl.abort(noInitialEvents ?? new WatchIdleError(headersMs)), headersMs)
      : undefined;
    let stream: InFlight | undefined;
    try {
      const resp = await this.#send({
        method: "GET",
        path: resourcePath(rt, o.namespace),
        signal: ctl.signal,
        stream: true,
        query: {
          watch: true,
          labelSelector: o.labelSelector,
          fieldSelector: o.fieldSelector,
          resourceVersion: o.resourceVersion,
          allowWatchBookmarks: o.allowWatchBookmarks,
          timeoutSeconds: o.timeoutSeconds,
          sendInitialEvents: o.sendInitialEvents,
          resourceVersionMatch: o.resourceVersionMatch,
        },
      });
      clearTimeout(headersTimer);
      if (!resp.body) return;
      const s: InFlight = stream = { ctl, sentAtMs: Date.now(), lastByteMs: Date.now() };
      this.#watches.add(s);
      this.#armFileCheck();
      try {
        o.onOpen?.();
      } catch { /* reporting must not break the stream */ }
      // Bytes on this stream show that its connection is alive, not that new ones work: they keep
      // it from the stall rule but do not end a failing episode (a request's answer does).
      yield* decodeWatchBatches<T>(resp.body, idleMs, () => ctl.abort(), () => {
        s.lastByteMs = Date.now();
      });
    } catch (err) {
      if (o.signal?.aborted) throw o.signal.reason;
      if (ctl.signal.reason instanceof WatchRestartError) throw ctl.signal.reason;
      if (noInitialEvents && ctl.signal.reason === noInitialEvents) {
        // As a list without an answer within its timeout (see #send): the pooled connections
        // may be dead.
        this.#failed(noInitialEvents);
        this.#creds.resetConnections();
        throw noInitialEvents;
      }
      if (err instanceof WatchIdleError) {
        // Silent past its bound (see the reflector: the apiserver's bookmark cadence).
        // No headers within the bound is a failure whatever the stream would carry; so is
        // silence while other requests get no answer either.
        if (o.idleIsFailure !== false || !stream || !this.health.healthy) {
          this.#failed(err);
          this.#creds.resetConnections();
        }
      } else if (stream && !(err instanceof ApiError)) {
        // The stream broke mid-way (a connection reset, a cut link).
        this.#failed(err);
      }
      throw err;
    } finally {
      clearTimeout(headersTimer);
      o.signal?.removeEventListener("abort", onAbort);
      if (stream) this.#watches.delete(stream);
      if (this.#watches.size === 0) {
        clearTimeout(this.#fileCheckTimer);
        this.#fileCheckTimer = undefined;
      }
      ctl.abort();
    }
  }
}
