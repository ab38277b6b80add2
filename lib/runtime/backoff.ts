/**
 * Exponential backoff with jitter, as used by reflectors and retry loops (client-go
 * `wait.Backoff` with the reflector's defaults: 800 ms doubling, jitter 1.0, capped at 30 s,
 * reset after a healthy period of 2 min).
 *
 * Jitter applies at the cap too: a delay is `base × (1 + jitter × random)` with `base` the
 * doubled delay capped at `maxMs / (1 + jitter)`, so delays never exceed `maxMs` and, once
 * doubling has reached the cap, are spread over [maxMs / (1 + jitter), maxMs) instead of all
 * being `maxMs`. Without that, clients that failed together retry together for ever: on a link
 * that drops every connection every few seconds, capped retries fell into the drops in lockstep
 * (docs/scenarios.md S15). client-go's `wait.Backoff` also jitters after capping (its delays then reach
 * (1 + jitter) × cap); here the cap stays the longest delay.
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
  /** The longest delay {@link Backoff.next} returns. */
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

  /**
   * The next delay (ms): `initial × factor^steps`, capped at `max / (1 + jitter)`, times
   * `(1 + jitter × random)` — never above `max`, jittered at the cap too (see the module doc).
   */
  next(): number {
    const o = this.#o;
    const now = o.now();
    if (now - this.#last >= o.resetAfterMs) this.#steps = 0;
    this.#last = now;
    const base = Math.min(o.initialMs * o.factor ** this.#steps, o.maxMs / (1 + o.jitter));
    this.#steps++;
    return Math.min(base * (1 + o.jitter * o.random()), o.maxMs);
  }

  /** Starts again from the initial delay (after a success). */
  reset(): void {
    this.#steps = 0;
  }
}
