/**
 * The reflector of a namespaced informer when the manager runs with several shards
 * (docs/design/sharding.md, "Informers"): {@link ShardReflector} lists and watches only the
 * shards this replica holds, in one of two modes decided once at start ({@link ShardMode}):
 * - `server`: the apiserver serves `shardSelector` (the `ShardedListAndWatch` feature gate): the
 *   list and watch carry the selector of the held shards; when the held set changes, the reflector
 *   is restarted with the new selector (a relist: the store keeps the objects of shards still
 *   held, unchanged ones without events, and drops those of shards given back);
 * - `client`: the apiserver does not serve it: the reflector lists and watches every namespace
 *   and the store drops objects outside the held shards (`Store.setFilter`). A shard given back
 *   costs no restart (its objects are pruned from the store); a shard acquired costs one relist
 *   (its objects were not kept).
 * Holding no shard, no reflector runs (the informer counts as synced: a standby is ready).
 *
 * @module
 */
import type { KubeObject } from "../kube/client.ts";
import type { InformerReflector } from "./controller.ts";
import { shardOf, shardSelector } from "./shards.ts";
import type { Store } from "./store.ts";
import { linkedStop } from "./abort.ts";

/** Whether the apiserver applies `shardSelector` (`server`) or the store filters (`client`). */
export type ShardMode = "server" | "client";

/** Options of {@link ShardReflector}. */
export interface ShardReflectorOptions<T extends KubeObject> {
  /** Number of shards (2..256). */
  shards: number;
  /** The store the reflectors fill; its filter is set here. */
  store: Store<T>;
  /** The mode, once known (the manager's start-up probe). */
  mode: Promise<ShardMode>;
  /** Makes a new reflector listing and watching with `shardSelector` (undefined: everything). */
  make: (shardSelector: string | undefined) => InformerReflector;
  /** The shard of a namespace (memoized by the caller); default {@link shardOf}. */
  shardOfNamespace?: (namespace: string) => number;
}

/** The status of a reflector that does not run (no shard held). */
const IDLE = { phase: "idle (no shard held)" };

/** A reflector restarted with the held shards; see the module doc. */
export class ShardReflector<T extends KubeObject> implements InformerReflector {
  readonly #o: ShardReflectorOptions<T>;
  readonly #shardOf: (namespace: string) => number;
  #held = new Set<number>();
  #mode?: ShardMode;
  #signal?: AbortSignal;
  #current?: { reflector: InformerReflector; stop: AbortController; done: Promise<void> };
  /** Serializes restarts. */
  #chain: Promise<void> = Promise.resolve();
  /** Restarts queued on {@link #chain} by {@link setHeld} and not begun yet. */
  #queued = 0;
  #firstSync!: () => void;
  readonly #firstSynced: Promise<void>;

  /** A reflector that runs nothing until {@link run} and a held shard. */
  constructor(o: ShardReflectorOptions<T>) {
    this.#o = o;
    this.#shardOf = o.shardOfNamespace ?? ((ns) => shardOf(ns, o.shards));
    this.#firstSynced = new Promise((r) => this.#firstSync = r);
    o.store.setFilter((obj) => this.#admits(obj));
  }

  #admits(obj: KubeObject): boolean {
    const ns = obj.metadata?.namespace;
    return ns === undefined || ns === "" || this.#held.has(this.#shardOf(ns));
  }

  /** The mode, once {@link run} has learnt it. */
  get mode(): ShardMode | undefined {
    return this.#mode;
  }

  /**
   * Waits for the mode, starts a reflector for the held shards (if any) and runs until `signal`
   * aborts.
   */
  async run(signal: AbortSignal): Promise<void> {
    this.#mode = await this.#o.mode;
    this.#signal = signal;
    this.#chain = this.#chain.then(() => this.#restart());
    await this.#chain;
    await new Promise<void>((resolve) => {
      if (signal.aborted) resolve();
      else signal.addEventListener("abort", () => resolve(), { once: true });
    });
    await this.#stopCurrent();
  }

  /**
   * Sets the held shards. Objects of shards no longer held leave the store (without events);
   * the reflector is restarted when a shard was added, or in `server` mode when the set changed;
   * calls before a queued restart has begun share it (one relist for the newest set).
   * Resolves once the store holds every object of the held shards (the restarted reflector has
   * listed, or at once without a restart); rejects never.
   */
  setHeld(held: Iterable<number>): Promise<void> {
    const next = new Set(held);
    const added = [...next].some((k) => !this.#held.has(k));
    const removed = [...this.#held].some((k) => !next.has(k));
    this.#held = next;
    if (removed) this.#o.store.prune();
    const restart = added || (removed && this.#mode !== "client");
    if (!restart || this.#signal === undefined || this.#mode === undefined) {
      // Not running yet: run() starts with the held set; otherwise nothing to list.
      return this.#signal === undefined ? this.#firstSynced : this.waitForCurrent();
    }
    // Restarts queued together (several shards taken in one round) make one reflector: each
    // reads the held set when it begins, so all but the last would list for nothing.
    this.#queued++;
    this.#chain = this.#chain.then(() => --this.#queued > 0 ? undefined : this.#restart());
    return this.#chain.then(() => this.waitForCurrent());
  }

  /**
   * Resolves once the reflector running now (if any) has synced; when it is replaced meanwhile,
   * once its successor has (at most 1000 replacements are followed), or when stopped.
   */
  async waitForCurrent(): Promise<void> {
    for (let i = 0; i < 1000; i++) {
      await this.#chain;
      const cur = this.#current;
      if (!cur || this.#signal?.aborted) return;
      await Promise.race([cur.reflector.waitForSync(), cur.done]);
      if (this.#current === cur) return;
    }
  }

  /** Stops the running reflector (if any) and starts one for the held shards (if any). */
  async #restart(): Promise<void> {
    await this.#stopCurrent();
    const signal = this.#signal;
    if (!signal || signal.aborted) return;
    if (this.#held.size === 0) {
      this.#firstSync();
      return;
    }
    const selector = this.#mode === "server"
      ? shardSelector([...this.#held], this.#o.shards)
      : undefined;
    const reflector = this.#o.make(selector);
    // Not AbortSignal.any: a stop must not depend on a dependent signal staying alive (abort.ts).
    const link = linkedStop(signal);
    const done = reflector.run(link.signal).catch(() => {}).finally(link.unlink);
    this.#current = { reflector, stop: link.controller, done };
    reflector.waitForSync().then(() => this.#firstSync());
  }

  async #stopCurrent(): Promise<void> {
    const cur = this.#current;
    this.#current = undefined;
    if (!cur) return;
    cur.stop.abort();
    await cur.done;
  }

  /** Resolves once a first reflector has synced (or none is needed: no shard held). */
  waitForSync(): Promise<void> {
    return this.#firstSynced;
  }

  /** The running reflector has synced; true when none runs (no shard held). */
  get hasSynced(): boolean {
    if (this.#mode === undefined) return false;
    return this.#current?.reflector.hasSynced ?? this.#held.size === 0;
  }

  /** The running reflector's last error. */
  get lastError(): string | undefined {
    return this.#current?.reflector.lastError;
  }

  /** The running reflector's start of failures. */
  get failingSinceMs(): number | undefined {
    return this.#current?.reflector.failingSinceMs;
  }

  /** The running reflector's failed attempts. */
  get failedAttempts(): number {
    return this.#current?.reflector.failedAttempts ?? 0;
  }

  /** The running reflector's state. */
  get state(): { phase: string } {
    return this.#current?.reflector.state ??
      (this.#mode === undefined ? { phase: "detecting shard selector support" } : IDLE);
  }

  /** The running reflector's deafness. */
  get deaf(): { sinceMs: number; reason: string } | undefined {
    return this.#current?.reflector.deaf;
  }
}
