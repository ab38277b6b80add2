/**
 * Client-side flow control: a token bucket (client-go `flowcontrol.NewTokenBucketRateLimiter`: at
 * most `qps` requests a second on average, `burst` at once; disabled when `qps` is 0), and the
 * client-wide Retry-After gate {@link RetryAfterGate} (docs/scenarios.md S16).
 *
 * @module
 */

/** Token bucket limiting requests per second; `wait()` resolves when a token is available. */
export class TokenBucket {
  #qps: number;
  #burst: number;
  #tokens: number;
  #lastMs: number;
  #now: () => number;

  /**
   * A full bucket.
   * @param qps average requests per second; 0 disables limiting
   * @param burst bucket size (requests allowed at once), at least 1
   * @param now clock in ms (injected for tests)
   */
  constructor(qps: number, burst: number, now: () => number = performance.now.bind(performance)) {
    this.#qps = qps;
    this.#burst = Math.max(1, burst);
    this.#tokens = this.#burst;
    this.#now = now;
    this.#lastMs = now();
  }

  /** Takes one token now if there is one and returns 0, else reserves one and returns the wait (ms). */
  reserve(): number {
    if (this.#qps <= 0) return 0;
    const now = this.#now();
    this.#tokens = Math.min(this.#burst, this.#tokens + ((now - this.#lastMs) / 1000) * this.#qps);
    this.#lastMs = now;
    this.#tokens -= 1;
    return this.#tokens >= 0 ? 0 : (-this.#tokens / this.#qps) * 1000;
  }

  /** Waits until a token is available (rejects if `signal` aborts first). */
  async wait(signal?: AbortSignal): Promise<void> {
    const ms = this.reserve();
    if (ms > 0) await sleep(ms, signal);
  }
}

/** Resolves after `ms` milliseconds, or rejects with the signal's reason when it aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal!.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/**
 * Window growth step of {@link RetryAfterGate} (ms): one more request in flight per second
 * without a 429, the pace at which API Priority and Fairness revises its Retry-After
 * (k8s.io/apiserver pkg/util/flowcontrol/dropped_requests_tracker.go works in whole seconds).
 */
export const GATE_WINDOW_STEP_MS = 1_000;
/** Window size at which {@link RetryAfterGate} stops limiting concurrency altogether. */
export const GATE_WINDOW_OPEN_AT = 32;

/** Options of {@link RetryAfterGate}. */
export interface RetryAfterGateOptions {
  /** Monotonic clock (ms); default `performance.now()`. */
  now?: () => number;
  /** See {@link GATE_WINDOW_STEP_MS}. */
  windowStepMs?: number;
  /** See {@link GATE_WINDOW_OPEN_AT}. */
  windowOpenAt?: number;
}

/**
 * A client-wide Retry-After gate (docs/scenarios.md S16). A throttled answer (429, or 503 with `Retry-After`)
 * closes it: no request of the client is admitted before the Retry-After has passed, whichever
 * request got it. When it opens again, requests are admitted through a window of concurrent
 * requests that starts at half the requests in flight when the throttling came (at least 1), is
 * halved again by each further throttled answer, grows by one every `windowStepMs` without one,
 * and stops limiting at `windowOpenAt`; waiting requests are admitted in arrival order. Without
 * the window every request that waited would be sent at the same instant and most would be
 * rejected again (measured in docs/design/client.md, "The Retry-After gate").
 *
 * Use: {@link acquire} before sending (it reserves a slot), {@link closedForMs} once more
 * synchronously right before sending (another request may have been throttled meanwhile: then
 * {@link release} and acquire again), and {@link release} when the answer's headers came or the
 * request failed, with the Retry-After (seconds) of a throttled answer.
 */
export class RetryAfterGate {
  #now: () => number;
  #stepMs: number;
  #openAt: number;
  #notBeforeMs = 0;
  #inFlight = 0;
  /** Window when the gate reopened; Infinity when not limiting. */
  #base = Infinity;
  /** Requests waiting, in arrival order. */
  #waiters: { maxWaitMs: number; grant: (granted: boolean) => void }[] = [];
  #timer?: ReturnType<typeof setTimeout>;

  /**
   * An open gate, not limiting concurrency until the first throttled answer.
   * @param o see {@link RetryAfterGateOptions}
   */
  constructor(o: RetryAfterGateOptions = {}) {
    this.#now = o.now ?? (() => performance.now());
    this.#stepMs = o.windowStepMs ?? GATE_WINDOW_STEP_MS;
    this.#openAt = o.windowOpenAt ?? GATE_WINDOW_OPEN_AT;
  }

  /** Milliseconds until the gate opens; 0 when open. */
  closedForMs(): number {
    return Math.max(0, this.#notBeforeMs - this.#now());
  }

  /** Requests that may be in flight now (Infinity: no limit). */
  window(): number {
    if (this.#base === Infinity) return Infinity;
    const sinceOpenMs = Math.max(0, this.#now() - this.#notBeforeMs);
    const grown = this.#base + Math.floor(sinceOpenMs / this.#stepMs);
    if (grown >= this.#openAt) this.#base = Infinity;
    return grown >= this.#openAt ? Infinity : grown;
  }

  /** Requests admitted and not yet released. */
  get inFlight(): number {
    return this.#inFlight;
  }

  /**
   * Waits until the gate is open and the window has room, then reserves a slot (release it with
   * {@link release}). A closed gate that would keep the request waiting longer than `maxWaitMs`
   * is not waited for: `tooLong(remainingMs)` is thrown instead.
   * @throws the signal's reason when it aborts; `tooLong`'s error
   */
  async acquire(
    maxWaitMs: number,
    tooLong: (remainingMs: number) => Error,
    signal?: AbortSignal,
  ): Promise<void> {
    for (let i = 0; i < 100_000; i++) {
      signal?.throwIfAborted();
      const closedMs = this.closedForMs();
      if (closedMs > maxWaitMs) throw tooLong(closedMs);
      this.#pump(); // the window may have grown since the first in line queued
      if (closedMs <= 0 && this.#waiters.length === 0 && this.#inFlight < this.window()) {
        this.#inFlight++;
        return;
      }
      if (await this.#queue(maxWaitMs, signal)) return;
    }
    throw tooLong(this.closedForMs());
  }

  /** Waits in line; true when a slot was granted, false to look at the gate again. */
  #queue(maxWaitMs: number, signal?: AbortSignal): Promise<boolean> {
    return new Promise((resolve, reject) => {
      const waiter = {
        maxWaitMs,
        grant: (granted: boolean) => {
          signal?.removeEventListener("abort", onAbort);
          resolve(granted);
        },
      };
      const onAbort = () => {
        const i = this.#waiters.indexOf(waiter);
        if (i >= 0) this.#waiters.splice(i, 1);
        if (this.#waiters.length === 0) this.#clearTimer();
        reject(signal!.reason);
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.#waiters.push(waiter);
      this.#pump();
    });
  }

  /**
   * Frees a slot taken by {@link acquire}. `retryAfterSeconds` (a throttled answer) closes the
   * gate until then (never earlier than already closed) and halves the window.
   */
  release(retryAfterSeconds?: number): void {
    if (retryAfterSeconds !== undefined) {
      const until = this.#now() + retryAfterSeconds * 1000;
      const limit = Math.min(this.window(), this.#inFlight);
      if (until > this.#notBeforeMs) this.#notBeforeMs = until;
      this.#base = Math.max(1, Math.floor(limit / 2));
      // Waiters that would now wait longer than they accept look at the gate again (and fail).
      const closedMs = this.closedForMs();
      for (const w of this.#waiters.filter((x) => closedMs > x.maxWaitMs)) {
        this.#waiters.splice(this.#waiters.indexOf(w), 1);
        w.grant(false);
      }
    }
    this.#inFlight = Math.max(0, this.#inFlight - 1);
    this.#pump();
  }

  /**
   * Hands free slots to the waiters in arrival order; while the gate is closed, one timer does
   * that when it opens.
   */
  #pump(): void {
    if (this.#waiters.length === 0) return this.#clearTimer();
    const closedMs = this.closedForMs();
    if (closedMs > 0) {
      if (this.#timer === undefined) {
        this.#timer = setTimeout(() => {
          this.#timer = undefined;
          this.#pump();
        }, closedMs);
      }
      return;
    }
    this.#clearTimer();
    while (this.#waiters.length > 0 && this.#inFlight < this.window()) {
      this.#inFlight++;
      this.#waiters.shift()!.grant(true);
    }
  }

  #clearTimer(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
  }
}
