/**
 * Leader election on a coordination.k8s.io/v1 Lease, with client-go `leaderelection` semantics,
 * and the one answer to "may this replica write": {@link LeaderElector.state}
 * (`candidate | leading(term) | lost | released`, docs/design/leadership.md).
 * - acquire: create the Lease, or take it over when its holder is empty or has not renewed for
 *   `leaseDurationSeconds` as observed on the local clock (the record's times are not trusted
 *   across clock skew); every write carries the read resourceVersion (a 409 means someone else
 *   won). A Lease deleted while another candidate held it is treated as still held by that
 *   candidate until a lease duration after its last renewal seen here.
 * - renew every `retryPeriodMs`; a leader that cannot renew within `renewDeadlineMs` (monotonic
 *   clock), or that sees another holder, has lost the Lease: its term's signal aborts,
 *   `onStoppedLeading("lost")` fires and the caller must stop writing at once (self-fencing).
 * - release (on shutdown): the term ends, then an update clears `holderIdentity` and sets
 *   `leaseDurationSeconds: 1`. Safe only after the process has stopped writing.
 * Times are written in MicroTime form (RFC 3339 with microseconds).
 *
 * Fencing (docs/scenarios.md S13): the elector owns a {@link LeaseFence}, the {@link WriteFence}
 * the manager puts on the reconcilers' client; a write leaves only during a term and while the
 * Lease write of the last successful attempt was *sent* less than `renewDeadlineMs` ago. The Lease
 * itself goes through a separate client without a fence.
 *
 * @module
 */
import type { Lease } from "kubernetes-types/coordination/v1.d.ts";
import type { KubeClient, WriteFence } from "../kube/client.ts";
import { FencedError, isAlreadyExists, isConflict, isNotFound } from "../kube/errors.ts";
import { LEASES } from "../kube/resources.ts";
import { type Clock, realClock, sleepOn } from "./clock.ts";
import {
  awaitLeaseFence,
  type FenceProbe,
  handoverMarker,
  type HandoverReport,
  isHandoverMarker,
  probeLeaseFence,
} from "./handover.ts";

/** Lease duration (s); client-go leaderelection default 15 s. */
export const LEASE_DURATION_SECONDS = 15;
/** Renew deadline (ms); client-go leaderelection default 10 s. */
export const RENEW_DEADLINE_MS = 10_000;
/** Retry period (ms); client-go leaderelection default 2 s. */
export const RETRY_PERIOD_MS = 2_000;
/** Jitter factor applied to the retry period of candidates; client-go JitterFactor 1.2. */
export const RETRY_JITTER = 1.2;

/**
 * Bound of one Lease attempt (ms): half the renew deadline, at least 1 s — the timeout client-go
 * gives the lock's client (`resourcelock.NewFromKubeconfig`). A timed-out attempt drops the pooled
 * connections and the next one goes at once, on a new connection (docs/design/leadership.md).
 */
export function leaseAttemptTimeoutMs(renewDeadlineMs: number): number {
  return Math.max(1_000, renewDeadlineMs / 2);
}

/** Formats a time as Kubernetes MicroTime: `2006-01-02T15:04:05.000000Z`. */
export function microTime(ms: number): string {
  const iso = new Date(ms).toISOString(); // ...T15:04:05.123Z
  return iso.replace(/\.(\d{3})Z$/, ".$1000Z");
}

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
 * Where a {@link LeaderElector} stands; the one answer to "may this replica write"
 * (docs/design/leadership.md has the diagram):
 * - `candidate`: not holding the Lease yet (the start);
 * - `leading`: holding it in `term`, since the write that acquired it succeeded;
 * - `lost`: the renewal failed past the renew deadline, or another holder was seen;
 * - `released`: this process gave it up on shutdown (or was stopping when it acquired it).
 * From `lost` or `released` a later successful acquisition starts a new term.
 */
export type LeadershipState =
  | { readonly kind: "candidate" }
  | { readonly kind: "leading"; readonly term: Term }
  | { readonly kind: "lost"; readonly term: Term }
  | { readonly kind: "released"; readonly term: Term };

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

/** Options of {@link LeaderElector}. */
export interface LeaderElectorOptions {
  /** Reads and writes the Lease. */
  client: KubeClient;
  /** Namespace of the Lease. */
  namespace: string;
  /** Name of the Lease (coordination.k8s.io/v1). */
  name: string;
  /** Holder identity, e.g. hostname plus a random suffix. */
  identity: string;
  /** Validity of a Lease without renewal (s); default {@link LEASE_DURATION_SECONDS}. */
  leaseDurationSeconds?: number;
  /** A leader not renewed within this (ms) stops leading; default {@link RENEW_DEADLINE_MS}. */
  renewDeadlineMs?: number;
  /** Interval of attempts (ms); default {@link RETRY_PERIOD_MS}. */
  retryPeriodMs?: number;
  /** Time of renewals and expiry; default the real clock. */
  clock?: Clock;
  /**
   * Monotonic clock (ms) of the renew deadline and the fence; default `performance.now()`, or
   * the injected `clock`'s `now` when one is given (tests).
   */
  monotonicNow?: () => number;
  /** Jitter source in [0, 1); default Math.random. */
  random?: () => number;
  /** Called once when this candidate becomes leader. */
  onStartedLeading?: () => void;
  /** Called once when leadership ends (lost or released). */
  onStoppedLeading?: (reason: "lost" | "released") => void;
  /** Called when another holder is observed. */
  onNewLeader?: (identity: string) => void;
  /** Called on each failed attempt (for logs). */
  onError?: (err: unknown) => void;
  /**
   * Seal each takeover against deploy/'s Lease-holder admission policy (lib/runtime/handover.ts):
   * write a handover marker, wait until the apiserver refuses the previous holder, then take the
   * Lease; and wait until this replica's writes are admitted before leading. Default true; with
   * no policy in force each wait ends at the first probe.
   */
  sealTakeover?: boolean;
  /** Called with each seal and confirm step of a takeover (for logs). */
  onHandover?: (report: HandoverReport) => void;
}

/** One candidate for the Lease; its {@link LeaderElector.state} says whether it may write. */
export class LeaderElector {
  #o:
    & Required<
      Omit<
        LeaderElectorOptions,
        | "onStartedLeading"
        | "onStoppedLeading"
        | "onNewLeader"
        | "onError"
        | "monotonicNow"
        | "sealTakeover"
        | "onHandover"
      >
    >
    & LeaderElectorOptions;
  #clock: Clock;
  #observed?: {
    holder: string;
    renewTime?: string;
    rv?: string;
    atMs: number;
    /** The record's leaseDurationSeconds, in ms (ours when it has none). */
    durationMs: number;
  };
  #lease?: Lease;
  /** The handover marker this candidate wrote into the Lease, while it seals a takeover. */
  #marker?: string;
  #state: LeadershipState = { kind: "candidate" };
  #terms = 0;
  #termEnd?: AbortController;
  /** The fence of this candidate's writes; see {@link LeaseFence}. */
  readonly fence: LeaseFence;

  /**
   * A candidate; it competes for the Lease once {@link LeaderElector.run} is called.
   * @param o see {@link LeaderElectorOptions}
   * @throws Error for options client-go's `NewLeaderElector` refuses
   */
  constructor(o: LeaderElectorOptions) {
    this.#o = {
      leaseDurationSeconds: LEASE_DURATION_SECONDS,
      renewDeadlineMs: RENEW_DEADLINE_MS,
      retryPeriodMs: RETRY_PERIOD_MS,
      clock: realClock,
      random: Math.random,
      ...o,
    };
    this.#clock = this.#o.clock;
    validateElectorOptions(o.identity, this.#o);
    const clock = this.#clock;
    this.fence = new LeaseFence(
      this.#o.renewDeadlineMs,
      o.monotonicNow ?? (o.clock ? () => clock.now() : () => performance.now()),
      () => clock.now(),
      clock,
    );
  }

  /** Where this candidate stands now; see {@link LeadershipState}. */
  get state(): LeadershipState {
    return this.#state;
  }

  /** Whether this candidate holds the Lease now (`state.kind === "leading"`). */
  get isLeader(): boolean {
    return this.#state.kind === "leading";
  }

  /** The last holder observed in the Lease ("" when none). */
  get observedHolder(): string {
    return this.#observed?.holder ?? "";
  }

  /** A Lease write sent at `stamp` made or kept this candidate the holder. */
  #held(stamp: FenceStamp): void {
    this.fence.renewed(stamp);
    if (this.#state.kind === "leading") return;
    this.#termEnd = new AbortController();
    const term: Term = { number: ++this.#terms, signal: this.#termEnd.signal };
    this.#state = { kind: "leading", term };
    this.fence.begin(term);
  }

  /** The term ends (`lost` or `released`): its signal aborts, so no write passes any more. */
  #end(kind: "lost" | "released"): void {
    if (this.#state.kind !== "leading") return;
    const term = this.#state.term;
    this.#state = { kind, term };
    this.#termEnd?.abort(
      new FencedError(
        "NotHeld",
        "write in flight when leadership ended",
        undefined,
        undefined,
        true,
      ),
    );
  }

  /**
   * One attempt to acquire or renew. Returns true when this candidate holds the Lease afterwards
   * (state `leading`; a new term when it was not). Seeing another holder while leading ends the
   * term (state `lost`) and returns false. Never throws for API errors (they are reported through onError and
   * count as a failed try). A takeover is sealed first (see {@link LeaderElectorOptions.sealTakeover});
   * the seal's wait is bounded by `sealSignal` and the renew deadline, the Lease writes by `signal`.
   */
  async tryAcquireOrRenew(
    signal?: AbortSignal,
    sealSignal: AbortSignal = signal ?? new AbortController().signal,
  ): Promise<boolean> {
    const o = this.#o;
    try {
      let current: Lease;
      let now: number;
      try {
        current = await o.client.get<Lease>(LEASES, o.name, { namespace: o.namespace, signal });
        now = this.#clock.now(); // observed when the answer arrived
      } catch (err) {
        if (!isNotFound(err)) throw err;
        return await this.#createMissing(signal);
      }
      this.#observe(current, now);
      const holder = current.spec?.holderIdentity ?? "";
      // Our own handover marker (a seal cut short) is ours to go on with.
      if (holder && holder !== o.identity && holder !== this.#marker) {
        // Someone else wrote the Lease during our term: it is over (lost), whatever the record's
        // age; a later attempt may start a new one.
        if (this.#state.kind === "leading") {
          this.#end("lost");
          return false;
        }
        const durMs = (current.spec?.leaseDurationSeconds ?? o.leaseDurationSeconds) * 1000;
        if (this.#observed!.atMs + durMs > now) return false; // held, not expired (on our clock)
      }
      // The record's times are those of the write's sending (the stamp taken right before it),
      // not of the attempt's start (docs/design/leadership.md, "Times of the record").
      if (holder !== o.identity && o.sealTakeover !== false) {
        current = await this.#seal(current, signal, sealSignal);
        signal = AbortSignal.any([
          sealSignal,
          AbortSignal.timeout(leaseAttemptTimeoutMs(o.renewDeadlineMs)),
        ]);
      }
      const stamp = this.fence.stamp();
      this.#lease = await o.client.update<Lease>(LEASES, {
        ...current,
        spec: { ...current.spec, ...leaseSpec(o, stamp.wallMs, current.spec) },
      }, { signal });
      this.#marker = undefined;
      this.#observe(this.#lease, stamp.wallMs);
      this.#held(stamp);
      return true;
    } catch (err) {
      // A conflict means another candidate won this round; an abort is our own shutdown.
      const shutdown = signal?.aborted && (signal.reason as Error)?.name !== "TimeoutError";
      if (!isConflict(err) && !isAlreadyExists(err) && !shutdown) o.onError?.(err);
      return false;
    }
  }

  /**
   * The Lease is missing. Deleted (by hand, a cleanup, a pruning tool) while another candidate
   * held it, that holder may still be working and will re-create it at its next renewal: taking
   * it now would make two leaders, so wait as for an expired Lease, a lease duration after its
   * last renewal seen here (client-go takes a missing Lease at once). Otherwise create it.
   */
  async #createMissing(signal?: AbortSignal): Promise<boolean> {
    const o = this.#o;
    const now = this.#clock.now();
    const last = this.#observed;
    if (last?.holder && last.holder !== o.identity && last.atMs + last.durationMs > now) {
      return false;
    }
    // The fence counts from the moment the write that makes us holder is sent.
    const stamp = this.fence.stamp();
    this.#lease = await o.client.create<Lease>(LEASES, {
      apiVersion: "coordination.k8s.io/v1",
      kind: "Lease",
      metadata: { name: o.name, namespace: o.namespace },
      spec: leaseSpec(o, stamp.wallMs),
    }, { signal });
    this.#observe(this.#lease, stamp.wallMs);
    this.#held(stamp);
    return true;
  }

  /**
   * Seals a takeover of `current` (see lib/runtime/handover.ts): writes this candidate's handover
   * marker as holder (unless it is there already), then probes until the apiserver's Lease-holder
   * policy judges on the marker, no policy answers, or the renew deadline passes (then it goes
   * on, and says so through onHandover). Returns the Lease as written. Throws the marker write's
   * error (a 409: another candidate won).
   */
  async #seal(
    current: Lease,
    signal: AbortSignal | undefined,
    sealSignal: AbortSignal,
  ): Promise<Lease> {
    const o = this.#o;
    const previous = current.spec?.holderIdentity ?? "";
    let lease = current;
    if (!this.#marker || previous !== this.#marker) {
      const marker = handoverMarker(o.identity, o.random);
      const now = this.#clock.now();
      lease = await o.client.update<Lease>(LEASES, {
        ...current,
        spec: {
          ...current.spec,
          holderIdentity: marker,
          leaseDurationSeconds: o.leaseDurationSeconds,
          renewTime: microTime(now),
        },
      }, { signal });
      this.#marker = marker;
      this.#observe(lease, now);
    }
    const marker = this.#marker;
    const wait = await awaitLeaseFence(
      (s) => probeLeaseFence(o.client, o.namespace, o.name, o.identity, s),
      (p) => p.kind !== "refused" || p.holder === marker,
      { timeoutMs: o.renewDeadlineMs, clock: this.#clock, signal: sealSignal },
    );
    o.onHandover?.({
      step: "seal",
      previous: isHandoverMarker(previous) ? undefined : previous,
      outcome: wait.done ? sealOutcome(wait.last) : "timeout",
      ...probeDetails(wait.last),
      waitedMs: wait.waitedMs,
      probes: wait.probes,
    });
    return lease;
  }

  /**
   * After a takeover, before the first write: probes until the apiserver's Lease-holder policy
   * admits this replica, bounded by a retry period; reports through onHandover.
   */
  async #confirm(signal: AbortSignal): Promise<void> {
    const o = this.#o;
    const wait = await awaitLeaseFence(
      (s) => probeLeaseFence(o.client, o.namespace, o.name, o.identity, s),
      (p) => p.kind !== "refused" || p.holder === o.identity,
      { timeoutMs: o.retryPeriodMs, clock: this.#clock, signal },
    );
    o.onHandover?.({
      step: "confirm",
      outcome: !wait.done
        ? "timeout"
        : wait.last.kind === "admitted"
        ? "in-force"
        : wait.last.kind === "refused"
        ? "refuses-holder"
        : "failed",
      ...probeDetails(wait.last),
      waitedMs: wait.waitedMs,
      probes: wait.probes,
    });
  }

  #observe(lease: Lease, now: number): void {
    const holder = lease.spec?.holderIdentity ?? "";
    const renew = lease.spec?.renewTime;
    const prev = this.#observed;
    if (!prev || prev.holder !== holder || prev.renewTime !== renew) {
      this.#observed = {
        holder,
        renewTime: renew,
        rv: lease.metadata?.resourceVersion,
        atMs: now,
        durationMs: (lease.spec?.leaseDurationSeconds ?? this.#o.leaseDurationSeconds) * 1000,
      };
      if (
        holder && holder !== this.#o.identity && prev?.holder !== holder &&
        !isHandoverMarker(holder)
      ) {
        this.#o.onNewLeader?.(holder);
      }
    }
  }

  /**
   * Campaigns until leading, then renews until the signal aborts (resolves "stopped", the term
   * still open for {@link release}) or the Lease is lost (state `lost`, `onStoppedLeading("lost")`,
   * resolves "lost"). Candidates retry forever.
   */
  async run(signal: AbortSignal): Promise<"lost" | "stopped"> {
    if (!(await this.#acquire(signal))) return "stopped";
    if (this.#o.sealTakeover !== false) await this.#confirm(signal);
    if (signal.aborted) {
      this.#end("released"); // stopped before any write (the Lease runs out by itself)
      return "stopped";
    }
    this.#o.onStartedLeading?.();
    return await this.#renew(signal);
  }

  /**
   * Attempts start at most every retry period (jittered); one that used up its time (a stalled
   * connection) is followed at once by the next, on a new connection. Resolves true once leading.
   */
  async #acquire(signal: AbortSignal): Promise<boolean> {
    const o = this.#o;
    const attemptMs = leaseAttemptTimeoutMs(o.renewDeadlineMs);
    while (!signal.aborted) {
      const startedMs = this.#clock.now();
      const attempt = AbortSignal.any([signal, AbortSignal.timeout(attemptMs)]);
      if (await this.tryAcquireOrRenew(attempt, signal)) break;
      const periodMs = o.retryPeriodMs * (1 + (RETRY_JITTER - 1) * o.random());
      try {
        await sleepOn(this.#clock, Math.max(0, periodMs - (this.#clock.now() - startedMs)), signal);
      } catch {
        return false;
      }
    }
    if (signal.aborted) {
      // Stopping as it acquired: the term ends before any write (the Lease runs out by itself).
      this.#end("released");
      return false;
    }
    // An acquisition whose write took long to answer may leave the fence closed already: renew
    // at once rather than after a retry period (a failure here is judged by the renew loop).
    if (!this.fence.open) {
      await this.tryAcquireOrRenew(
        AbortSignal.any([signal, AbortSignal.timeout(o.retryPeriodMs)]),
      );
    }
    return true;
  }

  /**
   * The deadline is the fence's: the monotonic age of the last successful write's sending. Each
   * attempt is bounded by leaseAttemptTimeoutMs (and the deadline); after one that used up a
   * retry period or more without success (it waited on a dead connection), the next goes at once.
   */
  async #renew(signal: AbortSignal): Promise<"lost" | "stopped"> {
    const o = this.#o;
    const attemptMs = leaseAttemptTimeoutMs(o.renewDeadlineMs);
    // The first renewal is due a retry period after the acquisition was sent, however long the
    // confirm step took.
    let waitMs = Math.max(0, o.retryPeriodMs - this.fence.monotonicAgeMs());
    while (!signal.aborted && this.#state.kind === "leading") {
      try {
        await sleepOn(this.#clock, waitMs, signal);
      } catch {
        break;
      }
      waitMs = o.retryPeriodMs;
      const remaining = o.renewDeadlineMs - this.fence.monotonicAgeMs();
      if (remaining > 0) {
        const startedMs = this.#clock.now();
        const attempt = AbortSignal.any([
          signal,
          AbortSignal.timeout(Math.min(remaining, attemptMs)),
        ]);
        if (await this.tryAcquireOrRenew(attempt)) continue;
        if (this.#clock.now() - startedMs >= o.retryPeriodMs) waitMs = 0;
      }
      if (signal.aborted) break;
      if (
        this.fence.monotonicAgeMs() >= o.renewDeadlineMs ||
        (this.#observed && this.#observed.holder !== o.identity)
      ) {
        this.#end("lost");
      }
    }
    if (this.#state.kind === "lost") {
      o.onStoppedLeading?.("lost");
      return "lost";
    }
    return "stopped";
  }

  /**
   * Releases the Lease if held: the term ends (state `released`), then an update clears the
   * holder and sets a 1 s duration. Call only after every write of this process has stopped.
   * Returns true when released (`onStoppedLeading("released")` fires then).
   */
  async release(signal?: AbortSignal): Promise<boolean> {
    if (this.#state.kind !== "leading" || !this.#lease) return false;
    this.#end("released");
    try {
      const current = await this.#o.client.get<Lease>(LEASES, this.#o.name, {
        namespace: this.#o.namespace,
        signal,
      });
      if (current.spec?.holderIdentity !== this.#o.identity) return false;
      const now = this.#clock.now(); // stamped when the write is sent
      await this.#o.client.update<Lease>(LEASES, {
        ...current,
        spec: {
          ...current.spec,
          holderIdentity: "",
          leaseDurationSeconds: 1,
          renewTime: microTime(now),
          acquireTime: microTime(now),
        },
      }, { signal });
      this.#o.onStoppedLeading?.("released");
      return true;
    } catch (err) {
      this.#o.onError?.(err);
      return false;
    }
  }
}

/**
 * client-go `NewLeaderElector`'s checks: a zero retry period would be a tight loop, an empty
 * identity would let every candidate believe it holds the Lease.
 * @throws Error naming the first option that breaks a rule
 */
function validateElectorOptions(
  identity: string,
  o: { leaseDurationSeconds: number; renewDeadlineMs: number; retryPeriodMs: number },
): void {
  if (!identity) throw new Error("identity must not be empty");
  if (!Number.isInteger(o.leaseDurationSeconds) || o.leaseDurationSeconds < 1) {
    throw new Error("leaseDuration must be a whole number of seconds, at least 1");
  }
  if (!(o.renewDeadlineMs > 0)) throw new Error("renewDeadline must be greater than zero");
  if (!(o.retryPeriodMs > 0)) throw new Error("retryPeriod must be greater than zero");
  if (o.leaseDurationSeconds * 1000 <= o.renewDeadlineMs) {
    throw new Error("leaseDuration must be greater than renewDeadline");
  }
  if (o.renewDeadlineMs <= RETRY_JITTER * o.retryPeriodMs) {
    throw new Error("renewDeadline must be greater than retryPeriod*JitterFactor");
  }
}

/**
 * The spec this candidate writes at `sentMs` (wall clock, ms) over `prev` (none: a create).
 * client-go counts every acquisition by a new holder, also of a released (empty) Lease; only the
 * creation of the Lease starts at 0.
 */
function leaseSpec(
  o: { identity: string; leaseDurationSeconds: number },
  sentMs: number,
  prev?: Lease["spec"],
): NonNullable<Lease["spec"]> {
  const taking = prev?.holderIdentity !== o.identity;
  return {
    holderIdentity: o.identity,
    leaseDurationSeconds: o.leaseDurationSeconds,
    acquireTime: taking ? microTime(sentMs) : prev?.acquireTime ?? microTime(sentMs),
    renewTime: microTime(sentMs),
    leaseTransitions: taking
      ? (prev?.leaseTransitions ?? 0) + (prev ? 1 : 0)
      : prev?.leaseTransitions ?? 0,
  };
}

/** The outcome of a seal whose wait ended on probe `p`. */
function sealOutcome(p: FenceProbe): HandoverReport["outcome"] {
  return p.kind === "refused" ? "in-force" : p.kind === "admitted" ? "not-in-force" : "failed";
}

/** The holder a refusal named, or the error of a failed probe. */
function probeDetails(p: FenceProbe): Pick<HandoverReport, "holder" | "error"> {
  return p.kind === "refused"
    ? { holder: p.holder }
    : p.kind === "failed"
    ? { error: p.error }
    : {};
}
