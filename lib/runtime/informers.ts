/**
 * The registry of shared informers behind {@link Manager.informer} (client-go
 * `SharedInformerFactory`): one informer per resource, namespace and selectors, however many
 * controllers ask for it, so each is listed and watched once.
 *
 * @module
 */
import type { KubeObject } from "../kube/client.ts";
import type { ResourceType } from "../kube/resources.ts";
import type { Informer, InformerReflector } from "./controller.ts";
import { type IndexFunc, Store } from "./store.ts";

/** Options of {@link Manager.informer}. */
export interface InformerOptions<T extends KubeObject> {
  /**
   * Namespace to watch, "" for all; default the manager's `watchNamespace` (which may name
   * several, comma-separated: one reflector per namespace then, filling one shared store).
   */
  namespace?: string;
  /** Label selector of the list and watch (e.g. `app.kubernetes.io/managed-by=x`). */
  labelSelector?: string;
  /** Field selector of the list and watch. */
  fieldSelector?: string;
  /** Named indexes to add to the shared store (same name, same function when shared). */
  indexes?: Record<string, IndexFunc<T>>;
  /**
   * Cache transform of the shared store (the `transform` of {@link Store}'s options: it must keep
   * every field any user of the informer reads). Informers are shared, so every caller asking for
   * the same informer must pass the same function (or none after the first).
   */
  transform?: (obj: T) => T;
}

/**
 * Makes the reflector of a new informer (the manager's, with its options, metrics and logs: a
 * `Reflector`, or with several shards a `ShardReflector` around one, shard_reflector.ts).
 */
export type ReflectorFactory = <T extends KubeObject>(
  resource: ResourceType,
  store: Store<T>,
  namespace: string | undefined,
  opts: InformerOptions<T>,
) => InformerReflector;

/** Options of {@link InformerRegistry}. */
export interface InformerRegistryOptions {
  /**
   * Namespace of informers that name none; "" for all; several comma-separated (`a,b`): such an
   * informer watches each of them (see {@link MultiNamespaceReflector}).
   */
  watchNamespace: string;
  /** Makes each new informer's reflector. */
  reflector: ReflectorFactory;
  /** Called when a store's event handler throws. */
  onHandlerError: (err: unknown) => void;
  /** Deep-freeze cached objects (`StoreOptions.freeze`); default false. */
  freeze?: boolean;
}

/** Shared informers by resource, namespace and selectors; see the module doc. */
export class InformerRegistry {
  readonly #o: InformerRegistryOptions;
  readonly #informers = new Map<string, Informer<KubeObject>>();
  /** The transform each shared informer was made with (by informer id). */
  readonly #transforms = new Map<string, unknown>();

  /** An empty registry; see {@link InformerRegistryOptions}. */
  constructor(o: InformerRegistryOptions) {
    this.#o = o;
  }

  /** Every informer made so far, in the order they were first asked for. */
  all(): Informer<KubeObject>[] {
    return [...this.#informers.values()];
  }

  /**
   * The shared informer of `resource` in a namespace with selectors: the same one for the same
   * resource, namespace and selectors. Its name is the resource's plural, made unique (`-2`, ...).
   * @throws Error for an index name taken by another function, or for a `transform` other than
   *   the one the shared informer was made with.
   */
  informer<T extends KubeObject>(
    resource: ResourceType,
    opts: InformerOptions<T> = {},
  ): Informer<T> {
    const namespace = resource.namespaced
      ? (opts.namespace ?? this.#o.watchNamespace) || undefined
      : undefined;
    const namespaces = parseNamespaces(namespace);
    const id = [
      resource.apiVersion,
      resource.plural,
      namespaces.join(","),
      opts.labelSelector,
      opts.fieldSelector,
    ]
      .join("|");
    let inf = this.#informers.get(id) as Informer<T> | undefined;
    if (!inf) {
      inf = this.#make(resource, namespaces, opts);
      this.#informers.set(id, inf as unknown as Informer<KubeObject>);
      this.#transforms.set(id, opts.transform);
    } else if (opts.transform && opts.transform !== this.#transforms.get(id)) {
      throw new Error(`informer ${inf.name} is shared and already has another cache transform`);
    }
    for (const [name, fn] of Object.entries(opts.indexes ?? {})) inf.store.addIndex(name, fn);
    return inf;
  }

  #make<T extends KubeObject>(
    resource: ResourceType,
    namespaces: string[],
    opts: InformerOptions<T>,
  ): Informer<T> {
    const names = new Set(this.all().map((i) => i.name));
    let name = resource.plural;
    for (let n = 2; names.has(name); n++) name = `${resource.plural}-${n}`;
    const store = new Store<T>({
      onHandlerError: this.#o.onHandlerError,
      transform: opts.transform,
      freeze: this.#o.freeze,
    });
    const base = {
      name,
      resource,
      labelSelector: opts.labelSelector,
      fieldSelector: opts.fieldSelector,
      store,
    };
    if (namespaces.length <= 1) {
      const namespace = namespaces[0];
      return { ...base, namespace, reflector: this.#o.reflector(resource, store, namespace, opts) };
    }
    return {
      ...base,
      namespaces,
      reflector: new MultiNamespaceReflector(
        namespaces.map((ns) => this.#o.reflector(resource, store, ns, opts)),
      ),
    };
  }
}

/**
 * The namespaces of a watch namespace setting: "" or undefined for all (none listed), else its
 * comma-separated names, trimmed, empty ones and repeats dropped, sorted (so `b,a` and `a,b` share
 * one informer). Names are not validated here (the apiserver refuses a bad one).
 */
export function parseNamespaces(setting: string | undefined): string[] {
  if (!setting) return [];
  return [...new Set(setting.split(",").map((n) => n.trim()).filter((n) => n !== ""))].sort();
}

/**
 * Several reflectors, one per watched namespace, filling one store, seen as one
 * (controller-runtime's multi-namespace cache keeps a cache per namespace behind one interface;
 * here the store is shared and each reflector's relist replaces only its own namespace,
 * `Store.beginReplace(namespace)`). Synced when every one is; for `/readyz` it reports the worst
 * of them: the first not synced, the first deaf, the oldest failure.
 */
export class MultiNamespaceReflector implements InformerReflector {
  readonly #parts: readonly InformerReflector[];

  /** Wraps `parts` (at least one). */
  constructor(parts: readonly InformerReflector[]) {
    if (parts.length === 0) throw new Error("MultiNamespaceReflector: no reflector");
    this.#parts = parts;
  }

  /** Runs every part until `signal` aborts; rejects with the first part's failure. */
  async run(signal: AbortSignal): Promise<void> {
    await Promise.all(this.#parts.map((p) => p.run(signal)));
  }

  /** Resolves when every part has synced. */
  async waitForSync(): Promise<void> {
    await Promise.all(this.#parts.map((p) => p.waitForSync()));
  }

  /** Every part has synced. */
  get hasSynced(): boolean {
    return this.#parts.every((p) => p.hasSynced);
  }

  /** The part that is not synced, else deaf, else failing, else the first: what /readyz names. */
  #worst(): InformerReflector {
    return this.#parts.find((p) => !p.hasSynced) ?? this.#parts.find((p) => p.deaf) ??
      this.#parts.find((p) => p.failingSinceMs !== undefined) ?? this.#parts[0];
  }

  /** The last error of {@link MultiNamespaceReflector.#worst}. */
  get lastError(): string | undefined {
    return this.#worst().lastError;
  }

  /** The oldest start of a run of failures among the parts; undefined when none fails. */
  get failingSinceMs(): number | undefined {
    const since = this.#parts.map((p) => p.failingSinceMs).filter((t) => t !== undefined);
    return since.length ? Math.min(...since) : undefined;
  }

  /** The most failed attempts of a part. */
  get failedAttempts(): number {
    return Math.max(...this.#parts.map((p) => p.failedAttempts));
  }

  /** The state of {@link MultiNamespaceReflector.#worst}. */
  get state(): { phase: string } {
    return this.#worst().state;
  }

  /** Set while any part's watch is deaf (that part's). */
  get deaf(): { sinceMs: number; reason: string } | undefined {
    return this.#parts.find((p) => p.deaf)?.deaf;
  }
}
