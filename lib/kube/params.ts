/**
 * Request parameters of the REST client: the options of each verb ({@link ListOptions},
 * {@link WatchOptions}, {@link PatchOptions}, ...) and how they become a request: query
 * parameters, the URL, a DeleteOptions body. Pure; nothing here sends.
 *
 * Rules followed: Kubernetes API concepts (paging with `limit`/`continue`, resource versions,
 * watch and bookmarks, WatchList, patch content types, server-side apply `fieldManager`/`force`,
 * server-side dry run, DeleteOptions).
 *
 * @module
 */

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
  /**
   * Shard selector (`shardRange(object.metadata.namespace, '0x..', '0x..') || ...`, the
   * `ShardedListAndWatch` feature gate, alpha; lib/runtime/shards.ts): only objects whose field
   * hash falls in a range. An apiserver without the gate ignores it (the list's
   * `metadata.shardInfo` says whether it was applied).
   */
  shardSelector?: string;
}

/** Options of a watch call. */
export interface WatchOptions extends CallOptions {
  /** Label selector (Kubernetes label selector syntax). */
  labelSelector?: string;
  /** Field selector, e.g. `metadata.name=x`. */
  fieldSelector?: string;
  /**
   * Shard selector (`shardRange(object.metadata.namespace, '0x..', '0x..') || ...`, the
   * `ShardedListAndWatch` feature gate, alpha; lib/runtime/shards.ts): only objects whose field
   * hash falls in a range. An apiserver without the gate ignores it (the list's
   * `metadata.shardInfo` says whether it was applied).
   */
  shardSelector?: string;
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
   * should have carried bytes (a bookmark was due), so its connection is presumed dead, the
   * connection health is told and pooled connections are dropped. False for a stream that may
   * rightly be quiet (no bookmark owed; the reflector's rule is `bookmarkWasDue` in
   * lib/runtime/reflector_machine.ts): it is only ended, and reopening it is the liveness check.
   * A function is asked when the bound fires, so that the answer can depend on what the stream
   * carried; it must not throw.
   */
  idleIsFailure?: boolean | (() => boolean);
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
  /**
   * e.g. `status` (an update of the status subresource); on a create, a subresource of the object
   * named by `metadata.name` that takes a POST (`binding`, `eviction`).
   */
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

/** Query parameters of a request; `undefined` and `""` values are left out. */
export type Query = Record<string, string | number | boolean | undefined>;

/** One request as the verbs hand it to the sending layers (client.ts, retry.ts, transport.ts). */
export interface RawRequest {
  /** HTTP verb, e.g. `GET`. */
  method: string;
  /** Path without the query, e.g. `/api/v1/namespaces/ns/pods`. */
  path: string;
  /** Query parameters. */
  query?: Query;
  /** JSON body, if any. */
  body?: unknown;
  /** Content type of the body; default `application/json`. */
  contentType?: string;
  /** The caller's signal: aborts the request with its reason. */
  signal?: AbortSignal;
  /** Watch: no request timeout, body is streamed. */
  stream?: boolean;
  /** No retry of any kind (the health probe). */
  noRetry?: boolean;
}

/**
 * `server` + `path` with the query parameters that have a value (form-encoded, as
 * `URLSearchParams` does). The URL is parsed once: setting its `searchParams` one by one would
 * parse it again for each.
 */
export function requestUrl(server: string, path: string, query: Query = {}): URL {
  const params = new URLSearchParams();
  for (const k in query) {
    const v = query[k];
    if (v !== undefined && v !== "") params.set(k, String(v));
  }
  const qs = params.size ? `?${params}` : "";
  return new URL(server + path + qs);
}

/** Query of a list call (one page). */
export function listQuery(o: ListOptions): Query {
  return {
    labelSelector: o.labelSelector,
    fieldSelector: o.fieldSelector,
    limit: o.limit,
    continue: o.continue,
    resourceVersion: o.resourceVersion,
    resourceVersionMatch: o.resourceVersionMatch,
    shardSelector: o.shardSelector,
  };
}

/**
 * Options of page `cont` of a paged list: the first page carries the caller's
 * `resourceVersion`(`Match`), later ones only the continue token (they belong to the first page's
 * snapshot); `limit` defaults to 500, as client-go's pager.
 */
export function pageOptions(o: ListOptions, cont: string | undefined): ListOptions {
  return {
    ...o,
    limit: o.limit ?? 500,
    continue: cont,
    resourceVersion: cont ? undefined : o.resourceVersion,
    resourceVersionMatch: cont ? undefined : o.resourceVersionMatch,
  };
}

/** Query of a watch call (`watch=true` and the watch's options). */
export function watchQuery(o: WatchOptions): Query {
  return {
    watch: true,
    labelSelector: o.labelSelector,
    fieldSelector: o.fieldSelector,
    resourceVersion: o.resourceVersion,
    allowWatchBookmarks: o.allowWatchBookmarks,
    timeoutSeconds: o.timeoutSeconds,
    sendInitialEvents: o.sendInitialEvents,
    resourceVersionMatch: o.resourceVersionMatch,
    shardSelector: o.shardSelector,
  };
}

/** Query of a create or update: `fieldManager`, and `dryRun=All` when asked. */
export function writeQuery(o: WriteOptions): Query {
  return { fieldManager: o.fieldManager, dryRun: o.dryRun ? "All" : undefined };
}

/** Query of a patch: `fieldManager`, and `force` for a server-side apply that asks for it. */
export function patchQuery(o: PatchOptions): Query {
  return {
    fieldManager: o.fieldManager,
    force: (o.type ?? "merge") === "apply" && o.force ? true : undefined,
  };
}

/** The `DeleteOptions` body of a delete call (only the fields given). */
export function deleteBody(o: DeleteOptions): Record<string, unknown> {
  const body: Record<string, unknown> = { apiVersion: "v1", kind: "DeleteOptions" };
  if (o.propagationPolicy) body.propagationPolicy = o.propagationPolicy;
  if (o.gracePeriodSeconds !== undefined) body.gracePeriodSeconds = o.gracePeriodSeconds;
  if (o.preconditions) body.preconditions = o.preconditions;
  return body;
}
