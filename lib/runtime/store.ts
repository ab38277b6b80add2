/**
 * The informer cache: objects keyed `namespace/name` (or `name` for cluster-scoped), secondary
 * indexes, and add/update/delete handlers that receive old and new objects (client-go
 * `cache.Indexer` + `ResourceEventHandler`). Design notes and figures: docs/design/reflector.md.
 *
 * Rules:
 * - {@link Store.replace} (after a list) diffs against the cache: objects gone since the last
 *   state produce `delete` events (no ghosts after a disconnect), objects whose resourceVersion is
 *   unchanged produce no event at all (no spurious work after a relist).
 * - `metadata.managedFields` is dropped from cached objects by default: it is large and never read
 *   by a controller (controller-runtime offers the same transform).
 * - The store owns the objects it is given (the reflector hands it freshly decoded ones): dropping
 *   managedFields sets `metadata.managedFields` to undefined in place instead of copying the
 *   object (cheaper; docs/design/reflector.md, "Collections at rest"). Callers must not keep
 *   using an object after giving it to the store, except to read it.
 * - Objects handed to readers (get, list, byIndex, handlers) are the cache's own: read-only for
 *   everyone. With `freeze` (on in the tests) they are deep-frozen as they enter the cache, so a
 *   stray mutation throws (in strict-mode code, i.e. every module) instead of corrupting the
 *   cache for every other reader.
 * - A `transform` (controller-runtime's cache `TransformFunc`, kube-rs reflector's `modify`) runs
 *   on every object before it is cached or handed to handlers, after managedFields are dropped:
 *   it may delete fields nobody reads, to keep the cache small. What it removes is gone for every
 *   reader of the store (handlers, indexes, reconcilers), so it must keep every field they read,
 *   and `metadata.name`, `namespace` and `resourceVersion` always.
 * - A list can be applied page by page ({@link Store.beginReplace}): each page's objects are
 *   cached (and their handlers told) as the page arrives, and the deletes of objects no page held
 *   come at the end, so a reflector never holds more than one page of a list besides the cache.
 *   A reader during a relist therefore sees it half-applied: for each key the old or the new
 *   object (never a mix of both), objects of pages not yet read at their old state, and objects
 *   gone from the apiserver still cached until the replace finishes. Every change is also an
 *   event, so a level-based controller reconciles again once the relist is through. kube-rs swaps
 *   the whole new state in at once instead; the memory trade is in docs/design/reflector.md,
 *   "Paged replace".
 * - Handlers run synchronously in order of registration; a throwing handler is reported through
 *   `onHandlerError` and does not stop the others.
 *
 * @module
 */
import type { KubeObject } from "../kube/client.ts";
import { controllerOf } from "./ownership.ts";

/** The cache key of an object: `namespace/name`, or `name` when it has no namespace. */
export function objectKey(obj: KubeObject): string {
  const m = obj.metadata ?? {};
  return m.namespace ? `${m.namespace}/${m.name}` : `${m.name}`;
}

/** Splits a key from {@link objectKey} into namespace ("" when cluster-scoped) and name. */
export function splitKey(key: string): { namespace: string; name: string } {
  const i = key.indexOf("/");
  return i < 0
    ? { namespace: "", name: key }
    : { namespace: key.slice(0, i), name: key.slice(i + 1) };
}

/** Computes index values of an object (e.g. its controller owner's UID). */
export type IndexFunc<T> = (obj: T) => string[];

/** Receives cache changes. `update` gets old and new; `delete` gets the last known state. */
export interface StoreHandler<T> {
  /** An object entered the cache (first seen, or seen again after a relist). */
  add?(obj: T): void;
  /** An object changed (new resourceVersion): its previous and new state. */
  update?(oldObj: T, newObj: T): void;
  /** An object left the cache: its last known state. */
  delete?(obj: T): void;
}

/** Index name of {@link controllerUidIndex}. */
export const CONTROLLER_UID_INDEX = "controllerUID";

/** Index function: the UID of the object's controller ownerReference, if any. */
export function controllerUidIndex(obj: KubeObject): string[] {
  const ref = controllerOf(obj);
  return ref ? [ref.uid] : [];
}

/** Options of {@link Store}. */
export interface StoreOptions<T> {
  /** Keep `metadata.managedFields` (default false: dropped). */
  keepManagedFields?: boolean;
  /** Named index functions. */
  indexes?: Record<string, IndexFunc<T>>;
  /** Reports an exception thrown by a handler. */
  onHandlerError?: (err: unknown) => void;
  /**
   * Runs on every object entering the cache (list items and watch events, after managedFields
   * are dropped) and returns what to cache: the object itself changed in place, or a new one.
   * See the module doc for what it must keep. Must not throw.
   */
  transform?: (obj: T) => T;
  /**
   * Deep-freeze every object as it enters the cache (after managedFields are dropped and the
   * transform ran), so that a reader mutating a cached object throws a TypeError. Default false:
   * freezing walks every object; the tests turn it on.
   */
  freeze?: boolean;
}

/**
 * Freezes `value` and everything reachable from it through own properties (objects and arrays);
 * returns it. Already frozen parts are not walked again.
 */
export function deepFreeze<V>(value: V): V {
  if (value === null || typeof value !== "object" || Object.isFrozen(value)) return value;
  Object.freeze(value);
  for (const v of Object.values(value)) deepFreeze(v);
  return value;
}

/** Counts of one replace: objects new to the cache, changed (new resourceVersion), removed. */
export interface ReplaceCounts {
  /** Objects listed that were not cached. */
  added: number;
  /** Objects listed with another resourceVersion than the cached one. */
  updated: number;
  /** Cached objects the list did not hold. */
  deleted: number;
}

/** A replace in progress ({@link Store.beginReplace}): pages in, then {@link finish}. */
export interface Replacement<T> {
  /** Caches one page of the list at once: adds and updates (unchanged resourceVersion: nothing). */
  add(items: Iterable<T>): void;
  /** Deletes every cached object that no page held, and returns the counts. Call once. */
  finish(): ReplaceCounts;
}

/** A keyed, indexed cache of one resource type. */
export class Store<T extends KubeObject> {
  #items = new Map<string, T>();
  #indexes = new Map<string, Map<string, Set<string>>>();
  /** Each index function with its map (value → keys), in a list walked on every change. */
  #indexList: { fn(obj: T): string[]; idx: Map<string, Set<string>> }[] = [];
  #handlers: StoreHandler<T>[] = [];
  #keepManagedFields: boolean;
  /** Method syntax: checked bivariantly, so a Store<Pod> is still a Store<KubeObject>. */
  #transformer?: { fn(obj: T): T };
  #onHandlerError: (err: unknown) => void;
  #freeze: boolean;
  /** Which objects may be cached (sharding's client-side filter); none: every object. */
  #admit?: { fn(obj: KubeObject): boolean };

  /**
   * An empty store with the given indexes.
   * @param o see {@link StoreOptions}
   */
  constructor(o: StoreOptions<T> = {}) {
    for (const [name, fn] of Object.entries(o.indexes ?? {})) {
      const idx = new Map<string, Set<string>>();
      this.#indexes.set(name, idx);
      this.#indexList.push({ fn, idx });
    }
    this.#keepManagedFields = !!o.keepManagedFields;
    if (o.transform) this.#transformer = { fn: o.transform };
    this.#onHandlerError = o.onHandlerError ?? ((e) => console.error(e));
    this.#freeze = !!o.freeze;
  }

  /**
   * Adds a named index, computed at once over the cached objects and kept up to date after.
   * Adding the same function under the same name again does nothing (informers shared between
   * controllers may each ask for it).
   * @throws Error when `name` already indexes with a different function.
   */
  addIndex(name: string, fn: IndexFunc<T>): void {
    const existing = this.#indexList.find((e) => this.#indexes.get(name) === e.idx);
    if (existing) {
      if (existing.fn === fn) return;
      throw new Error(`index ${name} already exists with another function`);
    }
    const idx = new Map<string, Set<string>>();
    this.#indexes.set(name, idx);
    this.#indexList.push({ fn, idx });
    for (const [key, obj] of this.#items) {
      for (const v of fn(obj)) {
        let s = idx.get(v);
        if (!s) idx.set(v, s = new Set());
        s.add(key);
      }
    }
  }

  /**
   * Sets (or with `undefined` clears) which objects may be cached: objects it refuses are not
   * cached by {@link upsert} or a replace and raise no event (sharding's client-side filter,
   * docs/design/sharding.md). Cached objects it refuses stay until {@link prune}.
   */
  setFilter(admit: ((obj: KubeObject) => boolean) | undefined): void {
    this.#admit = admit ? { fn: admit } : undefined;
  }

  /**
   * Drops every cached object the filter ({@link setFilter}) refuses, without events (they were
   * not deleted: this replica stopped caring for them). Returns how many were dropped.
   */
  prune(): number {
    const admit = this.#admit;
    if (!admit) return 0;
    let n = 0;
    for (const [key, obj] of [...this.#items]) {
      if (admit.fn(obj)) continue;
      this.#items.delete(key);
      this.#index(key, undefined, obj);
      n++;
    }
    return n;
  }

  /** Registers a handler; it is told about future changes only. */
  addHandler(h: StoreHandler<T>): void {
    this.#handlers.push(h);
  }

  /** Number of cached objects. */
  get size(): number {
    return this.#items.size;
  }

  /** The cached object with this key, if any. */
  get(key: string): T | undefined {
    return this.#items.get(key);
  }

  /** All cached objects (a fresh array). */
  list(): T[] {
    return [...this.#items.values()];
  }

  /** All keys (a fresh array). */
  keys(): string[] {
    return [...this.#items.keys()];
  }

  /** Objects whose index `indexName` yields `value`. @throws Error for an unknown index. */
  byIndex(indexName: string, value: string): T[] {
    const idx = this.#indexes.get(indexName);
    if (!idx) throw new Error(`no index ${indexName}`);
    const keys = idx.get(value);
    if (!keys) return [];
    const out: T[] = [];
    for (const k of keys) {
      const o = this.#items.get(k);
      if (o) out.push(o);
    }
    return out;
  }

  /**
   * Drops managedFields in place (see the module doc: the store owns what it is given), then
   * applies the transform, then freezes the result if asked to.
   */
  #strip(obj: T): T {
    if (!this.#keepManagedFields && obj.metadata?.managedFields) {
      obj.metadata.managedFields = undefined;
    }
    const out = this.#transformer ? this.#transformer.fn(obj) : obj;
    return this.#freeze ? deepFreeze(out) : out;
  }

  #index(key: string, obj: T | undefined, old: T | undefined): void {
    for (const { fn, idx } of this.#indexList) {
      if (old) {
        for (const v of fn(old)) {
          const s = idx.get(v);
          s?.delete(key);
          if (s && s.size === 0) idx.delete(v);
        }
      }
      if (obj) {
        for (const v of fn(obj)) {
          let s = idx.get(v);
          if (!s) idx.set(v, s = new Set());
          s.add(key);
        }
      }
    }
  }

  #emit(fn: (h: StoreHandler<T>) => void): void {
    for (const h of this.#handlers) {
      try {
        fn(h);
      } catch (err) {
        this.#onHandlerError(err);
      }
    }
  }

  /** Adds or replaces an object (watch ADDED/MODIFIED) and notifies handlers. Takes `raw`. */
  upsert(raw: T): void {
    if (this.#admit && !this.#admit.fn(raw)) return;
    const obj = this.#strip(raw);
    const key = objectKey(obj);
    const old = this.#items.get(key);
    this.#items.set(key, obj);
    this.#index(key, obj, old);
    if (old) this.#emit((h) => h.update?.(old, obj));
    else this.#emit((h) => h.add?.(obj));
  }

  /** Removes an object (watch DELETED) and notifies handlers with the final state. */
  remove(raw: T): void {
    const key = objectKey(raw);
    const old = this.#items.get(key);
    if (!old && this.#admit && !this.#admit.fn(raw)) return;
    this.#items.delete(key);
    this.#index(key, undefined, old);
    const last = raw.metadata ? this.#strip(raw) : (old ?? raw);
    this.#emit((h) => h.delete?.(last));
  }

  /**
   * Replaces the whole content (or that of `namespace`, see {@link beginReplace}) with a fresh
   * list: deletes for objects no longer listed, adds for new ones, updates only where the
   * resourceVersion changed. Returns the counts.
   */
  replace(items: T[], namespace?: string): ReplaceCounts {
    const r = this.beginReplace(namespace);
    r.add(items);
    return r.finish();
  }

  /**
   * Starts a replace that takes the list page by page (see the module doc): each page is cached
   * as it is given, with the events {@link replace} would emit for it, and {@link
   * Replacement.finish} removes what no page held. Until then the cache holds the pages given so
   * far next to the objects not listed yet. A replace that is never finished (a list that failed
   * mid-way) deletes nothing: the next replace starts afresh.
   * @param namespace the list's namespace: only objects of that namespace are removed when not
   *   listed (several namespaced reflectors fill one store, one per watched namespace, as
   *   controller-runtime's multi-namespace cache does); default the whole store
   */
  beginReplace(namespace?: string): Replacement<T> {
    const seen = new Set<string>();
    const counts: ReplaceCounts = { added: 0, updated: 0, deleted: 0 };
    let finished = false;
    return {
      add: (items: Iterable<T>) => {
        if (finished) throw new Error("Store: a replace was given a page after it finished");
        for (const raw of items) {
          if (this.#admit && !this.#admit.fn(raw)) continue;
          const key = objectKey(raw);
          seen.add(key);
          const old = this.#items.get(key);
          if (old && old.metadata?.resourceVersion === raw.metadata?.resourceVersion) continue;
          if (old) counts.updated++;
          else counts.added++;
          this.upsert(raw);
        }
      },
      finish: () => {
        if (finished) throw new Error("Store: a replace finished twice");
        finished = true;
        for (const [key, old] of [...this.#items]) {
          if (seen.has(key)) continue;
          if (namespace !== undefined && old.metadata?.namespace !== namespace) continue;
          this.#items.delete(key);
          this.#index(key, undefined, old);
          counts.deleted++;
          this.#emit((h) => h.delete?.(old));
        }
        return counts;
      },
    };
  }
}
