/**
 * Slow retries of writes the apiserver refused (docs/scenarios.md S19 at write time). A Pod create
 * or Service write
 * that a ValidatingAdmissionPolicy, a webhook, a ResourceQuota or the API's own validation refuses
 * will be refused again by the same request; retrying it with the work queue's error backoff
 * (5 ms doubling, about 14 attempts in the first minute) only floods the apiserver and the audit
 * log. Such a write is instead tried again after {@link REJECTED_WRITE_FIRST_RETRY_MS}, doubling
 * up to {@link REJECTED_WRITE_MAX_RETRY_MS}: attempts at 0, 5, 15, 35 and 75 s (4 in the first
 * minute), then as the work queue's per-key backoff grows (client-go's
 * DefaultControllerRateLimiter:
 * ×2 per failure up to 1,000 s), without its first sub-5-s steps, which are meant for transient
 * faults.
 *
 * The record is per AppService key, per write ("pod-create", "service", "pdb") and per generation: a new
 * generation (the user changed the spec) forgets it, so the changed spec is tried at once. Other
 * reconciles of the key meanwhile (a Pod became Ready, a resync) skip the refused write and keep
 * reporting it. The reconciler asks to be requeued at {@link RejectedWrites.nextDelayMs}, so the
 * retry needs nothing from the work queue's error policy.
 *
 * What refused a write may change by itself: a ResourceQuota raised, an admission policy changed.
 * Where that is a Kubernetes object the operator can watch, a change of it releases the held
 * writes it refused (docs/scenarios.md S24): a create refused by a ResourceQuota ({@link
 * isQuotaRefusal}) is
 * released, and its AppService requeued, when a ResourceQuota of its namespace changes
 * ({@link RejectedWrites.releaseQuota}, wired in controller.ts), so a quota raised right after a
 * refusal is acted on within the informer's latency instead of at the next slow retry.
 *
 * @module
 */
import { ApiError, isNamespaceTerminating } from "../kube/errors.ts";
import type { ResourceType } from "../kube/resources.ts";

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

/**
 * Whether `err` is a refusal by a ResourceQuota: 403 Forbidden whose message carries the quota
 * admission plugin's words, `exceeded quota: <name>, requested: ...` or `failed quota: <name>:
 * must specify ...` (k8s.io/apiserver quota admission's messages).
 */
export function isQuotaRefusal(err: unknown): err is ApiError {
  return err instanceof ApiError && err.code === 403 &&
    /\b(exceeded|failed) quota\b/.test(err.status?.message ?? err.message);
}

/** core/v1 ResourceQuota, watched so a raised quota releases the creates it refused. */
export const RESOURCE_QUOTAS: ResourceType = {
  apiVersion: "v1",
  kind: "ResourceQuota",
  plural: "resourcequotas",
  namespaced: true,
};

/** What is known about one refused write. */
export interface Refusal {
  /** Refused attempts at this generation. */
  attempts: number;
  /** When the next attempt may go (ms, clock of {@link RejectedWrites}). */
  nextAtMs: number;
  /** The apiserver's answer to the last attempt. */
  message: string;
  /** Refused by a ResourceQuota ({@link isQuotaRefusal}): released when one changes. */
  byQuota?: boolean;
  /** When the refused attempt started (ms): a quota change after it releases the refusal. */
  attemptAtMs?: number;
}

/** Per key, per write and per generation record of refused writes; see the module doc. */
export class RejectedWrites {
  #now: () => number;
  #byKey = new Map<string, { generation: number; writes: Map<string, Refusal> }>();
  /** When a ResourceQuota of each namespace last changed (ms), for refusals still in flight. */
  #quotaChangedAtMs = new Map<string, number>();

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
    return r && this.#now() < this.#dueAtMs(key, r) ? r : undefined;
  }

  /**
   * When `r` may be attempted again (ms): its slow retry, or at once when a ResourceQuota of the
   * key's namespace changed after its attempt started (a change seen while the attempt was in
   * flight must not wait for the next slow retry).
   */
  #dueAtMs(key: string, r: Refusal): number {
    if (!r.byQuota) return r.nextAtMs;
    const changed = this.#quotaChangedAtMs.get(key.slice(0, key.indexOf("/")));
    return changed !== undefined && changed >= (r.attemptAtMs ?? Infinity)
      ? Math.min(r.nextAtMs, changed)
      : r.nextAtMs;
  }

  /**
   * Records a refused attempt of `write`; returns the refusal with its next attempt time.
   * `byQuota`: refused by a ResourceQuota (see {@link RejectedWrites.releaseQuota});
   * `attemptAtMs`: when the refused attempt started (default now).
   */
  refused(
    key: string,
    generation: number,
    write: string,
    message: string,
    byQuota = false,
    attemptAtMs = this.#now(),
  ): Refusal {
    const writes = this.#entry(key, generation).writes;
    const attempts = (writes.get(write)?.attempts ?? 0) + 1;
    const delay = Math.min(
      REJECTED_WRITE_FIRST_RETRY_MS * 2 ** (attempts - 1),
      REJECTED_WRITE_MAX_RETRY_MS,
    );
    const r: Refusal = { attempts, nextAtMs: this.#now() + delay, message };
    if (byQuota) {
      r.byQuota = true;
      r.attemptAtMs = attemptAtMs;
    }
    writes.set(write, r);
    return r;
  }

  /**
   * A ResourceQuota of `namespace` changed: every write there whose last attempt a quota refused
   * may go at once (its attempt count is kept, so a refusal again waits as long as the next
   * slow retry would have); so does a refusal of an attempt that started before now and is
   * recorded later (in flight during the change). Returns the keys (`namespace/name`) to requeue.
   */
  releaseQuota(namespace: string | undefined): string[] {
    const keys: string[] = [];
    const now = this.#now();
    if (namespace !== undefined) this.#quotaChangedAtMs.set(namespace, now);
    for (const [key, e] of this.#byKey) {
      if (namespace !== undefined && !key.startsWith(`${namespace}/`)) continue;
      let released = false;
      for (const r of e.writes.values()) {
        if (!r.byQuota) continue;
        r.nextAtMs = Math.min(r.nextAtMs, now);
        released = true;
      }
      if (released) keys.push(key);
    }
    return keys;
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
    const at = Math.min(...[...e.writes.values()].map((r) => this.#dueAtMs(key, r)));
    return Math.max(1, at - this.#now());
  }

  /** Keys with a record (for tests and memory checks). */
  get size(): number {
    return this.#byKey.size;
  }
}
