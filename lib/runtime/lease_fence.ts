/**
 * The write fence of a Lease holder (docs/scenarios.md S13; the rule and its limits:
 * docs/design/leadership.md, "The client's fence"): {@link LeaseFence}, which the
 * `LeaderElector` of leader.ts owns and the manager puts on the reconcilers' client, and the
 * {@link Term} of leadership it lets writes pass in.
 *
 * @module
 */
import type { WriteFence } from "../kube/client.ts";
import { FencedError } from "../kube/errors.ts";
import { type Clock, realClock } from "./clock.ts";

/** When a Lease write was sent, on both clocks of a {@link LeaseFence} (ms). */
export interface FenceStamp {
  /** On the monotonic clock (`performance.now()` by default). */
  monotonicMs: number;
  /** On the wall clock (`Date.now()` by default). */
  wallMs: number;
}

/**
 * One term of leadership: from the Lease write that made this candidate the holder to the end of
 * its holding (lost or released). `signal` is aborted with a {@link FencedError} (reason
 * `NotHeld`, `inFlight` true) when the term ends: the client fence aborts the writes in flight
 * with it and the manager the controllers' reconciles.
 */
export interface Term {
  /** 1 for this process's first term, then 2, 3, ... */
  readonly number: number;
  /** Aborted (reason a {@link FencedError}) when the term ends. */
  readonly signal: AbortSignal;
}

/**
 * The write fence of a Lease candidate (docs/scenarios.md S13; the rule and its limits:
 * docs/design/leadership.md). A write passes only while a {@link Term} is open (given with
 * {@link begin}, by the elector) and the Lease write of the last successful renewal was sent less
 * than `renewDeadlineMs` ago, on the monotonic clock and on the wall clock (the larger age
 * counts). It holds no leadership state of its own: the term's signal is the elector's.
 */
export class LeaseFence implements WriteFence {
  #deadlineMs: number;
  #monotonic: () => number;
  #wall: () => number;
  #timers: Pick<Clock, "setTimer" | "clearTimer">;
  #renewed: FenceStamp = { monotonicMs: -Infinity, wallMs: -Infinity };
  #term?: Term;
  /** Aborted when the renewal goes stale at its deadline; a later renewal opens another window. */
  #window = new AbortController();
  /** The term's and the window's signals combined (made when first asked for). */
  #signal?: AbortSignal;
  #deadlineTimer: unknown;

  /**
   * A fence that is closed until a term begins and a renewal is recorded.
   * @param renewDeadlineMs age (ms) of the last successful renewal at which writes stop
   * @param monotonicNow monotonic clock (ms); default `performance.now()`
   * @param wallNow wall clock (ms); default `Date.now()`
   * @param timers for the deadline timer; default the real clock's
   */
  constructor(
    renewDeadlineMs: number,
    monotonicNow: () => number = () => performance.now(),
    wallNow: () => number = Date.now,
    timers: Pick<Clock, "setTimer" | "clearTimer"> = realClock,
  ) {
    this.#deadlineMs = renewDeadlineMs;
    this.#monotonic = monotonicNow;
    this.#wall = wallNow;
    this.#timers = timers;
  }

  /**
   * Writes may pass during `term` (while its signal is not aborted and the renewal is fresh).
   * When the term's signal aborts, the deadline timer is cleared.
   */
  begin(term: Term): void {
    this.#term = term;
    if (this.#window.signal.aborted) this.#window = new AbortController();
    this.#signal = undefined;
    term.signal.addEventListener("abort", () => {
      if (this.#term !== term) return;
      this.#timers.clearTimer(this.#deadlineTimer);
      this.#deadlineTimer = undefined;
    }, { once: true });
    this.#armDeadline();
  }

  /** Now, on both clocks: taken right before a Lease write is sent. */
  stamp(): FenceStamp {
    return { monotonicMs: this.#monotonic(), wallMs: this.#wall() };
  }

  /** A Lease write sent at `at` succeeded. */
  renewed(at: FenceStamp): void {
    if (this.#window.signal.aborted) {
      this.#window = new AbortController();
      this.#signal = undefined;
    }
    if (at.monotonicMs > this.#renewed.monotonicMs) this.#renewed = at;
    this.#armDeadline();
  }

  /** Whether a term is open (ignoring the renewal's age). */
  get #holding(): boolean {
    return this.#term !== undefined && !this.#term.signal.aborted;
  }

  /**
   * The deadline timer: when the renewal has gone stale, {@link signal} aborts the writes in
   * flight. After a pause the overdue timer runs in the first turn of the event loop, before the
   * connections write requests handed to fetch just before the pause (docs/design/leadership.md).
   */
  #armDeadline(): void {
    this.#timers.clearTimer(this.#deadlineTimer);
    this.#deadlineTimer = undefined;
    if (!this.#holding) return;
    const inMs = this.#deadlineMs - (this.#monotonic() - this.#renewed.monotonicMs);
    this.#deadlineTimer = this.#timers.setTimer(() => {
      this.#deadlineTimer = undefined;
      if (!this.#holding) return;
      if (this.open) {
        this.#armDeadline(); // renewed meanwhile, or woken early
        return;
      }
      this.#window.abort(
        new FencedError(
          "Stale",
          "write in flight at the renew deadline",
          this.renewalAgeMs(),
          undefined,
          true,
        ),
      );
    }, Math.max(0, inMs));
  }

  /**
   * Aborted when writes in flight must stop: the term ended (reason `NotHeld`), or the renewal
   * went stale at its deadline (reason `Stale`; a later renewal gives a new signal). Before any
   * term: a signal that is never aborted.
   */
  get signal(): AbortSignal {
    if (!this.#signal) {
      this.#signal = this.#term
        ? AbortSignal.any([this.#term.signal, this.#window.signal])
        : this.#window.signal;
    }
    return this.#signal;
  }

  /**
   * Age (ms) of the last successful renewal on the monotonic clock alone: what the renew loop
   * gives up on (a wall-clock step must not end leadership; it only holds writes back until the
   * next renewal).
   */
  monotonicAgeMs(): number {
    return this.#monotonic() - this.#renewed.monotonicMs;
  }

  /** Age (ms) of the last successful renewal: the larger of its monotonic and wall-clock ages. */
  renewalAgeMs(): number {
    return Math.max(
      this.#monotonic() - this.#renewed.monotonicMs,
      this.#wall() - this.#renewed.wallMs,
    );
  }

  /** Whether a write may leave now. */
  get open(): boolean {
    return this.#holding && this.renewalAgeMs() < this.#deadlineMs;
  }

  /**
   * Throws {@link FencedError} unless a write may leave now (reason `NotHeld`: no open term;
   * `Stale`: the renewal is past the deadline). Synchronous and cheap: it runs before every
   * write the client sends.
   */
  check(method: string, path: string): void {
    if (!this.#holding) throw new FencedError("NotHeld", `${method} ${path}`);
    const age = this.renewalAgeMs();
    if (age >= this.#deadlineMs) throw new FencedError("Stale", `${method} ${path}`, age);
  }
}
