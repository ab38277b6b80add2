/**
 * Clears the Leases of another mode that block this replica's writes at the apiserver.
 *
 * deploy/'s Lease-holder policies judge a write by every Lease of the election they select: the one
 * Lease `<id>` (lease_fence_policy.yaml) and the shard Leases `<id>-shard-<k>` with their hash ranges
 * (shard_fence_policy.yaml). A Lease left by a run of another mode — the one Lease after a move to
 * `--shards N`, shard Leases after a move back to one Lease, shard Leases numbered N or more after
 * a move to fewer shards — keeps refusing every write it judges once its holder is gone: released
 * (holder "") or dead, it names nobody who could write. Nothing in this replica's own election
 * would ever touch it again (docs/design/sharding.md, "Changing N").
 *
 * The trigger is the refusal itself, so a replica at rest makes no request for this: the client
 * tells the write fence of each refusal ({@link WriteFence.refused}); when the refusal names such a
 * Lease of this election, {@link FenceRepair} reads it, deletes it (with its resourceVersion as
 * precondition) once nobody holds it — released, or the same record seen for a lease duration on
 * this replica's clock (lease_expiry.ts) — and then has every key reconciled again
 * (`onRepaired`), since the refused keys wait in their backoff. A Lease of another mode that is
 * still renewed belongs to a replica running in that mode: it is left alone, with one warning per
 * holder, and read again when it could have run out (about once per lease duration) until it is
 * gone — a mixed-mode moment, such as a rolling change, ends with it.
 *
 * @module
 */
import type { Lease } from "kubernetes-types/coordination/v1.d.ts";
import type { KubeClient, WriteFence } from "../kube/client.ts";
import { type FencedError, isForbidden, isNotFound, refusingLease } from "../kube/errors.ts";
import { LEASES } from "../kube/resources.ts";
import { type Clock, realClock, sleepOn } from "./clock.ts";
import { runsOutAtMs, SeenLeases } from "./lease_expiry.ts";
import { errorText, type Logger } from "./log.ts";

/** Options of {@link FenceRepair}. */
export interface FenceRepairOptions {
  /** The Leases' client (no write fence). */
  client: KubeClient;
  /** Namespace of the election's Leases. */
  namespace: string;
  /** The election id (`--leader-election-id`): the one Lease's name, the shard Leases' prefix. */
  id: string;
  /** This replica's mode: 1 (the one Lease) or the number of shards. */
  shards: number;
  /** Lease duration (s) of a record that names none. */
  leaseDurationSeconds: number;
  /** Retry period (ms): the least time between two reads of one Lease. */
  retryPeriodMs: number;
  /** Where deletions and warnings go. */
  log: Logger;
  /** Called after a blocking Lease is gone: every key should be reconciled again. */
  onRepaired: () => void;
  /** Clock; default the real one. */
  clock?: Clock;
}

/** A Lease of another mode that refused a write, as tracked between reads. */
interface Suspect {
  /** Clock ms when the last read of it started (-Infinity before the first). */
  readAtMs: number;
  /** Clock ms before which it is not read again. */
  dueMs: number;
  /**
   * What was last warned about, so each is said once: a live holder (by identity), or that this
   * replica may not delete the Lease.
   */
  warned?: { holder: string } | "forbidden";
}

/**
 * Whether Lease `name` belongs to another mode than `shards` of election `id`: with one Lease,
 * any shard Lease `<id>-shard-<k>`; with N shards, the one Lease `<id>` and shard Leases numbered
 * N or more.
 */
export function otherModeLease(name: string, id: string, shards: number): boolean {
  if (name === id) return shards > 1;
  const prefix = `${id}-shard-`;
  if (!name.startsWith(prefix)) return false;
  const digits = name.slice(prefix.length);
  if (!/^(0|[1-9][0-9]*)$/.test(digits)) return false;
  return shards <= 1 || Number(digits) >= shards;
}

/** See the module doc. */
export class FenceRepair {
  readonly #o: FenceRepairOptions;
  readonly #clock: Clock;
  readonly #suspects = new Map<string, Suspect>();
  readonly #seen = new SeenLeases();
  /**
   * Clock ms when each Lease was found gone: refusals naming it for a lease duration after are
   * the apiserver's informer catching up, not a new Lease (each would requeue every key).
   */
  readonly #goneAtMs = new Map<string, number>();
  #signal?: AbortSignal;
  #loop?: Promise<void>;
  /** Wakes the loop's wait for the next due read. */
  #wake?: () => void;
  /** Set by each refusal that concerns the loop; cleared at the start of each pass. */
  #dirty = false;
  /** Whether a later requeue of every key is pending ({@link FenceRepair.refused}). */
  #requeuePending = false;

  /** A repair with nothing tracked; it acts only after {@link start}. */
  constructor(o: FenceRepairOptions) {
    this.#o = o;
    this.#clock = o.clock ?? realClock;
  }

  /** Acts on refusals until `signal` aborts. */
  start(signal: AbortSignal): void {
    this.#signal = signal;
  }

  /** Resolves once the loop (if running) has stopped. */
  async stopped(): Promise<void> {
    await this.#loop;
  }

  /**
   * A refusal by the apiserver (see {@link WriteFence.refused}): when it names a Lease of this
   * election of another mode, that Lease is read (at once, or when next due) and deleted once
   * nobody holds it. Other refusals (this mode's Leases: another replica holds them) are left to
   * the election.
   */
  refused(err: FencedError): void {
    const o = this.#o;
    const lease = refusingLease(err);
    if (!lease || lease.namespace !== o.namespace) return;
    if (!otherModeLease(lease.name, o.id, o.shards)) return;
    const now = this.#clock.now();
    const gone = this.#goneAtMs.get(lease.name);
    if (gone !== undefined && now - gone < o.leaseDurationSeconds * 1000) {
      // The apiserver's informer has not seen the deletion yet (each apiserver has its own): the
      // keys refused now wait in their backoff, so every key goes once more a retry period later.
      this.#requeueLater();
      return;
    }
    this.#goneAtMs.delete(lease.name);
    const s = this.#suspects.get(lease.name);
    if (!s) this.#suspects.set(lease.name, { readAtMs: -Infinity, dueMs: now });
    // Released since its last read (the refusal says so): read again as soon as allowed.
    else if (lease.holder === "") s.dueMs = Math.min(s.dueMs, s.readAtMs + o.retryPeriodMs);
    this.#kick();
  }

  /** One more requeue of every key a retry period from now (at most one pending). */
  #requeueLater(): void {
    const signal = this.#signal;
    if (this.#requeuePending || !signal || signal.aborted) return;
    this.#requeuePending = true;
    sleepOn(this.#clock, this.#o.retryPeriodMs, signal).then(
      () => {
        this.#requeuePending = false;
        this.#o.onRepaired();
      },
      () => this.#requeuePending = false,
    );
  }

  /** Runs the loop unless it runs, or has it look at the suspects again. */
  #kick(): void {
    const signal = this.#signal;
    if (!signal || signal.aborted) return;
    this.#dirty = true;
    if (this.#loop) {
      this.#wake?.();
      return;
    }
    this.#loop = this.#run(signal).finally(() => {
      this.#loop = undefined;
      // A refusal between the loop's last look and its end: start again.
      if (this.#suspects.size > 0) this.#kick();
    });
  }

  /**
   * Reads each suspect when due, until none is left (each is gone) or `signal` aborts. No Lease is
   * read more often than every retry period. Every key is requeued once per pass that found a
   * Lease gone.
   */
  async #run(signal: AbortSignal): Promise<void> {
    const o = this.#o;
    while (!signal.aborted && this.#suspects.size > 0) {
      this.#dirty = false;
      const now = this.#clock.now();
      let anyGone = false;
      for (const [name, s] of [...this.#suspects]) {
        if (s.dueMs > now) continue;
        s.readAtMs = this.#clock.now();
        const outcome = await this.#check(name, s, signal);
        if (outcome === "gone") {
          this.#suspects.delete(name);
          this.#seen.forget(name);
          this.#goneAtMs.set(name, this.#clock.now());
          anyGone = true;
          continue;
        }
        // Tracked until gone (its holder may exit any time, and the refused keys may wait long in
        // their backoff): read again no sooner than a retry period, a held record when it could
        // run out, so about once per lease duration while another replica renews it.
        s.dueMs = Math.max(s.readAtMs + o.retryPeriodMs, outcome === "retry" ? 0 : outcome);
      }
      if (anyGone) o.onRepaired();
      // Refusals during the reads may have added suspects or moved a due time: look again.
      if (this.#dirty || this.#suspects.size === 0) continue;
      const nextDue = Math.min(...[...this.#suspects.values()].map((x) => x.dueMs));
      const wait = new AbortController();
      this.#wake = () => wait.abort();
      await sleepOn(
        this.#clock,
        Math.max(0, nextDue - this.#clock.now()),
        AbortSignal.any([signal, wait.signal]),
      ).catch(() => {});
      this.#wake = undefined;
    }
  }

  /**
   * One read of Lease `name`: "gone" when it is missing or was deleted now; otherwise when (clock
   * ms) its record could run out, or "retry" after a failed request.
   */
  async #check(name: string, s: Suspect, signal: AbortSignal): Promise<"gone" | "retry" | number> {
    const o = this.#o;
    const attempt = AbortSignal.any([signal, AbortSignal.timeout(o.retryPeriodMs * 5)]);
    let lease: Lease;
    try {
      lease = await o.client.get<Lease>(LEASES, name, { namespace: o.namespace, signal: attempt });
    } catch (err) {
      if (isNotFound(err)) return "gone";
      o.log.debug("Reading a Lease that refused a write failed; trying again", {
        lease: `${o.namespace}/${name}`,
        error: errorText(err),
      });
      return "retry";
    }
    const now = this.#clock.now();
    const rv = lease.metadata?.resourceVersion ?? "";
    const { record, holder } = this.#seen.seeLease(lease, o.leaseDurationSeconds, now);
    if (holder !== undefined) {
      if (typeof s.warned !== "object" || s.warned.holder !== holder) {
        s.warned = { holder };
        o.log.warn(
          "A Lease of another mode refuses this replica's writes, and its holder renews it: run one mode at a time",
          { lease: `${o.namespace}/${name}`, holder, shards: o.shards },
        );
      }
      return runsOutAtMs(record);
    }
    try {
      await o.client.delete(LEASES, name, {
        namespace: o.namespace,
        preconditions: { resourceVersion: rv },
        signal: attempt,
      });
    } catch (err) {
      if (isNotFound(err)) return "gone";
      if (isForbidden(err)) {
        // No delete permission (leader election alone needs none): say once what to do, and
        // try again only a lease duration later.
        if (s.warned !== "forbidden") {
          s.warned = "forbidden";
          o.log.warn(
            "A Lease of another mode refuses this replica's writes, and this replica may not delete it: delete it by hand",
            { lease: `${o.namespace}/${name}`, error: errorText(err) },
          );
        }
        return now + o.leaseDurationSeconds * 1000;
      }
      o.log.debug("Deleting a Lease that refused a write failed; trying again", {
        lease: `${o.namespace}/${name}`,
        error: errorText(err),
      });
      return "retry";
    }
    o.log.info("Deleted a Lease of another mode that refused this replica's writes", {
      lease: `${o.namespace}/${name}`,
      formerHolder: lease.spec?.holderIdentity ?? "",
      shards: o.shards,
    });
    return "gone";
  }
}

/**
 * `fence` with {@link WriteFence.refused} also telling `repair` (the fence's own `refused`, if any,
 * first).
 */
export function withRefusalRepair(fence: WriteFence, repair: FenceRepair): WriteFence {
  const out: WriteFence = {
    check: (method, path) => fence.check(method, path),
    get signal() {
      return fence.signal;
    },
    refused: (err) => {
      fence.refused?.(err);
      repair.refused(err);
    },
  };
  if (fence.signalFor) out.signalFor = (method, path) => fence.signalFor!(method, path);
  return out;
}
