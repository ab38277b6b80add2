/**
 * A client-side token bucket (client-go `flowcontrol.NewTokenBucketRateLimiter`): at most `qps`
 * requests a second on average, `burst` at once. Disabled when `qps` is 0.
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
