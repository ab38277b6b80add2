/**
 * A thin Kubernetes REST client on Deno's `fetch` and `Deno.createHttpClient`: the verbs get, list
 * (one page or all pages), create, update, patch (JSON, merge, strategic merge, server-side apply),
 * delete and watch, typed errors from `metav1.Status` and for requests without an answer
 * (`NetworkError`), `Retry-After` for 429/503, retries of idempotent reads, an optional
 * client-side token bucket, a write fence, and a request hook for metrics.
 *
 * Layers (docs/design/client.md): this module holds the verbs and the watch; params.ts builds
 * their queries; retry.ts decides what is sent again and holds the token bucket, the Retry-After
 * gate (client-wide, docs/scenarios.md S16) and the credential; transport.ts sends one attempt,
 * checks the write fence at the moment of sending (docs/scenarios.md S13) and classifies what
 * happened; watch.ts decodes watch streams.
 *
 * Connection health ({@link ConnectionHealth}): every request reports whether an answer came.
 * When the path to the apiserver recovers after failures, what still waits on a dead connection
 * is ended and sent again (the stall rule, docs/scenarios.md S14): a request sent before the one
 * that got through, still without an answer after {@link STALLED_REQUEST_MIN_MS} (a read is sent
 * again once at no cost to its retries; a write fails with a `NetworkError` of kind
 * `stalled`, as it would at its timeout), and a watch that has received nothing since the
 * failures began ({@link WatchRestartError} `stalled`: its consumer resumes it at once). A change
 * of the CA or client certificate files (see credentials.ts) ends every watch the same way
 * (`credentials`), so that they reconnect with the new material.
 *
 * @module
 */
import type { ObjectMeta } from "kubernetes-types/meta/v1.d.ts";
import type { ClusterConfig } from "./config.ts";
import { ConnectionHealth, type Recovery } from "./connection.ts";
import { CREDENTIAL_FILE_CHECK_MS, CredentialProvider } from "./credentials.ts";
import { type ApiError, ConfigError, isUnreachable, type Status } from "./errors.ts";
import { listInPages } from "./pager.ts";
import {
  type CallOptions,
  deleteBody,
  type DeleteOptions,
  type ListOptions,
  listQuery,
  PATCH_CONTENT_TYPES,
  type PatchOptions,
  patchQuery,
  type RawRequest,
  type WatchOptions,
  type WriteOptions,
  writeQuery,
} from "./params.ts";
import {
  chooseProxy,
  denoProxy,
  describeProxy,
  type ProxyChoice,
  type ProxyEnvironment,
  takeProxyEnvironment,
} from "./proxy.ts";
import { resourcePath, type ResourceType } from "./resources.ts";
import { type Gate, NO_GATE, Sender } from "./retry.ts";

import { RetryAfterGate, TokenBucket } from "./throttle.ts";
import {
  METADATA_ACCEPT,
  type OutgoingRequest,
  type RequestInfo,
  type RequestScope,
  Transport,
  type WriteFence,
} from "./transport.ts";
import { type ObjectWatchEvent, openWatch, type WatchDeps, WatchRestartError } from "./watch.ts";

export {
  type CallOptions,
  type DeleteOptions,
  type ListOptions,
  PATCH_CONTENT_TYPES,
  type PatchOptions,
  type WatchOptions,
  type WriteOptions,
} from "./params.ts";
export { MAX_RETRY_AFTER_SECONDS } from "./retry.ts";
export {
  METADATA_ACCEPT,
  type RequestInfo,
  type RequestScope,
  STALLED_REQUEST_MIN_MS,
  type WriteFence,
} from "./transport.ts";

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
  metadata: {
    resourceVersion?: string;
    continue?: string;
    remainingItemCount?: number;
    /** Set when a shard selector was applied (`ShardedListAndWatch`): the selector echoed. */
    shardInfo?: { selector?: string };
  };
  /** The objects of this page. */
  items: T[];
}

/**
 * What the caller of a write reads of a successful answer ({@link ResponseOptions.response}):
 * - `full` (the default): the object the apiserver answered, decoded;
 * - `metadata`: only its metadata: the apiserver is asked for a `PartialObjectMetadata`
 *   ({@link METADATA_ACCEPT}), so it encodes, and the client receives and decodes, no spec and no
 *   status; the call resolves a {@link PartialObject} (a delete answered with a `Status` resolves
 *   that `Status`);
 * - `none`: nothing: the apiserver is asked for the metadata alone as for `metadata`, and the
 *   body is read to its end (so the connection serves the next request) but not decoded; the call
 *   resolves `undefined`.
 *
 * An error answer (non-2xx) is decoded in full whatever this says: the call throws the same
 * {@link ApiError} as with `full`.
 */
export type WriteResponse = "full" | "metadata" | "none";

/** The option of the write verbs (create, update, patch, delete) that says what is read. */
export interface ResponseOptions {
  /** What of a successful answer is read; default `full` (see {@link WriteResponse}). */
  response?: WriteResponse;
}

/**
 * The answer of a write made with `response: "metadata"`: a `PartialObjectMetadata`
 * (meta.k8s.io/v1) carrying the written object's metadata (name, namespace, uid,
 * resourceVersion, generation, labels, annotations, ownerReferences, finalizers, managedFields...).
 */
export interface PartialObject extends KubeObject {
  /** The written object's metadata. */
  metadata: ObjectMeta;
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
   * Called for every attempt right before it is handed to `fetch`: a {@link RequestScope} to
   * call `fetch` in and to tell how the attempt ended, or undefined for none (tracing: the
   * runtime's `requestSpan` makes a span of the request, child of the reconcile's). Must not
   * throw; default none.
   */
  requestScope?: (req: Pick<RequestInfo, "method" | "path">) => RequestScope | undefined;
  /**
   * Called synchronously right before a write (POST, PUT, PATCH, DELETE) is handed to `fetch`,
   * after the write fence passed it; `durationSeconds`, `code` and `retryAfterSeconds` are not
   * known yet. For logs that must survive the process stopping right after
   * (docs/scenarios.md S13). Must not throw.
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
 * The REST client. One instance per apiserver connection; safe for concurrent use.
 * All methods throw {@link ApiError} for error answers, `NetworkError` (mostly its
 * `UnreachableError`) when no answer came, `ConfigError` when the credential cannot be produced,
 * and the signal's reason when aborted.
 */
export class KubeClient {
  /** The resolved connection. */
  readonly config: ClusterConfig;
  /** The proxy requests to the apiserver go through, or direct (see proxy.ts). */
  readonly proxy: ProxyChoice;
  /** The environment's proxy variables this client was given (or took). */
  readonly proxyEnvironment: ProxyEnvironment;
  /** Health of the path to the apiserver (see {@link ConnectionHealth}). */
  readonly health: ConnectionHealth;
  #creds: CredentialProvider;
  #requestTimeoutMs: number;
  #fence?: WriteFence;
  #gate: Gate;
  #transport: Transport;
  #sender: Sender;
  #ownsHealth: boolean;
  #unsubscribe: (() => void)[] = [];
  #fileCheckTimer?: ReturnType<typeof setTimeout>;
  #watchDeps: WatchDeps;

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
    const creds = this.#creds = new CredentialProvider(config, Date.now, {
      proxy: denoProxy(this.proxy),
      execEnv: this.proxyEnvironment.raw,
    });
    this.health = opts.health ?? new ConnectionHealth();
    this.#ownsHealth = !opts.health;
    this.#requestTimeoutMs = opts.requestTimeoutMs ?? 30_000;
    this.#fence = opts.writeFence;
    this.#gate = opts.retryAfterGate === false ? NO_GATE : new RetryAfterGate();
    this.#transport = new Transport({
      userAgent: opts.userAgent ?? "appservice-operator",
      requestTimeoutMs: this.#requestTimeoutMs,
      route: {
        host: new URL(config.server).host,
        proxy: this.proxy.url ? describeProxy(this.proxy) : undefined,
      },
      health: this.health,
      onNoAnswer: () => creds.recheckAfterFailure(),
      resetConnections: () => creds.resetConnections(),
      onRequest: opts.onRequest,
      requestScope: opts.requestScope,
      onSendWrite: opts.onSendWrite,
    });
    const qps = opts.qps ?? 0;
    this.#sender = new Sender({
      server: config.server,
      transport: this.#transport,
      creds,
      bucket: new TokenBucket(qps, opts.burst ?? Math.max(1, Math.ceil(qps * 2))),
      gate: this.#gate,
      maxRetries: opts.maxRetries ?? 5,
      maxThrottleWaitMs: opts.maxThrottleWaitMs ?? MAX_THROTTLE_WAIT_MS,
      fence: () => this.#fence,
    });
    this.#watchDeps = this.#makeWatchDeps();
    this.#subscribe();
  }

  /** What {@link openWatch} uses of this client. */
  #makeWatchDeps(): WatchDeps {
    const watches = this.#transport.inFlight.watches;
    return {
      send: (req) => this.#sender.send(req),
      watches,
      requestTimeoutMs: this.#requestTimeoutMs,
      health: this.health,
      failed: (err) => this.#transport.failed(err),
      resetConnections: () => this.#creds.resetConnections(),
      opened: () => this.#armFileCheck(),
      closed: () => {
        if (watches.size > 0) return;
        clearTimeout(this.#fileCheckTimer);
        this.#fileCheckTimer = undefined;
      },
    };
  }

  /** Wires the probe, the stall rule at a recovery, and the watches' restart on new TLS material. */
  #subscribe(): void {
    this.health.setProbe((signal) => this.#probe(signal));
    const inFlight = this.#transport.inFlight;
    this.#unsubscribe.push(
      this.health.onRecovered((r: Recovery) => {
        // Idle pooled connections may have died with the path (no FIN, no RST): a later request
        // taken from the pool would wait on one until its timeout. New requests get new ones.
        this.#creds.resetConnections();
        inFlight.endStalled(r);
      }),
      this.#creds.onTlsChange((c) =>
        inFlight.restartWatches(
          new WatchRestartError("credentials", `${c.changed.join(", ")} changed`),
        )
      ),
    );
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

  /**
   * Checks the credential files every {@link CREDENTIAL_FILE_CHECK_MS} while a watch is open:
   * requests check them anyway, but a replica at rest sends none, and its watches must move to
   * rotated material too.
   */
  #armFileCheck(): void {
    const watches = this.#transport.inFlight.watches;
    if (!this.#creds.hasFiles || this.#fileCheckTimer !== undefined) return;
    if (watches.size === 0) return;
    const dueMs = this.#creds.lastCheckMs + CREDENTIAL_FILE_CHECK_MS - Date.now();
    this.#fileCheckTimer = setTimeout(async () => {
      this.#fileCheckTimer = undefined;
      if (watches.size === 0) return;
      await this.#creds.checkFiles();
      this.#armFileCheck();
    }, Math.max(0, dueMs));
  }

  /** One `GET /version` without retries: the health probe. */
  async #probe(signal: AbortSignal): Promise<void> {
    const resp = await this.#sender.send({
      method: "GET",
      path: "/version",
      signal,
      noRetry: true,
    });
    await resp.body?.cancel();
    this.#transport.settle(resp);
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

  async #json<T>(req: RawRequest): Promise<T> {
    const resp = await this.#sender.send(req);
    return await this.#read(req, resp, () => resp.json() as Promise<T>);
  }

  /**
   * Reads the body of an answer with `read`; a body that breaks off is a failure of the path
   * (Transport.bodyFailed: the health is told, an {@link UnreachableError} is thrown), so that
   * callers see one kind of error for an outage whether it cut a request before or during its
   * answer. The answer is settled afterwards, read or not ({@link Transport.settle}).
   */
  async #read<T>(req: RawRequest, resp: Response, read: () => Promise<T>): Promise<T> {
    try {
      return await read();
    } catch (err) {
      throw this.#transport.bodyFailed(req, err);
    } finally {
      this.#transport.settle(resp);
    }
  }

  /**
   * Sends a write and reads of its successful answer what `response` says (see
   * {@link WriteResponse}); error answers are decoded by the sender in any case.
   */
  async #write<T>(req: RawRequest, response: WriteResponse = "full"): Promise<T | undefined> {
    if (response === "full") return await this.#json<T>(req);
    const out: OutgoingRequest = { ...req, accept: METADATA_ACCEPT };
    const resp = await this.#sender.send(out);
    if (response === "metadata") {
      return await this.#read(out, resp, () => resp.json() as Promise<T>);
    }
    // Read to the end, not cancelled: docs/design/client.md, "Answers not read".
    try {
      await resp.arrayBuffer();
    } catch (err) {
      // The write was done (a 2xx answer); only the body nobody reads was lost.
      const error = this.#transport.bodyFailed(out, err);
      if (!isUnreachable(error)) throw error;
    } finally {
      this.#transport.settle(resp);
    }
    return undefined;
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
      query: listQuery(o),
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
    return await listInPages((page) => this.list<T>(rt, page), o, onPage, onExpired);
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

  /**
   * Creates an object in `namespace` (or the object's own); resolves what `o.response` asks for
   * ({@link WriteResponse}: the object created by default). With `o.subresource`, POSTs `obj` to
   * that subresource of the object `obj.metadata.name` names (e.g. a Binding to
   * `pods/<name>/binding`). @throws ApiError 409 AlreadyExists.
   */
  create<T extends KubeObject>(
    rt: ResourceType,
    obj: T,
    o: WriteOptions & { response: "none" },
  ): Promise<undefined>;
  /** `create` with `response: "metadata"`: resolves the metadata answered. */
  create<T extends KubeObject>(
    rt: ResourceType,
    obj: T,
    o: WriteOptions & { response: "metadata" },
  ): Promise<PartialObject>;
  /** `create` with the default `response: "full"`: resolves the object answered. */
  create<T extends KubeObject>(
    rt: ResourceType,
    obj: T,
    o?: WriteOptions & { response?: "full" },
  ): Promise<T>;
  /** `create` for a `response` chosen at run time: resolves what it asks for. */
  create<T extends KubeObject>(
    rt: ResourceType,
    obj: T,
    o?: WriteOptions & ResponseOptions,
  ): Promise<T | PartialObject | undefined>;
  /** `create` for any {@link WriteResponse} (the implementation). */
  create<T extends KubeObject>(
    rt: ResourceType,
    obj: T,
    o: WriteOptions & ResponseOptions = {},
  ): Promise<T | PartialObject | undefined> {
    const ns = o.namespace ?? obj.metadata?.namespace;
    return this.#write<T>({
      method: "POST",
      path: o.subresource
        ? resourcePath(rt, ns, obj.metadata?.name ?? "", o.subresource)
        : resourcePath(rt, ns),
      body: obj,
      signal: o.signal,
      query: writeQuery(o),
    }, o.response);
  }

  /**
   * Replaces an object (PUT); `metadata.resourceVersion` makes it conditional (409 Conflict).
   * Resolves what `o.response` asks for ({@link WriteResponse}: the object stored by default).
   */
  update<T extends KubeObject>(
    rt: ResourceType,
    obj: T,
    o: WriteOptions & { response: "none" },
  ): Promise<undefined>;
  /** `update` with `response: "metadata"`: resolves the metadata answered. */
  update<T extends KubeObject>(
    rt: ResourceType,
    obj: T,
    o: WriteOptions & { response: "metadata" },
  ): Promise<PartialObject>;
  /** `update` with the default `response: "full"`: resolves the object answered. */
  update<T extends KubeObject>(
    rt: ResourceType,
    obj: T,
    o?: WriteOptions & { response?: "full" },
  ): Promise<T>;
  /** `update` for a `response` chosen at run time: resolves what it asks for. */
  update<T extends KubeObject>(
    rt: ResourceType,
    obj: T,
    o?: WriteOptions & ResponseOptions,
  ): Promise<T | PartialObject | undefined>;
  /** `update` for any {@link WriteResponse} (the implementation). */
  update<T extends KubeObject>(
    rt: ResourceType,
    obj: T,
    o: WriteOptions & ResponseOptions = {},
  ): Promise<T | PartialObject | undefined> {
    const ns = o.namespace ?? obj.metadata?.namespace;
    return this.#write<T>({
      method: "PUT",
      path: resourcePath(rt, ns, obj.metadata?.name ?? "", o.subresource),
      body: obj,
      signal: o.signal,
      query: { fieldManager: o.fieldManager },
    }, o.response);
  }

  /**
   * Patches an object. `type` picks the content type; `apply` is server-side apply and needs
   * `fieldManager`. A JSON patch `test` op gives a precondition (422 Invalid... when it fails).
   * Resolves what `o.response` asks for ({@link WriteResponse}: the object patched by default).
   */
  patch<T extends KubeObject>(
    rt: ResourceType,
    name: string,
    patch: unknown,
    o: PatchOptions & { response: "none" },
  ): Promise<undefined>;
  /** `patch` with `response: "metadata"`: resolves the metadata answered. */
  patch<T extends KubeObject>(
    rt: ResourceType,
    name: string,
    patch: unknown,
    o: PatchOptions & { response: "metadata" },
  ): Promise<PartialObject>;
  /** `patch` with the default `response: "full"`: resolves the object answered. */
  patch<T extends KubeObject>(
    rt: ResourceType,
    name: string,
    patch: unknown,
    o?: PatchOptions & { response?: "full" },
  ): Promise<T>;
  /** `patch` for a `response` chosen at run time: resolves what it asks for. */
  patch<T extends KubeObject>(
    rt: ResourceType,
    name: string,
    patch: unknown,
    o?: PatchOptions & ResponseOptions,
  ): Promise<T | PartialObject | undefined>;
  /** `patch` for any {@link WriteResponse} (the implementation). */
  patch<T extends KubeObject>(
    rt: ResourceType,
    name: string,
    patch: unknown,
    o: PatchOptions & ResponseOptions = {},
  ): Promise<T | PartialObject | undefined> {
    return this.#write<T>({
      method: "PATCH",
      path: resourcePath(rt, o.namespace, name, o.subresource),
      body: patch,
      contentType: PATCH_CONTENT_TYPES[o.type ?? "merge"],
      signal: o.signal,
      query: patchQuery(o),
    }, o.response);
  }

  /**
   * Deletes an object; answers the object (with deletionTimestamp) or a Status, or what
   * `o.response` asks for ({@link WriteResponse}).
   */
  delete(
    rt: ResourceType,
    name: string,
    o: DeleteOptions & { response: "none" },
  ): Promise<undefined>;
  /** `delete` with `response: "metadata"`: resolves the metadata answered. */
  delete(
    rt: ResourceType,
    name: string,
    o: DeleteOptions & { response: "metadata" },
  ): Promise<PartialObject | Status>;
  /** `delete` with the default `response: "full"`: resolves the object answered. */
  delete(
    rt: ResourceType,
    name: string,
    o?: DeleteOptions & { response?: "full" },
  ): Promise<KubeObject | Status>;
  /** `delete` for a `response` chosen at run time: resolves what it asks for. */
  delete(
    rt: ResourceType,
    name: string,
    o?: DeleteOptions & ResponseOptions,
  ): Promise<KubeObject | Status | undefined>;
  /** `delete` for any {@link WriteResponse} (the implementation). */
  delete(
    rt: ResourceType,
    name: string,
    o: DeleteOptions & ResponseOptions = {},
  ): Promise<KubeObject | Status | undefined> {
    return this.#write<KubeObject | Status>({
      method: "DELETE",
      path: resourcePath(rt, o.namespace, name),
      body: deleteBody(o),
      signal: o.signal,
    }, o.response);
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
   * order; see `decodeWatchBatches` in watch.ts) until the server ends the stream (normal at
   * `timeoutSeconds`). ERROR frames are thrown as ApiError (410: relist) after the events before
   * them; a silent stream past `idleTimeoutMs` throws WatchIdleError. Breaking out of the loop
   * closes the connection. Bulk consumers (the reflector) use this to pay one async step per
   * chunk instead of one per event.
   *
   * The idle bound also covers the wait for the response headers (a request sent into a stalled
   * connection otherwise waits forever: watches have no request timeout); a WatchList
   * (`sendInitialEvents`) waits for its headers at most the request timeout, as a list would, and
   * then fails with a `NetworkError` of kind `timeout` (the apiserver answers only once it
   * can serve a consistent state: one whose etcd stalls does not answer at all). A WatchIdleError
   * drops the pooled connections ({@link CredentialProvider.resetConnections}) so that the next
   * watch does not go into a pooled connection on the same stalled path. A watch ended by the
   * client throws {@link WatchRestartError} (see the module doc): resume it at once.
   */
  async *watchBatches<T extends KubeObject>(
    rt: ResourceType,
    o: WatchOptions = {},
  ): AsyncGenerator<ObjectWatchEvent<T>[]> {
    yield* openWatch<T>(this.#watchDeps, resourcePath(rt, o.namespace), o);
  }
}
