/**
 * What the AppService reconciler itself wrote, until its cache shows it (docs/scenarios.md S24):
 * a reconcile that follows the reconciler's own write starts from the object the apiserver
 * answered, not from the cached version that write replaced (docs/design/status.md), and from
 * the Pods it created and deleted, not from a cache that does not show those writes yet
 * ({@link OwnPodWrites}).
 *
 * @module
 */
import type { Pod } from "kubernetes-types/core/v1.d.ts";
import type { ObjectMeta } from "kubernetes-types/meta/v1.d.ts";
import type { AppService } from "./schema.ts";
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
 * that a Pod removed by someone else before the cache saw it (a relist in between drops both of
 * its events) is made again soon.
 */
export const POD_WRITE_TRUST_MS = 10_000;

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
 * (rollout.ts `planRollout` counts it as terminating, not as available). This is client-go's
 * ControllerExpectations for the ReplicaSet controller, keeping the answered objects rather than
 * counts; controller-runtime leaves it to each reconciler.
 *
 * A record ends when the cache shows the write (a Pod of that name for a create; that uid with a
 * deletionTimestamp, or gone, for a delete), when it is older than {@link POD_WRITE_TRUST_MS}, or
 * with {@link OwnPodWrites.forget}. Memory: one Pod object per write not yet seen.
 */
export class OwnPodWrites {
  #m = new Map<string, Map<string, PodWrite>>();

  /** Notes that the reconciler of `key` created `pod` (its metadata as the apiserver answered). */
  created(key: string, pod: Pod, atMs: number): void {
    this.#note(key, { kind: "created", pod, atMs });
  }

  /** Notes that the reconciler of `key` deleted `pod` (uid precondition) at `atMs`. */
  deleted(key: string, pod: Pod, atMs: number): void {
    this.#note(key, { kind: "deleted", pod, atMs });
  }

  #note(key: string, w: PodWrite): void {
    const name = w.pod.metadata?.name;
    if (!name) return;
    let m = this.#m.get(key);
    if (!m) this.#m.set(key, m = new Map());
    m.set(name, w);
  }

  /**
   * The Pods of `key` as the reconciler knows them: `cached` (its owned Pods from the cache) with
   * the Pods it created and the cache does not show yet added, and those it deleted and the cache
   * still shows alive given a deletionTimestamp (the time of the delete). Records the cache has
   * caught up with, or older than {@link POD_WRITE_TRUST_MS}, are dropped.
   * @returns the Pods (`cached` itself when no record applies) and, when a record was used, when
   *   the earliest used one expires (ms): the reconcile should run again by then, in case the
   *   cache never shows the write
   */
  view(key: string, cached: Pod[], nowMs: number): { pods: Pod[]; expiresAtMs?: number } {
    const m = this.#m.get(key);
    if (!m) return { pods: cached };
    const byName = new Map<string, Pod>();
    for (const p of cached) if (p.metadata?.name) byName.set(p.metadata.name, p);
    let pods = cached;
    let expiresAtMs: number | undefined;
    for (const [name, w] of m) {
      const seen = byName.get(name);
      const expired = nowMs - w.atMs >= POD_WRITE_TRUST_MS;
      const same = seen !== undefined && seen.metadata?.uid === w.pod.metadata?.uid;
      const shown = w.kind === "created" ? same : !same || !!seen!.metadata?.deletionTimestamp;
      if (shown || expired) {
        m.delete(name);
        continue;
      }
      if (w.kind === "created") {
        // A Pod of that name still cached (the one before it, its delete not seen yet) holds
        // the slot as well; the created one is added once that is gone from the cache.
        if (seen) continue;
        if (pods === cached) pods = [...cached];
        pods.push(w.pod);
      } else {
        if (pods === cached) pods = [...cached];
        const i = pods.indexOf(seen!);
        pods[i] = {
          ...seen!,
          metadata: { ...seen!.metadata, deletionTimestamp: new Date(w.atMs).toISOString() },
        };
      }
      const at = w.atMs + POD_WRITE_TRUST_MS;
      expiresAtMs = Math.min(expiresAtMs ?? Infinity, at);
    }
    if (m.size === 0) this.#m.delete(key);
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
