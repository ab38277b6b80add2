/**
 * An event-loop delay monitor with the interface of Node's `perf_hooks.monitorEventLoopDelay()`
 * histogram (the part prom-client reads for its `nodejs_eventloop_lag_*` metrics), in bounded
 * memory.
 *
 * Why: Deno implements `monitorEventLoopDelay` with an HDR histogram of 5 significant digits that
 * grows to cover the largest delay seen (Deno's `tokio_eld` crate, `Histogram::new(5)`), and
 * prom-client resets it on every scrape, which writes every counter: one block of zeroed counters
 * of many MiB, all of it resident (docs/design/runtime.md, "Event-loop monitor"). This monitor keeps
 * {@link EVENT_LOOP_SAMPLE_CAPACITY} samples since the last reset (a uniform reservoir beyond
 * that) plus exact running min, max, mean and standard deviation: 16 KiB.
 *
 * What a sample is: how late a timer that should fire every {@link EVENT_LOOP_SAMPLE_MS} fired,
 * in nanoseconds (at least 1): about 0 while the loop is free, the time it was blocked otherwise.
 * That is what event-loop lag means to a reader of these metrics and close to what Deno's monitor
 * reports (the time a task waited to be run); Node's own histogram instead records the whole
 * interval between timer runs, resolution included. The timer runs every 100 ms, not every
 * 10 ms as Node's default resolution, for its cost at idle (docs/design/runtime.md). Empty (after a reset): `min` is 9223372036854775807 (Node's and
 * Deno's "no value"), `max` 0, `mean` and `stddev` NaN, percentiles 0, as Node answers.
 *
 * @module
 */

/** Samples kept between resets for percentiles (beyond it, a uniform reservoir sample); 16 KiB. */
export const EVENT_LOOP_SAMPLE_CAPACITY = 2048;
/** Interval of the sampling timer (ms); see the module doc for why not Node's 10 ms. */
export const EVENT_LOOP_SAMPLE_MS = 100;
/** `min` of an empty histogram: 2^63 - 1 as a double, as Node and Deno report it. */
const EMPTY_MIN = 9223372036854775807;

/** What prom-client (and Node's `IntervalHistogram`) reads of the monitor. */
export interface EventLoopDelayHistogram {
  /** Starts sampling; false if it already was. */
  enable(): boolean;
  /** Stops sampling; false if it already was stopped. */
  disable(): boolean;
  /** Forgets every sample. */
  reset(): void;
  /** The value (ns) at `percentile` in (0, 100]. */
  percentile(percentile: number): number;
  /** Smallest sample since the last reset (ns). */
  readonly min: number;
  /** Largest sample since the last reset (ns). */
  readonly max: number;
  /** Mean of the samples since the last reset (ns). */
  readonly mean: number;
  /** Population standard deviation of the samples since the last reset (ns). */
  readonly stddev: number;
  /** Samples since the last reset. */
  readonly count: number;
  /** Samples above one hour since the last reset (Node's `exceeds`). */
  readonly exceeds: number;
}

/**
 * The bounded histogram itself, fed by {@link EventLoopDelayHistogram.enable}'s timer or, in
 * tests, by {@link BoundedDelayHistogram.record}; `random` picks reservoir slots (default
 * Math.random).
 */
export class BoundedDelayHistogram implements EventLoopDelayHistogram {
  #samples = new Float64Array(EVENT_LOOP_SAMPLE_CAPACITY);
  #count = 0;
  #min = EMPTY_MIN;
  #max = 0;
  #sum = 0;
  #sumSq = 0;
  #exceeds = 0;
  #sorted = false;
  #timer?: ReturnType<typeof setInterval>;
  #last = 0;
  #intervalMs: number;
  #random: () => number;

  /**
   * @param intervalMs sampling interval (ms), at least 1; default {@link EVENT_LOOP_SAMPLE_MS}
   * @param random source of reservoir slots in [0, 1)
   */
  constructor(intervalMs = EVENT_LOOP_SAMPLE_MS, random: () => number = Math.random) {
    this.#intervalMs = Math.max(1, Math.floor(intervalMs || EVENT_LOOP_SAMPLE_MS));
    this.#random = random;
  }

  /** Adds one sample (ns). */
  record(ns: number): void {
    if (!(ns > 0)) return;
    if (ns > 3.6e12) this.#exceeds++;
    const n = this.#count++;
    if (n < EVENT_LOOP_SAMPLE_CAPACITY) this.#samples[n] = ns;
    else {
      const j = Math.floor(this.#random() * (n + 1));
      if (j < EVENT_LOOP_SAMPLE_CAPACITY) this.#samples[j] = ns;
    }
    this.#sorted = false;
    if (ns < this.#min) this.#min = ns;
    if (ns > this.#max) this.#max = ns;
    this.#sum += ns;
    this.#sumSq += ns * ns;
  }

  enable(): boolean {
    if (this.#timer !== undefined) return false;
    this.#last = performance.now();
    this.#timer = setInterval(() => {
      const now = performance.now();
      this.record(Math.max(1, Math.round((now - this.#last - this.#intervalMs) * 1e6)));
      this.#last = now;
    }, this.#intervalMs);
    // Like Node's monitor: it never keeps the process alive.
    Deno.unrefTimer(this.#timer as unknown as number);
    return true;
  }

  disable(): boolean {
    if (this.#timer === undefined) return false;
    clearInterval(this.#timer);
    this.#timer = undefined;
    return true;
  }

  reset(): void {
    this.#count = 0;
    this.#min = EMPTY_MIN;
    this.#max = 0;
    this.#sum = 0;
    this.#sumSq = 0;
    this.#exceeds = 0;
    this.#sorted = false;
  }

  percentile(percentile: number): number {
    const n = Math.min(this.#count, EVENT_LOOP_SAMPLE_CAPACITY);
    if (n === 0) return 0;
    if (!this.#sorted) {
      this.#samples.subarray(0, n).sort();
      this.#sorted = true;
    }
    const p = Math.min(100, Math.max(0, percentile));
    // Nearest rank (the smallest sample with at least p% of the samples at or below it).
    const rank = Math.max(1, Math.ceil((p / 100) * n));
    return this.#samples[rank - 1];
  }

  get min(): number {
    return this.#min;
  }

  get max(): number {
    return this.#max;
  }

  get mean(): number {
    return this.#count ? this.#sum / this.#count : NaN;
  }

  get stddev(): number {
    if (!this.#count) return NaN;
    const mean = this.#sum / this.#count;
    return Math.sqrt(Math.max(0, this.#sumSq / this.#count - mean * mean));
  }

  get count(): number {
    return this.#count;
  }

  get exceeds(): number {
    return this.#exceeds;
  }
}
