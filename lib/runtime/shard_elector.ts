/**
 * Sharded leader election (docs/design/sharding.md): `n` shards, one coordination.k8s.io/v1
 * Lease each (`<id>-shard-<k>`), shared by the live replicas.
 *
 * - Membership: each replica keeps a Lease of its own (`<id>-member-<hash of identity>`,
 *   labelled {@link SHARD_MEMBER_LABEL}=`<id>`, holder its identity) renewed every retry period
 *   on a timer of its own (not in the round: a slow round must not let it run out)
 *   and deleted on graceful exit. Live members: membership Leases not run out on this replica's
 *   clock (observed-time, as an expired Lease). Share ({@link targetShare}): `floor(n / live)`,
 *   plus one for the first `n mod live` members by identity (sorted), so the shares add up to n.
 * - Taking a shard: only below its share, only a Lease that is free (no holder) or has run
 *   out on this replica's clock (the rules of {@link LeaderElector}: one elector per shard,
 *   `observeLease` then `tryAcquireOrRenew`); a 409 means another replica won.
 * - Holding: the shard's elector renews it (its `run`, client-go's renew loop); a renewal that
 *   fails past the renew deadline, or another holder seen, loses the shard: its fence is closed
 *   at once, its work stops, and the replica goes on (it may take the shard again later).
 * - Giving back (above its share, or on shutdown): the shard's fence closes, its work is
 *   stopped and drained ({@link ShardHooks.stopping}, bounded by the grace period), then the
 *   Lease is released (holder cleared, as the elector's release).
 * - {@link ShardFence}: the write fence of the reconcilers' client: a write to a namespace
 *   passes only while the Lease of the namespace's shard is held and renewed within the renew
 *   deadline (that shard's {@link LeaseFence}); a cluster-scoped write only while at least one
 *   shard is.
 * - Timing: a round runs every retry period (jittered), and earlier when something is due: a
 *   watch on the namespace's Leases ({@link LeaseWatch}, without a name) records each renewal
 *   when it happens and wakes the round loop at once for a released shard or a member that
 *   joined or left, and when a shard's or a member's record runs out on this replica's clock.
 *   A dead replica's shards are so taken a lease duration after its last renewals, not up to two
 *   retry periods later (one to see the renewal, one to act); the retry period stays the bound
 *   when the watch is down or refused.
 * One log line per move: shard, from, to, reason.
 *
 * @module
 */
import type { Lease } from "kubernetes-types/coordination/v1.d.ts";
import type { KubeClient, WriteFence } from "../kube/client.ts";
import { FencedError, isAlreadyExists, isNotFound } from "../kube/errors.ts";
import { linkedStop } from "./abort.ts";
import { LEASES } from "../kube/resources.ts";
import { type Clock, sleepOn } from "./clock.ts";
import { logAttemptFailure } from "./controller.ts";
import {
  electorDefaults,
  LeaderElector,
  leaseAttemptTimeoutMs,
  microTime,
  RETRY_JITTER,
} from "./leader.ts";
import { SeenLeases } from "./lease_expiry.ts";
import { LeaseWatch } from "./lease_watch.ts";
import { errorText, type Logger } from "./log.ts";
import type { ShardMetrics } from "./metrics.ts";
import { fnv1a64, namespaceOfPath, shardOf } from "./shards.ts";
import { shardLeaseMetadata } from "./shard_fence_cel.ts";

/** Label of the membership Leases; its value is the election id. */
export const SHARD_MEMBER_LABEL = "sharding.apps.our-org.com/member-of";

/**
 * Annotation of a membership Lease: its replica's `--shards`. Replicas of one election run one
 * count at a time (docs/design/sharding.md, "Changing N"); a member without it counts as one of
 * this replica's count.
 */
export const SHARD_COUNT_ANNOTATION = "sharding.apps.our-org.com/shards";

/** Name of shard `k`'s Lease. */
export function shardLeaseName(id: string, k: number): string {
  return `${id}-shard-${k}`;
}

/**
 * The shard whose Lease is named `name` ({@link shardLeaseName}) among `n` shards, or undefined
 * (another Lease, or a shard of a larger count).
 */
export function shardOfLeaseName(id: string, name: string, n: number): number | undefined {
  const prefix = `${id}-shard-`;
  if (!name.startsWith(prefix)) return undefined;
  const rest = name.slice(prefix.length);
  if (!/^(0|[1-9][0-9]*)$/.test(rest)) return undefined;
  const k = Number(rest);
  return k < n ? k : undefined;
}

/** Name of the membership Lease of `identity` (its FNV-1a hash: identities hold `_`). */
export function memberLeaseName(id: string, identity: string): string {
  return `${id}-member-${fnv1a64(identity).toString(16).padStart(16, "0")}`;
}

/** Label value of the membership Leases of `id` (the id, or its hash when not a label value). */
export function memberLabelValue(id: string): string {
  return /^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$/.test(id)
    ? id
    : fnv1a64(id).toString(16).padStart(16, "0");
}

/** The largest share of `n` shards among `members` live replicas, `ceil(n / members)` ({@link targetShare} is a replica's own). */
export function fairShare(n: number, members: number): number {
  return Math.ceil(n / Math.max(1, members));
}

/**
 * The share of the replica ranked `rank` (its index among the live members' identities, sorted)
 * of `n` shards among `members` live replicas: `floor(n / members)`, plus one for the first
 * `n mod members` ranks, so the shares add up to `n` (4 over 3: 2, 1, 1; 6 over 4: 2, 2, 1, 1).
 */
export function targetShare(n: number, members: number, rank: number): number {
  const m = Math.max(1, members);
  return Math.floor(n / m) + (rank < n % m ? 1 : 0);
}

/** Why a shard moved (the `reason` of its log line). */
export type ShardMoveReason =
  | "free"
  | "expired"
  | "fair-share"
  | "shutdown"
  | "lost";

/** What the work side does when shards move (shard_work.ts). */
export interface ShardHooks {
  /** Shard `k`'s Lease was taken (its fence is open): sync its caches, then enqueue its keys. */
  acquired(k: number): void;
  /**
   * Shard `k` is being given back (fence already closed): stop taking its keys and wait for its
   * in-flight reconciles, at most `graceMs`.
   */
  stopping(k: number, graceMs: number): Promise<void>;
  /** Shard `k` is no longer held (released or lost): drop its keys and its cached objects. */
  stopped(k: number): void;
}

/** The sweeper's log field for `from`: `shards` when sharded, none on one Lease (`from` 0). */
function shardsField(from: number): { shards?: number } {
  return from === 0 ? {} : { shards: from };
}

/** Options of {@link ShardLeaseSweeper}. */
export interface ShardLeaseSweeperOptions {
  /** The Leases' client (no write fence). */
  client: KubeClient;
  /** Namespace of the Leases. */
  namespace: string;
  /** The election id (`--leader-election-id`). */
  id: string;
  /** Lease duration (s) of a record that names none. */
  leaseDurationSeconds: number;
  /** Where deletions and warnings go. */
  log: Logger;
}

/**
 * Deletes the shard Leases `<id>-shard-<k>` numbered `from` or more once nobody holds them
 * (released, or the same record seen for longer than its lease duration): left by a run with more
 * shards (or any shards, after going back to one Lease), they still carry their old hash range for
 * deploy/'s per-shard policy, which would refuse the writes in that range of every replica but
 * their old holder (docs/design/sharding.md, "The apiserver's fence per shard"). One still renewed
 * belongs to a replica running with another `--shards`: a warning, once per Lease. A failed delete
 * (a 409: renewed meanwhile) is tried again at the next sweep. Keeps, between sweeps, when each
 * record was first seen.
 */
export class ShardLeaseSweeper {
  readonly #o: ShardLeaseSweeperOptions;
  /** Each Lease's record, keyed by resourceVersion: any write to it starts its wait again. */
  readonly #seen = new SeenLeases();
  /** The Leases warned about (once each, whatever their later records). */
  readonly #warned = new Set<string>();

  /** A sweeper with no record seen yet. */
  constructor(o: ShardLeaseSweeperOptions) {
    this.#o = o;
  }

  /**
   * One sweep over `leases` (a list of the Leases' namespace) at clock time `now` (ms); each
   * delete gets the signal `attempt()` returns. Resolves with how many shard Leases numbered `from`
   * or more are left (held, or not deleted this time).
   */
  async sweep(
    leases: readonly Lease[],
    from: number,
    now: number,
    attempt: () => AbortSignal,
  ): Promise<number> {
    const o = this.#o;
    const prefix = `${o.id}-shard-`;
    const seen = new Set<string>();
    let left = 0;
    for (const l of leases) {
      const name = l.metadata?.name ?? "";
      const digits = name.startsWith(prefix) ? name.slice(prefix.length) : "";
      const k = Number(digits);
      if (!/^(0|[1-9][0-9]*)$/.test(digits) || k < from) continue;
      seen.add(name);
      const rv = l.metadata?.resourceVersion;
      const { holder } = this.#seen.seeLease(l, o.leaseDurationSeconds, now);
      if (holder !== undefined) {
        left++;
        if (!this.#warned.has(name)) {
          this.#warned.add(name);
          o.log.warn(
            from === 0
              ? "A shard Lease is held: a replica runs with --shards while this one runs on one Lease"
              : "A shard Lease beyond --shards is held: a replica runs with more shards",
            { lease: name, holder, ...shardsField(from) },
          );
        }
        continue;
      }
      try {
        await o.client.delete(LEASES, name, {
          namespace: o.namespace,
          preconditions: { resourceVersion: rv },
          signal: attempt(),
        });
        this.#seen.forget(name);
        o.log.info(
          from === 0
            ? "Deleted a shard Lease left by a sharded run: nobody holds it"
            : "Deleted a shard Lease beyond --shards: nobody holds it",
          { lease: name, ...shardsField(from) },
        );
      } catch (err) {
        if (isNotFound(err)) {
          this.#seen.forget(name);
          continue;
        }
        left++;
        o.log.debug("Could not delete a leftover shard Lease; next sweep", {
          lease: name,
          error: errorText(err),
        });
      }
    }
    this.#seen.keepOnly(seen);
    for (const name of [...this.#warned]) if (!seen.has(name)) this.#warned.delete(name);
    return left;
  }
}

/** Options of {@link ShardElector}. */
export interface ShardElectorOptions {
  /** The Leases' client (no write fence). */
  client: KubeClient;
  /** Namespace of the Leases. */
  namespace: string;
  /** The election id (`--leader-election-id`). */
  id: string;
  /** Holder identity. */
  identity: string;
  /** Number of shards, 2..256. */
  shards: number;
  /** Lease duration (s); default 15. */
  leaseDurationSeconds?: number;
  /** Renew deadline (ms); default 10 s. */
  renewDeadlineMs?: number;
  /** Retry period (ms); default 2 s. */
  retryPeriodMs?: number;
  /** Bound of a give-back's drain (ms). */
  gracefulShutdownTimeoutMs: number;
  /** The work side. */
  hooks: ShardHooks;
  /** Logger of the moves. */
  log: Logger;
  /** Sharding metrics, if any. */
  metrics?: ShardMetrics;
  /** Clock; default the real one. */
  clock?: Clock;
  /** Jitter source; default Math.random. */
  random?: () => number;
}

/** One shard as this replica sees it. */
interface Shard {
  readonly k: number;
  readonly elector: LeaderElector;
  /** Set while held: the renew loop's stop, its end, and whether it is being given back. */
  holding?: { stop: AbortController; done: Promise<"lost" | "stopped">; leaving: boolean };
}

/** The sharded elector; see the module doc. */
export class ShardElector {
  readonly #o: Required<Omit<ShardElectorOptions, "metrics">> & ShardElectorOptions;
  readonly #shards: Shard[];
  readonly #clock: Clock;
  /** Deletes the shard Leases numbered N or more once free ({@link ShardLeaseSweeper}). */
  readonly #sweeper: ShardLeaseSweeper;
  /** Membership Leases seen: name → record and when it was first seen (clock ms). */
  /** The other members' Leases, keyed by renewTime: a member is live while its record runs. */
  readonly #members = new SeenLeases();
  /** The `--shards` each live member's Lease says (those that say one), from the last round. */
  readonly #memberCounts = new Map<string, number>();
  /** Each live member's membership `acquireTime` (when it joined; "" unknown), from the last round. */
  readonly #memberSince = new Map<string, string>();
  /** The other counts last warned about ("" when none). */
  #mixedWarned = "";
  /** The one Lease `<id>` of a run without shards, as seen by the rounds (keyed by resourceVersion). */
  readonly #oneLease = new SeenLeases();
  /** Whether the wait for a live holder of the one Lease was told. */
  #oneWarned = false;
  #member?: Lease;
  #loop: Promise<void> = Promise.resolve();
  /** The membership Lease's renew loop (its own timer: a slow round must not let it run out). */
  #memberLoop: Promise<void> = Promise.resolve();
  /** Clock ms of the first failed membership renewal of the current run of failures. */
  #memberFailingSinceMs?: number;
  /** Give-backs in progress (fair share), awaited by {@link stop}. */
  readonly #leaving = new Set<Promise<void>>();
  /** Clock ms of the first failed round of the current run of failures; undefined after a success. */
  #failingSinceMs?: number;
  /** Whether the current run of failures was logged as an error (once per episode). */
  #failingLogged = false;
  /** The write fence of the reconcilers' client. */
  readonly fence: ShardFence;
  /** The namespace's Lease watch: observes renewals as they happen and wakes the round loop. */
  readonly #watch: LeaseWatch;
  /** Each shard's next try (clock ms) while not held here, as last observed (round or watch). */
  readonly #nextTry = new Map<number, number>();
  /** The watch saw what a round must act on at once: a released shard, a member joined or left. */
  #due = false;
  /** The live members of the last round (this replica included; before the first, itself). */
  #liveSet: ReadonlySet<string>;

  /** An elector that does nothing until {@link start}. */
  constructor(o: ShardElectorOptions) {
    this.#o = { ...electorDefaults(), ...o };
    this.#liveSet = new Set([o.identity]);
    this.#clock = this.#o.clock;
    this.#shards = Array.from({ length: o.shards }, (_, k) => ({
      k,
      elector: new LeaderElector({
        client: o.client,
        namespace: o.namespace,
        name: shardLeaseName(o.id, k),
        identity: o.identity,
        leaseDurationSeconds: this.#o.leaseDurationSeconds,
        renewDeadlineMs: this.#o.renewDeadlineMs,
        retryPeriodMs: this.#o.retryPeriodMs,
        // Only a clock given (tests): the fence's monotonic clock is performance.now() otherwise.
        ...(o.clock ? { clock: o.clock } : {}),
        random: this.#o.random,
        // Each shard Lease carries its hash range for deploy/'s per-shard policy, and each takeover
        // is sealed against it as with one Lease (lib/runtime/shard_fence_cel.ts, handover.ts).
        leaseMetadata: shardLeaseMetadata(memberLabelValue(o.id), k, o.shards),
        sealTakeover: true,
        onHandover: (r) => {
          const fields = {
            shard: k,
            step: r.step,
            outcome: r.outcome,
            waitedMs: Math.round(r.waitedMs),
            probes: r.probes,
            ...(r.holder ? { holder: r.holder } : {}),
          };
          // Expected outcomes at debug (one per shard taken); a policy that refuses the holder,
          // or still names another at the deadline, is worth a warning.
          if (r.outcome === "in-force" || r.outcome === "not-in-force") {
            o.log.debug("Shard Lease handover step", fields);
          } else {
            o.log.warn(
              "Shard Lease handover: the apiserver's Lease-holder policy did not confirm",
              {
                ...fields,
                ...(r.error ? { error: errorText(r.error) } : {}),
              },
            );
          }
        },
        watchLease: false,
        onError: (err) =>
          o.log.debug("Shard Lease attempt failed", { shard: k, error: errorText(err) }),
      }),
    }));
    this.#sweeper = new ShardLeaseSweeper({
      client: o.client,
      namespace: o.namespace,
      id: o.id,
      leaseDurationSeconds: this.#o.leaseDurationSeconds,
      log: o.log,
    });
    this.fence = new ShardFence(
      o.shards,
      (k) => this.#writable(k),
      (k) => this.#shards[k].elector.fence.signal,
    );
    this.#watch = new LeaseWatch({
      client: o.client,
      namespace: o.namespace,
      clock: this.#clock,
      retryPeriodMs: this.#o.retryPeriodMs,
      onLease: (lease, name) => this.#onWatched(lease, name),
      onError: (err) => o.log.debug("Shard Lease watch failed", { error: errorText(err) }),
    });
    o.metrics?.held.set(0);
    for (let k = 0; k < o.shards; k++) {
      for (const change of ["acquired", "released", "lost"]) {
        o.metrics?.moves.inc({ shard: String(k), change }, 0);
      }
    }
  }

  /** The shards held now (renewing, not being given back), ascending. */
  held(): number[] {
    return this.#shards.filter((s) => s.holding && !s.holding.leaving).map((s) => s.k);
  }

  /** Live members seen at the last look (this replica included). */
  get liveMembers(): number {
    return this.#liveSet.size;
  }

  /** Whether shard `k`'s writes may leave now (held, not leaving, renewal fresh). */
  #writable(k: number): WriteFence | undefined {
    const s = this.#shards[k];
    return s.holding && !s.holding.leaving ? s.elector.fence : undefined;
  }

  /** Starts the loop: membership, fair share, takes and give-backs, until `signal` aborts. */
  start(signal: AbortSignal): void {
    this.#memberLoop = this.#renewMembershipLoop(signal);
    this.#watch.start(signal);
    this.#loop = this.#run(signal);
  }

  /**
   * A Lease the watch delivered (`undefined`: deleted), recorded as seen now: a shard's Lease by
   * its elector (unless held here), another member's by the membership records. Returns when the
   * next round is due ({@link #nextWake}).
   */
  #onWatched(lease: Lease | undefined, name: string): number | undefined {
    const o = this.#o;
    const now = this.#clock.now();
    const k = shardOfLeaseName(o.id, name, o.shards);
    if (k !== undefined) {
      const s = this.#shards[k];
      if (!s.holding) {
        this.#nextTry.set(k, s.elector.observeLease(lease));
        // Released or deleted: free now.
        if (!lease?.spec?.holderIdentity) this.#due = true;
      }
    } else if (name.startsWith(`${o.id}-member-`) && name !== memberLeaseName(o.id, o.identity)) {
      if (!lease) {
        this.#members.forget(name);
        this.#due = true;
      } else if (lease.metadata?.labels?.[SHARD_MEMBER_LABEL] === memberLabelValue(o.id)) {
        const { holder } = this.#members.seeLease(lease, o.leaseDurationSeconds, now, "renewTime");
        if (holder !== undefined && !this.#liveSet.has(holder)) this.#due = true;
      }
    }
    return this.#nextWake(now);
  }

  /**
   * When the next round is due (clock ms; undefined: at the retry period): now when the watch saw
   * a change to act on, else the first moment after `now` at which a shard Lease not held here or
   * another member's record runs out.
   */
  #nextWake(now: number): number | undefined {
    if (this.#due) return now;
    let next = this.#members.nextRunOutAfter(now);
    for (const s of this.#shards) {
      const t = this.#nextTry.get(s.k);
      if (!s.holding && t !== undefined && t > now && (next === undefined || t < next)) next = t;
    }
    return next;
  }

  /**
   * Renews the membership Lease every retry period (jittered), on its own timer: a round slowed by
   * its takes (each bounded by the attempt timeout) must not let the membership run out, which
   * would make the others count this replica out and in again.
   */
  async #renewMembershipLoop(signal: AbortSignal): Promise<void> {
    const o = this.#o;
    while (!signal.aborted) {
      const startedMs = this.#clock.now();
      try {
        await this.#renewMembership(
          AbortSignal.any([signal, AbortSignal.timeout(leaseAttemptTimeoutMs(o.renewDeadlineMs))]),
        );
        this.#memberFailingSinceMs = undefined;
      } catch (err) {
        if (signal.aborted) break;
        this.#memberFailingSinceMs ??= startedMs;
        logAttemptFailure(o.log, "Membership Lease renewal failed", err, o.client.health);
      }
      const periodMs = o.retryPeriodMs * (1 + (RETRY_JITTER - 1) * o.random());
      try {
        await sleepOn(this.#clock, Math.max(0, periodMs - (this.#clock.now() - startedMs)), signal);
      } catch {
        break;
      }
    }
  }

  async #run(signal: AbortSignal): Promise<void> {
    const o = this.#o;
    while (!signal.aborted) {
      const startedMs = this.#clock.now();
      this.#due = false;
      try {
        await this.#round(signal);
        if (this.#failingLogged) o.log.info("Shard rounds succeed again");
        this.#failingSinceMs = undefined;
        this.#failingLogged = false;
      } catch (err) {
        if (!signal.aborted) this.#roundFailed(err);
      }
      const periodMs = o.retryPeriodMs * (1 + (RETRY_JITTER - 1) * o.random());
      // Earlier when the watch saw a change during the round, or a record runs out before then.
      this.#watch.wakeAt(this.#nextWake(this.#clock.now()));
      try {
        await this.#watch.sleep(Math.max(0, periodMs - (this.#clock.now() - startedMs)), signal);
      } catch {
        break;
      }
    }
  }

  /** A round failed: a warning, and an error once the failures have lasted a lease duration. */
  #roundFailed(err: unknown): void {
    const o = this.#o;
    const now = this.#clock.now();
    this.#failingSinceMs ??= now;
    // One line per apiserver outage (docs/design/transport.md); the error below still comes.
    logAttemptFailure(o.log, "Shard round failed", err, o.client.health);
    if (!this.#failingLogged && this.failingForMs() > o.leaseDurationSeconds * 1000) {
      this.#failingLogged = true;
      o.log.error("Shard rounds keep failing: this replica takes no part in the sharding", {
        error: errorText(err),
        failingForMs: now - this.#failingSinceMs,
      });
    }
  }

  /**
   * How long (ms) the rounds, or the membership renewals, have failed without a success in
   * between (the longer of the two); 0 when the last of each succeeded.
   */
  failingForMs(): number {
    const since = Math.min(
      this.#failingSinceMs ?? Infinity,
      this.#memberFailingSinceMs ?? Infinity,
    );
    return since === Infinity ? 0 : this.#clock.now() - since;
  }

  /**
   * Why this replica is not ready, or undefined: its rounds have failed for longer than a lease
   * duration (its membership has run out for the others; it can neither take nor give back
   * shards, so it must not look like a healthy standby).
   */
  unready(): string | undefined {
    const ms = this.failingForMs();
    return ms > this.#o.leaseDurationSeconds * 1000
      ? `shard rounds failing for ${Math.round(ms / 1000)} s`
      : undefined;
  }

  /** One round: read the Leases, give back above or take below the fair share. */
  async #round(signal: AbortSignal): Promise<void> {
    const o = this.#o;
    const attempt = () =>
      AbortSignal.any([signal, AbortSignal.timeout(leaseAttemptTimeoutMs(o.renewDeadlineMs))]);
    const list = await o.client.list<Lease>(LEASES, { namespace: o.namespace, signal: attempt() });
    const now = this.#clock.now();
    const byName = new Map(list.items.map((l) => [l.metadata?.name ?? "", l]));
    const live = this.#liveMembers(list.items, now);
    this.#liveSet = new Set(live);
    // One count at a time: the share is counted among the live members of this replica's
    // `--shards` only, and while a live member of another count holds a shard Lease this replica
    // takes no more (a rolling change of the count: the new replicas wait as standbys until the
    // last replica of the old count has released its shards; docs/design/sharding.md).
    const same = live.filter((id) => (this.#memberCounts.get(id) ?? o.shards) === o.shards);
    const others = live.filter((id) => !same.includes(id));
    const othersHold = others.length > 0 &&
      list.items.some((l) =>
        (l.metadata?.name ?? "").startsWith(`${o.id}-shard-`) &&
        others.includes(l.spec?.holderIdentity ?? "")
      );
    this.#warnMixed(others);
    const oneHeld = await this.#oneLeaseHeld(byName.get(o.id), now, attempt);
    let fair = targetShare(o.shards, same.length, same.indexOf(o.identity));
    if (othersHold || oneHeld) fair = Math.min(fair, this.held().length);
    // Both sides holding (two first attempts at once, which the rules above cannot order): one
    // side yields everything, or some shards would stay taken by nobody — to a live single
    // leader, or to the count whose first member joined first (the old count in a rolling change).
    if (this.held().length > 0 && (oneHeld || (othersHold && this.#newerCount(same, others)))) {
      fair = 0;
    }
    // Every round observes every shard's Lease, held elsewhere or not: a Lease runs out a lease
    // duration after its record was first seen unchanged, so it must be watched before this
    // replica needs it (e.g. while a dead member still counts as live).
    const nextTry = this.#nextTry;
    for (const s of this.#shards) {
      if (!s.holding) {
        nextTry.set(s.k, s.elector.observeLease(byName.get(shardLeaseName(o.id, s.k))));
      }
    }
    // Leases beyond this count may be another live count's: swept only when none is live.
    if (others.length === 0) await this.#sweeper.sweep(list.items, o.shards, now, attempt);
    const held = this.held();
    if (held.length > fair) {
      // Give back the highest shards above the share, one round at a time.
      for (const k of held.slice(fair).reverse()) {
        const p = this.#giveBack(k, "fair-share").finally(() => this.#leaving.delete(p));
        this.#leaving.add(p);
      }
      return;
    }
    let count = held.length;
    const candidates = this.#preference().filter((k) =>
      !this.#shards[k].holding && (nextTry.get(k) ?? Infinity) <= now
    );
    // Takes what is missing of the share at once, in batches (the next candidates only for those
    // a batch did not get): the shards of a batch start their work in one tick, so the informers
    // restart once for all of them (ShardReflector coalesces the restarts), and no take waits
    // for another's round trip.
    for (let i = 0; i < candidates.length && count < fair && !signal.aborted;) {
      const batch = candidates.slice(i, i + fair - count);
      i += batch.length;
      const tries = await Promise.allSettled(batch.map(async (k) => {
        const s = this.#shards[k];
        const previous = byName.get(shardLeaseName(o.id, k))?.spec?.holderIdentity ?? "";
        return { s, previous, taken: await s.elector.tryAcquireOrRenew(attempt()) };
      }));
      let failure: { reason: unknown } | undefined;
      for (const t of tries) {
        if (t.status === "rejected") failure ??= t;
        else if (t.value.taken) {
          count++;
          const { s, previous } = t.value;
          this.#hold(s, previous ? "expired" : "free", previous, signal);
        }
      }
      if (failure) throw failure.reason;
    }
  }

  /**
   * The one Lease `<id>` of a run without `--shards` (`lease`: from this round's list): true while
   * a live replica holds it (its record runs on this replica's clock) — a rolling change from one
   * Lease to shards, whose shards this replica then does not take yet. Released or run out, it
   * is deleted (resourceVersion precondition), since deploy/'s one-Lease policy would refuse every
   * write of every replica while it names nobody (docs/design/sharding.md, "Changing N").
   */
  async #oneLeaseHeld(
    lease: Lease | undefined,
    now: number,
    attempt: () => AbortSignal,
  ): Promise<boolean> {
    const o = this.#o;
    if (!lease) {
      this.#oneLease.forget(o.id);
      return false;
    }
    const rv = lease.metadata?.resourceVersion ?? "";
    const { holder } = this.#oneLease.seeLease(lease, o.leaseDurationSeconds, now);
    if (holder !== undefined) {
      if (!this.#oneWarned) {
        this.#oneWarned = true;
        o.log.warn(
          "A replica without --shards holds the one Lease: this replica takes no shard until it is released or runs out",
          { lease: `${o.namespace}/${o.id}`, holder, shards: o.shards },
        );
      }
      return true;
    }
    this.#oneWarned = false;
    try {
      await o.client.delete(LEASES, o.id, {
        namespace: o.namespace,
        preconditions: { resourceVersion: rv },
        signal: attempt(),
      });
      this.#oneLease.forget(o.id);
      o.log.info("Deleted the one Lease of a run without --shards: nobody holds it", {
        lease: `${o.namespace}/${o.id}`,
        formerHolder: holder,
      });
    } catch (err) {
      if (!isNotFound(err)) {
        o.log.debug("Could not delete the one Lease; next round", { error: errorText(err) });
      }
    }
    return false;
  }

  /**
   * Whether this replica's count joined after the other counts: the earliest membership
   * `acquireTime` among `same` (this replica's included) is later than the earliest among `others`
   * (times as the Leases carry them, RFC 3339 with microseconds, which compare as strings; an
   * unknown one counts as earliest); on a tie, the larger count is the newer.
   */
  #newerCount(same: string[], others: string[]): boolean {
    const own = this.#member?.spec?.acquireTime ?? "";
    const earliest = (ids: string[]) =>
      ids.reduce((min, id) => {
        const t = id === this.#o.identity ? own : (this.#memberSince.get(id) ?? "");
        return t < min ? t : min;
      }, "\uffff");
    const mine = earliest(same);
    const theirs = earliest(others);
    if (mine !== theirs) return mine > theirs;
    const otherCount = Math.min(...others.map((id) => this.#memberCounts.get(id) ?? Infinity));
    return this.#o.shards > otherCount;
  }

  /** Warns once per set of other counts seen among the live members (`others`: identities). */
  #warnMixed(others: string[]): void {
    const counts = [...new Set(others.map((id) => this.#memberCounts.get(id)!))].sort((a, b) =>
      a - b
    );
    const key = counts.join(",");
    if (key === this.#mixedWarned) return;
    this.#mixedWarned = key;
    if (key === "") {
      this.#o.log.info("Every live replica runs with this --shards again", {
        shards: this.#o.shards,
      });
      return;
    }
    this.#o.log.warn(
      "Replicas run with another --shards: this replica takes no shard while one of them holds a shard Lease",
      { shards: this.#o.shards, otherShards: counts, others },
    );
  }

  /** Shard order of this replica's attempts: from a start its identity picks, so replicas differ. */
  #preference(): number[] {
    const n = this.#o.shards;
    const start = shardOf(this.#o.identity, n);
    return Array.from({ length: n }, (_, i) => (start + i) % n);
  }

  /** The live members' identities (this replica's included), sorted. */
  #liveMembers(items: Lease[], now: number): string[] {
    const o = this.#o;
    const value = memberLabelValue(o.id);
    const own = memberLeaseName(o.id, o.identity);
    const live = [o.identity];
    const seen = new Set<string>();
    const counts = new Map<string, number>();
    const since = new Map<string, string>();
    for (const l of items) {
      const name = l.metadata?.name ?? "";
      if (l.metadata?.labels?.[SHARD_MEMBER_LABEL] !== value || name === own) continue;
      seen.add(name);
      const { holder } = this.#members.seeLease(l, o.leaseDurationSeconds, now, "renewTime");
      if (holder !== undefined && holder !== o.identity) {
        live.push(holder);
        const count = Number(l.metadata?.annotations?.[SHARD_COUNT_ANNOTATION]);
        if (Number.isInteger(count) && count > 0) counts.set(holder, count);
        since.set(holder, l.spec?.acquireTime ?? "");
      }
    }
    this.#members.keepOnly(seen);
    this.#memberCounts.clear();
    for (const [id, n] of counts) this.#memberCounts.set(id, n);
    this.#memberSince.clear();
    for (const [id, t] of since) this.#memberSince.set(id, t);
    return [...new Set(live)].sort();
  }

  /** Creates or renews this replica's membership Lease. */
  async #renewMembership(signal: AbortSignal): Promise<void> {
    const o = this.#o;
    const spec = () => ({
      holderIdentity: o.identity,
      leaseDurationSeconds: o.leaseDurationSeconds,
      renewTime: microTime(this.#clock.now()),
    });
    const name = memberLeaseName(o.id, o.identity);
    const metadata = (m: Lease["metadata"]) => ({
      ...m,
      annotations: { ...m?.annotations, [SHARD_COUNT_ANNOTATION]: String(o.shards) },
    });
    if (this.#member) {
      try {
        this.#member = await o.client.update<Lease>(LEASES, {
          ...this.#member,
          metadata: metadata(this.#member.metadata),
          spec: { ...this.#member.spec, ...spec() },
        }, { signal });
        return;
      } catch (err) {
        if (signal.aborted) throw err;
      }
    }
    try {
      const cur = await o.client.get<Lease>(LEASES, name, { namespace: o.namespace, signal });
      this.#member = await o.client.update<Lease>(LEASES, {
        ...cur,
        metadata: metadata(cur.metadata),
        spec: { ...cur.spec, ...spec() },
      }, { signal });
    } catch (err) {
      if (!isNotFound(err)) throw err;
      try {
        this.#member = await o.client.create<Lease>(LEASES, {
          apiVersion: "coordination.k8s.io/v1",
          kind: "Lease",
          metadata: metadata({
            name,
            namespace: o.namespace,
            labels: { [SHARD_MEMBER_LABEL]: memberLabelValue(o.id) },
          }),
          spec: { ...spec(), acquireTime: microTime(this.#clock.now()) },
        }, { signal });
      } catch (e) {
        if (!isAlreadyExists(e)) throw e;
      }
    }
  }

  /** Starts holding shard `s` (its Lease just taken): the renew loop and the work. */
  #hold(s: Shard, reason: ShardMoveReason, previous: string, signal: AbortSignal): void {
    const o = this.#o;
    // Not AbortSignal.any: giving the shard back must not depend on a dependent signal (abort.ts).
    const link = linkedStop(signal);
    const stop = link.controller;
    const done = s.elector.run(link.signal);
    done.finally(link.unlink).catch(() => {});
    const holding = { stop, done, leaving: false };
    s.holding = holding;
    this.#moved(s.k, "acquired", previous, o.identity, reason);
    o.hooks.acquired(s.k);
    done.then((r) => {
      if (r !== "lost" || s.holding !== holding) return;
      // Lost: the fence closed with the term; the work stops, the replica goes on.
      s.holding = undefined;
      o.hooks.stopped(s.k);
      this.#moved(s.k, "lost", o.identity, s.elector.observedHolder, "lost");
    });
  }

  /**
   * Gives shard `k` back: fence closed, work drained (bounded by the grace period), renewals
   * stopped, Lease released. Resolves when done.
   */
  async #giveBack(k: number, reason: ShardMoveReason): Promise<void> {
    const o = this.#o;
    const s = this.#shards[k];
    const h = s.holding;
    if (!h || h.leaving) return;
    h.leaving = true; // the fence is closed for k from here on
    await o.hooks.stopping(k, o.gracefulShutdownTimeoutMs);
    h.stop.abort();
    const end = await h.done;
    // Lost meanwhile: #hold has stopped its work and logged the loss, and the shard may have been
    // taken again since (a new holding that is not this give-back's to tear down).
    if (s.holding !== h) return;
    s.holding = undefined;
    o.hooks.stopped(k);
    if (end === "lost") {
      this.#moved(k, "lost", o.identity, s.elector.observedHolder, "lost");
      return;
    }
    if (!(await this.#release(s))) {
      o.log.warn("Shard Lease not released: it runs out a lease duration after its last renewal", {
        shard: k,
      });
    }
    this.#moved(k, "released", o.identity, "", reason);
  }

  /**
   * Releases shard `s`'s Lease: the elector's release, and when that writes nothing (its term had
   * not begun: a take that succeeded as the loop's signal aborted), a clearing write of the
   * current record if it still names this replica (resourceVersion-checked, as the elector's).
   * Resolves true when the Lease no longer names this replica.
   */
  async #release(s: Shard): Promise<boolean> {
    const o = this.#o;
    const signal = AbortSignal.timeout(leaseAttemptTimeoutMs(o.renewDeadlineMs));
    if (await s.elector.release(signal)) return true;
    try {
      const cur = await o.client.get<Lease>(LEASES, shardLeaseName(o.id, s.k), {
        namespace: o.namespace,
        signal,
      });
      if (cur.spec?.holderIdentity !== o.identity) return true;
      const now = microTime(this.#clock.now());
      await o.client.update<Lease>(LEASES, {
        ...cur,
        spec: { ...cur.spec, holderIdentity: "", leaseDurationSeconds: 1, renewTime: now },
      }, { signal });
      return true;
    } catch (err) {
      o.log.debug("Shard Lease clearing write failed", { shard: s.k, error: errorText(err) });
      return false;
    }
  }

  #moved(
    k: number,
    change: "acquired" | "released" | "lost",
    from: string,
    to: string,
    reason: ShardMoveReason,
  ): void {
    const o = this.#o;
    o.metrics?.moves.inc({ shard: String(k), change });
    o.metrics?.held.set(this.held().length);
    const line = { shard: k, from: from || "(none)", to: to || "(none)", reason };
    if (change === "lost") o.log.warn("Shard moved", line);
    else o.log.info("Shard moved", line);
  }

  /**
   * After the loop's signal: gives every held shard back (each drained and released) and deletes
   * the membership Lease. Resolves when done.
   */
  async stop(): Promise<void> {
    this.#watch.stop();
    await this.#loop;
    await this.#memberLoop;
    await Promise.all([
      ...this.held().map((k) => this.#giveBack(k, "shutdown")),
      ...this.#leaving,
    ]);
    const o = this.#o;
    try {
      await o.client.delete(LEASES, memberLeaseName(o.id, o.identity), {
        namespace: o.namespace,
        signal: AbortSignal.timeout(leaseAttemptTimeoutMs(o.renewDeadlineMs)),
      });
    } catch (err) {
      if (!isNotFound(err)) {
        o.log.warn("Could not delete the membership Lease", { error: errorText(err) });
      }
    }
  }
}

/**
 * The write fence of a sharded replica: a write to a namespace passes only while the Lease of
 * that namespace's shard is held (not being given back) and renewed within the renew deadline
 * (the shard's {@link LeaseFence}, checked synchronously); a cluster-scoped write (no namespace
 * in its path) only while at least one shard's does. The namespace is read from the request path.
 * A write in flight is aborted by {@link signalFor}: the signal of the shard's Lease fence (its
 * renew deadline, its term's end), so a shard lost or gone stale stops its own writes only.
 */
export class ShardFence implements WriteFence {
  readonly #n: number;
  readonly #fenceOf: (k: number) => WriteFence | undefined;
  readonly #signalOf: (k: number) => AbortSignal | undefined;
  readonly #shardOfNs = new Map<string, number>();

  /**
   * A fence asking `fenceOf` for the shard of each write's namespace.
   * @param n number of shards
   * @param fenceOf the Lease fence of shard k while held and not leaving, else undefined
   * @param signalOf the in-flight signal of shard k's Lease fence (aborted at its renew deadline
   *   and at its term's end); default none (writes in flight are then not aborted)
   */
  constructor(
    n: number,
    fenceOf: (k: number) => WriteFence | undefined,
    signalOf: (k: number) => AbortSignal | undefined = () => undefined,
  ) {
    this.#n = n;
    this.#fenceOf = fenceOf;
    this.#signalOf = signalOf;
  }

  /**
   * The signal aborting a write in flight to `path`: for a namespaced path, that of the Lease
   * fence of the namespace's shard; for a cluster-scoped one, that of the first shard whose fence
   * lets it pass now (the shard it is written under: it is aborted when that shard's fence closes,
   * even if another shard is still held), or undefined when none does ({@link check} refuses it).
   */
  signalFor(method: string, path: string): AbortSignal | undefined {
    const ns = namespaceOfPath(path);
    if (ns !== undefined) return this.#signalOf(this.shardOf(ns));
    for (let k = 0; k < this.#n; k++) {
      const f = this.#fenceOf(k);
      if (!f) continue;
      try {
        f.check(method, path);
        return this.#signalOf(k);
      } catch { /* stale: try the next shard */ }
    }
    return undefined;
  }

  /** The shard of `namespace` (memoized). */
  shardOf(namespace: string): number {
    let k = this.#shardOfNs.get(namespace);
    if (k === undefined) {
      k = shardOf(namespace, this.#n);
      if (this.#shardOfNs.size > 100_000) this.#shardOfNs.clear();
      this.#shardOfNs.set(namespace, k);
    }
    return k;
  }

  /**
   * Throws {@link FencedError} (`NotHeld`, or the shard fence's `Stale`) unless the write may
   * leave now; see the class doc.
   */
  check(method: string, path: string): void {
    const ns = namespaceOfPath(path);
    if (ns === undefined) {
      let last: unknown;
      for (let k = 0; k < this.#n; k++) {
        const f = this.#fenceOf(k);
        if (!f) continue;
        try {
          f.check(method, path);
          return;
        } catch (err) {
          last = err;
        }
      }
      throw last ?? new FencedError("NotHeld", `${method} ${path} (no shard held)`);
    }
    const k = this.shardOf(ns);
    const f = this.#fenceOf(k);
    if (!f) throw new FencedError("NotHeld", `${method} ${path} (shard ${k} not held)`);
    f.check(method, path);
  }
}
