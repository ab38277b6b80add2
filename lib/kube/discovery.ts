/**
 * Resource addressing by group, version and kind: {@link Discovery} turns a
 * {@link GroupVersionKind} (or an object's `apiVersion` and `kind`) into the {@link ResourceType}
 * that the client's verbs take, by reading the apiserver's discovery documents, and
 * {@link DynamicClient} is the client's verbs addressed that way.
 *
 * ```ts
 * import { DynamicClient, KubeClient, loadClusterConfig } from "./mod.ts";
 * const client = new KubeClient(loadClusterConfig());
 * const dynamic = new DynamicClient(client);
 * const deployments = await dynamic.discovery.resolve(
 *   { apiVersion: "apps/v1", kind: "Deployment" },
 * );
 * await client.get(deployments, "web", { namespace: "default" }); // plural, scope from discovery
 * const widget = { group: "example.com", version: "v1", kind: "Widget" };
 * await dynamic.get(widget, "w", { namespace: "default" }); // resolved, sent, once more on a 404
 * ```
 *
 * Documents: `GET /api/v1` for the core group, `GET /apis/<group>/<version>` otherwise (an
 * `APIResourceList`, Kubernetes API concepts, "Discovery API"), one per group/version, read only
 * when a kind of it is first asked for. `KubeClient.raw` sends no `Accept` header of the caller's,
 * so the aggregated document (`/apis` as `APIGroupDiscoveryList`) is not used: a controller
 * needs a handful of group/versions, one small request each.
 *
 * The refresh rule ({@link Discovery.resolve}, {@link DynamicClient}): a cached document is read
 * again (1) when a kind asked for is not in it: a CRD created after it was read; (2) after a
 * request on a type resolved from it was answered 404 for the resource itself
 * ({@link isResourceNotServed}): a CRD deleted and created again with another plural or scope
 * (the request is sent again only when the new scope fits the namespace the caller named, else
 * {@link ScopeChangedError}). No document is read more than once per
 * {@link DISCOVERY_MIN_REFRESH_INTERVAL_MS} (per group/version), however many callers miss. Sources: client-go's `DeferredDiscoveryRESTMapper`
 * (k8s.io/client-go/restmapper) drops its cache and maps once more when a mapping fails on a cache
 * that is not fresh; controller-runtime's lazy mapper (pkg/client/apiutil/restmapper.go) reloads
 * the group/version of a kind it does not know, and forgets a group/version whose document answers
 * 404. Neither re-reads on a 404 of a request, so a mapping whose plural or scope changed stays
 * wrong there until restart; case (2) is this module's own.
 *
 * @module
 */
import type { KubeClient, KubeObject, ObjectList } from "./client.ts";
import { ApiError, type Status } from "./errors.ts";
import type {
  CallOptions,
  DeleteOptions,
  ListOptions,
  PatchOptions,
  WriteOptions,
} from "./params.ts";
import type { ResourceType } from "./resources.ts";

/** A kind of one version of an API group, e.g. `{ group: "apps", version: "v1", kind: "Job" }`. */
export interface GroupVersionKind {
  /** API group; `""` for the core group (Pods, ConfigMaps, ...). */
  group: string;
  /** Version within the group, e.g. `v1`, `v1beta1`. */
  version: string;
  /** Kind of one object, case as served, e.g. `Deployment`. */
  kind: string;
}

/**
 * What names a kind: a {@link GroupVersionKind}, or `apiVersion` (`v1`, `apps/v1`) and `kind` as
 * every object carries them, so an object itself (or a {@link ResourceType}) can be passed.
 */
export type KindRef = GroupVersionKind | { apiVersion: string; kind: string };

/**
 * Shortest time (ms) between two reads of one group/version's discovery document: misses and
 * invalidations within it are answered from the document already read. It bounds a caller that
 * asks for a kind the apiserver does not serve, in a loop or from many reconciles at once, to one
 * request per second per group/version. Its cost: a kind that becomes served less than a second
 * after the last read (a CRD being installed while a controller retries) is seen up to a second
 * late. Measured against the local control plane in docs/design/client.md ("Discovery").
 */
export const DISCOVERY_MIN_REFRESH_INTERVAL_MS = 1_000;

/** Reads one discovery document (a path such as `/apis/apps/v1`) and decodes its JSON. */
export type DiscoveryFetcher = (path: string, signal?: AbortSignal) => Promise<unknown>;

/** Options of {@link Discovery}. */
export interface DiscoveryOptions {
  /** See {@link DISCOVERY_MIN_REFRESH_INTERVAL_MS} (the default); 0 disables the bound. */
  minRefreshIntervalMs?: number;
  /** Monotonic clock in ms for the interval; default `performance.now`. */
  now?: () => number;
}

/**
 * The apiserver does not serve the kind asked for: its group/version is not served at all
 * (`groupVersionServed` false: no such API group or version, e.g. a CRD not installed), or it is
 * and has no resource of that kind. Thrown by {@link Discovery.resolve} after the one refresh the
 * rule allows (see the module doc). Not an {@link ApiError}: no request on the kind was sent.
 */
export class NoKindMatchError extends Error {
  /** The group asked for (`""` for core). */
  readonly group: string;
  /** The version asked for. */
  readonly version: string;
  /** The kind asked for. */
  readonly kind: string;
  /** Whether the apiserver serves the group/version (and only the kind is missing). */
  readonly groupVersionServed: boolean;

  /** Builds the error for `gvk`; `groupVersionServed` says which of the two cases it is. */
  constructor(gvk: GroupVersionKind, groupVersionServed: boolean) {
    const gv = apiVersionOf(gvk);
    super(
      groupVersionServed
        ? `kind ${gvk.kind} is not served in ${gv}: the apiserver serves ${gv} without it`
        : `kind ${gvk.kind} is not served in ${gv}: the apiserver does not serve ${gv}`,
    );
    this.name = "NoKindMatchError";
    this.group = gvk.group;
    this.version = gvk.version;
    this.kind = gvk.kind;
    this.groupVersionServed = groupVersionServed;
  }
}

/**
 * Refused by {@link DynamicClient}: the kind's scope changed since it was resolved (its CRD was
 * made again namespaced instead of cluster-scoped, or the reverse), and the request, sent again
 * on the new type, would address another object than the caller named: with a namespace given
 * and the kind now cluster-scoped, the namespace would be dropped from the path and the
 * cluster-scoped object of that name read or written; without one and the kind now namespaced, a
 * list would span every namespace. Thrown instead of that second request; only the first one was
 * sent, and it was answered 404 for the resource ({@link isResourceNotServed}: nothing was read
 * or written). The caller decides: the same request with a namespace (or without) as the new
 * scope needs. Not an {@link ApiError}; `cause` is the 404.
 */
export class ScopeChangedError extends Error {
  /** The group asked for (`""` for core). */
  readonly group: string;
  /** The version asked for. */
  readonly version: string;
  /** The kind asked for. */
  readonly kind: string;
  /** The namespace the caller named, or undefined for none. */
  readonly namespace: string | undefined;
  /** Whether the kind is namespaced now (as the document read again says). */
  readonly namespaced: boolean;

  /**
   * Builds the error for `gvk`, asked for with `namespace` (undefined: none), now `namespaced`;
   * `cause`: the 404 of the request sent on the type resolved before.
   */
  constructor(
    gvk: GroupVersionKind,
    namespace: string | undefined,
    namespaced: boolean,
    cause: unknown,
  ) {
    const gv = apiVersionOf(gvk);
    super(
      namespaced
        ? `kind ${gvk.kind} of ${gv} is namespaced now, and the request named no namespace: ` +
          "not sent again"
        : `kind ${gvk.kind} of ${gv} is cluster-scoped now, and the request named namespace ` +
          `${namespace}: not sent again`,
      { cause },
    );
    this.name = "ScopeChangedError";
    this.group = gvk.group;
    this.version = gvk.version;
    this.kind = gvk.kind;
    this.namespace = namespace;
    this.namespaced = namespaced;
  }
}

/** Whether `err` is a {@link NoKindMatchError}. */
export function isNoKindMatch(err: unknown): err is NoKindMatchError {
  return err instanceof NoKindMatchError;
}

/**
 * Whether `err` is a 404 for the resource itself rather than for an object: the apiserver's
 * answer for a path it routes nowhere (a plural or scope it does not serve: `the server could not
 * find the requested resource`, a Status without `details.name`, or a body that is no Status).
 * A missing object, or a missing namespace on create, is answered 404 with `details.name` (the
 * object's or the namespace's name) and is not this. Nothing was read or written by such a
 * request, so it is safe to send again after resolving the type anew.
 */
export function isResourceNotServed(err: unknown): boolean {
  if (!(err instanceof ApiError) || err.code !== 404) return false;
  const status: Status | undefined = err.status;
  return !status?.details?.name;
}

/**
 * The group, version and kind `ref` names.
 * @throws TypeError when `apiVersion` is not `version` or `group/version`, or a part is empty.
 */
export function groupVersionKind(ref: KindRef): GroupVersionKind {
  let gvk: GroupVersionKind;
  if ("apiVersion" in ref) {
    const parts = ref.apiVersion.split("/");
    if (parts.length > 2) throw new TypeError(`malformed apiVersion "${ref.apiVersion}"`);
    gvk = parts.length === 2
      ? { group: parts[0], version: parts[1], kind: ref.kind }
      : { group: "", version: parts[0], kind: ref.kind };
    if (parts.length === 2 && !gvk.group) {
      throw new TypeError(`malformed apiVersion "${ref.apiVersion}"`);
    }
  } else {
    gvk = { group: ref.group, version: ref.version, kind: ref.kind };
  }
  if (!gvk.version || !gvk.kind || /[/?#%\s]/.test(gvk.group + gvk.version)) {
    throw new TypeError(`malformed group/version/kind ${JSON.stringify(gvk)}`);
  }
  return gvk;
}

/** `v1` for the core group, else `group/version`: the `apiVersion` objects of `gvk` carry. */
export function apiVersionOf(gvk: Pick<GroupVersionKind, "group" | "version">): string {
  return gvk.group ? `${gvk.group}/${gvk.version}` : gvk.version;
}

/** The path of a group/version's discovery document: `/api/v1`, `/apis/apps/v1`. */
export function discoveryPath(gvk: Pick<GroupVersionKind, "group" | "version">): string {
  return gvk.group ? `/apis/${gvk.group}/${gvk.version}` : `/api/${gvk.version}`;
}

/**
 * The resource types of one group/version's discovery document (an `APIResourceList`), by kind.
 * Subresources (`pods/status`: a name with `/`) are left out. Two resources of one kind (none
 * among the built-in APIs once subresources are left out) resolve to the first listed.
 * @throws TypeError when `doc` is not an `APIResourceList` of `gv`'s group/version.
 */
export function parseResourceList(
  doc: unknown,
  gv: Pick<GroupVersionKind, "group" | "version">,
): Map<string, ResourceType> {
  const apiVersion = apiVersionOf(gv);
  const list = doc as { groupVersion?: unknown; resources?: unknown } | null;
  if (!list || typeof list !== "object" || !Array.isArray(list.resources)) {
    throw new TypeError(`discovery document of ${apiVersion} is not an APIResourceList`);
  }
  if (list.groupVersion !== undefined && list.groupVersion !== apiVersion) {
    throw new TypeError(
      `discovery document of ${apiVersion} is of ${String(list.groupVersion)}`,
    );
  }
  const kinds = new Map<string, ResourceType>();
  for (const r of list.resources as { name?: unknown; kind?: unknown; namespaced?: unknown }[]) {
    if (typeof r?.name !== "string" || typeof r.kind !== "string") continue;
    if (!r.name || r.name.includes("/") || kinds.has(r.kind)) continue;
    kinds.set(r.kind, {
      apiVersion,
      kind: r.kind,
      plural: r.name,
      namespaced: r.namespaced === true,
    });
  }
  return kinds;
}

/** What is known of one group/version. */
interface Entry {
  /** Kinds of the last document read; undefined before one was read, or once it answered 404. */
  kinds?: Map<string, ResourceType>;
  /** The last read was answered 404: the group/version is not served. */
  notServed: boolean;
  /** When the last read started (clock ms); -Infinity before the first. */
  readAtMs: number;
  /** To be read again at the next resolve the interval allows ({@link Discovery.invalidate}). */
  stale: boolean;
  /** Counts invalidations: a read clears `stale` only if none came after it started. */
  invalidations: number;
  /** The last read's failure other than 404; cleared by a read that succeeds. */
  error?: unknown;
  /** The read in flight, shared by every caller; never rejects. */
  reading?: Promise<void>;
}

/**
 * A discovery-backed resolver of kinds to {@link ResourceType}s (client-go calls it a RESTMapper),
 * with a cache per group/version and the refresh rule of the module doc. Safe for concurrent use:
 * callers that need the same document while it is being read share the one request.
 */
export class Discovery {
  #fetch: DiscoveryFetcher;
  #minIntervalMs: number;
  #now: () => number;
  #entries = new Map<string, Entry>();
  #reads = 0;

  /**
   * A resolver that reads documents through `source`: a {@link KubeClient} (its `raw`, with the
   * client's retries, timeout and credentials) or a {@link DiscoveryFetcher}. Nothing is read
   * before the first {@link resolve}.
   */
  constructor(source: Pick<KubeClient, "raw"> | DiscoveryFetcher, opts: DiscoveryOptions = {}) {
    this.#fetch = typeof source === "function"
      ? source
      : (path, signal) => source.raw<unknown>(path, signal);
    this.#minIntervalMs = opts.minRefreshIntervalMs ?? DISCOVERY_MIN_REFRESH_INTERVAL_MS;
    this.#now = opts.now ?? (() => performance.now());
  }

  /** How many discovery documents were requested so far (answered or not). */
  get reads(): number {
    return this.#reads;
  }

  /**
   * The resource type of `ref`: its plural and scope as the apiserver serves them. Reads the
   * group/version's document when it was never read or was invalidated, and once more when the
   * kind is missing from it, each only if the interval since its last read allows (so at most one
   * request per call). An aborted `signal` ends the wait, not a read other callers share.
   * @throws NoKindMatchError when the apiserver does not serve the kind (after the refresh).
   * @throws TypeError for a malformed `ref` ({@link groupVersionKind}) or document.
   * @throws the read's error (ApiError other than 404, NetworkError, ...) when the last read of
   *   the document failed: whether the kind is served is then unknown.
   */
  async resolve(ref: KindRef, signal?: AbortSignal): Promise<ResourceType> {
    const gvk = groupVersionKind(ref);
    const entry = this.#entry(gvk);
    let tried = false;
    if (entry.stale || (entry.kinds === undefined && !entry.notServed)) {
      await this.#read(gvk, entry, signal);
      tried = true;
    }
    let rt = entry.kinds?.get(gvk.kind);
    if (!rt && !tried) {
      await this.#read(gvk, entry, signal);
      rt = entry.kinds?.get(gvk.kind);
    }
    if (rt) return { ...rt };
    if (entry.error !== undefined) throw entry.error;
    throw new NoKindMatchError(gvk, !entry.notServed);
  }

  /**
   * Marks `ref`'s group/version to be read again at its next {@link resolve} (once the interval
   * allows); e.g. after a request on a type resolved from it was answered
   * {@link isResourceNotServed}. Nothing is sent now.
   */
  invalidate(ref: KindRef): void {
    const entry = this.#entries.get(apiVersionOf(groupVersionKind(ref)));
    if (!entry) return;
    entry.stale = true;
    entry.invalidations++;
  }

  /**
   * After a request on `used` (resolved from `ref`) was answered {@link isResourceNotServed}:
   * invalidates the group/version and resolves `ref` again. Resolves the new type, or undefined
   * when it is the same as `used` (the interval allowed no read, or the 404 was not about a stale
   * type): the caller then keeps the 404.
   * @throws NoKindMatchError when the kind is no longer served; as {@link resolve} otherwise.
   */
  async resolveAgain(
    ref: KindRef,
    used: ResourceType,
    signal?: AbortSignal,
  ): Promise<ResourceType | undefined> {
    this.invalidate(ref);
    const rt = await this.resolve(ref, signal);
    return rt.plural === used.plural && rt.namespaced === used.namespaced &&
        rt.apiVersion === used.apiVersion
      ? undefined
      : rt;
  }

  #entry(gvk: GroupVersionKind): Entry {
    const key = apiVersionOf(gvk);
    let entry = this.#entries.get(key);
    if (!entry) {
      entry = { notServed: false, readAtMs: -Infinity, stale: false, invalidations: 0 };
      this.#entries.set(key, entry);
    }
    return entry;
  }

  /** Reads `gvk`'s document into `entry`, joins the read in flight, or (interval) does nothing. */
  async #read(gvk: GroupVersionKind, entry: Entry, signal?: AbortSignal): Promise<void> {
    signal?.throwIfAborted();
    if (!entry.reading) {
      if (this.#now() - entry.readAtMs < this.#minIntervalMs) return;
      entry.readAtMs = this.#now();
      this.#reads++;
      const invalidations = entry.invalidations;
      // An invalidation after the read started may be about a change the document predates.
      const fresh = () => entry.stale = entry.stale && entry.invalidations !== invalidations;
      entry.reading = this.#fetch(discoveryPath(gvk)).then(
        (doc) => {
          entry.kinds = parseResourceList(doc, gvk);
          entry.notServed = false;
          entry.error = undefined;
          fresh();
        },
        (err) => {
          if (err instanceof ApiError && err.code === 404) {
            entry.kinds = undefined;
            entry.notServed = true;
            entry.error = undefined;
            fresh();
          } else {
            entry.error = err; // the kinds read before stay usable; stale stays as it was
          }
        },
      ).catch((err) => {
        entry.error = err; // a malformed document
      }).finally(() => {
        entry.reading = undefined;
      });
    }
    await untilAborted(entry.reading, signal);
  }
}

/** `obj` with `rt`'s `apiVersion` and `kind` where it has none (a shallow copy), else `obj`. */
function withKind<T extends KubeObject>(obj: T, rt: ResourceType): T {
  if (obj.apiVersion && obj.kind) return obj;
  return { ...obj, apiVersion: obj.apiVersion || rt.apiVersion, kind: obj.kind || rt.kind };
}

/** `p`, or the signal's reason as soon as it aborts (`p` goes on). */
function untilAborted<T>(p: Promise<T>, signal?: AbortSignal): Promise<T> {
  if (!signal) return p;
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    if (signal.aborted) return onAbort();
    signal.addEventListener("abort", onAbort, { once: true });
    p.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}

/**
 * The verbs of {@link KubeClient} addressed by kind ({@link KindRef}) instead of by
 * {@link ResourceType}: each resolves the kind through its {@link Discovery}, then sends the
 * request through the client. When the request is answered {@link isResourceNotServed} (the type
 * resolved is stale: the CRD was deleted and created again with another plural or scope), the
 * kind is resolved once more ({@link Discovery.resolveAgain}) and, if its type changed, the
 * request is sent once more on the new type; if the kind is gone, {@link NoKindMatchError}. It is
 * not sent again when the new scope does not fit what the caller named — a namespace (the
 * option, or the body's `metadata.namespace` for create and update) for a kind now
 * cluster-scoped, or none for a kind now namespaced: {@link ScopeChangedError}, so that a request
 * never goes to an object the caller did not name. (On the first send, as with
 * {@link KubeClient}, a namespace given for a cluster-scoped type is left out of the path:
 * controller-runtime's client does the same.)
 * Otherwise every verb answers and throws what the client's does; create and update also fill in
 * the body's missing `apiVersion` and `kind`. For watches and informers,
 * resolve first and hand the type to the client or the runtime.
 */
export class DynamicClient {
  /** The client requests go through. */
  readonly client: KubeClient;
  /** The resolver (shared with any other user of it). */
  readonly discovery: Discovery;

  /**
   * Verbs by kind over `client`; `discovery` defaults to a new {@link Discovery} reading through
   * the same client.
   */
  constructor(client: KubeClient, discovery: Discovery = new Discovery(client)) {
    this.client = client;
    this.discovery = discovery;
  }

  /**
   * Resolves `ref`, calls `send` with the type, and once more on a changed type after a 404
   * unless its scope no longer fits `namespace` (the namespace the caller named, or undefined).
   * @throws ScopeChangedError instead of that second request
   */
  async #on<R>(
    ref: KindRef,
    namespace: string | undefined,
    signal: AbortSignal | undefined,
    send: (rt: ResourceType) => Promise<R>,
  ): Promise<R> {
    const rt = await this.discovery.resolve(ref, signal);
    try {
      return await send(rt);
    } catch (err) {
      if (!isResourceNotServed(err)) throw err;
      const again = await this.discovery.resolveAgain(ref, rt, signal);
      if (!again) throw err;
      if (again.namespaced !== (namespace !== undefined && namespace !== "")) {
        throw new ScopeChangedError(
          groupVersionKind(ref),
          namespace || undefined,
          again.namespaced,
          err,
        );
      }
      return await send(again);
    }
  }

  /** {@link KubeClient.get} of `ref`'s type. @throws ApiError 404 NotFound when absent. */
  get<T extends KubeObject>(ref: KindRef, name: string, o: CallOptions = {}): Promise<T> {
    return this.#on(ref, o.namespace, o.signal, (rt) => this.client.get<T>(rt, name, o));
  }

  /** {@link KubeClient.list} (one page) of `ref`'s type. */
  list<T extends KubeObject>(ref: KindRef, o: ListOptions = {}): Promise<ObjectList<T>> {
    return this.#on(ref, o.namespace, o.signal, (rt) => this.client.list<T>(rt, o));
  }

  /** {@link KubeClient.listAll} (every page) of `ref`'s type. */
  listAll<T extends KubeObject>(
    ref: KindRef,
    o: ListOptions = {},
  ): Promise<{ items: T[]; resourceVersion: string; pages: number }> {
    return this.#on(ref, o.namespace, o.signal, (rt) => this.client.listAll<T>(rt, o));
  }

  /**
   * {@link KubeClient.create} of `ref`'s type (pass `obj` as `ref` when it carries its kind).
   * `apiVersion` and `kind` absent from `obj` are sent as resolved (the apiserver refuses a
   * custom resource without them); `obj` itself is not changed.
   */
  create<T extends KubeObject>(ref: KindRef, obj: T, o: WriteOptions = {}): Promise<T> {
    return this.#on(
      ref,
      o.namespace ?? obj.metadata?.namespace,
      o.signal,
      (rt) => this.client.create<T>(rt, withKind(obj, rt), o),
    );
  }

  /** {@link KubeClient.update} of `ref`'s type; `apiVersion` and `kind` as for {@link create}. */
  update<T extends KubeObject>(ref: KindRef, obj: T, o: WriteOptions = {}): Promise<T> {
    return this.#on(
      ref,
      o.namespace ?? obj.metadata?.namespace,
      o.signal,
      (rt) => this.client.update<T>(rt, withKind(obj, rt), o),
    );
  }

  /** {@link KubeClient.patch} of `ref`'s type. */
  patch<T extends KubeObject>(
    ref: KindRef,
    name: string,
    patch: unknown,
    o: PatchOptions = {},
  ): Promise<T> {
    return this.#on(ref, o.namespace, o.signal, (rt) => this.client.patch<T>(rt, name, patch, o));
  }

  /** {@link KubeClient.delete} of `ref`'s type. */
  delete(ref: KindRef, name: string, o: DeleteOptions = {}): Promise<KubeObject | Status> {
    return this.#on(ref, o.namespace, o.signal, (rt) => this.client.delete(rt, name, o));
  }
}
