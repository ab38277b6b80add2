/**
 * Leader election on a coordination.k8s.io/v1 Lease, with client-go `leaderelection` semantics:
 * - acquire: create the Lease, or take it over when its holder is empty or has not renewed for
 *   `leaseDurationSeconds` as observed on the local clock (the record's times are not trusted
 *   across clock skew); every write carries the read resourceVersion (optimistic concurrency, a 409
 *   means someone else won). A Lease deleted while another candidate held it is treated as still
 *   held by that candidate until a lease duration after its last renewal seen here (the holder,
 *   if alive, re-creates it at its next renewal; client-go would take it at once: two leaders);
 * - renew every `retryPeriodMs`; a leader that cannot renew within `renewDeadlineMs` has lost the
 *   Lease: `onStoppedLeading` fires and the caller must stop writing at once (self-fencing);
 * - release (on shutdown): an update that clears `holderIdentity` and sets
 *   `leaseDurationSeconds: 1`, so a standby takes over within about one retry period. Safe only
 *   after the process has stopped writing.
 * Times are written in MicroTime form (RFC 3339 with microseconds).
 *
 * Fencing (S13): the elector owns a {@link LeaseFence}, the {@link WriteFence} the manager puts on
 * the reconcilers' client. A write may leave only while this candidate leads and the Lease write
 * (update or create) of its last successful acquire/renew attempt was *sent* less than
 * `renewDeadlineMs` ago, measured when the request is handed to fetch on a monotonic clock
 * (`performance.now()`, CLOCK_MONOTONIC, which keeps counting while the process is SIGSTOPped). A standby takes over only after it saw the
 * record unchanged for `leaseDurationSeconds` on its own clock, counted from after the renewal was
 * sent, so a write passed by the fence reaches the apiserver before any takeover unless it spends
 * longer than leaseDuration − renewDeadline between the check and the apiserver: only a process
 * paused (or a packet held) in that moment does. The renew loop gives up at the same (monotonic)
 * age the fence closes; the Lease itself goes through a separate client without a fence.
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
 * gives the lock's client (`resourcelock.NewFromKubeconfig`: `renewDeadline / 2`, at least 1 s),
 * which controller-runtime's leader election uses. An attempt sent into a connection that died
 * without FIN or RST (an apiserver behind a load balancer gone, a stalled path) would otherwise
 * wait for the whole renew deadline, and the Lease would be lost to a stall of a few seconds
 * that new connections had long survived: a timed-out attempt drops the pooled connections (the
 * client's rule for a caller's timeout) and the next one goes at once, on a new connection.
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
 * The write fence of a Lease candidate (see the module doc). Writes pass only while it leads and
 * the Lease write of its last successful renewal was sent less than `renewDeadlineMs` ago, on a
 * monotonic clock and, as a second opinion, on the wall clock: CLOCK_MONOTONIC stops while the whole machine or VM is
 * suspended, and a wall clock set right after resume (NTP) still shows the gap; a wall clock
 * stepped back never opens the fence, the monotonic age decides then. Under a VM pause whose
 * guest clocks do not move at all the fence cannot tell, and the server-side preconditions
 * (resourceVersion on status writes, uid on deletes, fixed Pod names) are what remains.
 */
export class LeaseFence implements WriteFence {
  #deadlineMs: number;
  #monotonic: () => number;
  #wall: () => number;
  #timers: Pick<Clock, "setTimer" | "clearTimer">;
  #leading = false;
  #renewed: FenceStamp = { monotonicMs: -Infinity, wallMs: -Infinity };
  #term = new AbortController();
  #deadlineTimer: unknown;

  /**
   * A fence that is closed until the first {@link renewed}.
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

  /** Now, on both clocks: taken right before a Lease write is sent. */
  stamp(): FenceStamp {
    return { monotonicMs: this.#monotonic(), wallMs: this.#wall() };
  }

  /** A Lease write sent at `at` succeeded: this candidate holds the Lease. */
  renewed(at: FenceStamp): void {
    if (this.#term.signal.aborted) this.#term = new AbortController();
    this.#leading = true;
    if (at.monotonicMs > this.#renewed.monotonicMs) this.#renewed = at;
    this.#armDeadline();
  }

  /**
   * The deadline timer: when the renewal has gone stale, {@link signal} aborts the writes in
   * flight. After a pause (SIGSTOP, a stalled VM) the overdue timer runs in the first turn of the
   * event loop, before the connections write requests that were handed to fetch just before the
   * pause, so those are cancelled unsent (measured: 199 of 200 in a busy-loop experiment; a
   * timer armed after the pause came too late for 49 of 50).
   */
  #armDeadline(): void {
    this.#timers.clearTimer(this.#deadlineTimer);
    const inMs = this.#deadlineMs - (this.#monotonic() - this.#renewed.monotonicMs);
    this.#deadlineTimer = this.#timers.setTimer(() => {
      this.#deadlineTimer = undefined;
      if (this.#leading && !this.open) {
        this.#term.abort(
          new FencedError(
            "RenewalStale",
            "write in flight at the renew deadline",
            this.renewalAgeMs(),
            undefined,
            true,
          ),
        );
      } else if (this.#leading) {
        this.#armDeadline(); // renewed meanwhile, or woken early
      }
    }, Math.max(0, inMs));
  }

  /**
   * Leadership ended (lost or released): no write passes until the next acquisition, and
   * {@link signal} aborts the writes in flight.
   */
  revoke(): void {
    this.#leading = false;
    this.#timers.clearTimer(this.#deadlineTimer);
    this.#deadlineTimer = undefined;
    this.#term.abort(
      new FencedError(
        "NotLeader",
        "write in flight when leadership ended",
        undefined,
        undefined,
        true,
      ),
    );
  }

  /**
   * Aborted when the current term of writes ends: leadership revoked, or the renewal stale at
   * its deadline (a later renewal starts a new term).
   */
  get signal(): AbortSignal {
    return this.#term.signal;
  }

  /** Whether this candidate holds the Lease (ignoring the renewal's age). */
  get leading(): boolean {
    return this.#leading;
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
    return this.#leading && this.renewalAgeMs() < this.#deadlineMs;
  }

  /**
   * Throws {@link FencedError} unless a write may leave now (reason `NotLeader` or
   * `RenewalStale`). Synchronous and cheap: it runs before every write the client sends.
   */
  check(method: string, path: string): void {
    if (!this.#leading) throw new FencedError("NotLeader", `${method} ${path}`);
    const age = this.renewalAgeMs();
    if (age >= this.#deadlineMs) throw new FencedError("RenewalStale", `${method} ${path}`, age);
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

/** One candidate for the Lease. */
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
  #leading = false;
  /** The handover marker this candidate wrote into the Lease, while it seals a takeover. */
  #marker?: string;
  /** The fence of this candidate's writes; see {@link LeaseFence}. */
  readonly fence: LeaseFence;

  /**
   * A candidate; it competes for the Lease once {@link LeaderElector.run} is called.
   * @param o see {@link LeaderElectorOptions}
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
    // client-go NewLeaderElector's checks: a zero retry period would be a tight loop, an empty
    // identity would let every candidate believe it holds the Lease.
    if (!o.identity) throw new Error("identity must not be empty");
    if (!Number.isInteger(this.#o.leaseDurationSeconds) || this.#o.leaseDurationSeconds < 1) {
      throw new Error("leaseDuration must be a whole number of seconds, at least 1");
    }
    if (!(this.#o.renewDeadlineMs > 0)) throw new Error("renewDeadline must be greater than zero");
    if (!(this.#o.retryPeriodMs > 0)) throw new Error("retryPeriod must be greater than zero");
    if (this.#o.leaseDurationSeconds * 1000 <= this.#o.renewDeadlineMs) {
      throw new Error("leaseDuration must be greater than renewDeadline");
    }
    if (this.#o.renewDeadlineMs <= RETRY_JITTER * this.#o.retryPeriodMs) {
      throw new Error("renewDeadline must be greater than retryPeriod*JitterFactor");
    }
    const clock = this.#clock;
    this.fence = new LeaseFence(
      this.#o.renewDeadlineMs,
      o.monotonicNow ?? (o.clock ? () => clock.now() : () => performance.now()),
      () => clock.now(),
      clock,
    );
  }

  /** Whether this candidate holds the Lease now. */
  get isLeader(): boolean {
    return this.#leading;
  }

  /** The last holder observed in the Lease ("" when none). */
  get observedHolder(): string {
    return this.#observed?.holder ?? "";
  }

  /**
   * One attempt to acquire or renew. Returns true when this candidate holds the Lease afterwards.
   * Never throws for API errors (they are reported through onError and count as a failed try).
   * A takeover is sealed first (see {@link LeaderElectorOptions.sealTakeover}); the seal's wait
   * is bounded by `sealSignal` and the renew deadline, the Lease writes by `signal`.
   */
  async tryAcquireOrRenew(
    signal?: AbortSignal,
    sealSignal: AbortSignal = signal ?? new AbortController().signal,
  ): Promise<boolean> {
    const o = this.#o;
    let now = this.#clock.now();
    // The record's times are those of the write's sending (the stamp taken right before it), not
    // of the attempt's start: a read held up on a slow or stalled connection must not date the
    // renewal in the past (issue 25: 4.5 s after a stall).
    const spec = (sentMs: number, prev?: Lease["spec"]) => {
      const taking = prev?.holderIdentity !== o.identity;
      return {
        holderIdentity: o.identity,
        leaseDurationSeconds: o.leaseDurationSeconds,
        acquireTime: taking ? microTime(sentMs) : prev?.acquireTime ?? microTime(sentMs),
        renewTime: microTime(sentMs),
        // client-go counts every acquisition by a new holder, also of a released (empty) Lease;
        // only the creation of the Lease starts at 0.
        leaseTransitions: taking
          ? (prev?.leaseTransitions ?? 0) + (prev ? 1 : 0)
          : prev?.leaseTransitions ?? 0,
      };
    };
    try {
      let current: Lease;
      try {
        current = await o.client.get<Lease>(LEASES, o.name, { namespace: o.namespace, signal });
        now = this.#clock.now(); // observed when the answer arrived
      } catch (err) {
        if (!isNotFound(err)) throw err;
        now = this.#clock.now();
        // Deleted (by hand, a cleanup, a pruning tool) while another candidate held it: that
        // holder may still be working and will re-create it at its next renewal. Taking it now
        // would make two leaders; wait as for an expired Lease, a lease duration after its last
        // renewal we saw (client-go takes a missing Lease at once).
        const last = this.#observed;
        if (last?.holder && last.holder !== o.identity && last.atMs + last.durationMs > now) {
          return false;
        }
        // The fence counts from the moment the write that makes us holder is sent: the record
        // cannot have changed earlier (a slow read before it, e.g. one stuck on a stalled
        // connection, does not age the new term).
        const stamp = this.fence.stamp();
        this.#lease = await o.client.create<Lease>(LEASES, {
          apiVersion: "coordination.k8s.io/v1",
          kind: "Lease",
          metadata: { name: o.name, namespace: o.namespace },
          spec: spec(stamp.wallMs),
        }, { signal });
        this.#observe(this.#lease, stamp.wallMs);
        this.fence.renewed(stamp);
        return true;
      }
      this.#observe(current, now);
      const holder = current.spec?.holderIdentity ?? "";
      const other = holder !== "" && holder !== o.identity && holder !== this.#marker;
      // Someone else holds it: whatever we thought, we may not write (the run loop ends).
      if (other) this.fence.revoke();
      const durMs = (current.spec?.leaseDurationSeconds ?? o.leaseDurationSeconds) * 1000;
      if (other && this.#observed!.atMs + durMs > now) {
        return false; // held by someone else and not expired (by our own observation)
      }
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
        spec: { ...current.spec, ...spec(stamp.wallMs, current.spec) },
      }, { signal });
      this.#marker = undefined;
      this.#observe(this.#lease, stamp.wallMs);
      this.fence.renewed(stamp);
      return true;
    } catch (err) {
      // A conflict means another candidate won this round; an abort is our own shutdown.
      const shutdown = signal?.aborted && (signal.reason as Error)?.name !== "TimeoutError";
      if (!isConflict(err) && !isAlreadyExists(err) && !shutdown) o.onError?.(err);
      return false;
    }
  }

  /**
   * Seals a takeover of `current` (see lib/runtime/handover.ts): writes this candidate's handover
   * marker as holder (unless it is there already), then probes until the apiserver's Lease-holder
   * policy judges on the marker, no policy answers, or the renew deadline passes (then it goes
   * on, and says so through onHandover). Returns the Lease as written. Throws the marker write's
   * error (a 409: another candidate won).
   */
  async #seal(current: Lease, signal: AbortSignal | undefined, sealSignal: AbortSignal) {
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
   * After a sealed takeover, before the first write: probes until the apiserver's Lease-holder
   * policy admits this replica, bounded by a retry period; reports through onHandover.
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
   * Campaigns until leading, then renews until the signal aborts (resolves "stopped") or renewal
   * fails past the renew deadline (resolves "lost"). Candidates retry forever.
   */
  async run(signal: AbortSignal): Promise<"lost" | "stopped"> {
    const o = this.#o;
    const attemptMs = leaseAttemptTimeoutMs(o.renewDeadlineMs);
    // Acquire. Attempts start at most every retry period (jittered); one that used up its time
    // (a stalled connection) is followed at once by the next, on a new connection.
    while (!signal.aborted) {
      const startedMs = this.#clock.now();
      if (
        await this.tryAcquireOrRenew(
          AbortSignal.any([signal, AbortSignal.timeout(attemptMs)]),
          signal,
        )
      ) {
        break;
      }
      const periodMs = o.retryPeriodMs * (1 + (RETRY_JITTER - 1) * o.random());
      try {
        await sleepOn(
          this.#clock,
          Math.max(0, periodMs - (this.#clock.now() - startedMs)),
          signal,
        );
      } catch {
        return "stopped";
      }
    }
    if (signal.aborted) {
      this.fence.revoke();
      return "stopped";
    }
    // An acquisition whose write took long to answer may leave the fence closed already: renew
    // at once rather than after a retry period (a failure here is judged by the loop below).
    if (!this.fence.open) {
      await this.tryAcquireOrRenew(
        AbortSignal.any([signal, AbortSignal.timeout(o.retryPeriodMs)]),
      );
    }
    if (o.sealTakeover !== false) await this.#confirm(signal);
    if (signal.aborted) {
      this.fence.revoke();
      return "stopped";
    }
    this.#leading = true;
    o.onStartedLeading?.();
    // Renew. The deadline is the fence's: the age of the last successful write's sending. Each
    // attempt is bounded by leaseAttemptTimeoutMs (and the deadline); after one that used up a
    // retry period or more without success (it waited on a dead connection), the next goes at
    // once.
    // The first renewal is due a retry period after the acquisition was sent, however long the
    // confirm step took.
    let waitMs = Math.max(0, o.retryPeriodMs - this.fence.monotonicAgeMs());
    while (!signal.aborted) {
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
        this.#leading = false;
        this.fence.revoke();
        o.onStoppedLeading?.("lost");
        return "lost";
      }
    }
    return "stopped";
  }

  /**
   * Releases the Lease if held: clears the holder and sets a 1 s duration with a valid update.
   * Call only after every write of this process has stopped. Returns true when released.
   */
  async release(signal?: AbortSignal): Promise<boolean> {
    if (!this.#leading || !this.#lease) return false;
    this.#leading = false;
    this.fence.revoke();
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
