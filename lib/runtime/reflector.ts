/**
 * The reflector: keeps a {@link Store} equal to the apiserver's state of one resource by listing
 * (in pages) and then watching from the list's resourceVersion (client-go `cache.Reflector`,
 * kube-runtime `watcher`).
 *
 * States ({@link ReflectorState}): `listing` → `watching` → (stream ends) `watching` again from the
 * last resourceVersion, or (410 Gone) `listing`, or (other failure) `backoff` → `watching` /
 * `listing`. Rules users must know:
 * - Every list is a consistent read (resourceVersion unset, in pages of `pageSize`): the store
 *   reports synced on it, and a controller acts on a synced store at once, before the watch has
 *   brought anything newer. A `resourceVersion=0` list (client-go's first list) is answered from
 *   the apiserver's watch cache with whatever state that cache holds, which on an HA control
 *   plane can be arbitrarily old (an apiserver whose etcd watch stalls keeps serving it): an
 *   operator restarted against such an apiserver saw an AppService scaled 2 → 4 at 2 replicas
 *   next to its 4 Pods and deleted 2 of them (tests/e2e/stale_list_test.ts). A consistent list
 *   waits until the apiserver is current, or fails and is retried. `initialListFromCache` opts
 *   the first list into `resourceVersion=0` for consumers that never act on a synced store
 *   before its watch has caught up (measured on kube-apiserver 1.36 with 10,000 ConfigMaps: 139
 *   ms of apiserver CPU against 377 ms for a consistent list in pages of 500).
 * - A DELETE can be missed across a relist: the store then emits the delete itself when the list
 *   no longer holds the object, but with the last state it saw. Use finalizers for cleanup that must
 *   happen.
 * - 410 Gone, as an HTTP answer or as an ERROR event in the stream, means the resourceVersion was
 *   compacted away: relist (once, immediately), then watch from the new list's resourceVersion. A
 *   second 410 in a row without progress goes through backoff, so there is never a tight loop.
 * - Watches ask for bookmarks and a server timeout drawn between 5 and 10 min (client-go's
 *   `minWatchTimeout` × [1, 2)). kube-apiserver sends a watcher that allows bookmarks one about
 *   every minute ({@link APISERVER_BOOKMARK_INTERVAL_MS}), so a stream that delivers no byte for
 *   `idleTimeoutMs` (default {@link DEFAULT_WATCH_IDLE_TIMEOUT_MS}: a missed bookmark plus the
 *   apiserver's own margin; response headers included) is on a dead connection: it is closed
 *   and resumed from the last resourceVersion on a new connection, and the informer is deaf
 *   ({@link Reflector.deaf}, which /readyz reports) until a watch is accepted again.
 *   That holds with evidence of a dead connection: a bookmark was due (this reflector's watches
 *   have carried them), the watch was never accepted, or other requests get no answer either.
 *   Without (an apiserver without a watch cache sends no bookmarks; a healthy path) the stream is
 *   quiet: it is reopened from the last resourceVersion without being a failure or deaf, and the
 *   reopening is the liveness check, its headers bounded by {@link QUIET_RECONNECT_HEADERS_MS}.
 * - A paged list whose continue token expired (410 on a later page: etcd compacted) is read
 *   again in one piece (the client's `listPages`, client-go's pager), the store's replace started
 *   over for it.
 * - The watch's health is tied to the connection's (see the client's ConnectionHealth): when the
 *   path to the apiserver recovers after failures, a watch that has received nothing since the
 *   failures began is ended by the client ({@link WatchRestartError} `stalled`) and resumed at
 *   once, and a reflector waiting in backoff tries again at once; a change of the CA or client
 *   certificate files ends watches too (`credentials`), to reconnect with the new material. Such
 *   restarts, like idle ones, cost no backoff, no relist and no store event.
 * - Every watch, after whatever failure, resumes from the resourceVersion of the last event it
 *   applied (bookmarks included), so no event is applied twice.
 * - WatchList (`useWatchList`, KEP-3157) gives the same guarantee as a consistent list: with no
 *   resourceVersion and `resourceVersionMatch=NotOlderThan` the apiserver sends initial events at
 *   least as new as etcd's current revision, streamed from its watch cache. It is not the
 *   default here: kube-apiserver 1.36 flushes every initial event on its own, so the stream
 *   arrives one event per read, and each read costs this single-threaded client more than
 *   the Go reflector. Measured on the local control plane (a 2-core machine; ms from spawn to
 *   `/readyz`, medians of 5): 1,000 AppServices with their Pods, paged lists 480, WatchList 540;
 *   5,000: 1,455–1,554 against 1,769–1,800; the controller-runtime peer (WatchList) 1,866–2,051.
 * - WatchList: once the initial events are applied (the `initial-events-end`
 *   bookmark), the stream is an ordinary watch, and a failure of it is one: it resumes with a
 *   plain watch from the last applied resourceVersion, not with new initial events (client-go's
 *   reflector, once synced, watches from `lastSyncResourceVersion` without `sendInitialEvents`).
 *   Only a 410 Gone, or a failure before the initial events are complete, syncs again.
 * - A stream that ends within {@link VERY_SHORT_WATCH_MS} without any event counts as a failure
 *   (backoff), so a server or proxy that closes streams at once causes no reconnect burst.
 * - Failures back off 800 ms doubling (jitter up to +100 %, at the cap too: see backoff.ts) to
 *   30 s, and at most one watch per reflector is open at any time. A success resets the backoff
 *   (and after 2 min without failures, client-go's rule): a list applied, or a watch that the
 *   apiserver accepted and that then delivered data (an event or a bookmark) or stayed open for
 *   {@link VERY_SHORT_WATCH_MS}. So on a link that drops every connection every few seconds each
 *   watch is resumed within about a second of the drop, instead of waiting at the cap.
 * - {@link Reflector.failingSinceMs} is when the current run of failed attempts began; a success
 *   (as above) ends the run. Readiness uses it to tell a stale cache from a blip.
 *
 * @module
 */
import type { KubeClient, KubeObject } from "../kube/client.ts";
import { isGone } from "../kube/errors.ts";
import type { ResourceType } from "../kube/resources.ts";
import { WatchIdleError, WatchRestartError } from "../kube/watch.ts";
import {
  Backoff,
  REFLECTOR_BACKOFF_INITIAL_MS,
  REFLECTOR_BACKOFF_MAX_MS,
  REFLECTOR_BACKOFF_RESET_MS,
} from "./backoff.ts";
import { type Clock, realClock, sleepOn } from "./clock.ts";
import type { Store } from "./store.ts";

/** Lower bound of the server-side watch timeout (s); client-go minWatchTimeout, 5 min. */
export const MIN_WATCH_TIMEOUT_SECONDS = 300;
/**
 * How often kube-apiserver sends a BOOKMARK to a watcher that allows them (ms): about every
 * minute. Source: kube-apiserver 1.36, `staging/src/k8s.io/apiserver/pkg/storage/cacher`:
 * `defaultBookmarkFrequency = time.Minute` (cacher.go); `cacheWatcher.nextBookmarkTime` schedules
 * the next one a frequency after the last (or 2 s before the watch's deadline, if sooner), in
 * one-second buckets that `dispatchEvents` pops every second ± 25 % (cache_watcher.go,
 * cacher.go). A quiet watch thus gets its first bookmark about 60 s after it starts and one about
 * every 60–62 s after that. Watches served from the watch cache get them (the default for every
 * built-in resource and CRD); with `--watch-cache=false` there are none, and a quiet watch is
 * reconnected every idle bound (one request).
 */
export const APISERVER_BOOKMARK_INTERVAL_MS = 60_000;
/**
 * Default client idle bound (ms): 75 s, one bookmark interval plus 15 s — the margin
 * kube-apiserver itself allows around its bookmarks (`DefaultEventFreshDuration =
 * defaultBookmarkFrequency + 15 s`, cacher.go). A watch silent that long has missed a bookmark:
 * its connection is dead. (It was 3 min, which left a stalled watch deaf for up to 3 min.)
 */
export const DEFAULT_WATCH_IDLE_TIMEOUT_MS = APISERVER_BOOKMARK_INTERVAL_MS + 15_000;
/** Default page size of the initial list; client-go pager default 500. */
export const DEFAULT_LIST_PAGE_SIZE = 500;
/**
 * Bound on the response headers of a watch that reopens a quiet stream (ms): 10 s. Without
 * bookmarks the reopening is what tells a quiet stream from a dead path; kube-apiserver answers a
 * watch's headers at once (up to ~3 s while its watch cache catches up with the resourceVersion),
 * so a path that gives no headers in 10 s is dead: the informer is deaf and the path is failing
 * (its probe then notices the recovery). Without this bound a stalled path would stay unnoticed
 * for two idle bounds.
 */
export const QUIET_RECONNECT_HEADERS_MS = 10_000;
/** A watch ending sooner than this (ms) without any event backs off; client-go reflector, 1 s. */
export const VERY_SHORT_WATCH_MS = 1_000;

/** Where the reflector is. */
export type ReflectorState =
  | { phase: "idle" }
  | { phase: "listing" }
  | { phase: "watching"; resourceVersion: string }
  | { phase: "backoff"; delayMs: number; error: string }
  | { phase: "stopped" };

/** What the reflector reports as it goes (for logs, metrics and readiness). */
export type ReflectorEvent =
  | {
    type: "listed";
    resourceVersion: string;
    items: number;
    pages: number;
    added: number;
    updated: number;
    deleted: number;
  }
  | { type: "watchStarted"; resourceVersion: string }
  | { type: "watchEnded"; resourceVersion: string; events: number }
  | { type: "relist"; reason: "gone"; phase: "list" | "watch"; resourceVersion: string }
  /** A continue token expired mid-list (410): the list is read again in one piece. */
  | { type: "listExpired"; detail: string }
  /**
   * A watch delivered no byte for the idle bound and is reopened from the last resourceVersion.
   * `quiet`: nothing says its connection died — this reflector's watches never received a
   * bookmark (an apiserver without a watch cache sends none), the watch had been accepted and
   * the path to the apiserver is healthy — so the silence is normal and the reopening is the
   * liveness check, not a failure. Otherwise (a bookmark missed, no headers, other requests
   * failing too) the informer was deaf and is marked so.
   */
  | { type: "idle"; resourceVersion: string; idleMs: number; quiet: boolean }
  | {
    type: "restart";
    why: WatchRestartError["why"];
    resourceVersion: string;
    detail: string;
  }
  | { type: "error"; phase: "list" | "watch"; error: unknown; retryInMs: number };

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
  /** Page size of lists; default {@link DEFAULT_LIST_PAGE_SIZE}. */
  pageSize?: number;
  /**
   * List the first time at `resourceVersion=0` (whatever state the apiserver's watch cache holds,
   * possibly far behind; in one piece) instead of a consistent read. Default false: a store
   * synced on a stale list makes a controller act on that state (see the module doc). Later lists
   * are consistent either way.
   */
  initialListFromCache?: boolean;
  /** Client idle bound (ms); default {@link DEFAULT_WATCH_IDLE_TIMEOUT_MS}. */
  idleTimeoutMs?: number;
  /** Server watch timeout bounds (s); default 300..600. */
  watchTimeoutSeconds?: { min: number; max: number };
  /** Use WatchList (KEP-3157, `sendInitialEvents=true`) instead of list; falls back to list. */
  useWatchList?: boolean;
  /** Told about each step. Must not throw. */
  onEvent?: (ev: ReflectorEvent) => void;
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
  #watchListUnsupported = false;
  #openWatches = 0;
  #lastError?: string;
  #failingSinceMs?: number;
  #failedAttempts = 0;
  #deaf?: { sinceMs: number; reason: string };
  #backoff: Backoff;
  /**
   * resourceVersion of the last event (bookmarks included) the current or last plain watch
   * applied. A watch that fails (idle, network, 5xx) resumes from here, not from where it began:
   * resuming earlier would replay events already applied (duplicate handler calls) or run into
   * 410 and relist for nothing.
   */
  #watchRv = "";
  /**
   * Whether a watch of this reflector ever received a BOOKMARK: the apiserver sends them (about
   * every minute), so a stream silent past the idle bound missed one and sat on a dead
   * connection. Without bookmarks (no watch cache) silence is normal (see the `idle` event).
   */
  #bookmarksSeen = false;
  /** The next watch reopens a quiet stream: its headers are bounded by {@link QUIET_RECONNECT_HEADERS_MS}. */
  #checkLiveness = false;
  /** Whether the last watch opened got its response headers (the apiserver accepted it). */
  #lastWatchAccepted = false;

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
  }

  /** Current state. */
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
    try {
      this.#o.onEvent?.(ev);
    } catch { /* reporting must not break the loop */ }
  }

  #succeeded(): void {
    this.#failingSinceMs = undefined;
    this.#failedAttempts = 0;
    this.#lastError = undefined;
    this.#backoff.reset();
  }

  #markDeaf(reason: string): void {
    this.#deaf ??= { sinceMs: this.#clock.now(), reason };
  }

  #markSynced(): void {
    if (this.#synced) return;
    this.#synced = true;
    for (const w of this.#syncedWaiters.splice(0)) w();
  }

  /**
   * Lists into the store. `consistent`: resourceVersion unset (the newest state); otherwise
   * resourceVersion=0 (the watch cache's state, maybe old: only with `initialListFromCache`).
   */
  async #list(signal: AbortSignal, consistent: boolean): Promise<string> {
    this.#state = { phase: "listing" };
    const o = this.#o;
    // Page by page into the store: each page is cached (managedFields dropped, transformed) and
    // released before the next is fetched, so the decoded list never exists whole next to the
    // cache (measured in BENCHMARKS.md, memory section).
    let replacement = o.store.beginReplace();
    const res = await o.client.listPages<T>(
      o.resource,
      {
        namespace: o.namespace,
        labelSelector: o.labelSelector,
        fieldSelector: o.fieldSelector,
        limit: o.pageSize ?? DEFAULT_LIST_PAGE_SIZE,
        resourceVersion: consistent ? undefined : "0",
        signal,
      },
      (page) => replacement.add(page.items ?? []),
      (err) => {
        // The pages so far belong to an older snapshot than the full list that follows: start the
        // replace over, so that the deletes at its end are those of the full list.
        replacement = o.store.beginReplace();
        this.#emit({ type: "listExpired", detail: err.message });
      },
    );
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
   * Streams one watch into the store. With `initial`, the stream is a WatchList: ADDED events up
   * to the bookmark annotated `k8s.io/initial-events-end` go into the store batch by batch as
   * one replace (`store.beginReplace`, as a paged list does: no batch's objects are held twice,
   * and objects missing from the initial events are deleted only at that bookmark); from there
   * on it is an ordinary watch, and `#watchRv` follows it. Returns
   * the last resourceVersion seen, how many events came and whether the initial events (if any)
   * were complete.
   */
  async #watch(
    rv: string,
    signal: AbortSignal,
    initial: boolean,
  ): Promise<{ rv: string; events: number; synced: boolean }> {
    const o = this.#o;
    this.#state = { phase: "watching", resourceVersion: rv };
    if (!initial) this.#emit({ type: "watchStarted", resourceVersion: rv });
    let events = 0;
    // WatchList: ADDED events go into one replace, a batch at a time, until the
    // initial-events-end bookmark; after it the stream is an ordinary watch and events go
    // straight to the store (replacement = undefined).
    let replacement = initial ? o.store.beginReplace() : undefined;
    let pending: T[] = [];
    this.#watchRv = initial ? "" : rv;
    if (this.#openWatches > 0) throw new Error("reflector: a watch is already open");
    this.#openWatches++;
    // A stream that the apiserver accepted and that has not failed for this long is healthy,
    // even before its first event.
    let openTimer: unknown;
    let accepted = false;
    const onOpen = () => {
      accepted = true;
      this.#checkLiveness = false;
      o.onWatchOpen?.(true);
      this.#deaf = undefined;
      openTimer = this.#clock.setTimer(() => this.#succeeded(), VERY_SHORT_WATCH_MS);
    };
    try {
      for await (
        const batch of o.client.watchBatches<T>(o.resource, {
          namespace: o.namespace,
          labelSelector: o.labelSelector,
          fieldSelector: o.fieldSelector,
          resourceVersion: initial ? undefined : rv,
          allowWatchBookmarks: true,
          timeoutSeconds: this.#watchTimeoutSeconds(),
          idleTimeoutMs: o.idleTimeoutMs ?? DEFAULT_WATCH_IDLE_TIMEOUT_MS,
          idleIsFailure: this.#bookmarksSeen,
          // After a quiet idle the reopening is the liveness check: it must be answered soon.
          headersTimeoutMs: this.#checkLiveness
            ? Math.min(QUIET_RECONNECT_HEADERS_MS, o.idleTimeoutMs ?? DEFAULT_WATCH_IDLE_TIMEOUT_MS)
            : undefined,
          sendInitialEvents: initial || undefined,
          resourceVersionMatch: initial ? "NotOlderThan" : undefined,
          onOpen,
          signal,
        })
      ) {
        // One batch is every frame of one chunk of the stream (decodeWatchBatches).
        for (const ev of batch) {
          events++;
          if (this.#failingSinceMs !== undefined) this.#succeeded();
          const obj = ev.object as T;
          const newRv = obj.metadata?.resourceVersion;
          switch (ev.type) {
            case "ADDED":
            case "MODIFIED":
              if (replacement) pending.push(obj);
              else o.store.upsert(obj);
              break;
            case "DELETED":
              o.store.remove(obj);
              break;
            case "BOOKMARK":
              this.#bookmarksSeen = true;
              if (
                replacement &&
                obj.metadata?.annotations?.["k8s.io/initial-events-end"] === "true"
              ) {
                replacement.add(pending);
                pending = [];
                const diff = replacement.finish();
                replacement = undefined;
                this.#markSynced();
                this.#emit({
                  type: "listed",
                  resourceVersion: newRv ?? rv,
                  items: o.store.size,
                  pages: 0,
                  ...diff,
                });
              }
              break;
            default: {
              const never: never = ev;
              throw new Error(`unexpected watch event ${JSON.stringify(never)}`);
            }
          }
          if (newRv) {
            rv = newRv;
            if (!replacement) this.#watchRv = rv;
          }
        }
        // Once per batch (a chunk of the stream), not per event.
        if (replacement && pending.length > 0) {
          replacement.add(pending);
          pending = [];
        }
        this.#state = { phase: "watching", resourceVersion: rv };
      }
    } finally {
      if (openTimer !== undefined) this.#clock.clearTimer(openTimer);
      if (accepted) o.onWatchOpen?.(false);
      this.#lastWatchAccepted = accepted;
      this.#openWatches--;
    }
    return { rv, events, synced: !replacement };
  }

  /**
   * Runs until `signal` aborts. Never throws for API or network failures (they are reported as
   * `error` events and retried with backoff); resolves when stopped.
   */
  async run(signal: AbortSignal): Promise<void> {
    const backoff = this.#backoff;
    let rv = "";
    let needList = true;
    let goneInARow = 0;
    // Until a list has been applied, lists may come from the watch cache (initialListFromCache).
    let listed = false;
    while (!signal.aborted) {
      let phase: "list" | "watch" = needList ? "list" : "watch";
      try {
        if (needList) {
          if (this.#o.useWatchList && !this.#watchListUnsupported) {
            try {
              const r = await this.#watch("", signal, true);
              if (!r.synced) {
                throw new Error(
                  "the WatchList stream ended before the initial events were complete",
                );
              }
              rv = r.rv;
              needList = false;
              goneInARow = 0;
              continue;
            } catch (err) {
              if (signal.aborted) break;
              if (this.#watchRv) {
                // Synced: the stream failed as the ordinary watch it had become, and is resumed
                // as one from #watchRv (below); a 410 still syncs again.
                needList = false;
                phase = "watch";
                throw err;
              }
              // An apiserver without WatchList answers 4xx; use a plain list from now on.
              const code = (err as { code?: number }).code;
              if (code !== undefined && code >= 400 && code < 500 && !isGone(err)) {
                this.#watchListUnsupported = true;
              } else throw err;
            }
          }
          rv = await this.#list(signal, listed || !this.#o.initialListFromCache);
          listed = true;
          needList = false;
        }
        phase = "watch";
        const startedMs = this.#clock.now();
        const r = await this.#watch(rv, signal, false);
        this.#emit({ type: "watchEnded", resourceVersion: r.rv, events: r.events });
        if (r.events > 0) goneInARow = 0;
        rv = r.rv;
        // A normal end (server timeout) resumes at once from the last resourceVersion. A stream
        // closed within a second without a single event is not a server timeout (an apiserver
        // shutting down, a proxy closing streams): it backs off, as client-go's "very short
        // watch" rule does, so that it never turns into a tight reconnect loop.
        if (r.events === 0 && this.#clock.now() - startedMs < VERY_SHORT_WATCH_MS) {
          throw new Error(
            `very short watch: the stream ended within ${VERY_SHORT_WATCH_MS} ms without events`,
          );
        }
      } catch (err) {
        if (signal.aborted) break;
        if (phase === "watch" && this.#watchRv) {
          if (this.#watchRv !== rv) goneInARow = 0; // the failed watch made progress
          rv = this.#watchRv;
        }
        if (isGone(err)) {
          goneInARow++;
          needList = true;
          this.#emit({ type: "relist", reason: "gone", phase, resourceVersion: rv });
          if (goneInARow === 1) continue;
        } else if (err instanceof WatchIdleError) {
          // Silence is evidence of a dead connection when bookmarks were due, when the watch was
          // never accepted (no headers within the bound), or while other requests get no answer
          // either; otherwise (no bookmarks from this apiserver, a healthy path) it is a quiet
          // stream, and reopening it is the liveness check.
          const quiet = !this.#bookmarksSeen && this.#lastWatchAccepted &&
            (this.#o.client.health?.healthy ?? true);
          this.#checkLiveness = quiet;
          if (!quiet) {
            this.#markDeaf(
              !this.#lastWatchAccepted
                ? `no answer to the watch for ${Math.round(err.idleMs / 1000)} s`
                : this.#bookmarksSeen
                ? `no byte for ${Math.round(err.idleMs / 1000)} s: missed the apiserver's ` +
                  `bookmarks (sent about every ${APISERVER_BOOKMARK_INTERVAL_MS / 1000} s)`
                : `no byte for ${Math.round(err.idleMs / 1000)} s while the apiserver is ` +
                  `not answering`,
            );
          }
          this.#emit({
            type: "idle",
            resourceVersion: rv,
            idleMs: err.idleMs,
            quiet,
          });
          continue;
        } else if (err instanceof WatchRestartError) {
          if (err.why === "stalled") this.#markDeaf(err.message);
          this.#emit({ type: "restart", why: err.why, resourceVersion: rv, detail: err.message });
          continue;
        }
        const delayMs = backoff.next();
        this.#lastError = String((err as Error)?.message ?? err);
        this.#failingSinceMs ??= this.#clock.now();
        this.#failedAttempts++;
        this.#state = { phase: "backoff", delayMs, error: this.#lastError };
        this.#emit({ type: "error", phase, error: err, retryInMs: delayMs });
        // The path to the apiserver recovering (another request got through) ends the wait.
        const woken = new AbortController();
        const unsubscribe = this.#o.client.health?.onRecovered(() => woken.abort());
        try {
          await sleepOn(this.#clock, delayMs, AbortSignal.any([signal, woken.signal]));
        } catch {
          if (signal.aborted) break;
        } finally {
          unsubscribe?.();
        }
      }
    }
    this.#state = { phase: "stopped" };
  }
}
