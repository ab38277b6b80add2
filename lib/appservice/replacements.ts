/**
 * Growing delay before a Failed Pod is replaced. A Pod ends `Failed` (or `Succeeded`, with
 * `restartPolicy: Always`) when the kubelet will not restart its container: `restartPolicy: Never`
 * and an app that exits with an error, an eviction, a Node shutdown. The reconciler replaces such a
 * Pod; without a delay an app that fails at start made it delete and re-create the Pod as fast as
 * the kubelet failed it (figures in docs/design/reconciler.md).
 *
 * As the kubelet backs off restarting a crashing container (CrashLoopBackOff), a Pod of the same
 * ordinal that fails again is replaced after {@link POD_REPLACE_BACKOFF_INITIAL_MS}, doubling up to
 * {@link POD_REPLACE_BACKOFF_MAX_MS}: replacements at 0, 10, 30, 70 s, ... The first failure is
 * replaced at once (an evicted Pod should come back without delay, and the kubelet too restarts a
 * container at once the first time). The count is reset when the ordinal has not failed for
 * {@link POD_REPLACE_BACKOFF_RESET_MS}, or when the failed Pod was made from another spec (the user
 * changed the AppService: the new spec gets a fresh start). While held, the Failed Pod stays, so
 * its logs and `kubectl describe` remain readable.
 *
 * The record lives in memory, per AppService key and slot (as the kubelet's and client-go's
 * `flowcontrol.Backoff`); after a restart of the operator the next failure counts as the first.
 *
 * @module
 */

/** Delay before replacing a Pod that failed again (ms); kubelet's initial crash-loop back-off. */
export const POD_REPLACE_BACKOFF_INITIAL_MS = 10_000;
/** Cap of the delay (ms); kubelet's `MaxContainerBackOff` (300 s). */
export const POD_REPLACE_BACKOFF_MAX_MS = 300_000;
/**
 * An ordinal that has not failed for this long starts counting again (ms): twice the cap, as
 * client-go's `flowcontrol.Backoff` expires an entry.
 */
export const POD_REPLACE_BACKOFF_RESET_MS = 2 * POD_REPLACE_BACKOFF_MAX_MS;

/** One failure of an ordinal, as recorded when it was first seen. */
export interface PodFailure {
  /** Failures of this ordinal in a row (1 for the first). */
  failures: number;
  /** When the failed Pod may be replaced (ms, the clock of {@link PodReplacements}). */
  dueMs: number;
  /** The delay chosen when the failure was seen (ms): constant, so status text stays stable. */
  delayMs: number;
}

interface Entry extends PodFailure {
  uid: string;
  hash: string;
  seenMs: number;
}

/** Per AppService key and ordinal record of failed Pods; see the module doc. */
export class PodReplacements {
  #now: () => number;
  #byKey = new Map<string, Map<number, Entry>>();

  /**
   * An empty record.
   * @param now clock (ms since the epoch), injected for tests
   */
  constructor(now: () => number = Date.now) {
    this.#now = now;
  }

  /**
   * Notes that the Pod `uid` of `ordinal` (made from spec hash `hash`) has failed, and returns
   * when it may be replaced. The same Pod seen again returns the same answer.
   */
  failed(key: string, ordinal: number, uid: string, hash: string): PodFailure {
    let ords = this.#byKey.get(key);
    if (!ords) this.#byKey.set(key, ords = new Map());
    const prev = ords.get(ordinal);
    if (prev?.uid === uid) return prev;
    const now = this.#now();
    const again = prev !== undefined && prev.hash === hash &&
      now - prev.seenMs < POD_REPLACE_BACKOFF_RESET_MS;
    const failures = again ? prev.failures + 1 : 1;
    const delayMs = failures === 1
      ? 0
      : Math.min(POD_REPLACE_BACKOFF_INITIAL_MS * 2 ** (failures - 2), POD_REPLACE_BACKOFF_MAX_MS);
    const e: Entry = { failures, delayMs, dueMs: now + delayMs, uid, hash, seenMs: now };
    ords.set(ordinal, e);
    return e;
  }

  /** Slots of `key` with a failure recorded within the reset period (the planner's preference). */
  slots(key: string): Set<number> {
    const now = this.#now();
    const out = new Set<number>();
    for (const [ord, e] of this.#byKey.get(key) ?? []) {
      if (now - e.seenMs < POD_REPLACE_BACKOFF_RESET_MS) out.add(ord);
    }
    return out;
  }

  /** Forgets everything about `key` (the AppService is gone). */
  forget(key: string): void {
    this.#byKey.delete(key);
  }

  /** Keys with a record (for tests and memory checks). */
  get size(): number {
    return this.#byKey.size;
  }
}
