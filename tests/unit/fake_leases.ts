/**
 * An in-memory Lease API of one namespace for the sharded election's unit tests
 * (shard_elector_test.ts, shard_reflector_test.ts): optimistic concurrency on resourceVersion and
 * switches for failures. Units only; the election against a real apiserver is tested end to end.
 */
import type { Lease } from "kubernetes-types/coordination/v1.d.ts";
import type { KubeClient } from "../../lib/kube/client.ts";
import { ApiError } from "../../lib/kube/errors.ts";

/** Leases of one namespace held in memory, with resourceVersion checks. */
export class FakeLeases {
  leases = new Map<string, Lease>();
  rv = 0;
  /** Writes of these Lease names fail with 500 (a renewal that cannot get through). */
  failWrites = new Set<string>();
  /** When set, lists fail with 500 (a round that cannot read the Leases). */
  failList = false;
  /** When set, lists wait for it (a slow round). */
  listGate?: Promise<void>;
  /** Called after each successful create or update, before its answer. */
  onWrite?: (name: string) => void;
  /** When set, watches fail with 403 (RBAC without the `watch` verb: the rounds only poll). */
  refuseWatch = false;
  /** The open watches: each is told every change. */
  readonly #watchers = new Set<(ev: { type: string; object: Lease }) => void>();
  /** How many watches were opened. */
  watchesOpened = 0;

  #emit(type: string, l: Lease): void {
    for (const w of this.#watchers) w({ type, object: structuredClone(l) });
  }

  /** A KubeClient stand-in with list, get, create, update, delete and watch of these Leases. */
  client(): KubeClient {
    const notFound = () => new ApiError(404, { reason: "NotFound", message: "not found" });
    // deno-lint-ignore no-this-alias
    const fake = this;
    const api = {
      list: async () => {
        await this.listGate;
        if (this.failList) throw new ApiError(500, {});
        return {
          metadata: { resourceVersion: String(this.rv) },
          items: [...this.leases.values()].map((l) => structuredClone(l)),
        };
      },
      get: (_rt: unknown, name: string) => {
        const l = this.leases.get(name);
        return l ? Promise.resolve(structuredClone(l)) : Promise.reject(notFound());
      },
      create: (_rt: unknown, obj: Lease) => {
        const name = obj.metadata!.name!;
        if (this.failWrites.has(name)) return Promise.reject(new ApiError(500, {}));
        if (this.leases.has(name)) {
          return Promise.reject(new ApiError(409, { reason: "AlreadyExists", message: "exists" }));
        }
        const l = structuredClone(obj);
        l.metadata = { ...l.metadata, resourceVersion: String(++this.rv) };
        this.leases.set(name, l);
        this.onWrite?.(name);
        this.#emit("ADDED", l);
        return Promise.resolve(structuredClone(l));
      },
      update: (_rt: unknown, obj: Lease) => {
        const name = obj.metadata!.name!;
        if (this.failWrites.has(name)) return Promise.reject(new ApiError(500, {}));
        const cur = this.leases.get(name);
        if (!cur) return Promise.reject(notFound());
        if (cur.metadata?.resourceVersion !== obj.metadata?.resourceVersion) {
          return Promise.reject(new ApiError(409, { reason: "Conflict", message: "modified" }));
        }
        const l = structuredClone(obj);
        l.metadata = { ...l.metadata, resourceVersion: String(++this.rv) };
        this.leases.set(name, l);
        this.onWrite?.(name);
        this.#emit("MODIFIED", l);
        return Promise.resolve(structuredClone(l));
      },
      delete: (_rt: unknown, name: string) => {
        const l = this.leases.get(name);
        if (!l || !this.leases.delete(name)) return Promise.reject(notFound());
        this.#emit("DELETED", l);
        return Promise.resolve({});
      },
      // Every Lease as ADDED, then each change, until the signal aborts (no resourceVersion, no
      // server timeout: what LeaseWatch asks for).
      watch: async function* (
        this: void,
        _rt: unknown,
        o: { signal?: AbortSignal } = {},
      ): AsyncGenerator<{ type: string; object: Lease }> {
        fake.watchesOpened++;
        if (fake.refuseWatch) throw new ApiError(403, { reason: "Forbidden", message: "no" });
        const queue: { type: string; object: Lease }[] = [];
        let wake: (() => void) | undefined;
        const push = (ev: { type: string; object: Lease }) => {
          queue.push(ev);
          wake?.();
        };
        const onAbort = () => wake?.();
        for (const l of fake.leases.values()) {
          queue.push({ type: "ADDED", object: structuredClone(l) });
        }
        fake.#watchers.add(push);
        o.signal?.addEventListener("abort", onAbort);
        try {
          while (!o.signal?.aborted) {
            const ev = queue.shift();
            if (ev) yield ev;
            else await new Promise<void>((r) => wake = r);
            wake = undefined;
          }
        } finally {
          fake.#watchers.delete(push);
          o.signal?.removeEventListener("abort", onAbort);
        }
      },
    };
    return api as unknown as KubeClient;
  }

  /** The holder identity of Lease `name` ("" when none). */
  holder(name: string): string {
    return this.leases.get(name)?.spec?.holderIdentity ?? "";
  }
}
