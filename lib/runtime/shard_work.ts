/**
 * The work side of sharding (docs/design/sharding.md): which keys the controllers take and
 * which objects the informers cache, as shards come and go ({@link ShardHooks} of
 * shard_elector.ts). A shard is `synced` once every sharded informer's store holds its objects
 * (after the relist its acquisition caused); only then are its keys taken: every primary key of
 * the shard is enqueued, and watch events of its objects enqueue theirs. Giving a shard back
 * drops its keys from the work queues and waits for its in-flight reconciles; a shard no longer
 * held leaves the caches.
 *
 * @module
 */
import type { KubeClient, KubeObject } from "../kube/client.ts";
import type { ResourceType } from "../kube/resources.ts";
import type { Controller } from "./controller.ts";
import { FenceRepair, withRefusalRepair } from "./fence_repair.ts";
import { errorText, type Logger } from "./log.ts";
import type { Metrics, ShardMetrics } from "./metrics.ts";
import { ShardElector, type ShardHooks } from "./shard_elector.ts";
import { leaderElectionClient } from "./clients.ts";
import type { Runnable } from "./runnables.ts";
import type { ShardMode, ShardReflector } from "./shard_reflector.ts";
import { shardOf, shardSelector } from "./shards.ts";
import { splitKey } from "./store.ts";

/** Logged once at start-up: the apiserver applies the shard selector. */
export const SHARD_SELECTOR_SERVED = "shard selector served by the apiserver";
/** Logged once at start-up: it does not; the stores filter. */
export const SHARD_SELECTOR_NOT_SERVED = "not served: filtering client-side";
/**
 * Waits (ms) between probes of the shard selector while every target failed to answer (a
 * doubling backoff, then client mode with the last error logged).
 */
export const SHARD_PROBE_BACKOFF_MS: readonly number[] = [1_000, 2_000, 4_000, 8_000, 16_000];
/** Interval (ms) of the `<prefix>_shard_queue_depth` gauge's update. */
export const SHARD_QUEUE_DEPTH_INTERVAL_MS = 1_000;

/** What {@link detectShardMode} found. */
export interface ShardModeProbe {
  /** `server` when any probed list applied the selector. */
  mode: ShardMode;
  /** Resources (plural, with `/namespace` when probed in one) whose list applied it. */
  served: string[];
  /** Those whose list did not. */
  notServed: string[];
  /** The last probe's error, when a probe failed. */
  error?: string;
}

/**
 * Whether the apiserver serves `shardSelector` on lists (the `ShardedListAndWatch` feature
 * gate): a list with `limit=1` and a selector answers `metadata.shardInfo` when it does. Probes
 * each target once (its namespace when the informer watches one: a replica may only be allowed
 * to list there); `server` when any answered with it. The stores filter in either mode, so a
 * resource that ignores the selector stays correct.
 */
export async function detectShardMode(
  client: KubeClient,
  targets: { resource: ResourceType; namespace?: string }[],
  n: number,
  signal?: AbortSignal,
): Promise<ShardModeProbe> {
  const out: ShardModeProbe = { mode: "client", served: [], notServed: [] };
  const seen = new Set<string>();
  for (const { resource, namespace } of targets) {
    const name = namespace ? `${resource.plural}/${namespace}` : resource.plural;
    if (seen.has(name)) continue;
    seen.add(name);
    try {
      const list = await client.list<KubeObject>(resource, {
        namespace,
        limit: 1,
        shardSelector: shardSelector([0], n),
        signal,
      });
      (list.metadata?.shardInfo ? out.served : out.notServed).push(name);
    } catch (err) {
      out.error = errorText(err);
    }
  }
  if (out.served.length > 0) out.mode = "server";
  return out;
}

/**
 * {@link detectShardMode} until a target answers without error, waiting
 * {@link SHARD_PROBE_BACKOFF_MS} between tries (a failed probe, e.g. the apiserver not reachable
 * yet, must not fix client mode for the life of the process); after the last wait, the last
 * result (client mode). Undefined when `signal` aborts first. `detect` and `backoffMs` are
 * {@link detectShardMode} and {@link SHARD_PROBE_BACKOFF_MS} unless a test replaces them.
 */
export async function probeShardMode(
  client: KubeClient,
  targets: { resource: ResourceType; namespace?: string }[],
  n: number,
  log: Logger,
  signal: AbortSignal,
  detect: typeof detectShardMode = detectShardMode,
  backoffMs: readonly number[] = SHARD_PROBE_BACKOFF_MS,
): Promise<ShardModeProbe | undefined> {
  let r: ShardModeProbe | undefined;
  for (let i = 0; i <= backoffMs.length; i++) {
    r = await detect(client, targets, n, signal);
    if (signal.aborted) return undefined;
    const answered = r.served.length + r.notServed.length > 0 || targets.length === 0;
    if (answered || i === backoffMs.length) break;
    log.info("Shard selector probe failed; trying again", { error: r.error, inMs: backoffMs[i] });
    const waited = await new Promise<boolean>((resolve) => {
      const t = setTimeout(() => resolve(true), backoffMs[i]);
      signal.addEventListener("abort", () => {
        clearTimeout(t);
        resolve(false);
      }, { once: true });
    });
    if (!waited) return undefined;
  }
  return r;
}

/** Options of {@link ShardWork}. */
export interface ShardWorkOptions {
  /** Number of shards. */
  shards: number;
  /** The controllers whose queues are filtered by shard. */
  controllers: () => Controller[];
  /** The sharded informers' reflectors. */
  reflectors: ShardReflector<KubeObject>[];
  /** The manager's logger. */
  log: Logger;
  /** Sharding metrics, if any. */
  metrics?: ShardMetrics;
}

/** See the module doc. */
export class ShardWork implements ShardHooks {
  readonly #o: ShardWorkOptions;
  readonly #held = new Set<number>();
  readonly #synced = new Set<number>();
  /**
   * The acquisition of each held shard not being given back: its number (from {@link #acquisitions});
   * a relist that finishes for an older one, or after `stopping`, does not mark the shard synced.
   */
  readonly #acquired = new Map<number, number>();
  #acquisitions = 0;
  readonly #shardOfNs = new Map<string, number>();

  /** Work for no shard yet: every queue takes no key. */
  constructor(o: ShardWorkOptions) {
    this.#o = o;
  }

  /** The shard of a key's namespace; -1 for a cluster-scoped key. */
  shardOfKey(key: string): number {
    const { namespace } = splitKey(key);
    if (!namespace) return -1;
    let k = this.#shardOfNs.get(namespace);
    if (k === undefined) {
      k = shardOf(namespace, this.#o.shards);
      if (this.#shardOfNs.size > 100_000) this.#shardOfNs.clear();
      this.#shardOfNs.set(namespace, k);
    }
    return k;
  }

  /** Whether a controller takes `key` now: its shard is held and synced. */
  takes(key: string): boolean {
    const k = this.shardOfKey(key);
    return k < 0 ? this.#synced.size > 0 : this.#synced.has(k);
  }

  /** Sets the queue filters; starts the queue-depth gauge (until `signal` aborts). */
  start(signal: AbortSignal): void {
    for (const c of this.#o.controllers()) c.queue.setFilter((key) => this.takes(key));
    const m = this.#o.metrics;
    if (!m) return;
    const timer = setInterval(() => this.#updateDepth(m), SHARD_QUEUE_DEPTH_INTERVAL_MS);
    Deno.unrefTimer(timer);
    signal.addEventListener("abort", () => clearInterval(timer), { once: true });
  }

  #updateDepth(m: ShardMetrics): void {
    const depth = new Map<number, number>();
    for (const k of this.#held) depth.set(k, 0);
    for (const c of this.#o.controllers()) {
      for (const k of this.#held) {
        depth.set(k, depth.get(k)! + c.queue.depthWhere((key) => this.shardOfKey(key) === k));
      }
    }
    m.queueDepth.reset();
    for (const [k, d] of depth) m.queueDepth.set({ shard: String(k) }, d);
  }

  /** Shards held (not being given back) whose caches have not synced yet (`/readyz`), ascending. */
  unsynced(): number[] {
    return [...this.#acquired.keys()].filter((k) => !this.#synced.has(k)).sort((a, b) => a - b);
  }

  /** Relists for shard `k`; once its objects are cached, enqueues its keys. */
  acquired(k: number): void {
    const acquisition = ++this.#acquisitions;
    this.#held.add(k);
    this.#acquired.set(k, acquisition);
    const held = [...this.#held];
    Promise.all(this.#o.reflectors.map((r) => r.setHeld(held))).then(() => {
      // Given back (or lost, or taken again) meanwhile: not this acquisition's to sync.
      if (this.#acquired.get(k) !== acquisition || this.#synced.has(k)) return;
      this.#synced.add(k);
      let keys = 0;
      for (const c of this.#o.controllers()) {
        keys += c.enqueueAll((key) => this.shardOfKey(key) === k);
      }
      this.#o.log.info("Shard synced; reconciling its objects", { shard: k, keys });
    }).catch((err) => this.#o.log.warn("Shard sync failed", { shard: k, error: errorText(err) }));
  }

  /** Stops taking shard `k`'s keys, drops them, and waits for its in-flight reconciles. */
  async stopping(k: number, graceMs: number): Promise<void> {
    this.#acquired.delete(k);
    this.#synced.delete(k);
    const mine = (key: string) => this.shardOfKey(key) === k;
    const controllers = this.#o.controllers();
    for (const c of controllers) c.queue.dropWhere(mine);
    const drained = await Promise.all(controllers.map((c) => c.queue.drainWhere(mine, graceMs)));
    if (drained.includes(false)) {
      this.#o.log.warn("In-flight reconciles of the shard did not finish within the grace period", {
        shard: k,
        graceMs,
      });
    }
  }

  /** Shard `k` is gone: its keys are dropped and its objects leave the caches. */
  stopped(k: number): void {
    this.#held.delete(k);
    this.#acquired.delete(k);
    this.#synced.delete(k);
    for (const c of this.#o.controllers()) c.queue.dropWhere((key) => this.shardOfKey(key) === k);
    const held = [...this.#held];
    for (const r of this.#o.reflectors) void r.setHeld(held);
  }
}

/** What the manager shares between its sharded informers and {@link shardingRunnables}. */
export interface ShardingRuntime {
  /** The mode the sharded reflectors wait for. */
  mode: Promise<ShardMode>;
  /** Resolves {@link ShardingRuntime.mode} (once). */
  setMode: (m: ShardMode) => void;
  /** The sharded informers' reflectors (made by the manager's reflector factory). */
  reflectors: ShardReflector<KubeObject>[];
  /** Their resources and namespaces, for the start-up probe of the mode. */
  targets: { resource: ResourceType; namespace?: string }[];
}

/** Options of {@link shardingRunnables}: the manager's, resolved. */
export interface ShardingRunnablesOptions {
  /** The reconcilers' client (it gets the shard fence; the mode probe reads through it). */
  client: KubeClient;
  /** The Leases' client; default one of its own. */
  leaderElectionClient?: KubeClient;
  /** Namespace of the Leases. */
  leaderElectionNamespace: string;
  /** The election id. */
  leaderElectionId: string;
  /** Holder identity. */
  identity: string;
  /** Number of shards. */
  shards: number;
  /** Lease duration (s). */
  leaseDurationSeconds: number;
  /** Renew deadline (ms). */
  renewDeadlineMs: number;
  /** Retry period (ms). */
  retryPeriodMs: number;
  /** Bound of a give-back's drain (ms). */
  gracefulShutdownTimeoutMs: number;
  /** The sharding metrics are registered on it. */
  metrics: Metrics;
  /** The sharded reflectors and the mode. */
  runtime: ShardingRuntime;
  /** The controllers. */
  controllers: () => Controller[];
  /** The manager's logger. */
  log: Logger;
}

/**
 * The manager's sharding runnables: `mode` (group `caches`: probes once whether the apiserver
 * serves the shard selector and logs which), `election` (group `election`: the
 * {@link ShardElector}, its fence on the client, the work side; on stop every shard is given
 * back and the membership Lease deleted), and `readiness` (`/readyz`: every held shard synced, and
 * the elector's rounds not failing for longer than a lease duration).
 */
export function shardingRunnables(o: ShardingRunnablesOptions): {
  mode: Runnable;
  election: Runnable;
  readiness: () => string | undefined;
} {
  const metrics = o.metrics.shardMetrics();
  const work = new ShardWork({
    shards: o.shards,
    controllers: o.controllers,
    reflectors: o.runtime.reflectors,
    log: o.log,
    metrics,
  });
  let elector: ShardElector | undefined;
  let repair: FenceRepair | undefined;
  let ownLeaseClient: KubeClient | undefined;
  const mode: Runnable = {
    name: "shard-mode",
    start: (signal) => {
      probeShardMode(o.client, o.runtime.targets, o.shards, o.log, signal).then((r) => {
        if (!r) return; // stopped before an answer
        const fields = { shards: o.shards, served: r.served, notServed: r.notServed };
        if (r.mode === "server") o.log.info(SHARD_SELECTOR_SERVED, fields);
        else o.log.info(SHARD_SELECTOR_NOT_SERVED, { ...fields, error: r.error });
        o.runtime.setMode(r.mode);
      });
    },
  };
  const election: Runnable = {
    name: "shard-election",
    start: (signal) => {
      let leaseClient = o.leaderElectionClient;
      if (!leaseClient || leaseClient === o.client) {
        leaseClient = ownLeaseClient = leaderElectionClient(o.client.config, {
          health: o.client.health,
        });
      }
      elector = new ShardElector({
        client: leaseClient,
        namespace: o.leaderElectionNamespace,
        id: o.leaderElectionId,
        identity: o.identity,
        shards: o.shards,
        leaseDurationSeconds: o.leaseDurationSeconds,
        renewDeadlineMs: o.renewDeadlineMs,
        retryPeriodMs: o.retryPeriodMs,
        gracefulShutdownTimeoutMs: o.gracefulShutdownTimeoutMs,
        hooks: work,
        log: o.log,
        metrics,
      });
      // A refusal by the apiserver that names a Lease of another mode (the one Lease, or shard
      // Leases beyond --shards, left by another run) is repaired; then every key goes again.
      repair = new FenceRepair({
        client: leaseClient,
        namespace: o.leaderElectionNamespace,
        id: o.leaderElectionId,
        shards: o.shards,
        leaseDurationSeconds: o.leaseDurationSeconds,
        retryPeriodMs: o.retryPeriodMs,
        log: o.log,
        onRepaired: () => {
          for (const c of o.controllers()) c.enqueueAll();
        },
      });
      repair.start(signal);
      o.client.setWriteFence(withRefusalRepair(elector.fence, repair));
      work.start(signal);
      o.log.info("Taking shards", {
        leases: `${o.leaderElectionNamespace}/${o.leaderElectionId}-shard-<k>`,
        shards: o.shards,
        identity: o.identity,
      });
      elector.start(signal);
    },
    stopped: async () => {
      await elector?.stop();
      await repair?.stopped();
      ownLeaseClient?.close();
    },
  };
  const readiness = () => {
    const failing = elector?.unready();
    if (failing) return failing;
    const left = work.unsynced();
    return left.length ? `shards not synced: ${left.join(",")}` : undefined;
  };
  return { mode, election, readiness };
}
