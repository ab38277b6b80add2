/**
 * Stopping a long-running loop from two places (its run signal and its own stop) without
 * `AbortSignal.any`. A dependent signal made by `AbortSignal.any` is kept alive only as the runtime
 * implements the DOM standard's rule "Abort signal garbage collection" (whatwg DOM §3.2.1: not
 * collected while its sources are alive and it has listeners or abort algorithms); Deno has had
 * gaps in that rule (denoland/deno#29075, fixed for listeners in deno#34061, not for abort
 * algorithms such as fetch's). A stop that is lost leaves a loop running past its stop — in a
 * sharded replica, a watch that ends only at its server timeout, minutes later
 * (docs/design/reflector.md, "Stopping a watch"). A plain controller, aborted by a listener on the
 * parent signal, has no such dependence: the parent holds the listener, the listener the
 * controller.
 *
 * @module
 */

/** A controller that also aborts when `parent` does; {@link LinkedStop.unlink} when done. */
export interface LinkedStop {
  /** Abort it to stop; its signal aborts too when the parent's does (with the parent's reason). */
  controller: AbortController;
  /** The controller's signal (the one to give the loop). */
  signal: AbortSignal;
  /** Removes the listener from the parent (call once the loop has ended; idempotent). */
  unlink(): void;
}

/**
 * A {@link LinkedStop} following `parent`: aborted at once when `parent` already is.
 * @param parent the run's signal (e.g. the manager's), usually long-lived
 */
export function linkedStop(parent: AbortSignal): LinkedStop {
  const controller = new AbortController();
  const onAbort = () => controller.abort(parent.reason);
  if (parent.aborted) controller.abort(parent.reason);
  else parent.addEventListener("abort", onAbort, { once: true });
  return {
    controller,
    signal: controller.signal,
    unlink: () => parent.removeEventListener("abort", onAbort),
  };
}
