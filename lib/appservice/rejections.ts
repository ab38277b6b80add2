/**
 * Slow retries of writes the apiserver refused (S19 at write time). A Pod create or Service write
 * that a ValidatingAdmissionPolicy, a webhook, a ResourceQuota or the API's own validation refuses
 * will be refused again by the same request; retrying it with the work queue's error backoff
 * (5 ms doubling, about 14 attempts in the first minute) only floods the apiserver and the audit
 * log. Such a write is instead tried again after {@link REJECTED_WRITE_FIRST_RETRY_MS}, doubling
 * up to {@link REJECTED_WRITE_MAX_RETRY_MS}: attempts at 0, 5, 15, 35 and 75 s (4 in the first
 * minute), then as the work queue's per-key backoff grows (client-go's DefaultControllerRateLimiter:
 * ×2 per failure up to 1,000 s), without its first sub-5-s steps, which are meant for transient
 * faults.
 *
 * The record is per AppService key, per write ("pod-create", "service") and per generation: a new
 * generation (the user changed the spec) forgets it, so the changed spec is tried at once. Other
 * reconciles of the key meanwhile (a Pod became Ready, a resync) skip the refused write and keep
 * reporting it. The reconciler asks to be requeued at {@link RejectedWrites.nextDelayMs}, so the
 * retry needs nothing from the work queue's error policy.
 *
 * @module
 */
import { ApiError, isNamespaceTerminating } from "../kube/errors.ts";

/** Delay before the first retry of a refused write (ms). */
export const REJECTED_WRITE_FIRST_RETRY_MS = 5_000;
/** Cap of the delay (ms); the work queue's per-key cap (client-go DefaultControllerRateLimiter). */
export const REJECTED_WRITE_MAX_RETRY_MS = 1_000_000;

/**
 * Whether `err` is a refusal that the same request would meet again: 400 BadRequest, 403
 * Forbidden (admission, quota, Pod Security, RBAC), 413, or 422 Invalid (validation,
 * ValidatingAdmissionPolicy). Not a conflict, a missing object, throttling or a server error, and
 * not a namespace being deleted (403 too, but final: nothing is retried there).
 */
export function isWriteRejection(err: unknown): err is ApiError {
  return err instanceof ApiError && [400, 403, 413, 422].includes(err.code) &&
    !isNamespaceTerminating(err);
}

/** What is known about one refused write. */
export interface Refusal {
  /** Refused attempts at this generation. */
  attempts: number;
  /** When the next attempt may go (ms, clock of {@link RejectedWrites}). */
  nextAtMs: number;
  /** The apiserver's answer to the last attempt. */
  message: string;
}

/** Per key, per write and per generation record of refused writes; see the module doc. */
export class RejectedWrites {
  #now: () => number;
  #byKey = new Map<string, { generation: number; writes: Map<string, Refusal> }>();

  /**
   * An empty record.
   * @param now clock (ms since the epoch), injected for tests
   */
  constructor(now: () => number = Date.now) {
    this.#now = now;
  }

  #entry(key: string, generation: number) {
    let e = this.#byKey.get(key);
    if (!e || e.generation !== generation) {
      e = { generation, writes: new Map() };
      this.#byKey.set(key, e);
    }
    return e;
  }

  /**
   * The refusal that holds `write` back now, or undefined when it may be attempted (never
   * refused at this generation, or its retry time has come).
   */
  held(key: string, generation: number, write: string): Refusal | undefined {
    const r = this.#entry(key, generation).writes.get(write);
    return r && this.#now() < r.nextAtMs ? r : undefined;
  }

  /** Records a refused attempt of `write`; returns the refusal with its next attempt time. */
  refused(key: string, generation: number, write: string, message: string): Refusal {
    const writes = this.#entry(key, generation).writes;
    const attempts = (writes.get(write)?.attempts ?? 0) + 1;
    const delay = Math.min(
      REJECTED_WRITE_FIRST_RETRY_MS * 2 ** (attempts - 1),
      REJECTED_WRITE_MAX_RETRY_MS,
    );
    const r = { attempts, nextAtMs: this.#now() + delay, message };
    writes.set(write, r);
    return r;
  }

  /** Forgets `write` of `key` (it went through). */
  succeeded(key: string, write: string): void {
    const e = this.#byKey.get(key);
    e?.writes.delete(write);
    if (e && e.writes.size === 0) this.#byKey.delete(key);
  }

  /** Forgets everything about `key` (the AppService is gone). */
  forget(key: string): void {
    this.#byKey.delete(key);
  }

  /** Milliseconds until the earliest held write of `key` may go again; undefined when none. */
  nextDelayMs(key: string): number | undefined {
    const e = this.#byKey.get(key);
    if (!e || e.writes.size === 0) return undefined;
    const at = Math.min(...[...e.writes.values()].map((r) => r.nextAtMs));
    return Math.max(1, at - this.#now());
  }

  /** Keys with a record (for tests and memory checks). */
  get size(): number {
    return this.#byKey.size;
  }
}
