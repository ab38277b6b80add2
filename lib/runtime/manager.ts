/**
 * The manager: runs any number of controllers over shared informers (reflector + store), with one
 * leader election, the probe and metrics servers, and shutdown (controller-runtime
 * `manager.Manager`). It knows no particular resource: informers are asked for with
 * {@link Manager.informer} (one per resource, namespace and selectors, shared), controllers are
 * declared with {@link Manager.add} ({@link ControllerDefinition}), Event recorders made with
 * {@link Manager.eventRecorder}; then {@link Manager.run} starts everything.
 *
 * Lifecycle:
 * - Informers start at once on every replica (a standby keeps a warm cache, so failover does not
 *   wait for a relist); `/readyz` is OK once every informer has synced. A missing CRD or a
 *   forbidden list keeps the replica not ready while the reflector retries with capped backoff
 *   (S11); it recovers by itself. A synced informer that then fails to list/watch for 30 s
 *   (`INFORMER_FAILING_NOT_READY_MS` in health.ts: a CRD deleted at runtime, RBAC revoked) makes
 *   the replica not ready again, naming the informer and its last error, until its first success.
 * - The controllers' workers run only while this replica holds the Lease (or always, without
 *   `leaderElect`), each once its own informers have synced. A lost Lease fences every
 *   controller at once (in-flight writes aborted) and {@link Manager.run} resolves with exit
 *   code 1.
 * - `/metrics` is served on every replica, leading or not: plain HTTP by default
 *   (controller-runtime's `SecureServing` default), or with `metricsSecure` over HTTPS with each
 *   request authenticated (TokenReview) and authorized (SubjectAccessReview) through a client of
 *   its own (metrics_server.ts, delegated_auth.ts). `/healthz` and `/readyz` stay plain HTTP.
 * - With `leaderElect`, the elector's `LeaseFence` (leader.ts) is put on `client` as its write
 *   fence: no write of this process (reconcilers, Events) leaves unless, at the moment it is sent,
 *   this replica holds the Lease and its last renewal is younger than the renew deadline (S13).
 *   The Lease goes through `leaderElectionClient`, which must be another client (no fence).
 * - When `signal` aborts (SIGTERM/SIGINT): stop taking keys, give in-flight reconciles
 *   `gracefulShutdownTimeoutMs`, release the Lease (holder cleared, duration 1 s), stop informers
 *   and servers, resolve with exit code 0 (S7).
 *
 * @module
 */
import { MESSAGES, OUTAGE_NOTE } from "./messages.ts";
import { KubeClient, type KubeObject } from "../kube/client.ts";
import { isFenced, isThrottled } from "../kube/errors.ts";
import type { ResourceType } from "../kube/resources.ts";
import { realClock } from "./clock.ts";
import { collectGarbage, exposedGc, IDLE_GC_POLL_MS, idleCollectionDue } from "./collect.ts";
import {
  Controller,
  type ControllerDefinition,
  controllerOwnerKeys,
  type Informer,
  unreachable,
} from "./controller.ts";
import { DelegatedAuth, kubeReviewer, REVIEW_TIMEOUT_MS } from "./delegated_auth.ts";
import { EventRecorder, type EventRecorderOptions } from "./events.ts";
import {
  checksHandler,
  connectionCheck,
  informerCheck,
  ListenError,
  parseBindAddress,
  type ServerName,
  serveRoutes,
} from "./health.ts";
import {
  LeaderElector,
  LEASE_DURATION_SECONDS,
  RENEW_DEADLINE_MS,
  RETRY_PERIOD_MS,
} from "./leader.ts";
import { errorText, log, type Logger } from "./log.ts";
import type { HandoverReport } from "./handover.ts";
import { Metrics } from "./metrics.ts";
import { startMetricsServer } from "./metrics_server.ts";
import { passes, type Predicate } from "./predicates.ts";
import { DEFAULT_WATCH_IDLE_TIMEOUT_MS, Reflector } from "./reflector.ts";
import {
  CONTROLLER_UID_INDEX,
  controllerUidIndex,
  type IndexFunc,
  objectKey,
  Store,
} from "./store.ts";

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
  /** Default namespace of informers (one namespace only); "" (the default) for all. */
  watchNamespace?: string;
  /** A watch silent (no byte, bookmarks included) this long is reconnected; default 75 s. */
  watchIdleTimeoutMs?: number;
  /** Page size of the informers' lists; default the reflector's (500, client-go's pager). */
  listPageSize?: number;
  /**
   * Informers start with WatchList (KEP-3157: a watch with `sendInitialEvents=true`,
   * `resourceVersionMatch=NotOlderThan` and no resourceVersion, so the initial state is at least as
   * new as a consistent list, streamed from the watch cache) where the apiserver supports it, else
   * with a consistent paged list; default false (client-go's reflector uses it by default from
   * v0.35, its WatchListClient feature, k8s.io/client-go features/known_features.go; here paged
   * lists measured faster, see docs/design/reflector.md).
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

/** How often (ms) the manager looks whether the first pass is over, for its first GC. */
export const FIRST_PASS_POLL_MS = 250;
/** Longest wait (ms) after the sync for the first pass to end before that GC runs anyway. */
export const FIRST_PASS_MAX_WAIT_MS = 120_000;

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

/** Options of {@link Manager.informer}. */
export interface InformerOptions<T extends KubeObject> {
  /** Namespace to watch, "" for all; default the manager's `watchNamespace`. */
  namespace?: string;
  /** Label selector of the list and watch (e.g. `app.kubernetes.io/managed-by=x`). */
  labelSelector?: string;
  /** Field selector of the list and watch. */
  fieldSelector?: string;
  /** Named indexes to add to the shared store (same name, same function when shared). */
  indexes?: Record<string, IndexFunc<T>>;
  /**
   * Cache transform of the shared store (the `transform` of {@link Store}'s options: it must keep every
   * field any user of the informer reads). Informers are shared, so every caller asking for the
   * same informer must pass the same function (or none after the first).
   */
  transform?: (obj: T) => T;
}

/** The operator process; see the module doc. */
export class Manager {
  #o: ResolvedOptions;
  #log = log("manager");
  #informers = new Map<string, Informer<KubeObject>>();
  /** The transform each shared informer was made with (by informer id). */
  #transforms = new Map<string, unknown>();
  #controllers: { controller: Controller; informers: Informer<KubeObject>[] }[] = [];
  #recorders: EventRecorder[] = [];
  #running = false;
  /** Reflector log lines held while the start gate is pending (see `startGate`). */
  #heldLogs?: (() => void)[];
  /** Ports actually bound (for tests that bind port 0). */
  readonly ports: { metrics?: number; health?: number } = {};

  /**
   * A manager with no informer or controller yet; nothing runs until {@link Manager.run}.
   * @param o see {@link ManagerOptions}
   */
  constructor(o: ManagerOptions) {
    this.#o = {
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
      gracefulShutdownTimeoutMs: o.gracefulShutdownTimeoutMs ??
        DEFAULT_GRACEFUL_SHUTDOWN_TIMEOUT_MS,
      watchNamespace: o.watchNamespace ?? "",
      watchIdleTimeoutMs: o.watchIdleTimeoutMs ?? DEFAULT_WATCH_IDLE_TIMEOUT_MS,
      useWatchList: o.useWatchList ?? false,
      freezeCache: o.freezeCache ?? false,
    };
    if (this.#o.leaderElect && !this.#o.leaderElectionId) {
      throw new Error("leaderElect needs a leaderElectionId (the Lease's name)");
    }
  }

  /** The client controllers read and write through. */
  get client(): KubeClient {
    return this.#o.client;
  }

  /** The metrics served on `/metrics` (e.g. to count a client's requests with `restRequests`). */
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
    const namespace = resource.namespaced
      ? (opts.namespace ?? this.#o.watchNamespace) || undefined
      : undefined;
    const id = [
      resource.apiVersion,
      resource.plural,
      namespace,
      opts.labelSelector,
      opts.fieldSelector,
    ]
      .join("|");
    let inf = this.#informers.get(id) as Informer<T> | undefined;
    if (!inf) {
      const names = new Set([...this.#informers.values()].map((i) => i.name));
      let name = resource.plural;
      for (let n = 2; names.has(name); n++) name = `${resource.plural}-${n}`;
      const store = new Store<T>({
        onHandlerError: (err) => this.#log.error("Event handler failed", { error: errorText(err) }),
        transform: opts.transform,
        freeze: this.#o.freezeCache,
      });
      this.#transforms.set(id, opts.transform);
      inf = {
        name,
        resource,
        namespace,
        labelSelector: opts.labelSelector,
        fieldSelector: opts.fieldSelector,
        store,
        reflector: this.#reflector(resource, store, namespace, opts),
      };
      this.#informers.set(id, inf);
    } else if (opts.transform && opts.transform !== this.#transforms.get(id)) {
      throw new Error(`informer ${inf.name} is shared and already has another cache transform`);
    }
    for (const [name, fn] of Object.entries(opts.indexes ?? {})) inf.store.addIndex(name, fn);
    return inf;
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
   * objects the keys their mapping returns. Its workers run while this replica leads.
   * @throws Error after {@link Manager.run} or for a name already used.
   */
  add<P extends KubeObject>(def: ControllerDefinition<P>): Controller {
    this.#notRunning("Manager.add");
    const o = this.#o;
    if (this.#controllers.some((c) => c.controller.name === def.name)) {
      throw new Error(`controller ${def.name} already added`);
    }
    const primary = def.for;
    const controller = new Controller({
      name: def.name,
      reconcile: def.reconcile,
      errorPolicy: def.errorPolicy,
      maxConcurrentReconciles: def.maxConcurrentReconciles ?? o.maxConcurrentReconciles,
      reconcileTimeoutMs: def.reconcileTimeoutMs ?? o.reconcileTimeoutMs,
      syncPeriodMs: def.syncPeriodMs ?? o.syncPeriodMs,
      allKeys: () => primary.store.keys(),
      metrics: o.metrics,
      health: o.client.health,
    });
    const enqueue = (keys: string[]) => {
      for (const k of keys) controller.enqueue(k);
    };
    // The primary maps to its own key (an update: the new state's, the same). Owned objects map
    // to their controller owner of the primary's kind, watched ones through their function;
    // for those both states of an update are mapped, so a changed owner or mapping reaches the
    // old key too (client-go's EnqueueRequestForOwner does the same).
    const toOwner = controllerOwnerKeys(primary.resource);
    const sources: {
      informer: Informer<KubeObject>;
      map(obj: KubeObject): string[];
      predicates?: Predicate<KubeObject>[];
      mapOld: boolean;
    }[] = [
      {
        informer: primary,
        map: (obj) => [objectKey(obj)],
        predicates: def.predicates,
        mapOld: false,
      },
      ...(def.owns ?? []).map((w) => {
        w.informer.store.addIndex(CONTROLLER_UID_INDEX, controllerUidIndex);
        return { informer: w.informer, map: toOwner, predicates: w.predicates, mapOld: true };
      }),
      ...(def.watches ?? []).map((w) => ({ ...w, mapOld: true })),
    ];
    for (const w of sources) {
      const preds = w.predicates ?? [];
      w.informer.store.addHandler({
        add: (obj) => {
          if (passes(preds, { type: "create", obj })) enqueue(w.map(obj));
        },
        update: (oldObj, newObj) => {
          if (!passes(preds, { type: "update", oldObj, newObj })) return;
          if (w.mapOld) enqueue(w.map(oldObj));
          enqueue(w.map(newObj));
        },
        delete: (obj) => {
          if (passes(preds, { type: "delete", obj })) enqueue(w.map(obj));
        },
      });
    }
    const informers = new Set(sources.map((w) => w.informer));
    this.#controllers.push({ controller, informers: [...informers] });
    return controller;
  }

  #reflector<T extends KubeObject>(
    resource: ResourceType,
    store: Store<T>,
    namespace: string | undefined,
    opts: InformerOptions<T>,
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
   * Logs the health of the path to the apiserver: one error line once requests have had no
   * answer for 10 s (naming the last reason, e.g. a TLS failure after a CA rotation), one line
   * when it recovers; short blips only at debug level. Returns the unsubscribe function.
   */
  #logConnection(): () => void {
    const logger = log("connection").with({ server: this.#o.client.config.server });
    return this.#o.client.health.onEvent((ev) => {
      switch (ev.type) {
        case "failing":
          logger.debug("Request to the apiserver got no answer", { error: ev.error });
          break;
        case "stillFailing":
          logger.error("No answer from the apiserver; retrying", {
            sinceMs: ev.sinceMs,
            failures: ev.failures,
            error: ev.error,
            hint: this.#trustHint(),
          });
          break;
        case "recovered": {
          const r = ev.recovery;
          const fields = {
            failedForMs: r.recoveredAtMs - r.failingSinceMs,
            failures: r.failures,
            lastError: r.lastError,
          };
          if (ev.reported) logger.info("Connection to the apiserver recovered", fields);
          else logger.debug("Connection to the apiserver recovered", fields);
          break;
        }
        default: {
          const never: never = ev;
          logger.debug("Connection event", { event: never });
        }
      }
    });
  }

  /**
   * A memory-reducing full garbage collection (collect.ts) once the initial lists are in and
   * every controller's first pass is over (its queue empty and no reconcile running, checked
   * every {@link FIRST_PASS_POLL_MS}; a standby's queues never drain, so at most
   * {@link FIRST_PASS_MAX_WAIT_MS} after the sync), and again whenever the controllers go idle
   * after work, or at rest with enough new heap (`idleCollectionDue`: after any reconcile since
   * the last one, or 2 MiB and 10% of new heap; looked at every
   * `IDLE_GC_POLL_MS`). The lists' pages and a burst of reconciles leave garbage and emptied
   * pages that V8 would otherwise keep committed until its next major GC, which an idle operator
   * may not need for a long time: the memory given back is what an operator at rest shows (Go's
   * runtime returns idle heap to the OS by itself, its scavenger). Only where V8 exposes `gc`
   * (`--v8-flags=--expose-gc`, in `deno task start`'s flags); a no-op otherwise.
   */
  #collectAfterFirstPass(allInformers: Informer<KubeObject>[], signal: AbortSignal): void {
    const gc = exposedGc();
    if (!gc) return;
    let lastMs = 0;
    let liveAfterLast = 0;
    let completedAtLast = 0;
    const completed = () =>
      this.#controllers.reduce((n, { controller }) => n + controller.queue.completed, 0);
    const collect = (why: string) => {
      const t0 = performance.now();
      completedAtLast = completed();
      liveAfterLast = collectGarbage(gc);
      lastMs = performance.now();
      this.#log.debug("Collected garbage", {
        why,
        ms: Math.round(lastMs - t0),
        liveMiB: Math.round(liveAfterLast / 2 ** 20 * 10) / 10,
      });
    };
    const busy = () =>
      this.#controllers.some(({ controller }) =>
        controller.queue.depth > 0 || controller.activeWorkers > 0
      );
    const whenIdle = () => {
      let idleLooks = 0;
      const timer = setInterval(() => {
        idleLooks = busy() ? 0 : idleLooks + 1;
        const due = idleCollectionDue({
          idleLooks,
          sinceLastMs: performance.now() - lastMs,
          reconcilesSinceLast: completed() - completedAtLast,
          heapUsedBytes: Deno.memoryUsage().heapUsed,
          liveAfterLastBytes: liveAfterLast,
        });
        if (due) collect("idle after work or with new heap since the last collection");
      }, IDLE_GC_POLL_MS);
      Deno.unrefTimer(timer);
      signal.addEventListener("abort", () => clearInterval(timer), { once: true });
    };
    const run = async () => {
      await Promise.all(allInformers.map((i) => i.reflector.waitForSync()));
      const deadline = Date.now() + FIRST_PASS_MAX_WAIT_MS;
      for (let i = 0; i < 100_000 && !signal.aborted && Date.now() < deadline; i++) {
        await new Promise((r) => setTimeout(r, FIRST_PASS_POLL_MS));
        if (!busy()) break;
      }
      if (signal.aborted) return;
      collect("after the first pass");
      whenIdle();
    };
    run().catch(() => {});
  }

  /**
   * Runs until `signal` aborts (resolves 0 after a clean shutdown) or the Lease is lost
   * (resolves 1). Throws only for start-up errors: a {@link ListenError} when the health-probe or
   * metrics address cannot be bound (in use, or a privileged port), having stopped what it started.
   */
  async run(signal: AbortSignal): Promise<number> {
    this.#notRunning("Manager.run");
    this.#running = true;
    const o = this.#o;
    const servers = new AbortController();
    const informers = new AbortController();
    const allInformers = [...this.#informers.values()];
    if (o.startGate) this.#heldLogs = [];
    for (const inf of allInformers) {
      inf.reflector.run(informers.signal).catch((err) =>
        log("reflector").with({ resource: inf.resource.plural }).error("Reflector stopped", {
          error: errorText(err),
        })
      );
    }
    if (o.startGate) {
      try {
        await o.startGate;
      } catch (err) {
        this.#heldLogs = undefined;
        informers.abort();
        throw err;
      }
      const held = this.#heldLogs ?? [];
      this.#heldLogs = undefined;
      for (const line of held) line();
    }
    const controllers = this.#controllers;
    this.#collectAfterFirstPass(allInformers, informers.signal);

    const unwatchConnection = this.#logConnection();
    let elector: LeaderElector | undefined;
    let ownLeaseClient: KubeClient | undefined;
    let fenced = false;
    const health = parseBindAddress(o.healthProbeBindAddress);
    const stopStarted = () => {
      servers.abort();
      informers.abort();
      unwatchConnection();
    };
    if (health) {
      let s;
      try {
        s = serveRoutes(health, {
          "/healthz": checksHandler({
            ping: () => undefined,
            lease: () => fenced ? "lost the Lease" : undefined,
          }),
          "/readyz": checksHandler({
            ...Object.fromEntries(allInformers.map((i) => [
              `informer-${i.name}`,
              informerCheck(i.reflector, realClock.now),
            ])),
            apiserver: connectionCheck(o.client.health, realClock.now, () => this.#trustHint()),
          }),
        }, servers.signal);
      } catch (err) {
        stopStarted();
        throw listenFailure("health", o.healthProbeBindAddress, err);
      }
      this.ports.health = s.port;
    }
    const metricsAddr = parseBindAddress(o.metricsBindAddress);
    let ownAuthClient: KubeClient | undefined;
    if (metricsAddr) {
      let auth: DelegatedAuth | undefined;
      if (o.metricsSecure) {
        const reviewClient = o.metricsAuthClient ??
          (ownAuthClient = new KubeClient(o.client.config, {
            maxRetries: 0,
            requestTimeoutMs: REVIEW_TIMEOUT_MS,
          }));
        auth = new DelegatedAuth({ reviewer: kubeReviewer(reviewClient) });
      }
      try {
        const s = await startMetricsServer({
          address: metricsAddr,
          metrics: async () => ({
            text: await o.metrics.text(),
            contentType: o.metrics.registry.contentType,
          }),
          secure: auth && { auth, certDir: o.metricsCertDir },
          signal: servers.signal,
          log: log("metrics"),
        });
        this.ports.metrics = s.port;
        this.#log.info("Serving metrics", {
          port: s.port,
          secure: o.metricsSecure,
          ...(s.certificate ? { certificate: s.certificate.source } : {}),
        });
      } catch (err) {
        stopStarted();
        ownAuthClient?.close();
        throw listenFailure("metrics", o.metricsBindAddress, err);
      }
    }
    this.#log.info("Started", {
      identity: o.identity,
      healthPort: this.ports.health,
      metricsPort: this.ports.metrics,
      leaderElect: o.leaderElect,
      watchNamespace: o.watchNamespace || "(all)",
    });

    // Leading: run the controllers until shutdown or loss.
    const leading = new AbortController();
    const onSignal = () => leading.abort();
    signal.addEventListener("abort", onSignal, { once: true });
    let exitCode = 0;
    let controllerDone: Promise<unknown> = Promise.resolve();
    const startController = () => {
      // Wait for the caches, but not past shutdown (a missing CRD may keep them unsynced).
      const stopped = new Promise<void>((r) => {
        if (leading.signal.aborted) r();
        else leading.signal.addEventListener("abort", () => r(), { once: true });
      });
      controllerDone = Promise.all(controllers.map(async ({ controller, informers }) => {
        this.#log.info(MESSAGES.startingWorkers, {
          controller: controller.name,
          workerCount: controller.workers,
        });
        await Promise.race([Promise.all(informers.map((i) => i.reflector.waitForSync())), stopped]);
        if (leading.signal.aborted) return;
        this.#log.info("Caches synced; reconciling", { controller: controller.name });
        await controller.run(leading.signal, o.gracefulShutdownTimeoutMs);
      }));
    };
    if (o.leaderElect) {
      const leaseName = `${o.leaderElectionNamespace}/${o.leaderElectionId}`;
      o.metrics.leaderStatus.set({ name: o.leaderElectionId }, 0);
      const change = (c: "acquired" | "lost" | "released", n = 1) =>
        o.metrics.leaderChanges.inc({ name: o.leaderElectionId, change: c }, n);
      for (const c of ["acquired", "lost", "released"] as const) change(c, 0);
      // The Lease needs a client without the write fence (and without the reconcilers' Retry-After
      // gate): the one given, or one of our own on the same connection.
      let leaseClient = o.leaderElectionClient;
      if (!leaseClient || leaseClient === o.client) {
        leaseClient = ownLeaseClient = new KubeClient(o.client.config, {
          maxRetries: 0,
          retryAfterGate: false,
          health: o.client.health,
        });
      }
      elector = new LeaderElector({
        client: leaseClient,
        namespace: o.leaderElectionNamespace,
        name: o.leaderElectionId,
        identity: o.identity,
        leaseDurationSeconds: o.leaseDurationSeconds,
        renewDeadlineMs: o.renewDeadlineMs,
        retryPeriodMs: o.retryPeriodMs,
        onStartedLeading: () => {
          o.metrics.leaderStatus.set({ name: o.leaderElectionId }, 1);
          change("acquired");
          this.#log.info(MESSAGES.acquiredLease, { lease: leaseName, identity: o.identity });
          startController();
        },
        onStoppedLeading: (why) => {
          o.metrics.leaderStatus.set({ name: o.leaderElectionId }, 0);
          change(why === "lost" ? "lost" : "released");
          if (why === "lost") {
            fenced = true;
            for (const { controller } of controllers) controller.fence();
            leading.abort();
            this.#log.error(MESSAGES.lostLease, { lease: leaseName });
          } else {
            this.#log.info(MESSAGES.releasedLease, { lease: leaseName });
          }
        },
        onNewLeader: (holder) => this.#log.info("Observed leader", { lease: leaseName, holder }),
        onHandover: (r) => logHandover(this.#log, leaseName, r),
        onError: (err) =>
          this.#log.warn("Lease attempt failed", { lease: leaseName, error: errorText(err) }),
      });
      // From now on every write of `client` needs a fresh Lease (S13).
      o.client.setWriteFence(elector.fence);
      this.#log.info("Waiting for the Lease", { lease: leaseName, identity: o.identity });
      // The elector keeps renewing while the workers drain after SIGTERM: it stops only once
      // they are done, so the Lease is never free while this process may still write
      // (controller-runtime's order). A lost Lease aborts `leading` itself (onStoppedLeading).
      const electing = new AbortController();
      const electorDone = elector.run(electing.signal);
      const stopRequested = new Promise<void>((r) => {
        if (leading.signal.aborted) r();
        else leading.signal.addEventListener("abort", () => r(), { once: true });
      });
      const first = await Promise.race([electorDone, stopRequested.then(() => "signal" as const)]);
      if (first === "lost") exitCode = 1;
      if (first === "signal" && elector.isLeader) {
        this.#log.info("Draining in-flight reconciles; still holding the Lease", {
          lease: leaseName,
          graceMs: o.gracefulShutdownTimeoutMs,
        });
        await controllerDone;
      }
      electing.abort();
      if ((await electorDone) === "lost") exitCode = 1;
    } else {
      startController();
      await new Promise<void>((r) => {
        if (leading.signal.aborted) r();
        else leading.signal.addEventListener("abort", () => r(), { once: true });
      });
    }
    // Shutdown: workers drain (or were fenced), then the Lease is released, then the rest.
    this.#log.info("Shutting down", { reason: exitCode ? "lost the Lease" : "signal" });
    await controllerDone;
    // Events are best effort; give the queued ones a moment to be written.
    await Promise.race([
      Promise.all(this.#recorders.map((r) => r.flush())),
      new Promise((r) => setTimeout(r, 2_000)),
    ]);
    if (elector && exitCode === 0) await elector.release(AbortSignal.timeout(5_000));
    ownLeaseClient?.close();
    informers.abort();
    servers.abort();
    ownAuthClient?.close();
    unwatchConnection();
    signal.removeEventListener("abort", onSignal);
    this.#log.info("Stopped", { exitCode });
    return exitCode;
  }
}

/**
 * Logs one step of a Lease takeover (lib/runtime/handover.ts): what the apiserver's Lease-holder
 * policy did, in one line; a policy that refuses the holder itself is an error (misconfigured
 * identity), one that could not be probed or did not follow in time a warning.
 */
function logHandover(logger: Logger, lease: string, r: HandoverReport): void {
  const base = { lease, waitedMs: Math.round(r.waitedMs), probes: r.probes };
  switch (r.outcome) {
    case "in-force":
      logger.info(
        r.step === "seal"
          ? "Sealed the Lease before taking it: the apiserver refuses the previous holder's writes"
          : "The apiserver admits this replica's writes",
        { ...base, ...(r.step === "seal" ? { previous: r.previous } : {}) },
      );
      return;
    case "not-in-force":
      logger.info(
        "No Lease-holder admission policy in force for this Lease; the client-side fence alone " +
          "decides",
        base,
      );
      return;
    case "timeout":
      logger.warn(
        r.step === "seal"
          ? "The apiserver's Lease-holder policy still named another holder at the deadline; " +
            "taking the Lease"
          : "The apiserver's Lease-holder policy did not admit this replica in time; writes " +
            "refused meanwhile are requeued",
        { ...base, holder: r.holder },
      );
      return;
    case "refuses-holder":
      logger.error(
        "The apiserver's Lease-holder policy refuses this replica although it holds the Lease",
        {
          ...base,
          holder: r.holder,
          hint: "the holder identity must start with the Pod's name and '_' " +
            "(APPSERVICE_POD_NAME from the downward API)",
        },
      );
      return;
    case "failed":
      logger.warn("Could not probe the apiserver's Lease-holder policy", {
        ...base,
        error: errorText(r.error),
      });
  }
}

/** A listen call's error as a {@link ListenError} naming the server; other errors unchanged. */
function listenFailure(server: ServerName, address: string, err: unknown): unknown {
  return err instanceof Deno.errors.AddrInUse || err instanceof Deno.errors.PermissionDenied
    ? new ListenError(server, address, err)
    : err;
}
