/**
 * The reflector: keeps a {@link Store} equal to the apiserver's state of one resource by listing
 * (in pages) and then watching from the list's resourceVersion (client-go `cache.Reflector`,
 * kube-runtime `watcher`). Its states and transitions are the pure `step` of
 * reflector_machine.ts; {@link Reflector.run} is the I/O that drives it. The state table, the
 * reasons behind each rule and the figures are in docs/design/reflector.md.
 *
 * Rules users must know:
 * - Every list is a consistent read (resourceVersion unset, in pages of `pageSize`), and a
 *   controller acts on a synced store at once. `initialListFromCache` opts the first list into
 *   `resourceVersion=0` (the watch cache's state, maybe far behind: tests/e2e/stale_list_test.ts).
 * - A DELETE can be missed across a relist: the store then emits the delete itself, with the last
 *   state it saw. Use finalizers for cleanup that must happen.
 * - 410 Gone relists at once, then watches from the new list's resourceVersion; a second 410 in a
 *   row without progress backs off first. A paged list whose continue token expired is read again
 *   in one piece.
 * - Every watch resumes from the resourceVersion of the last event it applied (bookmarks
 *   included), so no event is applied twice. A watch silent for `idleTimeoutMs` (default
 *   {@link DEFAULT_WATCH_IDLE_TIMEOUT_MS}) is reopened; with evidence of a dead connection the
 *   informer is {@link Reflector.deaf} (reported by /readyz) until a watch is accepted again.
 *   Client restarts of a watch (`WatchRestartError`) and idle ends cost no backoff.
 * - WatchList (`useWatchList`) syncs with initial events as new as a consistent list; once synced
 *   its stream is an ordinary watch. An apiserver that refuses it (4xx) gets lists.
 * - Failures back off 800 ms doubling (jittered, see backoff.ts) to 30 s; a watch ending within
 *   {@link VERY_SHORT_WATCH_MS} without events is a failure; at most one watch is open at a time.
 *   {@link Reflector.failingSinceMs} is when the current run of failures began.
 *
 * @module
 */
import type { KubeClient, KubeObject, WatchOptions } from "../kube/client.ts";
import type { ResourceType } from "../kube/resources.ts";
import {
  Backoff,
  REFLECTOR_BACKOFF_INITIAL_MS,
  REFLECTOR_BACKOFF_MAX_MS,
  REFLECTOR_BACKOFF_RESET_MS,
} from "./backoff.ts";
import { type Clock, realClock, sleepOn } from "./clock.ts";
import {
  APISERVER_BOOKMARK_INTERVAL_MS,
  bookmarkWasDue,
  errorMessage,
  type ReflectorEffect,
  type ReflectorEvent,
  type ReflectorInput,
  type ReflectorMemory,
  type ReflectorState,
  step,
  VERY_SHORT_WATCH_MS,
  type WatchOutcome,
} from "./reflector_machine.ts";
import {
  defaultReflectorLogger,
  type ReflectorLogger,
  type ReflectorMetrics,
  reflectorReporter,
} from "./reflector_log.ts";
import { applyWatchEvent, type Stream } from "./reflector_stream.ts";
import type { Store } from "./store.ts";

export {
  APISERVER_BOOKMARK_INTERVAL_MS,
  type ReflectorEvent,
  type ReflectorMemory,
  type ReflectorState,
  VERY_SHORT_WATCH_MS,
};
export type { LogLevelFn, ReflectorLogger, ReflectorMetrics } from "./reflector_log.ts";

/** Lower bound of the server-side watch timeout (s); client-go minWatchTimeout, 5 min. */
export const MIN_WATCH_TIMEOUT_SECONDS = 300;
/**
 * Default client idle bound (ms): 75 s, one bookmark interval plus the 15 s margin kube-apiserver
 * itself allows around its bookmarks; a stream that has received a bookmark and is silent that
 * long has missed one ({@link bookmarkWasDue}; docs/design/reflector.md, "Watch idle bound").
 */
export const DEFAULT_WATCH_IDLE_TIMEOUT_MS = APISERVER_BOOKMARK_INTERVAL_MS + 15_000;
/** Default page size of the initial list; client-go pager default 500. */
export const DEFAULT_LIST_PAGE_SIZE = 500;
/**
 * Bound on the response headers of a watch that reopens a quiet stream (ms): 10 s; a path that
 * gives no headers in that time is dead (docs/design/reflector.md, "Watch idle bound").
 */
export const QUIET_RECONNECT_HEADERS_MS = 10_000;

/** Options of {@link Reflector}. */
export interface ReflectorOptions<T extends KubeObject> {
  /** Lists and watches through this client. */
  client: KubeClient;
  /** The resource to mirror. */
  resource: ResourceType;
  /** The cache to keep equal to the apiserver's state (the reflector owns its writes). */
  store: Store<T>;
  /** Limit to one namespace; default all. */
  namespace?: string;
  /** Label selector of the list and watch; only matching objects are cached. */
  labelSelector?: string;
  /** Field selector of the list and watch. */
  fieldSelector?: string;
  /**
   * Shard selector of the list and watch (lib/runtime/shards.ts; the apiserver's
   * `ShardedListAndWatch` feature gate): only objects of the held shards are sent.
   */
  shardSelector?: string;
  /** Page size of lists; default {@link DEFAULT_LIST_PAGE_SIZE}. */
  pageSize?: number;
  /**
   * List the first time at `resourceVersion=0` (the watch cache's state, possibly far behind; in
   * one piece) instead of a consistent read (see the module doc). Later lists are consistent.
   */
  initialListFromCache?: boolean;
  /** Client idle bound (ms); default {@link DEFAULT_WATCH_IDLE_TIMEOUT_MS}. */
  idleTimeoutMs?: number;
  /** Server watch timeout bounds (s); default 300..600. */
  watchTimeoutSeconds?: { min: number; max: number };
  /** Use WatchList (KEP-3157, `sendInitialEvents=true`) instead of list; falls back to list. */
  useWatchList?: boolean;
  /** Told about each step, after the reflector has logged and counted it. Must not throw. */
  onEvent?: (ev: ReflectorEvent) => void;
  /**
   * Where the reflector logs its events (reflector_log.ts); default the runtime's `reflector`
   * category with a `resource` property.
   */
  logger?: ReflectorLogger;
  /** Metrics to count lists, relists, failures and open watches in; none by default. */
  metrics?: ReflectorMetrics;
  /**
   * Told `true` when the apiserver accepts a watch (its response headers arrived) and `false`
   * when that watch ends, once each per watch: the sum over the calls is the number of this
   * reflector's watches open now (0 or 1). Must not throw.
   */
  onWatchOpen?: (open: boolean) => void;
  /** Time for backoff and failure tracking; default the real clock. */
  clock?: Clock;
  /** Source of jitter in [0, 1); default Math.random. */
  random?: () => number;
}

/** Keeps a Store in sync with one resource; {@link Reflector.run} until the signal aborts. */
export class Reflector<T extends KubeObject> {
  #o: ReflectorOptions<T>;
  #state: ReflectorState = { phase: "idle" };
  #synced = false;
  #syncedWaiters: (() => void)[] = [];
  #clock: Clock;
  #random: () => number;
  #report: (ev: ReflectorEvent) => void;
  #openWatches = 0;
  #lastError?: string;
  #failingSinceMs?: number;
  #failedAttempts = 0;
  #deaf?: { sinceMs: number; reason: string };
  #backoff: Backoff;
  /** The delay of the backoff in progress (ms), taken when the failure was counted. */
  #delayMs = 0;
  /** What the last watch did (step()'s {@link WatchOutcome}), the last resourceVersion applied. */
  #lastWatch: Stream<T>["seen"] = { appliedResourceVersion: "", accepted: false, bookmarks: false };

  /**
   * A reflector for one resource; it lists and watches once {@link Reflector.run} is called.
   * @param o see {@link ReflectorOptions}
   */
  constructor(o: ReflectorOptions<T>) {
    this.#o = o;
    this.#clock = o.clock ?? realClock;
    this.#random = o.random ?? Math.random;
    this.#backoff = new Backoff({
      initialMs: REFLECTOR_BACKOFF_INITIAL_MS,
      maxMs: REFLECTOR_BACKOFF_MAX_MS,
      resetAfterMs: REFLECTOR_BACKOFF_RESET_MS,
      random: this.#random,
      now: () => this.#clock.now(),
    });
    this.#report = reflectorReporter({
      resource: o.resource,
      logger: o.logger ?? defaultReflectorLogger(o.resource),
      metrics: o.metrics,
      health: o.client.health,
    });
  }

  /** Current state (see reflector_machine.ts). */
  get state(): ReflectorState {
    return this.#state;
  }

  /** The last list or watch failure (kept while retrying, cleared on success), for readiness. */
  get lastError(): string | undefined {
    return this.#lastError;
  }

  /**
   * Clock time (ms) of the first failed list or watch attempt since the last success (a list
   * applied, a watch event, or a watch open for {@link VERY_SHORT_WATCH_MS}); undefined while
   * healthy. A 410 relist and an idle reconnect are not failures.
   */
  get failingSinceMs(): number | undefined {
    return this.#failingSinceMs;
  }

  /** Failed list or watch attempts since the last success (0 while healthy). */
  get failedAttempts(): number {
    return this.#failedAttempts;
  }

  /**
   * Set while the informer is known not to hear the apiserver: its watch missed the bookmark
   * cadence (no byte for the idle bound), or was ended because its connection was found dead.
   * `sinceMs` is clock time; cleared when a watch is accepted again (response headers) or a list
   * is applied.
   */
  get deaf(): { sinceMs: number; reason: string } | undefined {
    return this.#deaf;
  }

  /** True once the first list (or WatchList initial events) has been applied to the store. */
  get hasSynced(): boolean {
    return this.#synced;
  }

  /** Number of watch streams open now (0 or 1). */
  get openWatches(): number {
    return this.#openWatches;
  }

  /** Resolves when {@link hasSynced} becomes true. */
  waitForSync(): Promise<void> {
    if (this.#synced) return Promise.resolve();
    return new Promise((r) => this.#syncedWaiters.push(r));
  }

  #emit(ev: ReflectorEvent): void {
    // Reporting must not break the loop.
    try {
      this.#report(ev);
    } catch { /* ignored */ }
    try {
      this.#o.onEvent?.(ev);
    } catch { /* ignored */ }
  }

  #succeeded(): void {
    this.#failingSinceMs = undefined;
    this.#failedAttempts = 0;
    this.#lastError = undefined;
    this.#backoff.reset();
  }

  #markSynced(): void {
    if (this.#synced) return;
    this.#synced = true;
    for (const w of this.#syncedWaiters.splice(0)) w();
  }

  /** Moves to the transition's state and carries out its effects, in order. */
  #apply(t: { state: ReflectorState; effects: ReflectorEffect[] }): void {
    this.#state = t.state;
    for (const e of t.effects) {
      switch (e.type) {
        case "report":
          this.#emit(e.event);
          break;
        case "deaf":
          this.#deaf ??= { sinceMs: this.#clock.now(), reason: e.reason };
          break;
        case "backoff":
          this.#delayMs = this.#backoff.next();
          this.#lastError = errorMessage(e.error);
          this.#failingSinceMs ??= this.#clock.now();
          this.#failedAttempts++;
          this.#emit({ type: "error", phase: e.phase, error: e.error, retryInMs: this.#delayMs });
          break;
      }
    }
  }

  /**
   * Runs until `signal` aborts. Never throws for API or network failures (they are reported as
   * `error` events and retried with backoff); resolves when stopped.
   */
  async run(signal: AbortSignal): Promise<void> {
    this.#apply(step(this.#state, {
      type: "start",
      useWatchList: !!this.#o.useWatchList,
      initialListFromCache: !!this.#o.initialListFromCache,
    }));
    while (!signal.aborted) {
      const input = await this.#perform(this.#state, signal);
      if (signal.aborted) break;
      this.#apply(step(this.#state, input));
    }
    this.#apply(step(this.#state, { type: "stop" }));
  }

  /** Does what `state` says (list, watch or wait) and returns what came of it. */
  async #perform(state: ReflectorState, signal: AbortSignal): Promise<ReflectorInput> {
    if (state.phase === "backoff") return await this.#wait(signal);
    if (state.phase === "listing" && state.via === "list") {
      try {
        return { type: "listed", resourceVersion: await this.#list(signal, !state.fromCache) };
      } catch (error) {
        return { type: "listFailed", error };
      }
    }
    if (state.phase !== "listing" && state.phase !== "watching") return { type: "stop" };
    const startedMs = this.#clock.now();
    try {
      const r = await this.#watch(state.memory, signal, state.phase === "listing");
      // A watch, or a WatchList that synced on the way (the state is watching since).
      if (this.#state.phase === "watching") {
        const durationMs = this.#clock.now() - startedMs;
        return { type: "watchEnded", events: r.events, durationMs, ...this.#outcome() };
      }
      return { type: "watchListEnded", synced: false, ...this.#outcome() };
    } catch (error) {
      return this.#state.phase === "watching"
        ? { type: "watchFailed", error, ...this.#outcome() }
        : { type: "watchListFailed", error, ...this.#outcome() };
    }
  }

  /** Waits out the backoff; the path to the apiserver recovering ends the wait early. */
  async #wait(signal: AbortSignal): Promise<ReflectorInput> {
    const woken = new AbortController();
    const unsubscribe = this.#o.client.health?.onRecovered(() => woken.abort());
    try {
      await sleepOn(this.#clock, this.#delayMs, AbortSignal.any([signal, woken.signal]));
    } catch {
      /* woken, or stopped (the run loop checks its signal) */
    } finally {
      unsubscribe?.();
    }
    return { type: "backoffDone" };
  }

  /** The last watch's {@link WatchOutcome}, with the connection's health now. */
  #outcome(): WatchOutcome {
    return { ...this.#lastWatch, healthy: this.#o.client.health?.healthy ?? true };
  }

  /**
   * Lists into the store. `consistent`: resourceVersion unset (the newest state); otherwise
   * resourceVersion=0 (the watch cache's state, maybe old: only with `initialListFromCache`).
   */
  async #list(signal: AbortSignal, consistent: boolean): Promise<string> {
    const o = this.#o;
    // Page by page into the store, so the decoded list never exists whole next to the cache
    // (docs/design/reflector.md, "Paged replace").
    let replacement = o.store.beginReplace(o.namespace);
    const res = await o.client.listPages<T>(
      o.resource,
      {
        namespace: o.namespace,
        labelSelector: o.labelSelector,
        fieldSelector: o.fieldSelector,
        shardSelector: o.shardSelector,
        limit: o.pageSize ?? DEFAULT_LIST_PAGE_SIZE,
        resourceVersion: consistent ? undefined : "0",
        signal,
      },
      (page) => {
        if (signal.aborted) throw signal.reason;
        replacement.add(page.items ?? []);
      },
      (err) => {
        // The pages so far belong to an older snapshot than the full list that follows: start the
        // replace over, so that the deletes at its end are those of the full list.
        replacement = o.store.beginReplace(o.namespace);
        this.#apply(step(this.#state, { type: "listContinueExpired", detail: err.message }));
      },
    );
    if (signal.aborted) throw signal.reason;
    const diff = replacement.finish();
    this.#succeeded();
    this.#deaf = undefined;
    this.#markSynced();
    this.#emit({
      type: "listed",
      resourceVersion: res.resourceVersion,
      items: res.items,
      pages: res.pages,
      ...diff,
    });
    return res.resourceVersion;
  }

  #watchTimeoutSeconds(): number {
    const b = this.#o.watchTimeoutSeconds ??
      { min: MIN_WATCH_TIMEOUT_SECONDS, max: 2 * MIN_WATCH_TIMEOUT_SECONDS };
    return Math.floor(b.min + this.#random() * (b.max - b.min));
  }

  /**
   * Streams one watch into the store, from `memory.resourceVersion`. With `initial`, the stream
   * is a WatchList: ADDED events up to the bookmark annotated `k8s.io/initial-events-end` go into
   * the store batch by batch as one replace (`store.beginReplace`, as a paged list does), and
   * objects missing from them are deleted only at that bookmark; from there on it is an ordinary
   * watch. Records what it did in `#lastWatch` (also when it throws).
   */
  async #watch(
    memory: ReflectorMemory,
    signal: AbortSignal,
    initial: boolean,
  ): Promise<Stream<T>> {
    const o = this.#o;
    const s: Stream<T> = {
      rv: initial ? "" : memory.resourceVersion,
      events: 0,
      replacement: initial ? o.store.beginReplace(o.namespace) : undefined,
      pending: [],
      seen: {
        appliedResourceVersion: initial ? "" : memory.resourceVersion,
        accepted: false,
        bookmarks: false,
      },
    };
    this.#lastWatch = s.seen;
    if (!initial) this.#emit({ type: "watchStarted", resourceVersion: s.rv });
    if (this.#openWatches > 0) throw new Error("reflector: a watch is already open");
    this.#openWatches++;
    // A stream that the apiserver accepted and that has not failed for this long is healthy,
    // even before its first event.
    let openTimer: unknown;
    const onOpen = () => {
      s.seen.accepted = true;
      this.#opened(true);
      this.#deaf = undefined;
      openTimer = this.#clock.setTimer(() => this.#succeeded(), VERY_SHORT_WATCH_MS);
    };
    try {
      const opts = this.#watchOptions(memory, initial, s.seen, onOpen, signal);
      for await (const batch of o.client.watchBatches<T>(o.resource, opts)) {
        // A stopped reflector changes the store no more, even if its stream has not ended yet
        // (a shard restart lists into the same store: docs/design/reflector.md).
        if (signal.aborted) break;
        // One batch is every frame of one chunk of the stream (decodeWatchBatches).
        for (const ev of batch) {
          if (this.#failingSinceMs !== undefined) this.#succeeded();
          applyWatchEvent(o.store, s, ev, (diff, rv) => {
            this.#apply(step(this.#state, { type: "watchListSynced", resourceVersion: rv }));
            this.#markSynced();
            this.#emit({
              type: "listed",
              resourceVersion: rv,
              items: o.store.size,
              pages: 0,
              ...diff,
            });
          });
        }
        // Once per batch (a chunk of the stream), not per event.
        if (s.replacement && s.pending.length > 0) {
          s.replacement.add(s.pending);
          s.pending = [];
        }
        if (!s.replacement) {
          this.#apply(step(this.#state, { type: "watchProgress", resourceVersion: s.rv }));
        }
      }
    } finally {
      if (openTimer !== undefined) this.#clock.clearTimer(openTimer);
      if (s.seen.accepted) this.#opened(false);
      this.#openWatches--;
    }
    return s;
  }

  /** The client's options for one watch (see {@link Reflector.#watch}). */
  #watchOptions(
    memory: ReflectorMemory,
    initial: boolean,
    seen: { bookmarks: boolean },
    onOpen: () => void,
    signal: AbortSignal,
  ): WatchOptions {
    const o = this.#o;
    const idleTimeoutMs = o.idleTimeoutMs ?? DEFAULT_WATCH_IDLE_TIMEOUT_MS;
    return {
      namespace: o.namespace,
      labelSelector: o.labelSelector,
      fieldSelector: o.fieldSelector,
      shardSelector: o.shardSelector,
      resourceVersion: initial ? undefined : memory.resourceVersion,
      allowWatchBookmarks: true,
      timeoutSeconds: this.#watchTimeoutSeconds(),
      idleTimeoutMs,
      // Asked when the bound fires: by then the stream's batches have been applied.
      idleIsFailure: () => bookmarkWasDue(seen.bookmarks, idleTimeoutMs),
      // After a quiet idle the reopening is the liveness check: it must be answered soon.
      headersTimeoutMs: memory.checkLiveness
        ? Math.min(QUIET_RECONNECT_HEADERS_MS, idleTimeoutMs)
        : undefined,
      sendInitialEvents: initial || undefined,
      resourceVersionMatch: initial ? "NotOlderThan" : undefined,
      onOpen,
      signal,
    };
  }

  /** Tells `onWatchOpen` and the open-watches gauge that the watch opened or ended. */
  #opened(open: boolean): void {
    this.#o.onWatchOpen?.(open);
    this.#o.metrics?.reflectorWatchesOpen.inc({ resource: this.#o.resource.plural }, open ? 1 : -1);
  }
}
