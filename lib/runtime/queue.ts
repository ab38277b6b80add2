/**
 * The keyed work queue with client-go `workqueue` semantics (`Type` + `DelayingQueue` +
 * `RateLimitingQueue` with `DefaultControllerRateLimiter`):
 * - keys (`namespace/name`) are deduplicated: adding a key that is already pending merges;
 * - a key is handed to at most one worker at a time; a key added while it is processed is marked
 *   dirty and handed out again after {@link WorkQueue.done};
 * - {@link WorkQueue.addRateLimited} waits the larger of a per-key exponential backoff (5 ms
 *   doubling to 1,000 s), an overall token bucket (10 per second, burst 100) and a minimum the
 *   caller gives (the server's Retry-After, docs/scenarios.md S16);
 *   {@link WorkQueue.forget} resets a key's backoff after success;
 * - {@link WorkQueue.addAfter} keeps the earliest of several pending delays for one key;
 * - two priorities (controller-runtime's priority queue has the same idea, with integers): a key
 *   added with `"high"` is handed out before every `"normal"` one, except that after
 *   {@link HIGH_PRIORITY_RUN} high keys in a row a waiting normal key goes first, so a stream of
 *   high keys slows normal keys down but never stops them. A pending key added again with a higher
 *   priority moves up; a lower one never moves it down. Delayed and rate-limited adds are normal;
 * - {@link WorkQueue.shutDown} stops handing out keys at once; {@link WorkQueue.drain} waits for
 *   in-flight keys to be done within a grace period.
 *
 * @module
 */
import { TokenBucket } from "../kube/throttle.ts";
import { type Clock, realClock } from "./clock.ts";

/** Per-key backoff base (ms); client-go DefaultControllerRateLimiter 5 ms. */
export const QUEUE_BASE_DELAY_MS = 5;
/** Per-key backoff cap (ms); client-go DefaultControllerRateLimiter 1,000 s. */
export const QUEUE_MAX_DELAY_MS = 1_000_000;
/** Overall retry rate (per second); client-go DefaultControllerRateLimiter 10 qps. */
export const QUEUE_QPS = 10;
/** Overall retry burst; client-go DefaultControllerRateLimiter 100. */
export const QUEUE_BURST = 100;

/**
 * High keys handed out in a row while a normal key waits, before that normal key goes: the bound
 * that keeps a stream of high keys from starving the rest (the normal lane gets at least one
 * worker slot in `HIGH_PRIORITY_RUN + 1`).
 */
export const HIGH_PRIORITY_RUN = 4;

/**
 * Priority of an {@link WorkQueue.add}: `"high"` for a change that finishes work already under way
 * (an owned object reaching the state its owner waits for), `"normal"` for everything else.
 */
export type QueuePriority = "normal" | "high";

/** Hooks for metrics; each must not throw. Durations in seconds. */
export interface QueueHooks {
  /** Called for every add, duplicates included (`workqueue_adds_total`). */
  onAdd?(): void;
  /** A worker took a key that waited this long (s). */
  onGet?(queueDurationSeconds: number): void;
  /** A worker finished a key it held this long (s). */
  onDone?(workDurationSeconds: number): void;
  /** A rate-limited (backoff) re-add (`workqueue_retries_total`). */
  onRetry?(): void;
}

/** Options of {@link WorkQueue}. */
export interface QueueOptions {
  /** Time for delays and durations; default the real clock. */
  clock?: Clock;
  /** First per-key backoff delay (ms), doubling per failure; default {@link QUEUE_BASE_DELAY_MS}. */
  baseDelayMs?: number;
  /** Cap of the per-key backoff (ms); default {@link QUEUE_MAX_DELAY_MS}. */
  maxDelayMs?: number;
  /** Overall token bucket for rate-limited adds; qps 0 disables it. */
  qps?: number;
  /** Burst of the overall token bucket; default {@link QUEUE_BURST}. */
  burst?: number;
  /** Metric hooks; default none. */
  hooks?: QueueHooks;
}

/** A deduplicating, per-key-exclusive, rate-limited work queue of string keys. */
export class WorkQueue {
  #clock: Clock;
  #o: Required<Omit<QueueOptions, "clock" | "hooks">>;
  #hooks: QueueHooks;
  #queue = new Set<string>(); // normal lane, ordered: Set keeps insertion order
  #urgent = new Set<string>(); // high lane, ordered likewise; a key is in at most one lane
  #dirty = new Set<string>();
  /** Keys added with high priority while in flight: queued in the high lane after `done`. */
  #dirtyHigh = new Set<string>();
  /** High keys handed out in a row since the last normal one ({@link HIGH_PRIORITY_RUN}). */
  #run = 0;
  #completed = 0;
  #processing = new Map<string, number>(); // key -> start time (ms)
  #addedAt = new Map<string, number>();
  #failures = new Map<string, number>();
  #delayed = new Map<string, { at: number; handle: unknown }>();
  #waiters: ((key: string | undefined) => void)[] = [];
  #idleWaiters: (() => void)[] = [];
  /** Waiters of {@link drainWhere}: each resolves once no key it names is in flight. */
  #keyWaiters: { matches(key: string): boolean; resolve(): void }[] = [];
  /** Which keys {@link add} takes (sharding: keys of synced held shards); none: every key. */
  #admit?: { fn(key: string): boolean };
  #bucket: TokenBucket;
  #shuttingDown = false;

  /**
   * An empty queue.
   * @param o see {@link QueueOptions}
   */
  constructor(o: QueueOptions = {}) {
    this.#clock = o.clock ?? realClock;
    this.#o = {
      baseDelayMs: o.baseDelayMs ?? QUEUE_BASE_DELAY_MS,
      maxDelayMs: o.maxDelayMs ?? QUEUE_MAX_DELAY_MS,
      qps: o.qps ?? QUEUE_QPS,
      burst: o.burst ?? QUEUE_BURST,
    };
    this.#hooks = o.hooks ?? {};
    this.#bucket = new TokenBucket(this.#o.qps, this.#o.burst, () => this.#clock.now());
  }

  /** Keys finished ({@link done}) since the queue was made: a count that only grows. */
  get completed(): number {
    return this.#completed;
  }

  /** Keys waiting to be handed out, both priorities (workqueue_depth). */
  get depth(): number {
    return this.#queue.size + this.#urgent.size;
  }

  /** Keys waiting with high priority. */
  get depthHigh(): number {
    return this.#urgent.size;
  }

  /** Keys being processed now. */
  get processing(): number {
    return this.#processing.size;
  }

  /** Keys scheduled by addAfter / addRateLimited and not yet due. */
  get delayed(): number {
    return this.#delayed.size;
  }

  /** True after {@link shutDown}. */
  get shuttingDown(): boolean {
    return this.#shuttingDown;
  }

  /** Whether `key` is being processed now. */
  isProcessing(key: string): boolean {
    return this.#processing.has(key);
  }

  /** Seconds of work in flight, summed (workqueue_unfinished_work_seconds). */
  unfinishedWorkSeconds(): number {
    const now = this.#clock.now();
    let s = 0;
    for (const t of this.#processing.values()) s += (now - t) / 1000;
    return s;
  }

  /** Seconds the longest running key has been in flight (workqueue_longest_running_processor_seconds). */
  longestRunningSeconds(): number {
    const now = this.#clock.now();
    let s = 0;
    for (const t of this.#processing.values()) s = Math.max(s, (now - t) / 1000);
    return s;
  }

  /**
   * Sets (or with `undefined` clears) which keys {@link add} and {@link addAfter} take; others
   * are dropped silently (sharding: the keys of shards this replica does not hold and sync,
   * docs/design/sharding.md). Keys queued already are left; {@link dropWhere} removes them.
   */
  setFilter(admit: ((key: string) => boolean) | undefined): void {
    this.#admit = admit ? { fn: admit } : undefined;
  }

  /**
   * Removes every key `matches` names from the queue, the dirty set and the delayed adds (and
   * forgets their failures); keys in flight finish, and are not queued again after. Returns how
   * many queued or delayed keys were removed.
   */
  dropWhere(matches: (key: string) => boolean): number {
    let n = 0;
    for (const lane of [this.#queue, this.#urgent]) {
      for (const key of [...lane]) {
        if (!matches(key)) continue;
        lane.delete(key);
        this.#addedAt.delete(key);
        n++;
      }
    }
    for (const key of [...this.#dirty]) {
      if (!matches(key)) continue;
      this.#dirty.delete(key);
      this.#dirtyHigh.delete(key);
    }
    for (const [key, d] of [...this.#delayed]) {
      if (!matches(key)) continue;
      this.#clock.clearTimer(d.handle);
      this.#delayed.delete(key);
      n++;
    }
    for (const key of [...this.#failures.keys()]) if (matches(key)) this.#failures.delete(key);
    return n;
  }

  /** Keys waiting in the queue that `matches` names. */
  depthWhere(matches: (key: string) => boolean): number {
    let n = 0;
    for (const key of this.#queue) if (matches(key)) n++;
    for (const key of this.#urgent) if (matches(key)) n++;
    return n;
  }

  /**
   * Waits until no key `matches` names is in flight, at most `timeoutMs`. Returns true if so in
   * time.
   */
  drainWhere(matches: (key: string) => boolean, timeoutMs: number): Promise<boolean> {
    const busy = () => [...this.#processing.keys()].some(matches);
    if (!busy()) return Promise.resolve(true);
    return new Promise((resolve) => {
      const waiter = { matches, resolve: () => finish(true) };
      const h = this.#clock.setTimer(() => finish(false), timeoutMs);
      const finish = (ok: boolean) => {
        this.#clock.clearTimer(h);
        const i = this.#keyWaiters.indexOf(waiter);
        if (i >= 0) this.#keyWaiters.splice(i, 1);
        resolve(ok);
      };
      this.#keyWaiters.push(waiter);
    });
  }

  /**
   * Adds a key now, with `priority` (default `"normal"`; see {@link QueuePriority}). Merges with a
   * pending one (which moves to the high lane when this add is high and it was not); marks dirty
   * if in flight (queued after {@link done} with the highest priority it was added with
   * meanwhile). No-op after shutdown.
   */
  add(key: string, priority: QueuePriority = "normal"): void {
    if (this.#shuttingDown) return;
    if (this.#admit && !this.#admit.fn(key)) return;
    this.#hooks.onAdd?.();
    const high = priority === "high";
    if (this.#dirty.has(key)) {
      if (!high) return;
      if (this.#processing.has(key)) this.#dirtyHigh.add(key);
      else if (this.#queue.delete(key)) this.#urgent.add(key);
      return;
    }
    this.#dirty.add(key);
    if (this.#processing.has(key)) {
      if (high) this.#dirtyHigh.add(key);
      return;
    }
    this.#enqueue(key, high);
  }

  #enqueue(key: string, high: boolean): void {
    this.#addedAt.set(key, this.#clock.now());
    const w = this.#waiters.shift();
    if (w) {
      this.#take(key);
      w(key);
    } else {
      (high ? this.#urgent : this.#queue).add(key);
    }
  }

  /**
   * The key {@link get} hands out next, or undefined when none waits: the first high key, unless
   * {@link HIGH_PRIORITY_RUN} high keys went in a row and a normal key waits; else the first
   * normal key.
   */
  #next(): string | undefined {
    const high = this.#urgent.values().next();
    const normal = this.#queue.values().next();
    if (!high.done && (normal.done || this.#run < HIGH_PRIORITY_RUN)) {
      this.#run++;
      return high.value;
    }
    this.#run = 0;
    return normal.done ? undefined : normal.value;
  }

  #take(key: string): void {
    this.#queue.delete(key);
    this.#urgent.delete(key);
    this.#dirty.delete(key);
    this.#dirtyHigh.delete(key);
    const now = this.#clock.now();
    this.#processing.set(key, now);
    const added = this.#addedAt.get(key);
    this.#addedAt.delete(key);
    this.#hooks.onGet?.(added === undefined ? 0 : (now - added) / 1000);
  }

  /** Adds `key` after `delayMs`; several pending delays for one key keep the earliest. */
  addAfter(key: string, delayMs: number): void {
    if (this.#shuttingDown) return;
    if (this.#admit && !this.#admit.fn(key)) return;
    if (delayMs <= 0) return this.add(key);
    const at = this.#clock.now() + delayMs;
    const prev = this.#delayed.get(key);
    if (prev && prev.at <= at) return;
    if (prev) this.#clock.clearTimer(prev.handle);
    const handle = this.#clock.setTimer(() => {
      this.#delayed.delete(key);
      this.add(key);
    }, delayMs);
    this.#delayed.set(key, { at, handle });
  }

  /** The delay {@link addRateLimited} would use next for `key` (ms), counting this failure. */
  #whenMs(key: string): number {
    const n = this.#failures.get(key) ?? 0;
    this.#failures.set(key, n + 1);
    const perKey = Math.min(this.#o.baseDelayMs * 2 ** n, this.#o.maxDelayMs);
    return Math.max(perKey, this.#bucket.reserve());
  }

  /**
   * Re-adds `key` after its backoff (a failed reconcile), and not before `minDelayMs` (e.g. the
   * apiserver's Retry-After). Returns the delay used (ms).
   */
  addRateLimited(key: string, minDelayMs = 0): number {
    if (this.#shuttingDown) return 0;
    const ms = Math.max(this.#whenMs(key), minDelayMs);
    this.#hooks.onRetry?.();
    this.addAfter(key, ms);
    return ms;
  }

  /** Clears `key`'s failure count (a successful reconcile). */
  forget(key: string): void {
    this.#failures.delete(key);
  }

  /** How many times `key` was re-added with {@link addRateLimited} since its last forget. */
  numRequeues(key: string): number {
    return this.#failures.get(key) ?? 0;
  }

  /**
   * Waits for the next key and marks it in flight. Resolves `undefined` once shut down (keys
   * still queued then are not handed out) or when `signal` aborts.
   */
  get(signal?: AbortSignal): Promise<string | undefined> {
    if (this.#shuttingDown || signal?.aborted) return Promise.resolve(undefined);
    const next = this.#next();
    if (next !== undefined) {
      this.#take(next);
      return Promise.resolve(next);
    }
    return new Promise((resolve) => {
      const w = (k: string | undefined) => {
        signal?.removeEventListener("abort", onAbort);
        resolve(k);
      };
      const onAbort = () => {
        const i = this.#waiters.indexOf(w);
        if (i >= 0) this.#waiters.splice(i, 1);
        resolve(undefined);
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.#waiters.push(w);
    });
  }

  /** Marks `key` finished; if it was added meanwhile, it is queued again. */
  done(key: string): void {
    const started = this.#processing.get(key);
    if (started === undefined) return;
    this.#processing.delete(key);
    this.#completed++;
    this.#hooks.onDone?.((this.#clock.now() - started) / 1000);
    if (this.#dirty.has(key) && !this.#shuttingDown) this.#enqueue(key, this.#dirtyHigh.has(key));
    this.#dirtyHigh.delete(key);
    if (this.#processing.size === 0) { for (const w of this.#idleWaiters.splice(0)) w(); }
    for (const w of [...this.#keyWaiters]) {
      if (matchesAny(this.#processing.keys(), w.matches)) continue;
      w.resolve();
    }
  }

  /** Stops handing out keys and cancels delayed adds; waiting `get` calls resolve `undefined`. */
  shutDown(): void {
    if (this.#shuttingDown) return;
    this.#shuttingDown = true;
    for (const d of this.#delayed.values()) this.#clock.clearTimer(d.handle);
    this.#delayed.clear();
    for (const w of this.#waiters.splice(0)) w(undefined);
  }

  /**
   * Waits until no key is in flight, at most `timeoutMs`. Returns true if drained in time.
   */
  drain(timeoutMs: number): Promise<boolean> {
    if (this.#processing.size === 0) return Promise.resolve(true);
    return new Promise((resolve) => {
      const h = this.#clock.setTimer(() => {
        const i = this.#idleWaiters.indexOf(done);
        if (i >= 0) this.#idleWaiters.splice(i, 1);
        resolve(false);
      }, timeoutMs);
      const done = () => {
        this.#clock.clearTimer(h);
        resolve(true);
      };
      this.#idleWaiters.push(done);
    });
  }
}

/** Whether any of `keys` is one `matches` names. */
function matchesAny(keys: Iterable<string>, matches: (key: string) => boolean): boolean {
  for (const k of keys) if (matches(k)) return true;
  return false;
}
