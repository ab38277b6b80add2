/**
 * The manager: runs any number of controllers over shared informers (reflector + store), with one
 * leader election, the probe and metrics servers, and shutdown (controller-runtime
 * `manager.Manager`). It knows no particular resource: informers are asked for with
 * {@link Manager.informer} (one per resource, namespace and selectors, shared; informers.ts),
 * controllers are declared with {@link Manager.add} ({@link ControllerDefinition}; builder.ts),
 * Event recorders made with {@link Manager.eventRecorder}; then {@link Manager.run} starts
 * everything as runnable groups (runnables.ts, manager_runnables.ts).
 *
 * Lifecycle:
 * - Start order `servers → caches → election → controllers`, stop order the reverse. The caches
 *   start first of all, beside the start gate (`startGate`): the informers list at once on every
 *   replica (a standby keeps a warm cache); the rest starts once the gate resolves. `/readyz` is
 *   OK once every informer has synced; a missing CRD or a forbidden list keeps the replica not
 *   ready while the reflector retries (docs/scenarios.md S11), and a synced informer failing for
 *   `INFORMER_FAILING_NOT_READY_MS` (health.ts) makes it not ready again until its next success.
 * - The controllers' workers run only while this replica leads (or always, without
 *   `leaderElect`), each once its own informers have synced. Who may write is the elector's
 *   state (leader.ts, docs/design/leadership.md): its fence is put on `client`, and when its term
 *   ends every controller is fenced at once (in-flight reconciles aborted with `FencedError`); a
 *   lost Lease makes {@link Manager.run} resolve 1. The Lease goes through
 *   `leaderElectionClient`, another client (no fence).
 * - With `shards` > 1 (docs/design/sharding.md) the replicas share the namespaces by shard: a
 *   Lease per shard and a membership Lease per replica (shard_elector.ts), namespaced informers
 *   listing and watching only the held shards (shard_reflector.ts), work queues taking only the
 *   keys of held, synced shards (shard_work.ts), and a write fence per shard. A lost shard does
 *   not end the process; `run` resolves 0 on the signal, having given every shard back.
 * - `/metrics` is served on every replica: plain HTTP by default (controller-runtime's
 *   `SecureServing` default), or with `metricsSecure` over HTTPS with each request authenticated
 *   (TokenReview) and authorized (SubjectAccessReview) through a client of its own
 *   (metrics_server.ts, delegated_auth.ts). `/healthz` and `/readyz` stay plain HTTP.
 * - When `signal` aborts (SIGTERM/SIGINT): the controllers stop taking keys and in-flight
 *   reconciles get `gracefulShutdownTimeoutMs`, queued Events are flushed, the Lease is released
 *   (holder cleared, duration 1 s), then informers and servers stop; resolves 0
 *   (docs/scenarios.md S7).
 *
 * @module
 */
import { OUTAGE_NOTE } from "./messages.ts";
import type { KubeClient, KubeObject } from "../kube/client.ts";
import { isFenced, isThrottled } from "../kube/errors.ts";
import type { ResourceType } from "../kube/resources.ts";
import { buildController } from "./builder.ts";
import {
  type Controller,
  type ControllerDefinition,
  type Informer,
  unreachable,
} from "./controller.ts";
import { EventRecorder, type EventRecorderOptions } from "./events.ts";
import { type InformerOptions, InformerRegistry } from "./informers.ts";
import { LEASE_DURATION_SECONDS, RENEW_DEADLINE_MS, RETRY_PERIOD_MS, type Term } from "./leader.ts";
import { errorText, log } from "./log.ts";
import {
  collectionRunnable,
  connectionLog,
  controllersRunnable,
  Election,
  healthServer,
  informerRunnable,
  metricsServer,
} from "./manager_runnables.ts";
import { Metrics } from "./metrics.ts";
import { DEFAULT_WATCH_IDLE_TIMEOUT_MS, Reflector } from "./reflector.ts";
import { RunnableGroups, whenAborted } from "./runnables.ts";
import type { Store } from "./store.ts";
import { checkShardCount } from "./shards.ts";
import { ShardReflector } from "./shard_reflector.ts";
import { shardingRunnables, type ShardingRuntime } from "./shard_work.ts";
import type { InformerReflector } from "./controller.ts";

export type { InformerOptions } from "./informers.ts";

/** The sharding state shared by the informers made before {@link Manager.run} and its runnables. */
function newShardingRuntime(): ShardingRuntime {
  let resolve!: (m: "server" | "client") => void;
  const mode = new Promise<"server" | "client">((r) => resolve = r);
  return { mode, setMode: resolve, reflectors: [], targets: [] };
}

/**
 * Options of {@link Manager}; durations in ms unless the name says seconds. Only `client` is
 * required; the defaults are controller-runtime's and client-go's.
 */
export interface ManagerOptions {
  /** Client of informers, reconcilers and Events. */
  client: KubeClient;
  /**
   * Client for the Lease only; default one made from `client`'s connection (no retries, no
   * Retry-After gate). Never `client` itself: `client` gets the Lease's write fence, which the
   * Lease's own writes must not pass through. A separate one also keeps renewals out of the
   * reconcilers' rate limit and Retry-After gate, so a busy or throttled leader does not lose
   * its own Lease.
   */
  leaderElectionClient?: KubeClient;
  /** Metrics served on `/metrics`; default a new {@link Metrics}. */
  metrics?: Metrics;
  /** Address of `/metrics`: `host:port`, `:port` or `0` (disabled, the default). */
  metricsBindAddress?: string;
  /**
   * Serve `/metrics` over HTTPS and let only requests through whose bearer token the apiserver
   * authenticates (TokenReview) and authorizes for `get` on `/metrics` (SubjectAccessReview);
   * default false (plain HTTP), controller-runtime's `SecureServing` default. See
   * metrics_server.ts and delegated_auth.ts.
   */
  metricsSecure?: boolean;
  /** With `metricsSecure`: folder of tls.crt and tls.key (re-read every 10 s); "" self-signed. */
  metricsCertDir?: string;
  /**
   * With `metricsSecure`: the client that creates the TokenReviews and SubjectAccessReviews
   * (needs `create` on both). Default: a client of its own on `client.config`, closed by
   * {@link Manager.run}. Give one that no write fence and no reconcile rate limit applies to:
   * every replica, leader or not, answers scrapes, and a review changes nothing.
   */
  metricsAuthClient?: KubeClient;
  /** Address of `/healthz` and `/readyz`: `host:port`, `:port` or `0` (disabled, the default). */
  healthProbeBindAddress?: string;
  /** Reconcile only while holding the Lease (several replicas); default false: always. */
  leaderElect?: boolean;
  /**
   * Number of shards the replicas share the namespaces by (1..256; docs/design/sharding.md);
   * default 1: one Lease (`leaderElect`), nothing else changes. With more, the replicas always
   * elect, one Lease per shard named `<leaderElectionId>-shard-<k>`, `leaderElect` or not.
   */
  shards?: number;
  /** Namespace of the Lease; default the client's namespace (kubeconfig context or pod's). */
  leaderElectionNamespace?: string;
  /** Name of the Lease (coordination.k8s.io/v1); required with `leaderElect`. */
  leaderElectionId?: string;
  /** How long a Lease is valid without renewal (s); default 15 (client-go). */
  leaseDurationSeconds?: number;
  /** A leader that cannot renew within this stops every write, `run` resolves 1; default 10 s. */
  renewDeadlineMs?: number;
  /** Interval of Lease attempts; default 2 s (client-go). */
  retryPeriodMs?: number;
  /** Lease holder identity and Events' `reportingInstance`; default a random UUID. */
  identity?: string;
  /** Default workers of each controller (a {@link ControllerDefinition} may set its own). */
  maxConcurrentReconciles?: number;
  /** Default bound of one reconcile (ms; 0 = none). */
  reconcileTimeoutMs?: number;
  /** Default resync period of each controller (ms). */
  syncPeriodMs?: number;
  /** After the signal, how long in-flight reconciles may finish; default 30 s (controller-runtime). */
  gracefulShutdownTimeoutMs?: number;
  /**
   * Default namespace of informers; several comma-separated (`a,b`: one list and watch per
   * namespace and resource, one cache); "" (the default) for all.
   */
  watchNamespace?: string;
  /**
   * A watch silent (no byte, bookmarks included) this long is reconnected; default the
   * reflector's `DEFAULT_WATCH_IDLE_TIMEOUT_MS` (75 s).
   */
  watchIdleTimeoutMs?: number;
  /** Page size of the informers' lists; default the reflector's (500, client-go's pager). */
  listPageSize?: number;
  /**
   * Informers start with WatchList (KEP-3157: a watch with `sendInitialEvents=true`,
   * `resourceVersionMatch=NotOlderThan` and no resourceVersion, so the initial state is at least as
   * new as a consistent list, streamed from the watch cache) where the apiserver supports it, else
   * with a consistent paged list; default false (client-go's reflector uses it by default from
   * v0.35, its WatchListClient feature; why not here: lib/runtime/reflector.ts).
   */
  useWatchList?: boolean;
  /**
   * A check that must pass before anything but reading starts (main.ts: who the apiserver says
   * the credential is, refusing anonymous). The informers' first lists go out at once, beside it,
   * so that neither waits for the other (each first request on a new connection costs tens of ms:
   * Deno's fetch does not set TCP_NODELAY); the probe and metrics servers, leader election and
   * the controllers' workers (every write) start only once it resolves. While it is pending,
   * what the reflectors would log is held: logged when it resolves, dropped when it rejects.
   * When it rejects, {@link Manager.run} stops the informers and throws its error (a failed
   * start-up ends with one line). Default: none.
   */
  startGate?: Promise<unknown>;
  /**
   * Deep-freeze the objects in the informers' caches (`StoreOptions.freeze`), so that code
   * mutating a cached object throws. For tests; default false.
   */
  freezeCache?: boolean;
}

/** Default of {@link ManagerOptions.gracefulShutdownTimeoutMs}; controller-runtime's 30 s. */
export const DEFAULT_GRACEFUL_SHUTDOWN_TIMEOUT_MS = 30_000;

/** Options that stay optional after defaults: per-controller defaults, and the Lease client. */
type StillOptional =
  | "leaderElectionClient"
  | "metricsAuthClient"
  | "maxConcurrentReconciles"
  | "reconcileTimeoutMs"
  | "syncPeriodMs"
  | "listPageSize"
  | "startGate";

/** {@link ManagerOptions} with every default filled in. */
type ResolvedOptions =
  & Required<Omit<ManagerOptions, StillOptional>>
  & Pick<ManagerOptions, StillOptional>;

/**
 * The one place {@link ManagerOptions}' defaults are filled in (controller-runtime's and
 * client-go's, see each option).
 * @throws Error for `leaderElect` or `shards` > 1 without `leaderElectionId`, RangeError for
 *   `shards` outside 1..256
 */
function resolveManagerOptions(o: ManagerOptions): ResolvedOptions {
  const r: ResolvedOptions = {
    ...o,
    metrics: o.metrics ?? new Metrics(),
    metricsBindAddress: o.metricsBindAddress ?? "0",
    metricsSecure: o.metricsSecure ?? false,
    metricsCertDir: o.metricsCertDir ?? "",
    healthProbeBindAddress: o.healthProbeBindAddress ?? "0",
    leaderElect: o.leaderElect ?? false,
    leaderElectionNamespace: o.leaderElectionNamespace || o.client.config.namespace,
    leaderElectionId: o.leaderElectionId ?? "",
    leaseDurationSeconds: o.leaseDurationSeconds ?? LEASE_DURATION_SECONDS,
    renewDeadlineMs: o.renewDeadlineMs ?? RENEW_DEADLINE_MS,
    retryPeriodMs: o.retryPeriodMs ?? RETRY_PERIOD_MS,
    identity: o.identity || crypto.randomUUID(),
    gracefulShutdownTimeoutMs: o.gracefulShutdownTimeoutMs ?? DEFAULT_GRACEFUL_SHUTDOWN_TIMEOUT_MS,
    watchNamespace: o.watchNamespace ?? "",
    watchIdleTimeoutMs: o.watchIdleTimeoutMs ?? DEFAULT_WATCH_IDLE_TIMEOUT_MS,
    useWatchList: o.useWatchList ?? false,
    freezeCache: o.freezeCache ?? false,
    shards: o.shards ?? 1,
  };
  checkShardCount(r.shards);
  if ((r.leaderElect || r.shards > 1) && !r.leaderElectionId) {
    throw new Error("leaderElect and shards need a leaderElectionId (the Lease's name)");
  }
  return r;
}

/** The manager's runnable groups, in start order (stopped in the reverse order). */
export const RUNNABLE_GROUPS = ["servers", "caches", "election", "controllers"] as const;

/** The operator process; see the module doc. */
export class Manager {
  #o: ResolvedOptions;
  #log = log("manager");
  #informers: InformerRegistry;
  #controllers: { controller: Controller; informers: Informer<KubeObject>[] }[] = [];
  #recorders: EventRecorder[] = [];
  #running = false;
  /** Reflector log lines held while the start gate is pending (see `startGate`). */
  #heldLogs?: (() => void)[];
  /** With several shards: the sharded reflectors and the mode they wait for. */
  #sharding: ShardingRuntime = newShardingRuntime();
  /** Ports actually bound (for tests that bind port 0). */
  readonly ports: { metrics?: number; health?: number } = {};

  /**
   * A manager with no informer or controller yet; nothing runs until {@link Manager.run}.
   * @param o see {@link ManagerOptions}
   * @throws Error for `leaderElect` without `leaderElectionId`
   */
  constructor(o: ManagerOptions) {
    this.#o = resolveManagerOptions(o);
    this.#informers = new InformerRegistry({
      watchNamespace: this.#o.watchNamespace,
      reflector: (resource, store, namespace, opts) =>
        this.#reflector(resource, store, namespace, opts),
      onHandlerError: (err) => this.#log.error("Event handler failed", { error: errorText(err) }),
      freeze: this.#o.freezeCache,
    });
  }

  /** The client controllers read and write through. */
  get client(): KubeClient {
    return this.#o.client;
  }

  /** The metrics served on `/metrics` (e.g. to count and time a client's requests: `onRequest` calling `recordRequest`). */
  get metrics(): Metrics {
    return this.#o.metrics;
  }

  /** This process's identity (Lease holder, Events' `reportingInstance`). */
  get identity(): string {
    return this.#o.identity;
  }

  #notRunning(what: string): void {
    if (this.#running) throw new Error(`${what} after Manager.run`);
  }

  /**
   * The shared informer of `resource` in a namespace with selectors: the same one for the same
   * resource, namespace and selectors, so each is listed and watched once however many
   * controllers use it. Its reflector starts with {@link Manager.run}, on every replica (a
   * standby keeps a warm cache); `/readyz` waits for it.
   * @throws Error after {@link Manager.run}, for an index name taken by another function, or for
   *   a `transform` other than the one the shared informer was made with.
   */
  informer<T extends KubeObject>(
    resource: ResourceType,
    opts: InformerOptions<T> = {},
  ): Informer<T> {
    this.#notRunning("Manager.informer");
    return this.#informers.informer(resource, opts);
  }

  /**
   * An Event recorder (events.k8s.io/v1) reporting as `reportingController` (e.g.
   * `example.com/my-operator`) and this manager's identity; queued Events are flushed (for up to
   * 2 s) on shutdown.
   * @param opts see {@link EventRecorderOptions} (e.g. `terminating`, the namespaces where
   *   nothing is created any more); failed writes are logged at warning level (at debug when
   *   fenced or throttled).
   */
  eventRecorder(
    reportingController: string,
    opts: Omit<EventRecorderOptions, "onError"> = {},
  ): EventRecorder {
    const r = new EventRecorder(this.#o.client, reportingController, this.#o.identity, {
      ...opts,
      onError: (err) => {
        // The recorder's EventWriteError says whether it was sent; its cause is the client's.
        const cause = err instanceof Error && err.cause !== undefined ? err.cause : err;
        // Fenced (not the leader now) or throttled: expected, and said elsewhere; the apiserver
        // unreachable: said once per outage (ConnectionHealth.claimReport).
        const down = unreachable(cause, this.#o.client.health);
        return isFenced(cause) || isThrottled(cause) ||
            (down && !this.#o.client.health.claimReport())
          ? this.#log.debug("Event not recorded", { error: errorText(err) })
          : this.#log.warn("Event not recorded", {
            error: errorText(err),
            ...(down ? { outage: OUTAGE_NOTE } : {}),
          });
      },
    });
    this.#recorders.push(r);
    return r;
  }

  /**
   * Declares a controller: changes of its primary objects enqueue their keys (filtered by its
   * predicates), changes of owned objects the key of their controller owner, changes of watched
   * objects the keys their mapping returns (builder.ts). Its workers run while this replica
   * leads.
   * @throws Error after {@link Manager.run} or for a name already used.
   */
  add<P extends KubeObject>(def: ControllerDefinition<P>): Controller {
    this.#notRunning("Manager.add");
    if (this.#controllers.some((c) => c.controller.name === def.name)) {
      throw new Error(`controller ${def.name} already added`);
    }
    const o = this.#o;
    const built = buildController(def, {
      maxConcurrentReconciles: o.maxConcurrentReconciles,
      reconcileTimeoutMs: o.reconcileTimeoutMs,
      syncPeriodMs: o.syncPeriodMs,
      metrics: o.metrics,
      health: o.client.health,
    });
    this.#controllers.push(built);
    return built.controller;
  }

  /**
   * The reflector of a new informer: a {@link Reflector}, or with several shards and a
   * namespaced resource a {@link ShardReflector} making one per held set.
   */
  #reflector<T extends KubeObject>(
    resource: ResourceType,
    store: Store<T>,
    namespace: string | undefined,
    opts: InformerOptions<T>,
  ): InformerReflector {
    if (this.#o.shards > 1 && resource.namespaced) {
      const sharded = new ShardReflector<T>({
        shards: this.#o.shards,
        store,
        mode: this.#sharding.mode,
        make: (shardSelector) =>
          this.#plainReflector(resource, store, namespace, opts, shardSelector),
      });
      this.#sharding.reflectors.push(sharded as unknown as ShardReflector<KubeObject>);
      this.#sharding.targets.push({ resource, namespace });
      return sharded;
    }
    return this.#plainReflector(resource, store, namespace, opts);
  }

  #plainReflector<T extends KubeObject>(
    resource: ResourceType,
    store: Store<T>,
    namespace: string | undefined,
    opts: InformerOptions<T>,
    shardSelector?: string,
  ): Reflector<T> {
    const o = this.#o;
    const reflectorLog = log("reflector").with({ resource: resource.plural });
    /** One level of the reflector's logger, held back while the start gate is pending. */
    const holdable =
      (level: "info" | "warn" | "debug") => (message: string, props: Record<string, unknown>) =>
        this.#logOrHold(() => reflectorLog[level](message, props));
    const logger = { info: holdable("info"), warn: holdable("warn"), debug: holdable("debug") };
    return new Reflector<T>({
      client: o.client,
      resource,
      store,
      namespace,
      labelSelector: opts.labelSelector,
      fieldSelector: opts.fieldSelector,
      shardSelector,
      idleTimeoutMs: o.watchIdleTimeoutMs,
      pageSize: o.listPageSize,
      useWatchList: o.useWatchList,
      logger,
      metrics: o.metrics,
    });
  }

  #logOrHold(line: () => void): void {
    if (this.#heldLogs) this.#heldLogs.push(line);
    else line();
  }

  /** Where the trusted CAs come from, and a credential file that could not be used, if any. */
  #trustHint(): string | undefined {
    const c = this.#o.client;
    const parts: string[] = [];
    if (c.config.caFile) {
      parts.push(`trusted CAs from ${c.config.caFile} (re-read every 60 s and after failures)`);
    }
    if (c.credentialFileError) parts.push(c.credentialFileError);
    return parts.join("; ") || undefined;
  }

  /**
   * Runs until `signal` aborts (resolves 0 after a clean shutdown) or the Lease is lost
   * (resolves 1). Throws only for start-up errors: the start gate's rejection, or a
   * {@link ListenError} when the health-probe or metrics address cannot be bound (in use, or a
   * privileged port), having stopped what it started.
   */
  async run(signal: AbortSignal): Promise<number> {
    this.#notRunning("Manager.run");
    this.#running = true;
    const o = this.#o;
    const { groups, election } = this.#runnables();
    // The caches start beside the start gate; what the reflectors log meanwhile is held.
    if (o.startGate) this.#heldLogs = [];
    await groups.start("caches");
    if (o.startGate) {
      try {
        await o.startGate;
      } catch (err) {
        this.#heldLogs = undefined;
        await groups.stop();
        throw err;
      }
      const held = this.#heldLogs ?? [];
      this.#heldLogs = undefined;
      for (const line of held) line();
    }
    await groups.start("servers");
    this.#log.info("Started", {
      identity: o.identity,
      healthPort: this.ports.health,
      metricsPort: this.ports.metrics,
      leaderElect: o.leaderElect,
      ...(o.shards > 1 ? { shards: o.shards } : {}),
      watchNamespace: o.watchNamespace || "(all)",
    });
    await groups.start();
    const first = await Promise.race([
      whenAborted(signal).then(() => "signal" as const),
      (election?.lost ?? new Promise<never>(() => {})).then(() => "lost" as const),
    ]);
    if (first === "signal" && election?.state.kind === "leading") {
      this.#log.info("Draining in-flight reconciles; still holding the Lease", {
        lease: `${o.leaderElectionNamespace}/${o.leaderElectionId}`,
        graceMs: o.gracefulShutdownTimeoutMs,
      });
    }
    this.#log.info("Shutting down", { reason: first === "lost" ? "lost the Lease" : "signal" });
    await groups.stop();
    const exitCode = election?.state.kind === "lost" ? 1 : 0;
    this.#log.info("Stopped", { exitCode });
    return exitCode;
  }

  /** The runnables of {@link Manager.run}, in their groups. */
  #runnables(): { groups: RunnableGroups<typeof RUNNABLE_GROUPS[number]>; election?: Election } {
    const o = this.#o;
    const groups = new RunnableGroups(RUNNABLE_GROUPS);
    const informers = this.#informers.all();
    const trustHint = () => this.#trustHint();
    const controllers = this.#controllers;
    const sharded = o.shards > 1
      ? shardingRunnables({
        ...o,
        runtime: this.#sharding,
        controllers: () => controllers.map((c) => c.controller),
        log: this.#log,
      })
      : undefined;
    const election = o.leaderElect && !sharded
      ? new Election({
        client: o.client,
        leaseClient: o.leaderElectionClient,
        namespace: o.leaderElectionNamespace,
        name: o.leaderElectionId,
        identity: o.identity,
        leaseDurationSeconds: o.leaseDurationSeconds,
        renewDeadlineMs: o.renewDeadlineMs,
        retryPeriodMs: o.retryPeriodMs,
        metrics: o.metrics,
        log: this.#log,
        requeueAll: () => {
          for (const c of controllers) c.controller.enqueueAll();
        },
      })
      : undefined;
    groups.add("servers", connectionLog(o.client, trustHint));
    groups.add(
      "servers",
      healthServer({
        address: o.healthProbeBindAddress,
        informers,
        client: o.client,
        trustHint,
        lost: () => election?.state.kind === "lost",
        shards: sharded?.readiness,
        ports: this.ports,
      }),
    );
    groups.add(
      "servers",
      metricsServer({
        address: o.metricsBindAddress,
        metrics: o.metrics,
        secure: o.metricsSecure,
        certDir: o.metricsCertDir,
        authClient: o.metricsAuthClient,
        client: o.client,
        ports: this.ports,
        log: this.#log,
      }),
    );
    if (sharded) groups.add("caches", sharded.mode);
    for (const inf of informers) groups.add("caches", informerRunnable(inf));
    groups.add(
      "caches",
      collectionRunnable(informers, () => controllers.map((c) => c.controller), this.#log),
    );
    if (election) groups.add("election", election);
    if (sharded) groups.add("election", sharded.election);
    const leading: Promise<Term | undefined> = election?.leading ?? Promise.resolve(undefined);
    groups.add(
      "controllers",
      controllersRunnable({
        controllers,
        leading,
        gracefulShutdownTimeoutMs: o.gracefulShutdownTimeoutMs,
        recorders: this.#recorders,
        log: this.#log,
      }),
    );
    return { groups, election };
  }
}
