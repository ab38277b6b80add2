/**
 * The sharding test's checker (tests/e2e/sharding_test.ts; unit-tested with synthetic records in
 * tests/unit/shard_audit_test.ts): who held which shard's Lease when, from the apiserver's audit
 * log, and whether every write of a replica to a namespaced object went to a namespace of a shard
 * it held at that moment.
 *
 * The audit log names the user and the times of each Lease write and (Request level for Leases)
 * the body it sent; a watch of the Leases records every version stored. Every write sets a new
 * `renewTime`, so a version's spec names the one write that sent it, and {@link joinLeaseWrites}
 * pairs them by it — whatever the write's answer (a writer killed mid-request has its version
 * stored and a 504 in the log) — checking that every version has its write, every write answered
 * 2xx its version, and that each version's holder is the writer itself, a release (no holder) or
 * the writer's handover marker.
 *
 * Shard of a namespace (the operator's contract, issue 30): h = 64-bit FNV-1a of the namespace
 * name; bounds b_k = floor(k·2^64/N); shard k holds b_k ≤ h < b_{k+1}.
 * @module
 */
import type { Lease } from "kubernetes-types/coordination/v1.d.ts";
import type { KubeClient } from "../../lib/kube/client.ts";
import { LEASES } from "../../lib/kube/resources.ts";
import type { AuditEvent } from "../../lib/testing/mod.ts";
import { shardOf } from "../../lib/runtime/shards.ts";
import { isWrite, microTimeMs, receivedMs } from "./audit.ts";

export { fnv1a64 } from "../../lib/runtime/shards.ts";

/**
 * The shard (0..n-1) of `namespace` among `n`: the operator's own rule, `shardOf` of
 * lib/runtime/shards.ts (its unit tests hold Go's hash/fnv vectors).
 */
export const shardOfNamespace: (namespace: string, n: number) => number = shardOf;

/**
 * `perShard` namespace names `<prefix>-<i>` for every shard of `n` (the first found by counting
 * i up), shard by shard: `[shard][j]`.
 * @throws Error when 100,000 names do not fill every shard (never for a sane `n`)
 */
export function namespacesPerShard(prefix: string, n: number, perShard: number): string[][] {
  const out: string[][] = Array.from({ length: n }, () => []);
  for (let i = 0; i < 100_000; i++) {
    const name = `${prefix}-${i}`;
    const k = shardOfNamespace(name, n);
    if (out[k].length < perShard) out[k].push(name);
    if (out.every((names) => names.length >= perShard)) return out;
  }
  throw new Error(`no ${perShard} names per shard of ${n} among 100,000 with prefix ${prefix}`);
}

/** The shard number of a shard Lease's name `<id>-shard-<k>`; undefined for any other name. */
export function shardOfLease(leaseId: string, name: string): number | undefined {
  const m = new RegExp(`^${leaseId.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}-shard-(\\d+)$`)
    .exec(name);
  return m ? Number(m[1]) : undefined;
}

/** The user a replica identity `<pod name>_<8 hex>` belongs to when pod name = user name. */
export function podOfIdentity(identity: string): string {
  const i = identity.lastIndexOf("_");
  return i > 0 ? identity.slice(0, i) : identity;
}

/** One successful write of a shard Lease: who sent it, when, and the holder it stored. */
export interface LeaseWrite {
  shard: number;
  /** The writer, as the audit log names it (`user.username`). */
  user: string;
  /** The holder identity stored: a replica identity, "" for a release, or a handover marker. */
  holder: string;
  /** When the apiserver received it (ms since the epoch, to the microsecond). */
  receivedMs: number;
  /** When the apiserver completed it (its `stageTimestamp`). */
  completedMs: number;
}

/** One write of a replica to a namespaced object (from the audit log). */
export interface NamespacedWrite {
  user: string;
  namespace: string;
  receivedMs: number;
  /** e.g. `patch /apis/apps.our-org.com/v1/namespaces/x/appservices/a/status -> 200`. */
  what: string;
}

/** A time `user` held `shard`: from its acquisition's completion until `toMs`. */
export interface HoldInterval {
  shard: number;
  user: string;
  fromMs: number;
  /** The end: its release, another's takeover, or its last renewal + the lease duration. */
  toMs: number;
  /** How it ended: `released`, `taken` (by another writer), `expired` (still open at the end). */
  end: "released" | "taken" | "expired";
}

/** What {@link holdIntervals} finds. */
export interface Holds {
  intervals: HoldInterval[];
  /**
   * Takeovers while the previous holder's lease still ran (no release, its last renewal less
   * than the lease duration before): two holders at once. One line each.
   */
  overlaps: string[];
}

/**
 * The hold intervals of every shard from its Lease writes (any order; sorted by completion).
 * Per shard: a write storing holder `h` by a user that does not hold the shard yet opens an
 * interval at the write's completion (the writer knows it holds once the answer is back); a
 * further write by the same holder is a renewal; a release (holder "") by the holder closes it
 * at the release's arrival; a write by another user (its acquisition or its handover marker)
 * closes it at that write's arrival, and is an overlap when the holder neither released nor let
 * its lease run out (last renewal's arrival + `leaseMs`) by then. An interval taken over or open
 * at the end runs at most to its last renewal + `fenceMs`.
 * @param userOf the audit log's user of a replica identity
 * @param fenceMs how long after its last renewal a holder's writes may still arrive (the write
 *   fence's renew deadline); default `leaseMs`
 */
export function holdIntervals(
  writes: LeaseWrite[],
  leaseMs: number,
  userOf: (identity: string) => string = podOfIdentity,
  fenceMs: number = leaseMs,
): Holds {
  const intervals: HoldInterval[] = [];
  const overlaps: string[] = [];
  const shards = [...new Set(writes.map((w) => w.shard))].sort((a, b) => a - b);
  for (const shard of shards) {
    const ws = writes.filter((w) => w.shard === shard).sort((a, b) =>
      a.completedMs - b.completedMs
    );
    let open: { user: string; fromMs: number; lastRenewMs: number } | undefined;
    for (const w of ws) {
      const holderUser = w.holder === "" || w.holder.startsWith("handover:")
        ? undefined
        : userOf(w.holder);
      if (open && w.user === open.user) {
        if (holderUser === open.user) {
          open.lastRenewMs = w.receivedMs;
          continue;
        }
        // Its release (or anything but itself as holder) ends its hold.
        intervals.push({
          shard,
          user: open.user,
          fromMs: open.fromMs,
          toMs: w.receivedMs,
          end: "released",
        });
        open = undefined;
        continue;
      }
      if (open) {
        const runsUntil = open.lastRenewMs + leaseMs;
        if (w.receivedMs < runsUntil) {
          overlaps.push(
            `shard ${shard}: ${w.user} wrote its Lease (holder ${w.holder || "none"}) at ` +
              `${iso(w.receivedMs)}, ${
                (runsUntil - w.receivedMs).toFixed(1)
              } ms before the lease ` +
              `of ${open.user} (last renewal ${iso(open.lastRenewMs)}) ran out`,
          );
        }
        intervals.push({
          shard,
          user: open.user,
          fromMs: open.fromMs,
          toMs: Math.min(w.receivedMs, open.lastRenewMs + fenceMs),
          end: "taken",
        });
        open = undefined;
      }
      if (holderUser !== undefined) {
        open = { user: holderUser, fromMs: w.completedMs, lastRenewMs: w.receivedMs };
      }
    }
    if (open) {
      intervals.push({
        shard,
        user: open.user,
        fromMs: open.fromMs,
        toMs: open.lastRenewMs + fenceMs,
        end: "expired",
      });
    }
  }
  return { intervals, overlaps };
}

/** What {@link fenceViolations} finds. */
export interface FenceCheck {
  /** One line per write outside every interval of its writer on its namespace's shard. */
  violations: string[];
  /** Writes checked per user (the positive control: a checker that saw none proves nothing). */
  checked: Map<string, number>;
}

/**
 * Every write must arrive while its writer holds the shard of its namespace:
 * `fromMs ≤ receivedMs ≤ toMs` of one of the writer's intervals on that shard.
 * @param shardOf the shard of a namespace
 */
export function fenceViolations(
  intervals: HoldInterval[],
  writes: NamespacedWrite[],
  shardOf: (namespace: string) => number,
): FenceCheck {
  const violations: string[] = [];
  const checked = new Map<string, number>();
  for (const w of writes) {
    checked.set(w.user, (checked.get(w.user) ?? 0) + 1);
    const shard = shardOf(w.namespace);
    const mine = intervals.filter((i) => i.shard === shard && i.user === w.user);
    if (mine.some((i) => i.fromMs <= w.receivedMs && w.receivedMs <= i.toMs)) continue;
    const holders = intervals.filter((i) =>
      i.shard === shard && i.fromMs <= w.receivedMs && w.receivedMs <= i.toMs
    ).map((i) => i.user);
    violations.push(
      `${w.user} at ${iso(w.receivedMs)}: ${w.what} (namespace ${w.namespace}, shard ${shard}, ` +
        `held then by ${holders.join(", ") || "nobody"}; ${w.user}'s holds of it: ${
          mine.map((i) => `${iso(i.fromMs)}..${iso(i.toMs)}`).join(", ") || "none"
        })`,
    );
  }
  return { violations, checked };
}

/**
 * Per shard, the writers of its namespaces' objects in arrival order, with consecutive runs by
 * one writer merged: `[shard] -> [[user, first ms, last ms], ...]`. Two holders writing one shard
 * at once show as runs that interleave (A, B, A, ...) within a short time.
 */
export function writerRuns(
  writes: NamespacedWrite[],
  shardOf: (namespace: string) => number,
): Map<number, [string, number, number][]> {
  const out = new Map<number, [string, number, number][]>();
  for (const w of [...writes].sort((a, b) => a.receivedMs - b.receivedMs)) {
    const k = shardOf(w.namespace);
    const runs = out.get(k) ?? [];
    const last = runs.at(-1);
    if (last && last[0] === w.user) last[2] = w.receivedMs;
    else runs.push([w.user, w.receivedMs, w.receivedMs]);
    out.set(k, runs);
  }
  return out;
}

/** Every version of the Leases in one namespace a watch delivered, in order, by Lease name. */
export interface LeaseRecord {
  versions: Map<string, Lease[]>;
  /** Stops the watch and waits for it. */
  stop(): Promise<void>;
}

/**
 * Watches the Leases of `namespace` from now (a list first, for its resourceVersion: the versions
 * it lists are not kept, so start it before anything writes the Leases of interest) and keeps
 * every ADDED and MODIFIED version by name, reopening the watch from the last version seen when
 * it ends (at most 1,000 times) until {@link LeaseRecord.stop}.
 */
export async function recordLeases(client: KubeClient, namespace: string): Promise<LeaseRecord> {
  const versions = new Map<string, Lease[]>();
  const ctl = new AbortController();
  const first = await client.list<Lease>(LEASES, { namespace });
  let rv = first.metadata?.resourceVersion;
  const done = (async () => {
    for (let i = 0; i < 1_000 && !ctl.signal.aborted; i++) {
      try {
        for await (
          const ev of client.watch<Lease>(LEASES, {
            namespace,
            resourceVersion: rv,
            timeoutSeconds: 600,
            signal: ctl.signal,
          })
        ) {
          if (ev.type === "BOOKMARK") continue;
          rv = ev.object.metadata?.resourceVersion ?? rv;
          if (ev.type === "ADDED" || ev.type === "MODIFIED") {
            const name = ev.object.metadata!.name!;
            versions.set(name, [...versions.get(name) ?? [], ev.object]);
          }
        }
      } catch {
        if (ctl.signal.aborted) return;
        await new Promise((r) => setTimeout(r, 200));
      }
    }
  })();
  return {
    versions,
    stop: async () => {
      ctl.abort();
      await done;
    },
  };
}

/** The fields of a Lease spec that tell one write from another (each write sets `renewTime`). */
function specKey(spec: unknown): string | undefined {
  if (!spec || typeof spec !== "object") return undefined;
  const sp = spec as Record<string, unknown>;
  const t = (v: unknown) => typeof v === "string" && v !== "" ? microTimeMs(v).toFixed(3) : "";
  return JSON.stringify([
    sp.holderIdentity ?? "",
    t(sp.renewTime),
    t(sp.acquireTime),
    sp.leaseTransitions ?? 0,
    sp.leaseDurationSeconds ?? 0,
  ]);
}

/** The key ({@link specKey}) of the Lease spec a write event sent, from its `requestObject`. */
function sentKey(e: AuditEvent): string | undefined {
  const body = e.requestObject as { spec?: unknown } | undefined;
  return specKey(body?.spec);
}

/**
 * Pairs each stored version of each shard Lease (as the watch recorded them, in order) with the
 * write in the audit log that stored it: the write whose request body (`requestObject`; the local
 * control plane logs Lease writes at Request level) sent that version's spec. A write counts
 * whatever its answer: a writer killed, or a request aborted, after the apiserver took it is
 * answered 504 in the log while its version is stored. Each write stores at most one version.
 * @param sinceMs when the recording began ({@link recordLeases}, before any shard Lease existed)
 * @returns the writes with their holders, in the order of the versions; `lostAnswers`, one line per
 *   version whose write was not answered 2xx; and `mismatches`, one line per disagreement — a
 *   version no write sent, a write answered 2xx that stored no version, a write refused (4xx) that
 *   stored one, a write without its body, or a holder that is not its writer, a release (no
 *   holder) or the writer's handover marker. The join's positive control: an empty `mismatches`
 *   is required before the intervals mean anything.
 */
export function joinLeaseWrites(
  events: AuditEvent[],
  record: Map<string, Lease[]>,
  leaseId: string,
  leaseNamespace: string,
  sinceMs: number,
  userOf: (identity: string) => string = podOfIdentity,
): { writes: LeaseWrite[]; mismatches: string[]; lostAnswers: string[] } {
  const writes: LeaseWrite[] = [];
  const mismatches: string[] = [];
  const lostAnswers: string[] = [];
  const byName = new Map<string, AuditEvent[]>();
  for (const e of events) {
    const name = e.objectRef?.name ?? "";
    if (
      e.objectRef?.resource !== "leases" || e.objectRef.namespace !== leaseNamespace ||
      shardOfLease(leaseId, name) === undefined || !isWrite(e) ||
      microTimeMs(e.stageTimestamp) < sinceMs
    ) continue;
    byName.set(name, [...byName.get(name) ?? [], e]);
  }
  const names = new Set(
    [...byName.keys(), ...record.keys()].filter((n) => shardOfLease(leaseId, n) !== undefined),
  );
  const code = (e: AuditEvent) => e.responseStatus?.code ?? 0;
  const describe = (e: AuditEvent) =>
    `${e.verb} by ${e.user?.username ?? "?"} received ${iso(receivedMs(e))} -> ${code(e)}`;
  for (const name of [...names].sort()) {
    const shard = shardOfLease(leaseId, name)!;
    const evs = (byName.get(name) ?? []).sort((a, b) =>
      microTimeMs(a.stageTimestamp) - microTimeMs(b.stageTimestamp)
    );
    for (const e of evs) {
      if (sentKey(e) === undefined) {
        mismatches.push(`${name}: ${describe(e)} has no request body in the audit log`);
      }
    }
    const used = new Set<AuditEvent>();
    for (const [i, v] of (record.get(name) ?? []).entries()) {
      const key = specKey(v.spec);
      const holder = v.spec?.holderIdentity ?? "";
      const e = evs.find((x) => !used.has(x) && sentKey(x) === key);
      if (!e) {
        mismatches.push(
          `${name}: version ${i} (holder "${holder}", renewTime ${v.spec?.renewTime}) ` +
            `was sent by no write in the audit log`,
        );
        continue;
      }
      used.add(e);
      const user = e.user?.username ?? "";
      if (code(e) >= 300) {
        if (code(e) < 500) {
          mismatches.push(`${name}: version ${i} stored by a refused ${describe(e)}`);
        } else lostAnswers.push(`${name}: version ${i} stored by ${describe(e)}`);
      }
      const own = holder === "" || userOf(holder) === user ||
        (holder.startsWith("handover:") && holder.includes(`${user}.`));
      if (!own) mismatches.push(`${name}: write ${i} by ${user} stored holder ${holder}`);
      writes.push({
        shard,
        user,
        holder,
        receivedMs: receivedMs(e),
        completedMs: microTimeMs(e.stageTimestamp),
      });
    }
    for (const e of evs) {
      if (!used.has(e) && code(e) >= 200 && code(e) < 300) {
        mismatches.push(`${name}: ${describe(e)} stored no version the watch saw`);
      }
    }
  }
  return { writes, mismatches, lostAnswers };
}

/** The writes of `users` to namespaced objects outside `excludeNamespace`, from the audit log. */
export function namespacedWrites(
  events: AuditEvent[],
  users: Set<string>,
  excludeNamespace: string,
): NamespacedWrite[] {
  return events.filter((e) =>
    isWrite(e) && users.has(e.user?.username ?? "") && !!e.objectRef?.namespace &&
    e.objectRef.namespace !== excludeNamespace
  ).map((e) => ({
    user: e.user!.username!,
    namespace: e.objectRef!.namespace!,
    receivedMs: receivedMs(e),
    what: `${e.verb} ${e.requestURI} -> ${e.responseStatus?.code}`,
  }));
}

/** An epoch-ms time as RFC 3339 with milliseconds. */
function iso(ms: number): string {
  return Number.isFinite(ms) ? new Date(ms).toISOString() : String(ms);
}
