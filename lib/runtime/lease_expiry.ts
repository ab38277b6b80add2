/**
 * When a Lease record runs out, as this process sees it — the one rule the leader elector
 * (leader.ts), the sharded elector's membership count and its sweeper of leftover shard Leases
 * (shard_elector.ts) share.
 *
 * The rule (client-go's leaderelection, `observedTime`; the Lease API's `leaseDurationSeconds`
 * doc): a record runs out a lease duration after it was *first seen unchanged here*, measured on
 * this process's clock. The `renewTime` it carries was written by another machine's clock and is
 * never compared with ours; a changed record (a renewal, another holder) starts the wait again.
 * What makes two records "the same" is the caller's choice of key (holder and renewTime, or the
 * resourceVersion): see each caller.
 *
 * @module
 */
import type { Lease } from "kubernetes-types/coordination/v1.d.ts";

/** One Lease record, as first seen here. */
export interface SeenRecord {
  /** What identifies the record (the caller's key: e.g. holder and renewTime, or resourceVersion). */
  readonly key: string;
  /** Clock time (ms) when this record was first seen. */
  readonly sinceMs: number;
  /** The record's lease duration (ms). */
  readonly durationMs: number;
}

/** The lease duration of `lease` in ms: its `spec.leaseDurationSeconds`, else `defaultSeconds`. */
export function leaseDurationMs(lease: Lease, defaultSeconds: number): number {
  return (lease.spec?.leaseDurationSeconds ?? defaultSeconds) * 1000;
}

/**
 * The record seen at clock time `nowMs` (ms) under `key`: `prev` itself when it is the same record
 * (so its wait goes on), else a new record whose wait starts now.
 */
export function seeRecord(
  prev: SeenRecord | undefined,
  key: string,
  durationMs: number,
  nowMs: number,
): SeenRecord {
  return prev && prev.key === key ? prev : { key, sinceMs: nowMs, durationMs };
}

/** Clock time (ms) at which `r` runs out: a lease duration after it was first seen. */
export function runsOutAtMs(r: SeenRecord): number {
  return r.sinceMs + r.durationMs;
}

/** Whether `r` still runs at clock time `nowMs` (ms): seen unchanged for less than its duration. */
export function stillRuns(r: SeenRecord, nowMs: number): boolean {
  return nowMs < runsOutAtMs(r);
}

/**
 * The records of several Leases by name, kept between lists of them (each list: {@link see} for
 * every Lease listed, then {@link keepOnly} with their names, so a deleted Lease is forgotten).
 */
export class SeenLeases {
  readonly #seen = new Map<string, SeenRecord>();

  /** Records Lease `name`'s record `key` at `nowMs` (see {@link seeRecord}) and returns it. */
  see(name: string, key: string, durationMs: number, nowMs: number): SeenRecord {
    const r = seeRecord(this.#seen.get(name), key, durationMs, nowMs);
    this.#seen.set(name, r);
    return r;
  }

  /**
   * Records `lease` as seen at `nowMs` (ms) under its name, its record identified by `by` (its
   * resourceVersion: any write is a new record; or its renewTime: only a renewal is) with the
   * lease duration it names, else `defaultSeconds`.
   * @returns the record, and the holder while the record still runs (undefined when the Lease has
   *   no holder or its record ran out unchanged)
   */
  seeLease(
    lease: Lease,
    defaultSeconds: number,
    nowMs: number,
    by: "resourceVersion" | "renewTime" = "resourceVersion",
  ): { record: SeenRecord; holder?: string } {
    const key = (by === "renewTime" ? lease.spec?.renewTime : lease.metadata?.resourceVersion) ??
      "";
    const record = this.see(
      lease.metadata?.name ?? "",
      key,
      leaseDurationMs(lease, defaultSeconds),
      nowMs,
    );
    const holder = lease.spec?.holderIdentity ?? "";
    return holder !== "" && stillRuns(record, nowMs) ? { record, holder } : { record };
  }

  /** Forgets Lease `name` (deleted). */
  forget(name: string): void {
    this.#seen.delete(name);
  }

  /** Forgets every Lease not in `names` (no longer listed). */
  keepOnly(names: ReadonlySet<string>): void {
    for (const name of [...this.#seen.keys()]) if (!names.has(name)) this.#seen.delete(name);
  }

  /**
   * The first clock time (ms) after `nowMs` at which a remembered record runs out, or undefined
   * when none runs out later than `nowMs`.
   */
  nextRunOutAfter(nowMs: number): number | undefined {
    let next: number | undefined;
    for (const r of this.#seen.values()) {
      const t = runsOutAtMs(r);
      if (t > nowMs && (next === undefined || t < next)) next = t;
    }
    return next;
  }

  /** How many Leases are remembered. */
  get size(): number {
    return this.#seen.size;
  }
}
