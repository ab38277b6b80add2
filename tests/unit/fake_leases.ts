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

  /** A KubeClient stand-in with list, get, create, update and delete of these Leases. */
  client(): KubeClient {
    const notFound = () => new ApiError(404, { reason: "NotFound", message: "not found" });
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
        return Promise.resolve(structuredClone(l));
      },
      delete: (_rt: unknown, name: string) => {
        if (!this.leases.delete(name)) return Promise.reject(notFound());
        return Promise.resolve({});
      },
    };
    return api as unknown as KubeClient;
  }

  /** The holder identity of Lease `name` ("" when none). */
  holder(name: string): string {
    return this.leases.get(name)?.spec?.holderIdentity ?? "";
  }
}
