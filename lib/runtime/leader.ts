/**
 * Leader election on a coordination.k8s.io/v1 Lease, with client-go `leaderelection` semantics:
 * - acquire: create the Lease, or take it over when its holder is empty or has not renewed for
 *   `leaseDurationSeconds` as observed on the local clock (the record's times are not trusted
 *   across clock skew); every write carries the read resourceVersion (optimistic concurrency, a 409
 *   means someone else won);
 * - renew every `retryPeriodMs`; a leader that cannot renew within `renewDeadlineMs` has lost the
 *   Lease: `onStoppedLeading` fires and the caller must stop writing at once (self-fencing);
 * - release (on shutdown): an update that clears `holderIdentity` and sets
 *   `leaseDurationSeconds: 1`, so a standby takes over within about one retry period. Safe only
 *   after the process has stopped writing.
 * Times are written in MicroTime form (RFC 3339 with microseconds).
 *
 * @module
 */
import type { Lease } from "kubernetes-types/coordination/v1.d.ts";
import type { KubeClient } from "../kube/client.ts";
import { isAlreadyExists, isConflict, isNotFound } from "../kube/errors.ts";
import { LEASES } from "../kube/resources.ts";
import { type Clock, realClock, sleepOn } from "./clock.ts";

/** Lease duration (s); client-go leaderelection default 15 s. */
export const LEASE_DURATION_SECONDS = 15;
/** Renew deadline (ms); client-go leaderelection default 10 s. */
export const RENEW_DEADLINE_MS = 10_000;
/** Retry period (ms); client-go leaderelection default 2 s. */
export const RETRY_PERIOD_MS = 2_000;
/** Jitter factor applied to the retry period of candidates; client-go JitterFactor 1.2. */
export const RETRY_JITTER = 1.2;

/** Formats a time as Kubernetes MicroTime: `2006-01-02T15:04:05.000000Z`. */
export function microTime(ms: number): string {
  const iso = new Date(ms).toISOString(); // ...T15:04:05.123Z
  return iso.replace(/\.(\d{3})Z$/, ".$1000Z");
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
}

/** One candidate for the Lease. */
export class LeaderElector {
  #o:
    & Required<
      Omit<
        LeaderElectorOptions,
        "onStartedLeading" | "onStoppedLeading" | "onNewLeader" | "onError"
      >
    >
    & LeaderElectorOptions;
  #clock: Clock;
  #observed?: { holder: string; renewTime?: string; rv?: string; atMs: number };
  #lease?: Lease;
  #leading = false;
  #lastRenewMs = 0;

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
   */
  async tryAcquireOrRenew(signal?: AbortSignal): Promise<boolean> {
    const o = this.#o;
    const now = this.#clock.now();
    const spec = (prev?: Lease["spec"]) => {
      const taking = prev?.holderIdentity !== o.identity;
      return {
        holderIdentity: o.identity,
        leaseDurationSeconds: o.leaseDurationSeconds,
        acquireTime: taking ? microTime(now) : prev?.acquireTime ?? microTime(now),
        renewTime: microTime(now),
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
      } catch (err) {
        if (!isNotFound(err)) throw err;
        this.#lease = await o.client.create<Lease>(LEASES, {
          apiVersion: "coordination.k8s.io/v1",
          kind: "Lease",
          metadata: { name: o.name, namespace: o.namespace },
          spec: spec(undefined),
        }, { signal });
        this.#observe(this.#lease, now);
        return true;
      }
      this.#observe(current, now);
      const holder = current.spec?.holderIdentity ?? "";
      const durMs = (current.spec?.leaseDurationSeconds ?? o.leaseDurationSeconds) * 1000;
      if (holder && holder !== o.identity && this.#observed!.atMs + durMs > now) {
        return false; // held by someone else and not expired (by our own observation)
      }
      this.#lease = await o.client.update<Lease>(LEASES, {
        ...current,
        spec: { ...current.spec, ...spec(current.spec) },
      }, { signal });
      this.#observe(this.#lease, now);
      return true;
    } catch (err) {
      // A conflict means another candidate won this round; an abort is our own shutdown.
      const shutdown = signal?.aborted && (signal.reason as Error)?.name !== "TimeoutError";
      if (!isConflict(err) && !isAlreadyExists(err) && !shutdown) o.onError?.(err);
      return false;
    }
  }

  #observe(lease: Lease, now: number): void {
    const holder = lease.spec?.holderIdentity ?? "";
    const renew = lease.spec?.renewTime;
    const prev = this.#observed;
    if (!prev || prev.holder !== holder || prev.renewTime !== renew) {
      this.#observed = { holder, renewTime: renew, rv: lease.metadata?.resourceVersion, atMs: now };
      if (holder && holder !== this.#o.identity && prev?.holder !== holder) {
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
    // Acquire.
    while (!signal.aborted) {
      if (await this.tryAcquireOrRenew(signal)) break;
      try {
        await sleepOn(this.#clock, o.retryPeriodMs * (1 + (RETRY_JITTER - 1) * o.random()), signal);
      } catch {
        return "stopped";
      }
    }
    if (signal.aborted) return "stopped";
    this.#leading = true;
    this.#lastRenewMs = this.#clock.now();
    o.onStartedLeading?.();
    // Renew.
    while (!signal.aborted) {
      try {
        await sleepOn(this.#clock, o.retryPeriodMs, signal);
      } catch {
        break;
      }
      const deadline = this.#lastRenewMs + o.renewDeadlineMs;
      const remaining = deadline - this.#clock.now();
      const attempt = AbortSignal.any([signal, AbortSignal.timeout(Math.max(1, remaining))]);
      if (await this.tryAcquireOrRenew(attempt)) {
        this.#lastRenewMs = this.#clock.now();
        continue;
      }
      if (signal.aborted) break;
      if (
        this.#clock.now() >= deadline || (this.#observed && this.#observed.holder !== o.identity)
      ) {
        this.#leading = false;
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
    const now = this.#clock.now();
    try {
      const current = await this.#o.client.get<Lease>(LEASES, this.#o.name, {
        namespace: this.#o.namespace,
        signal,
      });
      if (current.spec?.holderIdentity !== this.#o.identity) return false;
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
