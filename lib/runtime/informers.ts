/**
 * The registry of shared informers behind {@link Manager.informer} (client-go
 * `SharedInformerFactory`): one informer per resource, namespace and selectors, however many
 * controllers ask for it, so each is listed and watched once.
 *
 * @module
 */
import type { KubeObject } from "../kube/client.ts";
import type { ResourceType } from "../kube/resources.ts";
import type { Informer } from "./controller.ts";
import type { Reflector } from "./reflector.ts";
import { type IndexFunc, Store } from "./store.ts";

/** Options of {@link Manager.informer}. */
export interface InformerOptions<T extends KubeObject> {
  /** Namespace to watch, "" for all; default the manager's `watchNamespace`. */
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

/** Makes the reflector of a new informer (the manager's, with its options, metrics and logs). */
export type ReflectorFactory = <T extends KubeObject>(
  resource: ResourceType,
  store: Store<T>,
  namespace: string | undefined,
  opts: InformerOptions<T>,
) => Reflector<T>;

/** Options of {@link InformerRegistry}. */
export interface InformerRegistryOptions {
  /** Namespace of informers that name none; "" for all. */
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
    const id = [
      resource.apiVersion,
      resource.plural,
      namespace,
      opts.labelSelector,
      opts.fieldSelector,
    ]
      .join("|");
    let inf = this.#informers.get(id) as Informer<T> | undefined;
    if (!inf) {
      inf = this.#make(resource, namespace, opts);
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
    namespace: string | undefined,
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
    return {
      name,
      resource,
      namespace,
      labelSelector: opts.labelSelector,
      fieldSelector: opts.fieldSelector,
      store,
      reflector: this.#o.reflector(resource, store, namespace, opts),
    };
  }
}
