/**
 * The benchmark's own API work: clients with their own User-Agent, the CRD, namespaces, creating
 * AppServices in bulk (bounded concurrency), tracking how many are Ready over time (a reflector
 * on AppServices, no polling), and cleanup. Every wait is bounded in time.
 *
 * @module
 */
import { parse as parseYaml } from "yaml";
import { KubeClient, type KubeObject } from "../../lib/kube/client.ts";
import { loadClusterConfig } from "../../lib/kube/config.ts";
import { isAlreadyExists, isNotFound } from "../../lib/kube/errors.ts";
import { CRDS, NAMESPACES, PODS } from "../../lib/kube/resources.ts";
import { type AppService, APPSERVICES, FINALIZER } from "../../lib/appservice/schema.ts";
import { Reflector } from "../../lib/runtime/reflector.ts";
import { Store } from "../../lib/runtime/store.ts";
import { REPO } from "../../tests/cluster/host.ts";
import { applyFinalizerPolicy } from "../../tests/cluster/finalizer_policy.ts";

/** AppServices as a ResourceType for the client. */
export const AS_RESOURCE = APPSERVICES as unknown as Parameters<KubeClient["get"]>[0];

/** A client for the cluster with a given User-Agent. */
export function benchClient(kubeconfig: string, userAgent: string): KubeClient {
  return new KubeClient(loadClusterConfig({ kubeconfig }), { userAgent, maxRetries: 5 });
}

/** Sleeps `ms`. */
export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/**
 * Polls `fn` every `intervalMs` until it returns true, at most `timeoutMs`.
 * @throws Error naming `what` on timeout.
 */
export async function waitUntil(
  what: string,
  fn: () => Promise<boolean> | boolean,
  timeoutMs: number,
  intervalMs = 250,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (let i = 0; i < 10_000_000; i++) {
    try {
      if (await fn()) return;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) break;
    await sleep(intervalMs);
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last ? `: ${last}` : ""}`);
}

/** Runs `fn(i)` for i in 0..count-1 with at most `concurrency` in flight. */
export async function pool(
  count: number,
  concurrency: number,
  fn: (i: number) => Promise<void>,
): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < count) {
      const i = next++;
      await fn(i);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(concurrency, count)) }, worker));
}

/** Applies crd/appservice.yaml (server-side apply) and waits until AppServices are served. */
export async function installCrd(c: KubeClient): Promise<void> {
  const crd = parseYaml(await Deno.readTextFile(`${REPO}/crd/appservice.yaml`)) as KubeObject;
  await c.patch(CRDS, crd.metadata!.name!, crd, {
    type: "apply",
    fieldManager: "appservice-bench",
    force: true,
  });
  await waitUntil("AppService API served", async () => {
    await c.list(AS_RESOURCE, { namespace: "default", limit: 1 });
    return true;
  }, 60_000);
}

/**
 * Label of the namespaces deploy/finalizer_policy.yaml is bound to in the benchmark: ours' converge
 * namespaces only (the peer runs as a kubebuilder operator does, without the policy).
 */
export const POLICY_NAMESPACE_LABEL = "bench.our-org.com/finalizer-policy";

/**
 * Applies deploy/finalizer_policy.yaml as deploy/ does, its binding limited to namespaces labelled
 * {@link POLICY_NAMESPACE_LABEL}`=on`, and waits until it is in force in `probeNamespace` (one of
 * them). Idempotent (server-side apply).
 * @throws Error when the policy is not in force within 30 s
 */
export async function installFinalizerPolicy(c: KubeClient, probeNamespace: string): Promise<void> {
  await applyFinalizerPolicy(c, {
    fieldManager: "appservice-bench",
    namespaceSelector: { matchLabels: { [POLICY_NAMESPACE_LABEL]: "on" } },
    probeNamespace,
  });
}

/** Creates a namespace with `labels` (fine if it exists). */
export async function createNamespace(
  c: KubeClient,
  name: string,
  labels?: Record<string, string>,
): Promise<void> {
  try {
    await c.create(NAMESPACES, {
      apiVersion: "v1",
      kind: "Namespace",
      metadata: { name, labels },
    });
  } catch (err) {
    if (!isAlreadyExists(err)) throw err;
  }
}

/** Name of the i-th benchmark AppService. */
export function asName(i: number): string {
  return `app-${String(i).padStart(5, "0")}`;
}

/** The AppService the benchmark creates: one replica, no ports. */
export function benchAppService(ns: string, i: number): AppService {
  return {
    apiVersion: "apps.our-org.com/v1",
    kind: "AppService",
    metadata: { name: asName(i), namespace: ns, labels: { "bench.our-org.com/run": ns } },
    spec: { image: "registry.local/bench/app:1.0", replicas: 1 },
  };
}

/** Creates `count` AppServices in `ns`; returns them as the apiserver answered. */
export async function createAppServices(
  c: KubeClient,
  ns: string,
  count: number,
  concurrency: number,
): Promise<AppService[]> {
  const out: AppService[] = new Array(count);
  await pool(count, concurrency, async (i) => {
    out[i] = await c.create<AppService>(AS_RESOURCE, benchAppService(ns, i));
  });
  return out;
}

/**
 * Counts Ready AppServices (`status.ready === true`) of one namespace as the watch reports them,
 * with a timeline of (ms since {@link ReadyTracker.markStart}, ready count).
 */
export class ReadyTracker {
  readonly store = new Store<AppService>();
  readonly timeline: [number, number][] = [];
  #ready = new Set<string>();
  #start = performance.now();
  #ctl = new AbortController();
  #reflector: Reflector<AppService>;
  #waiters: (() => void)[] = [];

  /** @param c client; @param ns namespace to watch */
  constructor(c: KubeClient, ns: string) {
    const onObj = (obj: AppService) => {
      const key = `${obj.metadata.namespace}/${obj.metadata.name}`;
      const before = this.#ready.size;
      if (obj.status?.ready === true && !obj.metadata.deletionTimestamp) this.#ready.add(key);
      else this.#ready.delete(key);
      if (this.#ready.size !== before) {
        this.timeline.push([Math.round(performance.now() - this.#start), this.#ready.size]);
        for (const w of this.#waiters.splice(0)) w();
      }
    };
    this.store.addHandler({
      add: onObj,
      update: (_o, n) => onObj(n),
      delete: (o) => {
        this.#ready.delete(`${o.metadata.namespace}/${o.metadata.name}`);
      },
    });
    this.#reflector = new Reflector<AppService>({
      client: c,
      resource: AS_RESOURCE,
      store: this.store,
      namespace: ns,
    });
    this.#reflector.run(this.#ctl.signal).catch(() => {});
  }

  /** Resolves once the first list is in. */
  synced(): Promise<void> {
    return this.#reflector.waitForSync();
  }

  /** Restarts the timeline clock at 0. */
  markStart(): void {
    this.#start = performance.now();
    this.timeline.length = 0;
    this.timeline.push([0, this.#ready.size]);
  }

  /** Number of Ready AppServices now. */
  get ready(): number {
    return this.#ready.size;
  }

  /** Resolves true when at least `n` are Ready, false after `timeoutMs`. */
  async waitReady(n: number, timeoutMs: number): Promise<boolean> {
    const deadline = performance.now() + timeoutMs;
    for (let i = 0; i < 10_000_000; i++) {
      if (this.#ready.size >= n) return true;
      const left = deadline - performance.now();
      if (left <= 0) return false;
      await new Promise<void>((r) => {
        const t = setTimeout(r, Math.min(left, 1_000));
        this.#waiters.push(() => {
          clearTimeout(t);
          r();
        });
      });
    }
    return false;
  }

  /** Stops the watch. */
  stop(): void {
    this.#ctl.abort();
  }
}

/**
 * Removes every AppService of `ns` without an operator (finalizers cleared first), deletes the
 * namespace and waits until it is gone (its Pods included), at most `timeoutMs`.
 */
export async function dropNamespace(
  c: KubeClient,
  ns: string,
  concurrency: number,
  timeoutMs = 300_000,
): Promise<void> {
  try {
    const list = await c.listAll<AppService>(AS_RESOURCE, { namespace: ns });
    const withFinalizer = list.items.filter((a) => a.metadata.finalizers?.includes(FINALIZER));
    await pool(withFinalizer.length, concurrency, async (i) => {
      const a = withFinalizer[i];
      await c.patch(AS_RESOURCE, a.metadata.name!, { metadata: { finalizers: null } }, {
        namespace: ns,
      }).catch((err) => {
        if (!isNotFound(err)) throw err;
      });
    });
  } catch (err) {
    if (!isNotFound(err)) throw err;
  }
  await c.delete(NAMESPACES, ns).catch((err) => {
    if (!isNotFound(err)) throw err;
  });
  await waitUntil(
    `namespace ${ns} deleted`,
    async () => {
      try {
        await c.get(NAMESPACES, ns);
        return false;
      } catch (err) {
        if (isNotFound(err)) return true;
        throw err;
      }
    },
    timeoutMs,
    500,
  );
}

/** Number of Pods in `ns` (one paged list). */
export async function countPods(c: KubeClient, ns: string): Promise<number> {
  return (await c.listAll(PODS, { namespace: ns })).items.length;
}
