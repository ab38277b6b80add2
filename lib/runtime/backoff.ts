/**
 * Exponential backoff with jitter, as used by reflectors and retry loops (client-go
 * `wait.Backoff` with the reflector's defaults: 800 ms doubling to 30 s, jitter 1.0, reset after
 * a healthy period of 2 min).
 *
 * @module
 */

/** Reflector initial backoff (ms); client-go reflector default 800 ms. */
export const REFLECTOR_BACKOFF_INITIAL_MS = 800;
/** Reflector maximum backoff (ms); client-go reflector default 30 s. */
export const REFLECTOR_BACKOFF_MAX_MS = 30_000;
/** Healthy period after which backoff resets (ms); client-go reflector default 2 min. */
export const REFLECTOR_BACKOFF_RESET_MS = 120_000;

/** Options of {@link Backoff}. All durations in ms. */
export interface BackoffOptions {
  /** First delay (ms). */
  initialMs: number;
  /** Cap of the delay (ms), before jitter. */
  maxMs: number;
  /** Factor per step; default 2. */
  factor?: number;
  /** Extra random share added: delay × (1 + jitter × random); default 1.0 (client-go). */
  jitter?: number;
  /** A step this long after the previous one starts again from `initialMs`; default none. */
  resetAfterMs?: number;
  /** Random source in [0, 1); injected for tests. */
  random?: () => number;
  /** Clock in ms; injected for tests. */
  now?: () => number;
}

/** Stateful exponential backoff: each {@link Backoff.next} returns the next delay (ms). */
export class Backoff {
  #o: Required<BackoffOptions>;
  #steps = 0;
  #last = -Infinity;

  /**
   * A backoff at its first step.
   * @param o see {@link BackoffOptions}
   */
  constructor(o: BackoffOptions) {
    this.#o = {
      factor: 2,
      jitter: 1.0,
      resetAfterMs: Infinity,
      random: Math.random,
      now: Date.now,
      ...o,
    };
  }

  /** Number of consecutive steps since the last reset. */
  get steps(): number {
    return this.#steps;
  }

  /** The next delay (ms): initial × factor^steps capped at max, plus jitter, capped at max. */
  next(): number {
    const now = this.#o.now();
    if (now - this.#last >= this.#o.resetAfterMs) this.#steps = 0;
    this.#last = now;
    const base = Math.min(this.#o.initialMs * this.#o.factor ** this.#steps, this.#o.maxMs);
    this.#steps++;
    return Math.min(base * (1 + this.#o.jitter * this.#o.random()), this.#o.maxMs);
  }

  /** Starts again from the initial delay. */
  reset(): void {
    this.#steps = 0;
  }
}
