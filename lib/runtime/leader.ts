/**
 * Leader election on a coordination.k8s.io/v1 Lease, with client-go `leaderelection` semantics,
 * and the one answer to "may this replica write": {@link LeaderElector.state}
 * (`candidate | leading(term) | lost | released`, docs/design/leadership.md).
 * - acquire: create the Lease, or take it over when its holder is empty or has not renewed for
 *   `leaseDurationSeconds` as observed on the local clock (the record's times are not trusted
 *   across clock skew); every write carries the read resourceVersion (a 409 means someone else
 *   won). A Lease deleted while another candidate held it is treated as still held by that
 *   candidate until a lease duration after its last renewal seen here.
 * - candidates try every `retryPeriodMs` (jittered), and at once when their watch on the Lease
 *   shows it released or run out (lib/runtime/lease_watch.ts; the retry period stays the bound).
 * - renew every `retryPeriodMs`, with one update from the record written last (client-go's fast
 *   path; a read only when that fails); a leader that cannot renew within `renewDeadlineMs` (monotonic
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
import type { KubeClient } from "../kube/client.ts";
import { FencedError, isAlreadyExists, isConflict, isNotFound } from "../kube/errors.ts";
import { LEASES } from "../kube/resources.ts";
import { type Clock, realClock, sleepOn } from "./clock.ts";
import {
  leaseDurationMs,
  runsOutAtMs,
  type SeenRecord,
  seeRecord,
  stillRuns,
} from "./lease_expiry.ts";
import { type FenceStamp, LeaseFence, type Term } from "./lease_fence.ts";
import { LeaseWatch } from "./lease_watch.ts";
import {
  awaitLeaseFence,
  type FenceProbe,
  handoverMarker,
  type HandoverReport,
  isHandoverMarker,
  probeLeaseFence,
} from "./handover.ts";

export { type FenceStamp, LeaseFence, type Term } from "./lease_fence.ts";

/** Lease duration (s); client-go leaderelection default 15 s. */
export const LEASE_DURATION_SECONDS = 15;
/** Renew deadline (ms); client-go leaderelection default 10 s. */
export const RENEW_DEADLINE_MS = 10_000;
/** Retry period (ms); client-go leaderelection default 2 s. */
export const RETRY_PERIOD_MS = 2_000;
/** Jitter factor applied to the retry period of candidates; client-go JitterFactor 1.2. */
export const RETRY_JITTER = 1.2;

/**
 * The defaults of an elector's timing, clock and jitter (client-go's durations; the real clock;
 * Math.random), shared by {@link LeaderElector} and the sharded elector (shard_elector.ts).
 */
export function electorDefaults(): {
  leaseDurationSeconds: number;
  renewDeadlineMs: number;
  retryPeriodMs: number;
  clock: Clock;
  random: () => number;
} {
  return {
    leaseDurationSeconds: LEASE_DURATION_SECONDS,
    renewDeadlineMs: RENEW_DEADLINE_MS,
    retryPeriodMs: RETRY_PERIOD_MS,
    clock: realClock,
    random: Math.random,
  };
}

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
  /**
   * While a candidate whose first attempt failed, watch the Lease and try at once when it is
   * released, or when it runs out on this replica's clock (lib/runtime/lease_watch.ts); needs the
   * `watch` verb on leases. Default true; the retry period stays the bound either way.
   */
  watchLease?: boolean;
  /**
   * Labels and annotations the Lease carries: set when this candidate creates the Lease or
   * writes itself as its holder (a takeover, each renewal), added to those already there. The
   * shards' Leases carry their hash range this way (lib/runtime/shard_fence_cel.ts).
   */
  leaseMetadata?: { labels?: Record<string, string>; annotations?: Record<string, string> };
  /**
   * Asked before this candidate takes a Lease that is free, run out or missing (never before a
   * renewal): false leaves it for now, as if it were held (the next attempt asks again). The
   * manager's single Lease waits so while a sharded replica of the same election still holds shard
   * Leases (docs/design/sharding.md, "Changing N"). Default: always true.
   */
  mayTake?: (signal?: AbortSignal) => Promise<boolean>;
}

/**
 * `meta` with `extra`'s labels and annotations added (same keys: `extra`'s values); `meta` itself
 * when it has them all already.
 */
export function withLeaseMetadata(
  meta: Lease["metadata"],
  extra: LeaderElectorOptions["leaseMetadata"],
): Lease["metadata"] {
  const missing = (have: Record<string, string> | undefined, want?: Record<string, string>) =>
    Object.entries(want ?? {}).some(([k, v]) => have?.[k] !== v);
  if (
    !extra ||
    (!missing(meta?.labels, extra.labels) && !missing(meta?.annotations, extra.annotations))
  ) {
    return meta;
  }
  return {
    ...meta,
    ...(extra.labels ? { labels: { ...meta?.labels, ...extra.labels } } : {}),
    ...(extra.annotations ? { annotations: { ...meta?.annotations, ...extra.annotations } } : {}),
  };
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
        | "watchLease"
        | "leaseMetadata"
        | "mayTake"
      >
    >
    & LeaderElectorOptions;
  #clock: Clock;
  /** The last record seen (keyed by holder and renewTime, lease_expiry.ts) and its holder. */
  #observed?: SeenRecord & { holder: string };
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
    this.#o = { ...electorDefaults(), ...o };
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

  /**
   * Records `lease` (undefined: missing) as seen now, e.g. in a list of Leases, and returns when
   * (clock ms) an attempt may take it: now when it has no holder, else when it runs out on this
   * replica's clock — the rules of {@link tryAcquireOrRenew} (the sharded elector,
   * shard_elector.ts, picks its attempts with it).
   */
  observeLease(lease: Lease | undefined): number {
    return this.#nextTry(lease);
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
      // client-go's fast path: a leader renews with one update from the record it wrote last; any
      // failure (a 409: someone else wrote the Lease) falls back to a read and an update.
      if (this.#state.kind === "leading" && this.#lease?.spec?.holderIdentity === o.identity) {
        try {
          return await this.#write(this.#lease, this.fence.stamp(), signal);
        } catch (err) {
          if (signal?.aborted) throw err;
        }
      }
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
        if (stillRuns(this.#observed!, now)) return false; // held, not expired (on our clock)
      }
      if (holder !== o.identity && holder !== this.#marker && !await this.#mayTake(signal)) {
        return false;
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
      return await this.#write(current, this.fence.stamp(), signal);
    } catch (err) {
      // A conflict means another candidate won this round; an abort is our own shutdown.
      const shutdown = signal?.aborted && (signal.reason as Error)?.name !== "TimeoutError";
      if (!isConflict(err) && !isAlreadyExists(err) && !shutdown) o.onError?.(err);
      return false;
    }
  }

  /**
   * Writes this candidate as holder over `current` (its resourceVersion the precondition), stamped
   * `stamp` (taken right before the write is sent); on success the fence counts from that stamp.
   * Returns true; throws the update's error.
   */
  async #write(current: Lease, stamp: FenceStamp, signal?: AbortSignal): Promise<boolean> {
    this.#lease = await this.#o.client.update<Lease>(LEASES, {
      ...current,
      metadata: withLeaseMetadata(current.metadata, this.#o.leaseMetadata),
      spec: { ...current.spec, ...leaseSpec(this.#o, stamp.wallMs, current.spec) },
    }, { signal });
    this.#marker = undefined;
    this.#observe(this.#lease, stamp.wallMs);
    this.#held(stamp);
    return true;
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
    if (last?.holder && last.holder !== o.identity && stillRuns(last, now)) {
      return false;
    }
    if (!await this.#mayTake(signal)) return false;
    // The fence counts from the moment the write that makes us holder is sent.
    const stamp = this.fence.stamp();
    this.#lease = await o.client.create<Lease>(LEASES, {
      apiVersion: "coordination.k8s.io/v1",
      kind: "Lease",
      metadata: withLeaseMetadata({ name: o.name, namespace: o.namespace }, o.leaseMetadata),
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
        metadata: withLeaseMetadata(current.metadata, o.leaseMetadata),
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

  /**
   * When to try next after the watch delivered `lease` (undefined: deleted): at once when it has
   * no holder, else when it runs out on this replica's clock (the rule of tryAcquireOrRenew and
   * #createMissing).
   */
  #nextTry(lease: Lease | undefined): number {
    if (lease) this.#observe(lease, this.#clock.now());
    const seen = this.#observed;
    return seen?.holder ? runsOutAtMs(seen) : this.#clock.now();
  }

  /** {@link LeaderElectorOptions.mayTake}: true when none was given. */
  #mayTake(signal?: AbortSignal): Promise<boolean> {
    return this.#o.mayTake ? this.#o.mayTake(signal) : Promise.resolve(true);
  }

  /** Records `lease` as seen at clock time `now` (ms); a new holder is reported (onNewLeader). */
  #observe(lease: Lease, now: number): void {
    const holder = lease.spec?.holderIdentity ?? "";
    const prev = this.#observed;
    const key = JSON.stringify([holder, lease.spec?.renewTime ?? null]);
    const record = seeRecord(prev, key, leaseDurationMs(lease, this.#o.leaseDurationSeconds), now);
    if (record !== prev) {
      this.#observed = { ...record, holder };
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
    const watch = new LeaseWatch({ ...o, onLease: (l) => this.#nextTry(l), clock: this.#clock });
    try {
      while (!signal.aborted) {
        const startedMs = this.#clock.now();
        const attempt = AbortSignal.any([signal, AbortSignal.timeout(attemptMs)]);
        if (await this.tryAcquireOrRenew(attempt, signal)) break;
        if (o.watchLease !== false) watch.start(signal);
        const periodMs = o.retryPeriodMs * (1 + (RETRY_JITTER - 1) * o.random());
        await watch.sleep(Math.max(0, periodMs - (this.#clock.now() - startedMs)), signal);
      }
    } catch {
      return false;
    } finally {
      watch.stop();
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
        // Never past the renew deadline: an attempt that failed shortly before it must not put
        // the loss off by a retry period (client-go bounds the whole renew poll by the deadline).
        const untilDeadlineMs = Math.max(0, o.renewDeadlineMs - this.fence.monotonicAgeMs());
        await sleepOn(this.#clock, Math.min(waitMs, untilDeadlineMs), signal);
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
   * Releases the Lease if held: the term ends (state `released`), then an update from the record
   * written last (after a failure: a read, and an update if this replica still holds it) clears
   * the holder and sets a 1 s duration. Call only after every write of this process has stopped.
   * Returns true when released (`onStoppedLeading("released")` fires then).
   */
  async release(signal?: AbortSignal): Promise<boolean> {
    if (this.#state.kind !== "leading" || !this.#lease) return false;
    this.#end("released");
    const o = this.#o;
    const clear = (current: Lease) => {
      const now = microTime(this.#clock.now()); // stamped when the write is sent
      const spec = {
        holderIdentity: "",
        leaseDurationSeconds: 1,
        renewTime: now,
        acquireTime: now,
      };
      return o.client.update<Lease>(LEASES, {
        ...current,
        spec: { ...current.spec, ...spec },
      }, { signal });
    };
    try {
      // One update from the record written last; a read and an update only when that fails (a
      // 409: someone else wrote the Lease since).
      const done = await clear(this.#lease).then(() => true, async (err) => {
        if (signal?.aborted) throw err;
        const current = await o.client.get<Lease>(LEASES, o.name, {
          namespace: o.namespace,
          signal,
        });
        return current.spec?.holderIdentity === o.identity && !!(await clear(current));
      });
      if (done) o.onStoppedLeading?.("released");
      return done;
    } catch (err) {
      o.onError?.(err);
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
