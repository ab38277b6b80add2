/**
 * An injectable clock, so that queue, backoff and Lease logic are tested without sleeping
 * (kube-runtime and client-go's `clock.Clock` do the same).
 *
 * @module
 */

import { realTimers, type Timers } from "../kube/connection.ts";

/**
 * Time source and timers, all in milliseconds: `now()`, `setTimer(fn, ms)` returning a handle,
 * `clearTimer(handle)`. The same shape as the client's {@link Timers} (defined in lib/kube, which
 * the runtime builds on), so one clock drives both.
 */
export type Clock = Timers;

/** The real clock (Date.now and setTimeout). */
export const realClock: Clock = realTimers;

/** A manual clock for tests: time moves only with {@link FakeClock.advance}. */
export class FakeClock implements Clock {
  #now: number;
  #seq = 0;
  #timers = new Map<number, { at: number; fn: () => void }>();

  /**
   * A clock standing still at `startMs` until {@link FakeClock.advance} moves it.
   * @param startMs initial time (ms since the epoch)
   */
  constructor(startMs = 1_700_000_000_000) {
    this.#now = startMs;
  }

  /** Current fake time (ms). */
  now(): number {
    return this.#now;
  }

  /** Registers a timer firing when time reaches now + ms. */
  setTimer(fn: () => void, ms: number): unknown {
    const id = ++this.#seq;
    this.#timers.set(id, { at: this.#now + Math.max(0, ms), fn });
    return id;
  }

  /** Cancels a timer. */
  clearTimer(handle: unknown): void {
    this.#timers.delete(handle as number);
  }

  /** Number of pending timers. */
  get pendingTimers(): number {
    return this.#timers.size;
  }

  /** Moves time forward by `ms`, firing due timers in order of their due time. */
  advance(ms: number): void {
    const target = this.#now + ms;
    for (let guard = 0; guard < 1_000_000; guard++) {
      let next: [number, { at: number; fn: () => void }] | undefined;
      for (const e of this.#timers) {
        if (e[1].at <= target && (!next || e[1].at < next[1].at)) next = e;
      }
      if (!next) break;
      this.#timers.delete(next[0]);
      this.#now = next[1].at;
      next[1].fn();
    }
    this.#now = target;
  }
}

/** Resolves after `ms` on `clock`, or rejects with the signal's reason when it aborts. */
export function sleepOn(clock: Clock, ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clock.clearTimer(h);
      reject(signal!.reason);
    };
    const h = clock.setTimer(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
