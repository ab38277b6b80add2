/**
 * A thin Kubernetes REST client on Deno's `fetch` and `Deno.createHttpClient`: the verbs get, list
 * (one page or all pages), create, update, patch (JSON, merge, strategic merge, server-side apply),
 * delete and watch, typed errors from `metav1.Status`, `Retry-After` for 429/503, retries of
 * idempotent reads, an optional client-side token bucket, and a request hook for metrics.
 *
 * Rules followed: Kubernetes API concepts (paging with `limit`/`continue`, watch, bookmarks, patch
 * content types, server-side apply `fieldManager`/`force`) and client-go `rest.Request`
 * (`Retry-After` honoured up to `maxRetries`, reads retried on connection errors, a 401 makes the
 * credential be fetched again once).
 *
 * @module
 */
import type { ObjectMeta } from "kubernetes-types/meta/v1.d.ts";
import type { ClusterConfig } from "./config.ts";
import { CredentialProvider } from "./credentials.ts";
import { ApiError, networkErrorReason, type Status } from "./errors.ts";
import { resourcePath, type ResourceType } from "./resources.ts";
import { sleep, TokenBucket } from "./throttle.ts";
import { decodeWatchBatches, type ObjectWatchEvent, WatchIdleError } from "./watch.ts";

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
  /** HTTP status code as a string, or `<error>` when no answer came. */
  code: string;
  /** host:port of the apiserver. */
  host: string;
  /** Seconds from sending to headers received. */
  durationSeconds: number;
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
  /** Called after every HTTP request (metrics). Must not throw. */
  onRequest?: (info: RequestInfo) => void;
}

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
}

const IDEMPOTENT = new Set(["GET", "HEAD"]);

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
  #creds: CredentialProvider;
  #opts: Required<Omit<ClientOptions, "onRequest">> & Pick<ClientOptions, "onRequest">;
  #bucket: TokenBucket;
  #host: string;

  /**
   * A client of the apiserver `config` names; no request is sent until a verb is called.
   * @param config the resolved connection ({@link loadClusterConfig})
   * @param opts see {@link ClientOptions}
   */
  constructor(config: ClusterConfig, opts: ClientOptions = {}) {
    this.config = config;
    this.#creds = new CredentialProvider(config);
    this.#opts = {
      userAgent: opts.userAgent ?? "appservice-operator",
      qps: opts.qps ?? 0,
      burst: opts.burst ?? Math.max(1, Math.ceil((opts.qps ?? 0) * 2)),
      maxRetries: opts.maxRetries ?? 5,
      requestTimeoutMs: opts.requestTimeoutMs ?? 30_000,
      onRequest: opts.onRequest,
    };
    this.#bucket = new TokenBucket(this.#opts.qps, this.#opts.burst);
    this.#host = new URL(config.server).host;
  }

  /** Releases the HTTP clients. */
  close(): void {
    this.#creds.close();
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
    let retriedAuth = false;
    for (let attempt = 0;; attempt++) {
      await this.#bucket.wait(req.signal);
      const cred = await this.#creds.get(req.signal);
      const headers: Record<string, string> = {
        "Accept": "application/json",
        "User-Agent": this.#opts.userAgent,
      };
      if (cred.authorization) headers["Authorization"] = cred.authorization;
      if (req.body !== undefined) headers["Content-Type"] = req.contentType ?? "application/json";
      const signals: AbortSignal[] = [];
      if (req.signal) signals.push(req.signal);
      const timeout = req.stream ? undefined : AbortSignal.timeout(this.#opts.requestTimeoutMs);
      if (timeout) signals.push(timeout);
      const started = performance.now();
      let resp: Response;
      try {
        resp = await fetch(url, {
          method: req.method,
          headers,
          body: req.body === undefined ? undefined : JSON.stringify(req.body),
          signal: signals.length ? AbortSignal.any(signals) : undefined,
          client: cred.httpClient,
        });
      } catch (err) {
        this.#record(req.method, "<error>", started);
        if (req.signal?.aborted) throw req.signal.reason;
        // No answer within the request timeout: the pooled connections may be dead (a network
        // path that drops packets); the next attempt, and every later request, gets a new one
        // (see resetConnections).
        if (timeout?.aborted) this.#creds.resetConnections();
        // The HTTP client was closed by resetConnections between get() and fetch(): the request
        // never left, so it is safe to send again whatever its method.
        if (err instanceof Deno.errors.BadResource && attempt < this.#opts.maxRetries) continue;
        if (IDEMPOTENT.has(req.method) && !req.stream && attempt < this.#opts.maxRetries) {
          await sleep(Math.min(200 * 2 ** attempt, 5_000), req.signal);
          continue;
        }
        throw new Error(`${label}: cannot reach ${this.#host}: ${networkErrorReason(err)}`, {
          cause: err,
        });
      }
      this.#record(req.method, String(resp.status), started);
      if (resp.ok) return resp;
      const retryAfter = parseRetryAfter(resp.headers.get("Retry-After"));
      const text = await resp.text().catch(() => "");
      let status: Status | undefined;
      try {
        const parsed = JSON.parse(text);
        if (parsed?.kind === "Status") status = parsed;
      } catch { /* not JSON */ }
      if (!status) status = { message: text.slice(0, 200) || resp.statusText, code: resp.status };
      if (resp.status === 401 && !retriedAuth) {
        retriedAuth = true;
        this.#creds.invalidate();
        continue;
      }
      const retryable = resp.status === 429 || (resp.status === 503 && retryAfter !== undefined) ||
        (IDEMPOTENT.has(req.method) && !req.stream && resp.status >= 500 && resp.status !== 501);
      if (retryable && attempt < this.#opts.maxRetries) {
        const waitMs = retryAfter !== undefined
          ? Math.min(retryAfter * 1000, 30_000)
          : Math.min(200 * 2 ** attempt, 5_000);
        await sleep(Math.max(waitMs, 50), req.signal);
        continue;
      }
      throw new ApiError(resp.status, status, { retryAfterSeconds: retryAfter, request: label });
    }
  }

  #record(method: string, code: string, startedMs: number): void {
    try {
      this.#opts.onRequest?.({
        method,
        code,
        host: this.#host,
        durationSeconds: (performance.now() - startedMs) / 1000,
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
   * @throws ApiError 410 when a continue token expired mid-way (the caller lists again); what
   *   `onPage` throws.
   */
  async listPages<T extends KubeObject>(
    rt: ResourceType,
    o: ListOptions,
    onPage: (page: ObjectList<T>) => void | Promise<void>,
  ): Promise<{ resourceVersion: string; pages: number; items: number }> {
    let cont: string | undefined;
    let rv: string | undefined;
    let pages = 0;
    let items = 0;
    do {
      let page: ObjectList<T> | undefined = await this.list<T>(rt, {
        ...o,
        limit: o.limit ?? 500,
        continue: cont,
        resourceVersion: cont ? undefined : o.resourceVersion,
        resourceVersionMatch: cont ? undefined : o.resourceVersionMatch,
      });
      pages++;
      rv ??= page.metadata?.resourceVersion ?? "";
      items += page.items?.length ?? 0;
      cont = page.metadata?.continue || undefined;
      await onPage(page);
      // Let this page go before the next request is awaited (a suspended async function keeps
      // what its variables still point at).
      page = undefined;
    } while (cont && pages < 100_000);
    return { resourceVersion: rv ?? "", pages, items };
  }

  /**
   * Lists every page ({@link listPages}) and returns all items with the resourceVersion of the
   * first page (the snapshot the pages belong to).
   * @throws ApiError 410 when a continue token expired mid-way (the caller relists).
   */
  async listAll<T extends KubeObject>(
    rt: ResourceType,
    o: ListOptions = {},
  ): Promise<{ items: T[]; resourceVersion: string; pages: number }> {
    const items: T[] = [];
    const r = await this.listPages<T>(rt, o, (page) => {
      for (const it of page.items ?? []) items.push(it);
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
   * connection otherwise waits forever: watches have no request timeout), and a WatchIdleError
   * drops the pooled connections ({@link CredentialProvider.resetConnections}) so that the next
   * watch does not go into a pooled connection on the same stalled path.
   */
  async *watchBatches<T extends KubeObject>(
    rt: ResourceType,
    o: WatchOptions = {},
  ): AsyncGenerator<ObjectWatchEvent<T>[]> {
    const ctl = new AbortController();
    const onAbort = () => ctl.abort(o.signal?.reason);
    o.signal?.addEventListener("abort", onAbort, { once: true });
    const idleMs = o.idleTimeoutMs ?? 0;
    const headersTimer = idleMs > 0
      ? setTimeout(() => ctl.abort(new WatchIdleError(idleMs)), idleMs)
      : undefined;
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
      yield* decodeWatchBatches<T>(resp.body, idleMs, () => ctl.abort());
    } catch (err) {
      if (o.signal?.aborted) throw o.signal.reason;
      if (err instanceof WatchIdleError) this.#creds.resetConnections();
      throw err;
    } finally {
      clearTimeout(headersTimer);
      o.signal?.removeEventListener("abort", onAbort);
      ctl.abort();
    }
  }
}
