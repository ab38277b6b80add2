/**
 * A time bound that is released when the work it bounds ends.
 *
 * `AbortSignal.timeout(ms)` cannot be cancelled: its timer holds the signal, the timer's closure
 * and whatever is registered on the signal until `ms` have passed, long after the request or
 * reconcile it bounded has ended. With a 30 s request bound and a 60 s reconcile bound, a converge
 * of N AppServices leaves on the order of 3N timers and signals pending for up to a minute after
 * its last write (docs/design/runtime.md, "Time bounds that end with the work"). A
 * {@link Deadline} is cleared when the work ends, which drops the timer and everything it held.
 *
 * @module
 */

/** A cancellable time bound: {@link deadline}. */
export interface Deadline {
  /**
   * Aborted `ms` after {@link deadline} was called, unless {@link Deadline.clear} came first,
   * with a `DOMException` named `TimeoutError` (the reason `AbortSignal.timeout` gives, so
   * code that tells a timeout from other aborts by the reason's name treats both alike).
   */
  readonly signal: AbortSignal;
  /** Drops the timer; the signal then never aborts. Idempotent; a no-op once it has fired. */
  clear(): void;
}

/**
 * Starts a time bound of `ms` milliseconds (a non-negative number; fractions are rounded by the
 * timer). Like `AbortSignal.timeout`, its timer does not keep the process alive
 * (`Deno.unrefTimer`).
 * @param ms the bound, in milliseconds
 */
export function deadline(ms: number): Deadline {
  const controller = new AbortController();
  const id = setTimeout(() => {
    timer = undefined;
    controller.abort(new DOMException("Signal timed out.", "TimeoutError"));
  }, Math.max(0, ms));
  let timer: ReturnType<typeof setTimeout> | undefined = id;
  Deno.unrefTimer(id);
  return {
    signal: controller.signal,
    clear() {
      if (timer === undefined) return;
      clearTimeout(timer);
      timer = undefined;
    },
  };
}
