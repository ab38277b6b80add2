/**
 * The manager: wires informers (reflector + store), the AppService controller, leader election,
 * the probe and metrics servers, and shutdown (controller-runtime `manager.Manager`).
 *
 * Lifecycle:
 * - Informers start at once on every replica (a standby keeps a warm cache, so failover does not
 *   wait for a relist); `/readyz` is OK once every informer has synced. A missing CRD or a
 *   forbidden list keeps the replica not ready while the reflector retries with capped backoff
 *   (S11); it recovers by itself. A synced informer that then fails to list/watch for 30 s
 *   (`INFORMER_FAILING_NOT_READY_MS` in health.ts: a CRD deleted at runtime, RBAC revoked) makes
 *   the replica not ready again, naming the informer and its last error, until its first success.
 * - The controller's workers run only while this replica holds the Lease (or always, without
 *   `leaderElect`). A lost Lease fences the controller at once (in-flight writes aborted) and
 *   {@link Manager.run} resolves with exit code 1.
 * - When `signal` aborts (SIGTERM/SIGINT): stop taking keys, give in-flight reconciles
 *   `gracefulShutdownTimeoutMs`, release the Lease (holder cleared, duration 1 s), stop informers
 *   and servers, resolve with exit code 0 (S7).
 *
 * @module
 */
import type { Pod, Service } from "kubernetes-types/core/v1.d.ts";
import type { KubeClient, KubeObject } from "../kube/client.ts";
import { PODS, type ResourceType, SERVICES } from "../kube/resources.ts";
import { appServiceReconciler } from "../appservice/reconcile.ts";
import { MANAGED_SELECTOR } from "../appservice/pods.ts";
import { APPSERVICES, GROUP, KIND } from "../appservice/api.ts";
import type { AppService } from "../appservice/schema.ts";
import { realClock } from "./clock.ts";
import { Controller } from "./controller.ts";
import { EventRecorder } from "./events.ts";
import {
  checksHandler,
  connectionCheck,
  informerCheck,
  parseBindAddress,
  serveRoutes,
} from "./health.ts";
import { LeaderElector } from "./leader.ts";
import { errorText, log } from "./log.ts";
import type { Metrics } from "./metrics.ts";
import { Reflector, type ReflectorEvent } from "./reflector.ts";
import { CONTROLLER_UID_INDEX, controllerUidIndex, objectKey, Store } from "./store.ts";

/** Options of {@link Manager}; durations in ms unless the name says seconds. */
export interface ManagerOptions {
  client: KubeClient;
  /**
   * Client for the Lease only (default: `client`). A separate one keeps renewals out of the
   * reconcilers' client-side rate limit, so a busy leader does not lose its own Lease.
   */
  leaderElectionClient?: KubeClient;
  metrics: Metrics;
  /** `host:port`, `:port` or `0` (disabled). */
  metricsBindAddress: string;
  healthProbeBindAddress: string;
  leaderElect: boolean;
  leaderElectionNamespace: string;
  leaderElectionId: string;
  leaseDurationSeconds: number;
  renewDeadlineMs: number;
  retryPeriodMs: number;
  /** Lease holder identity. */
  identity: string;
  maxConcurrentReconciles: number;
  reconcileTimeoutMs: number;
  syncPeriodMs: number;
  gracefulShutdownTimeoutMs: number;
  /** Watch one namespace only; "" for all. */
  watchNamespace: string;
  watchIdleTimeoutMs: number;
  useWatchList: boolean;
}

/** Name of the AppService controller (metrics label `controller`). */
export const CONTROLLER_NAME = "appservice";

/** The operator process; see the module doc. */
export class Manager {
  #o: ManagerOptions;
  #log = log("manager");
  /** Ports actually bound (for tests that bind port 0). */
  readonly ports: { metrics?: number; health?: number } = {};

  /** @param o see {@link ManagerOptions} */
  constructor(o: ManagerOptions) {
    this.#o = o;
  }

  #informer<T extends KubeObject>(
    resource: ResourceType,
    store: Store<T>,
    labelSelector: string | undefined,
    signal: AbortSignal,
  ): Reflector<T> {
    const o = this.#o;
    const logger = log("reflector").with({ resource: resource.plural });
    const r = new Reflector<T>({
      client: o.client,
      resource,
      store,
      namespace: o.watchNamespace || undefined,
      labelSelector,
      idleTimeoutMs: o.watchIdleTimeoutMs,
      useWatchList: o.useWatchList,
      onEvent: (ev: ReflectorEvent) => {
        switch (ev.type) {
          case "listed":
            logger.info("Listed", {
              resourceVersion: ev.resourceVersion,
              items: ev.items,
              pages: ev.pages,
              added: ev.added,
              updated: ev.updated,
              deleted: ev.deleted,
            });
            break;
          case "watchStarted":
            logger.debug("Watch started", { resourceVersion: ev.resourceVersion });
            break;
          case "watchEnded":
            logger.debug("Watch ended", { resourceVersion: ev.resourceVersion, events: ev.events });
            break;
          case "relist":
            o.metrics.reflectorRelists.inc({ resource: resource.plural });
            logger.warn("Watch resourceVersion expired (410 Gone); relisting", {
              resourceVersion: ev.resourceVersion,
            });
            break;
          case "idle":
            logger.warn("Watch stream idle; reconnecting", {
              resourceVersion: ev.resourceVersion,
              idleMs: ev.idleMs,
            });
            break;
          case "restart":
            logger.info("Watch restarted", {
              why: ev.why,
              resourceVersion: ev.resourceVersion,
              detail: ev.detail,
            });
            break;
          case "error":
            o.metrics.reflectorWatchErrors.inc({ resource: resource.plural });
            logger.warn(ev.phase === "list" ? "List failed" : "Watch failed", {
              error: errorText(ev.error),
              retryInMs: Math.round(ev.retryInMs),
            });
            break;
          default: {
            const never: never = ev;
            logger.debug("Reflector event", { event: never });
          }
        }
      },
    });
    r.run(signal).catch((err) => logger.error("Reflector stopped", { error: errorText(err) }));
    return r;
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
   * Runs until `signal` aborts (resolves 0 after a clean shutdown) or the Lease is lost
   * (resolves 1). Throws only for start-up errors (e.g. a bind address in use).
   */
  async run(signal: AbortSignal): Promise<number> {
    const o = this.#o;
    const servers = new AbortController();
    const informers = new AbortController();
    const onHandlerError = (err: unknown) =>
      this.#log.error("Event handler failed", { error: errorText(err) });
    const appServices = new Store<AppService>({ onHandlerError });
    const pods = new Store<Pod>({
      indexes: { [CONTROLLER_UID_INDEX]: controllerUidIndex },
      onHandlerError,
    });
    const services = new Store<Service>({
      indexes: { [CONTROLLER_UID_INDEX]: controllerUidIndex },
      onHandlerError,
    });

    const events = new EventRecorder(
      o.client,
      `${GROUP}/appservice-operator`,
      o.identity,
      (err) => this.#log.warn("Event not recorded", { error: errorText(err) }),
    );
    const controller = new Controller({
      name: CONTROLLER_NAME,
      reconcile: appServiceReconciler({ client: o.client, appServices, pods, services, events }),
      maxConcurrentReconciles: o.maxConcurrentReconciles,
      reconcileTimeoutMs: o.reconcileTimeoutMs,
      syncPeriodMs: o.syncPeriodMs,
      allKeys: () => appServices.keys(),
      metrics: o.metrics,
    });

    // Event handlers: primary (generation-changed or deletion), owned objects via controller ref.
    appServices.addHandler({
      add: (obj) => controller.enqueue(objectKey(obj)),
      update: (oldObj, newObj) => {
        if (
          oldObj.metadata?.generation !== newObj.metadata?.generation ||
          !!oldObj.metadata?.deletionTimestamp !== !!newObj.metadata?.deletionTimestamp ||
          (oldObj.metadata?.finalizers ?? []).join() !== (newObj.metadata?.finalizers ?? []).join()
        ) controller.enqueue(objectKey(newObj));
      },
      delete: () => {},
    });
    const toOwner = (obj: KubeObject) => {
      const ref = obj.metadata?.ownerReferences?.find((r) => r.controller);
      if (ref && ref.kind === KIND && ref.apiVersion.startsWith(`${GROUP}/`)) {
        controller.enqueue(`${obj.metadata?.namespace}/${ref.name}`);
      }
    };
    for (const s of [pods, services] as Store<KubeObject>[]) {
      s.addHandler({
        add: toOwner,
        update: (a, b) => {
          toOwner(a);
          toOwner(b);
        },
        delete: toOwner,
      });
    }

    const reflectors = [
      this.#informer(APPSERVICES, appServices, undefined, informers.signal),
      this.#informer(PODS, pods, MANAGED_SELECTOR, informers.signal),
      this.#informer(SERVICES, services, MANAGED_SELECTOR, informers.signal),
    ];
    const names = ["appservices", "pods", "services"];

    const unwatchConnection = this.#logConnection();
    let elector: LeaderElector | undefined;
    let fenced = false;
    const health = parseBindAddress(o.healthProbeBindAddress);
    if (health) {
      const s = serveRoutes(health, {
        "/healthz": checksHandler({
          ping: () => undefined,
          lease: () => fenced ? "lost the Lease" : undefined,
        }),
        "/readyz": checksHandler({
          ...Object.fromEntries(
            reflectors.map((r, i) => [`informer-${names[i]}`, informerCheck(r, realClock.now)]),
          ),
          apiserver: connectionCheck(o.client.health, realClock.now, () => this.#trustHint()),
        }),
      }, servers.signal);
      this.ports.health = s.port;
    }
    const metricsAddr = parseBindAddress(o.metricsBindAddress);
    if (metricsAddr) {
      const s = serveRoutes(metricsAddr, {
        "/metrics": async () =>
          new Response(await o.metrics.text(), {
            headers: { "Content-Type": o.metrics.registry.contentType },
          }),
      }, servers.signal);
      this.ports.metrics = s.port;
    }
    this.#log.info("Started", {
      identity: o.identity,
      healthPort: this.ports.health,
      metricsPort: this.ports.metrics,
      leaderElect: o.leaderElect,
      watchNamespace: o.watchNamespace || "(all)",
    });

    // Leading: run the controller until shutdown or loss.
    const leading = new AbortController();
    const onSignal = () => leading.abort();
    signal.addEventListener("abort", onSignal, { once: true });
    let exitCode = 0;
    let controllerDone: Promise<void> = Promise.resolve();
    const startController = () => {
      this.#log.info("Starting workers", {
        controller: CONTROLLER_NAME,
        workerCount: o.maxConcurrentReconciles,
      });
      controllerDone = (async () => {
        // Wait for the caches, but not past shutdown (a missing CRD may keep them unsynced).
        const stopped = new Promise<void>((r) => {
          if (leading.signal.aborted) r();
          else leading.signal.addEventListener("abort", () => r(), { once: true });
        });
        await Promise.race([Promise.all(reflectors.map((r) => r.waitForSync())), stopped]);
        if (leading.signal.aborted) return;
        this.#log.info("Caches synced; reconciling", { controller: CONTROLLER_NAME });
        await controller.run(leading.signal, o.gracefulShutdownTimeoutMs);
      })();
    };
    if (o.leaderElect) {
      const leaseName = `${o.leaderElectionNamespace}/${o.leaderElectionId}`;
      o.metrics.leaderStatus.set({ name: o.leaderElectionId }, 0);
      elector = new LeaderElector({
        client: o.leaderElectionClient ?? o.client,
        namespace: o.leaderElectionNamespace,
        name: o.leaderElectionId,
        identity: o.identity,
        leaseDurationSeconds: o.leaseDurationSeconds,
        renewDeadlineMs: o.renewDeadlineMs,
        retryPeriodMs: o.retryPeriodMs,
        onStartedLeading: () => {
          o.metrics.leaderStatus.set({ name: o.leaderElectionId }, 1);
          this.#log.info("Acquired the Lease; leading", { lease: leaseName, identity: o.identity });
          startController();
        },
        onStoppedLeading: (why) => {
          o.metrics.leaderStatus.set({ name: o.leaderElectionId }, 0);
          if (why === "lost") {
            fenced = true;
            controller.fence();
            leading.abort();
            this.#log.error("Lost the Lease; stopped all writes", { lease: leaseName });
          } else {
            this.#log.info("Released the Lease", { lease: leaseName });
          }
        },
        onNewLeader: (holder) => this.#log.info("Observed leader", { lease: leaseName, holder }),
        onError: (err) =>
          this.#log.warn("Lease attempt failed", { lease: leaseName, error: errorText(err) }),
      });
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
    await Promise.race([events.flush(), new Promise((r) => setTimeout(r, 2_000))]);
    if (elector && exitCode === 0) await elector.release(AbortSignal.timeout(5_000));
    informers.abort();
    servers.abort();
    unwatchConnection();
    signal.removeEventListener("abort", onSignal);
    this.#log.info("Stopped", { exitCode });
    return exitCode;
  }
}
