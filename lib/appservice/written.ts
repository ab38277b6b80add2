/**
 * What the AppService reconciler itself wrote, until its cache shows it (docs/scenarios.md S24):
 * a reconcile that follows the reconciler's own write starts from the object the apiserver
 * answered, not from the cached version that write replaced (docs/design/status.md), and from
 * the Pods it created and deleted, not from a cache that does not show those writes yet
 * ({@link OwnPodWrites}; docs/scenarios.md S5).
 *
 * @module
 */
import type { Pod } from "kubernetes-types/core/v1.d.ts";
import type { ObjectMeta } from "kubernetes-types/meta/v1.d.ts";
import type { AppService } from "./schema.ts";
import { isControlledBy } from "../runtime/ownership.ts";
import { WrittenVersions } from "../runtime/written.ts";

export { WrittenVersions };

/**
 * `target` with the JSON merge patch `patch` applied (RFC 7386): members of `patch` replace those
 * of `target`, objects merge member by member, `null` removes, arrays and scalars replace whole.
 * Neither argument is changed.
 */
export function applyMergePatch(target: unknown, patch: unknown): unknown {
  if (typeof patch !== "object" || patch === null || Array.isArray(patch)) return patch;
  const out: Record<string, unknown> =
    typeof target === "object" && target !== null && !Array.isArray(target)
      ? { ...target as Record<string, unknown> }
      : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else if (v !== undefined) out[k] = applyMergePatch(out[k], v);
  }
  return out;
}

/**
 * The AppService stored by a merge patch of its status subresource, from what the reconciler
 * knows without decoding the answer's object: `from` (the version the patch was made against,
 * its resourceVersion the patch's precondition, so the stored object was exactly `from`), the
 * status patch, and the metadata the apiserver answered (`response: "metadata"`; its
 * managedFields are left out, as the cache leaves them out). The status subresource changes only
 * the status and the metadata the apiserver sets (resourceVersion; the status has no defaults in
 * the CRD).
 */
export function statusWritten(
  from: AppService,
  statusPatch: Record<string, unknown>,
  answered: ObjectMeta,
): AppService {
  const { managedFields: _, ...metadata } = answered;
  return {
    ...from,
    metadata: metadata as AppService["metadata"],
    status: applyMergePatch(from.status, statusPatch) as AppService["status"],
  };
}

/**
 * How long the apiserver's answer to a Pod create or delete by this reconciler stands for the Pod
 * while the cache does not show that write (ms): far longer than a watch event takes, short enough
 * that a Pod whose events the cache never gets (created and removed by someone else while the
 * watch was down: the relist shows neither) no longer holds its slot at the next reconcile of the
 * key. Below status.ts `TERMINATING_STUCK_AFTER_MS`, so the deletionTimestamp a delete record
 * gives a Pod (the time of the delete) never makes it look stuck terminating.
 */
export const POD_WRITE_TRUST_MS = 10_000;

/** Every this many writes noted, expired records of all keys are swept. */
const SWEEP_EVERY_WRITES = 256;

/** One Pod write of the reconciler that its cache may not show yet. */
interface PodWrite {
  /** `created`: the Pod as created (answered metadata); `deleted`: the Pod it deleted. */
  kind: "created" | "deleted";
  pod: Pod;
  /** When the write was answered (ms). */
  atMs: number;
}

/**
 * The Pods the reconciler itself created or deleted, per AppService key, until its cache shows
 * the write (at most {@link POD_WRITE_TRUST_MS}): the reconcile that follows a create before the
 * Pod's watch event sees the Pod (so it does not create it again, which the apiserver would refuse
 * with AlreadyExists: a wasted write), and the one that follows a delete sees that Pod going
 * (rollout.ts `planRollout` counts it as terminating, not as available, and keeps its slot). This
 * is what client-go's ReplicaSet controller keeps as ControllerExpectations (counts of expected
 * creates and deletes), keeping the answered objects instead; controller-runtime leaves it to each
 * reconciler.
 *
 * Records end by the cache's events ({@link OwnPodWrites.observed}, from the Pod informer's
 * handler): a create record at any event of its Pod's uid, a delete record when the cache shows
 * that uid with a deletionTimestamp or removes it. They also end after
 * {@link POD_WRITE_TRUST_MS}, when a Pod of the name with another uid shows the write is past, and
 * with {@link OwnPodWrites.forget}; expired records of keys no longer reconciled here (a shard
 * given away) are swept as new ones are noted. A delete whose Pod the cache already showed removed
 * (its DELETED event handled before the delete's answer came back) is not recorded. Memory: one
 * Pod object per write not yet seen, and the uid of each Pod removed in the last
 * {@link POD_WRITE_TRUST_MS}.
 */
export class OwnPodWrites {
  /** Records by AppService key, then by Pod name. */
  #m = new Map<string, Map<string, PodWrite>>();
  /** Uids of Pods the cache showed removed, with when (ms), oldest first. */
  #gone = new Map<string, number>();
  /** Writes noted since the last sweep of expired records. */
  #sinceSweep = 0;
  readonly #now: () => number;

  /** @param now the clock (ms) of the cache's events; the writes' times are given with each */
  constructor(now: () => number = Date.now) {
    this.#now = now;
  }

  /** Notes that the reconciler of `key` created `pod` (its metadata as the apiserver answered). */
  created(key: string, pod: Pod, atMs: number): void {
    this.#note(key, { kind: "created", pod, atMs });
  }

  /**
   * Notes that the reconciler of `key` deleted `pod` (uid precondition; the delete went through)
   * at `atMs`; it replaces a create record of that Pod (created and deleted before the cache showed
   * it). Not noted when the cache has already shown the Pod removed.
   */
  deleted(key: string, pod: Pod, atMs: number): void {
    this.#note(key, { kind: "deleted", pod, atMs });
  }

  #note(key: string, w: PodWrite): void {
    const name = w.pod.metadata?.name;
    const uid = w.pod.metadata?.uid;
    if (++this.#sinceSweep >= SWEEP_EVERY_WRITES) this.#sweep(w.atMs);
    if (!name || !uid || (w.kind === "deleted" && this.#gone.has(uid))) return;
    let m = this.#m.get(key);
    if (!m) this.#m.set(key, m = new Map());
    m.set(name, w);
  }

  /** Drops expired records of every key, and removals older than {@link POD_WRITE_TRUST_MS}. */
  #sweep(nowMs: number): void {
    this.#sinceSweep = 0;
    for (const [key, m] of [...this.#m]) {
      for (const [name, w] of [...m]) {
        if (nowMs - w.atMs >= POD_WRITE_TRUST_MS) this.#drop(key, m, name);
      }
    }
    this.#pruneGone(nowMs);
  }

  #pruneGone(nowMs: number): void {
    for (const [uid, at] of this.#gone) {
      if (nowMs - at < POD_WRITE_TRUST_MS) break;
      this.#gone.delete(uid);
    }
  }

  #drop(key: string, m: Map<string, PodWrite>, name: string): void {
    m.delete(name);
    if (m.size === 0) this.#m.delete(key);
  }

  /**
   * What the cache showed of a Pod (the Pod informer's handler): `pod` added or changed, or with
   * `gone` removed; `key` is its controller's key (undefined without one). Ends the record of that
   * uid the event proves seen (see the class doc).
   */
  observed(key: string | undefined, pod: Pod, gone: boolean): void {
    const uid = pod.metadata?.uid;
    if (uid && gone) {
      const nowMs = this.#now();
      this.#pruneGone(nowMs);
      this.#gone.set(uid, nowMs);
    }
    const m = key === undefined ? undefined : this.#m.get(key);
    const name = pod.metadata?.name ?? "";
    const w = m?.get(name);
    if (!m || !w || w.pod.metadata?.uid !== uid) return;
    if (w.kind === "created" || gone || pod.metadata?.deletionTimestamp) this.#drop(key!, m, name);
  }

  /**
   * The Pods of `key` as the reconciler knows them: `cached` (the owned Pods of the AppService of
   * uid `ownerUid` from the cache) with, for records of Pods that AppService controls, the Pods
   * it created added (unless a Pod of that name is cached: the one before it, whose removal the
   * cache has not shown, holds the slot), and those it deleted given a deletionTimestamp (the time
   * of the delete): replaced when cached alive, added when not cached (created and deleted before
   * the cache showed it). Expired records and those of another owner are dropped.
   * @returns the Pods (`cached` itself when no record applies) and, when a record was used, when
   *   the earliest used one expires (ms): the reconcile should run again by then, in case the
   *   cache never shows the write
   */
  view(
    key: string,
    ownerUid: string,
    cached: Pod[],
    nowMs: number,
  ): { pods: Pod[]; expiresAtMs?: number } {
    const m = this.#m.get(key);
    if (!m) return { pods: cached };
    const byName = new Map<string, Pod>();
    for (const p of cached) if (p.metadata?.name) byName.set(p.metadata.name, p);
    let pods = cached;
    let expiresAtMs: number | undefined;
    for (const [name, w] of [...m]) {
      const uid = w.pod.metadata?.uid;
      const seen = byName.get(name);
      const other = seen !== undefined && seen.metadata?.uid !== uid;
      const owned = isControlledBy(w.pod, ownerUid);
      // Shown by the cache (normally ended by `observed` already), past, or another owner's.
      const shown = seen !== undefined && !other &&
        (w.kind === "created" || !!seen.metadata?.deletionTimestamp);
      const past = w.kind === "deleted" && other;
      if (nowMs - w.atMs >= POD_WRITE_TRUST_MS || !owned || shown || past) {
        this.#drop(key, m, name);
        continue;
      }
      if (w.kind === "created") {
        if (seen) continue;
        if (pods === cached) pods = [...cached];
        pods.push(w.pod);
      } else {
        const base = seen ?? w.pod;
        const going: Pod = {
          ...base,
          metadata: { ...base.metadata, deletionTimestamp: new Date(w.atMs).toISOString() },
        };
        if (pods === cached) pods = [...cached];
        if (seen) pods[pods.indexOf(seen)] = going;
        else pods.push(going);
      }
      expiresAtMs = Math.min(expiresAtMs ?? Infinity, w.atMs + POD_WRITE_TRUST_MS);
    }
    return { pods, expiresAtMs };
  }

  /** Forgets the key (its AppService is gone or being deleted). */
  forget(key: string): void {
    this.#m.delete(key);
  }

  /** Keys with a Pod write the cache has not shown yet (for tests). */
  get size(): number {
    return this.#m.size;
  }
}
