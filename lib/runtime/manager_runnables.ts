/**
 * The manager's runnables (runnables.ts), one per thing {@link Manager.run} starts: the probe and
 * metrics servers and the connection log (group `servers`), each informer's reflector and the
 * garbage collections after the first pass (`caches`), the Lease (`election`) and the
 * controllers' workers (`controllers`). Who may write is decided in one place, the elector's
 * state (leader.ts, docs/design/leadership.md); these only react to it.
 *
 * @module
 */
import type { KubeClient, KubeObject } from "../kube/client.ts";
import { isForbidden } from "../kube/errors.ts";
import { realClock, sleepOn } from "./clock.ts";
import { collectGarbage, exposedGc, IDLE_GC_POLL_MS, idleCollectionDue } from "./collect.ts";
import { type Controller, type Informer, logAttemptFailure } from "./controller.ts";
import { DelegatedAuth, kubeReviewer } from "./delegated_auth.ts";
import type { EventRecorder } from "./events.ts";
import {
  checksHandler,
  connectionCheck,
  informerCheck,
  ListenError,
  parseBindAddress,
  type ServerName,
  serveRoutes,
} from "./health.ts";
import { FenceRepair, withRefusalRepair } from "./fence_repair.ts";
import { SeenLeases } from "./lease_expiry.ts";
import type { HandoverReport } from "./handover.ts";
import { LeaderElector, type LeadershipState, leaseAttemptTimeoutMs, type Term } from "./leader.ts";
import { memberLabelValue, ShardLeaseSweeper } from "./shard_elector.ts";
import { SHARD_LEASE_LABEL } from "./shard_fence_cel.ts";
import { LEASES } from "../kube/resources.ts";
import type { Lease } from "kubernetes-types/coordination/v1.d.ts";
import { errorText, log, type Logger } from "./log.ts";
import { MESSAGES } from "./messages.ts";
import type { Metrics } from "./metrics.ts";
import { startMetricsServer } from "./metrics_server.ts";
import { type Runnable, whenAborted } from "./runnables.ts";
import { leaderElectionClient, reviewClient } from "./clients.ts";

/** How often (ms) the manager looks whether the first pass is over, for its first GC. */
export const FIRST_PASS_POLL_MS = 250;
/** Longest wait (ms) after the sync for the first pass to end before that GC runs anyway. */
export const FIRST_PASS_MAX_WAIT_MS = 120_000;
/** How long (ms) queued Events may take to be written on shutdown (they are best effort). */
export const EVENT_FLUSH_MS = 2_000;
/** Bound (ms) of the Lease release on shutdown. */
export const RELEASE_TIMEOUT_MS = 5_000;

/** A listen call's error as a {@link ListenError} naming the server; other errors unchanged. */
function listenFailure(server: ServerName, address: string, err: unknown): unknown {
  return err instanceof Deno.errors.AddrInUse || err instanceof Deno.errors.PermissionDenied
    ? new ListenError(server, address, err)
    : err;
}

/** What the probe server needs to answer `/healthz` and `/readyz`. */
export interface HealthServerOptions {
  /** `host:port`, `:port` or `0` (off). */
  address: string;
  /** The informers `/readyz` waits for. */
  informers: Informer<KubeObject>[];
  /** The reconcilers' client (its connection health is a readiness check). */
  client: KubeClient;
  /** Where the trusted CAs come from (for a failing connection check). */
  trustHint: () => string | undefined;
  /** Whether the Lease was lost (`/healthz` fails then). */
  lost: () => boolean;
  /** With several shards: why not ready (held shards not synced), else undefined. */
  shards?: () => string | undefined;
  /** Where the bound port is written. */
  ports: { health?: number };
}

/** `/healthz` and `/readyz` (plain HTTP); none when the address is `0`. */
export function healthServer(o: HealthServerOptions): Runnable {
  return {
    name: "health-probe-server",
    start: (signal) => {
      const addr = parseBindAddress(o.address);
      if (!addr) return;
      try {
        const s = serveRoutes(addr, {
          "/healthz": checksHandler({
            ping: () => undefined,
            lease: () => o.lost() ? "lost the Lease" : undefined,
          }),
          "/readyz": checksHandler({
            ...Object.fromEntries(o.informers.map((i) => [
              `informer-${i.name}`,
              informerCheck(i.reflector, realClock.now),
            ])),
            apiserver: connectionCheck(o.client.health, realClock.now, o.trustHint),
            ...(o.shards ? { shards: o.shards } : {}),
          }),
        }, signal);
        o.ports.health = s.port;
      } catch (err) {
        throw listenFailure("health", o.address, err);
      }
    },
  };
}

/** What the metrics server needs. */
export interface MetricsServerOptions {
  /** `host:port`, `:port` or `0` (off). */
  address: string;
  /** What `/metrics` serves. */
  metrics: Metrics;
  /** HTTPS with delegated authentication and authorization. */
  secure: boolean;
  /** With `secure`: folder of tls.crt and tls.key; "" self-signed. */
  certDir: string;
  /** With `secure`: the reviews' client; default one of its own ({@link reviewClient}). */
  authClient?: KubeClient;
  /** The reconcilers' client (its configuration makes the reviews' own client). */
  client: KubeClient;
  /** Where the bound port is written. */
  ports: { metrics?: number };
  /** The manager's logger. */
  log: Logger;
}

/** `/metrics`, on every replica; none when the address is `0`. Closes its own review client. */
export function metricsServer(o: MetricsServerOptions): Runnable {
  let ownAuthClient: KubeClient | undefined;
  return {
    name: "metrics-server",
    start: async (signal) => {
      const addr = parseBindAddress(o.address);
      if (!addr) return;
      let auth: DelegatedAuth | undefined;
      if (o.secure) {
        const client = o.authClient ?? (ownAuthClient = reviewClient(o.client.config));
        auth = new DelegatedAuth({ reviewer: kubeReviewer(client) });
      }
      try {
        const s = await startMetricsServer({
          address: addr,
          metrics: async () => ({
            text: await o.metrics.text(),
            contentType: o.metrics.registry.contentType,
          }),
          secure: auth && {
            auth,
            certDir: o.certDir,
            onCertificateRead: (ok) => {
              o.metrics.certificateReads.inc();
              if (!ok) o.metrics.certificateReadErrors.inc();
            },
          },
          signal,
          log: log("metrics"),
        });
        o.ports.metrics = s.port;
        o.log.info("Serving metrics", {
          port: s.port,
          secure: o.secure,
          ...(s.certificate ? { certificate: s.certificate.source } : {}),
        });
      } catch (err) {
        ownAuthClient?.close();
        throw listenFailure("metrics", o.address, err);
      }
    },
    stopped: () => ownAuthClient?.close(),
  };
}

/**
 * Logs the health of the path to the apiserver: one error line once requests have had no
 * answer for 10 s (naming the last reason, e.g. a TLS failure after a CA rotation), one line
 * when it recovers; short blips only at debug level.
 */
export function connectionLog(client: KubeClient, trustHint: () => string | undefined): Runnable {
  let unsubscribe = () => {};
  return {
    name: "connection-log",
    start: () => {
      const logger = log("connection").with({ server: client.config.server });
      unsubscribe = client.health.onEvent((ev) => {
        switch (ev.type) {
          case "failing":
            logger.debug("Request to the apiserver got no answer", { error: ev.error });
            break;
          case "stillFailing":
            logger.error("No answer from the apiserver; retrying", {
              sinceMs: ev.sinceMs,
              failures: ev.failures,
              error: ev.error,
              hint: trustHint(),
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
    },
    stopped: () => unsubscribe(),
  };
}

/** An informer's reflector, listing and watching until its group stops (on every replica). */
export function informerRunnable(inf: Informer<KubeObject>): Runnable {
  return {
    name: `informer-${inf.name}`,
    start: (signal) => {
      inf.reflector.run(signal).catch((err) =>
        log("reflector").with({ resource: inf.resource.plural }).error("Reflector stopped", {
          error: errorText(err),
        })
      );
    },
  };
}

/**
 * A memory-reducing full garbage collection (collect.ts) once the initial lists are in and
 * every controller's first pass is over (its queue empty and no reconcile running, checked
 * every {@link FIRST_PASS_POLL_MS}; a standby's queues never drain, so at most
 * {@link FIRST_PASS_MAX_WAIT_MS} after the sync), and again whenever the controllers go idle
 * after work, or at rest with enough new heap (`idleCollectionDue`, looked at every
 * `IDLE_GC_POLL_MS`). Only where V8 exposes `gc` (`--v8-flags=--expose-gc`); a no-op otherwise.
 * Why it pays: collect.ts.
 */
export function collectionRunnable(
  informers: Informer<KubeObject>[],
  controllers: () => Controller[],
  logger: Logger,
): Runnable {
  return {
    name: "garbage-collection",
    start: (signal) => {
      const gc = exposedGc();
      if (!gc) return;
      let lastMs = 0;
      let liveAfterLast = 0;
      let completedAtLast = 0;
      const completed = () => controllers().reduce((n, c) => n + c.queue.completed, 0);
      const busy = () => controllers().some((c) => c.queue.depth > 0 || c.activeWorkers > 0);
      const collect = (why: string) => {
        const t0 = performance.now();
        completedAtLast = completed();
        liveAfterLast = collectGarbage(gc);
        lastMs = performance.now();
        logger.debug("Collected garbage", {
          why,
          ms: Math.round(lastMs - t0),
          liveMiB: Math.round(liveAfterLast / 2 ** 20 * 10) / 10,
        });
      };
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
        await Promise.all(informers.map((i) => i.reflector.waitForSync()));
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
    },
  };
}

/** Options of {@link Election}: the manager's, resolved. */
export interface ElectionOptions {
  /** The reconcilers' client: it gets the elector's write fence. */
  client: KubeClient;
  /** The Lease's client; default one of its own ({@link leaderElectionClient}), closed on stop. */
  leaseClient?: KubeClient;
  /** Namespace of the Lease. */
  namespace: string;
  /** Name of the Lease. */
  name: string;
  /** Holder identity. */
  identity: string;
  /** Lease duration (s). */
  leaseDurationSeconds: number;
  /** Renew deadline (ms). */
  renewDeadlineMs: number;
  /** Retry period (ms). */
  retryPeriodMs: number;
  /** `leader_election_master_status` and the changes counter. */
  metrics: Metrics;
  /** The manager's logger. */
  log: Logger;
  /**
   * Has every key reconciled again, after a Lease of another mode that refused this replica's
   * writes is gone (lib/runtime/fence_repair.ts); none: nothing is requeued.
   */
  requeueAll?: () => void;
}

/**
 * The Lease (group `election`): started after the caches, stopped after the controllers, so the
 * Lease is never free while this process may still write (controller-runtime's order); on stop
 * it is released unless it was lost. {@link Election.leading} resolves with the term when this
 * replica starts leading, {@link Election.lost} when the Lease is lost. Logs and metrics of
 * leadership changes are made here; the decision is the elector's state.
 */
export class Election implements Runnable {
  /** For logs and errors. */
  readonly name = "leader-election";
  /** Resolves with the term once leading. */
  readonly leading: Promise<Term>;
  /** Resolves once the Lease is lost. */
  readonly lost: Promise<void>;
  readonly #o: ElectionOptions;
  #onLeading!: (t: Term) => void;
  #onLost!: () => void;
  /** Made by {@link Election.start}, with the Lease client (its own one only then). */
  #elector?: LeaderElector;
  #ownLeaseClient?: KubeClient;
  /** Clears shard Leases that refuse this leader's writes (made by {@link Election.start}). */
  #repair?: FenceRepair;
  /** Shard Leases' records seen before taking the Lease ({@link Election.#noShardHeld}). */
  readonly #shardRecords = new SeenLeases();
  /** Whether the wait for sharded replicas was told. */
  #shardWaitTold = false;
  /** Whether a forbidden list of the shard Leases was told. */
  #listForbiddenTold = false;
  #done: Promise<unknown> = Promise.resolve();

  /** A candidate that makes nothing and does not campaign before {@link Election.start}. */
  constructor(o: ElectionOptions) {
    this.#o = o;
    this.leading = new Promise((r) => this.#onLeading = r);
    this.lost = new Promise((r) => this.#onLost = r);
    o.metrics.leaderStatus.set({ name: o.name }, 0);
    for (const c of ["acquired", "lost", "released"] as const) {
      o.metrics.leaderChanges.inc({ name: o.name, change: c }, 0);
    }
  }

  /** The elector's state; `candidate` before {@link Election.start}. */
  get state(): LeadershipState {
    return this.#elector?.state ?? { kind: "candidate" };
  }

  /**
   * Makes the elector (and the Lease's own client when none other than `client` was given), puts
   * its fence on the reconcilers' client and campaigns until `signal` aborts.
   */
  start(signal: AbortSignal): void {
    const elector = this.#elector = this.#makeElector();
    const o = this.#o;
    const repair = this.#repair = new FenceRepair({
      client: this.#ownLeaseClient ?? o.leaseClient ?? o.client,
      namespace: o.namespace,
      id: o.name,
      shards: 1,
      leaseDurationSeconds: o.leaseDurationSeconds,
      retryPeriodMs: o.retryPeriodMs,
      log: o.log,
      onRepaired: () => o.requeueAll?.(),
    });
    repair.start(signal);
    // From now on every write of `client` needs a fresh Lease (docs/scenarios.md S13); a refusal
    // by the apiserver that names a shard Lease left by a sharded run is repaired.
    this.#o.client.setWriteFence(withRefusalRepair(elector.fence, repair));
    this.#o.log.info("Waiting for the Lease", {
      lease: `${this.#o.namespace}/${this.#o.name}`,
      identity: this.#o.identity,
    });
    this.#done = elector.run(signal);
  }

  /** Waits for the elector to stop, releases the Lease if still held, closes its own client. */
  async stopped(): Promise<void> {
    await this.#done;
    await this.#repair?.stopped();
    await this.#elector?.release(AbortSignal.timeout(RELEASE_TIMEOUT_MS));
    this.#ownLeaseClient?.close();
  }

  /**
   * While leading in `term`: deletes the shard Leases of this election left by a sharded run
   * (`--shards N > 1`) once nobody holds them ({@link ShardLeaseSweeper}), since deploy/'s
   * per-shard policy would refuse this leader's writes in their old ranges. Lists them by label
   * every retry period until none is left, at most for three lease durations (one still held after
   * that belongs to a sharded replica that runs on: warned about, left alone).
   */
  async #sweepShardLeases(client: KubeClient, term: Term): Promise<void> {
    const o = this.#o;
    const sweeper = new ShardLeaseSweeper({
      client,
      namespace: o.namespace,
      id: o.name,
      leaseDurationSeconds: o.leaseDurationSeconds,
      log: o.log,
    });
    const attempt = () =>
      AbortSignal.any([term.signal, AbortSignal.timeout(leaseAttemptTimeoutMs(o.renewDeadlineMs))]);
    const rounds = Math.ceil((3 * o.leaseDurationSeconds * 1000) / o.retryPeriodMs) + 1;
    for (let i = 0; i < rounds && !term.signal.aborted; i++) {
      try {
        const list = await client.list<Lease>(LEASES, {
          namespace: o.namespace,
          labelSelector: `${SHARD_LEASE_LABEL}=${memberLabelValue(o.name)}`,
          signal: attempt(),
        });
        if (list.items.length === 0) return;
        const left = await sweeper.sweep(list.items, 0, realClock.now(), attempt);
        if (left === 0) return;
      } catch (err) {
        if (term.signal.aborted) return;
        o.log.debug("Listing leftover shard Leases failed; next round", { error: errorText(err) });
      }
      await sleepOn(realClock, o.retryPeriodMs, term.signal).catch(() => {});
    }
  }

  /**
   * Whether no shard Lease of this election is held by a live replica ({@link
   * LeaderElectorOptions.mayTake}): lists them by label; a holder's record that still runs on this
   * replica's clock (seen unchanged for less than its lease duration) means a sharded replica
   * still works, and taking the one Lease now would have each refuse the other's writes. Told once
   * while waiting. Throws the list's error (the attempt fails and is retried).
   */
  async #noShardHeld(client: KubeClient, signal?: AbortSignal): Promise<boolean> {
    const o = this.#o;
    let list;
    try {
      list = await client.list<Lease>(LEASES, {
        namespace: o.namespace,
        labelSelector: `${SHARD_LEASE_LABEL}=${memberLabelValue(o.name)}`,
        signal,
      });
    } catch (err) {
      // Leader election itself needs only get, create and update on the Lease (client-go's
      // rule); without list there is no sharded run of this election to wait for that this
      // replica could see: take the Lease as before.
      if (!isForbidden(err)) throw err;
      if (!this.#listForbiddenTold) {
        this.#listForbiddenTold = true;
        o.log.info("May not list Leases: not checking for shard Leases before taking the Lease", {
          lease: `${o.namespace}/${o.name}`,
          error: errorText(err),
        });
      }
      return true;
    }
    const now = realClock.now();
    const names = new Set<string>();
    let held: { lease: string; holder: string } | undefined;
    for (const l of list.items) {
      const name = l.metadata?.name ?? "";
      names.add(name);
      const { holder } = this.#shardRecords.seeLease(l, o.leaseDurationSeconds, now);
      if (holder !== undefined) held ??= { lease: `${o.namespace}/${name}`, holder };
    }
    this.#shardRecords.keepOnly(names);
    if (held) {
      if (!this.#shardWaitTold) {
        this.#shardWaitTold = true;
        o.log.warn(
          "A sharded replica holds shard Leases of this election: this replica takes the one Lease once they are released or run out",
          held,
        );
      }
      return false;
    }
    this.#shardWaitTold = false;
    return true;
  }

  #makeElector(): LeaderElector {
    const o = this.#o;
    let leaseClient = o.leaseClient;
    if (!leaseClient || leaseClient === o.client) {
      leaseClient = this.#ownLeaseClient = leaderElectionClient(o.client.config, {
        health: o.client.health,
      });
    }
    const lease = `${o.namespace}/${o.name}`;
    const labels = { name: o.name };
    const client = leaseClient;
    const elector: LeaderElector = new LeaderElector({
      client: leaseClient,
      namespace: o.namespace,
      name: o.name,
      identity: o.identity,
      leaseDurationSeconds: o.leaseDurationSeconds,
      renewDeadlineMs: o.renewDeadlineMs,
      retryPeriodMs: o.retryPeriodMs,
      onStartedLeading: () => {
        o.metrics.leaderStatus.set(labels, 1);
        o.metrics.leaderChanges.inc({ ...labels, change: "acquired" });
        o.log.info(MESSAGES.acquiredLease, { lease, identity: o.identity });
        const s = elector.state;
        if (s.kind !== "candidate") {
          this.#onLeading(s.term);
          this.#sweepShardLeases(leaseClient, s.term).catch(() => {});
        }
      },
      onStoppedLeading: (why) => {
        o.metrics.leaderStatus.set(labels, 0);
        o.metrics.leaderChanges.inc({ ...labels, change: why });
        if (why === "lost") {
          o.log.error(MESSAGES.lostLease, { lease });
          this.#onLost();
        } else {
          o.log.info(MESSAGES.releasedLease, { lease });
        }
      },
      onNewLeader: (holder) => o.log.info("Observed leader", { lease, holder }),
      // A rolling change from shards to one Lease: not while a sharded replica holds shards.
      mayTake: (signal) => this.#noShardHeld(client, signal),
      onHandover: (r) => logHandover(o.log, lease, r),
      // A failure to reach the apiserver is the outage's, told once (docs/design/transport.md);
      // a renewal that keeps failing ends in the lost-Lease error.
      onError: (err) =>
        logAttemptFailure(o.log, "Lease attempt failed", err, leaseClient.health, { lease }),
    });
    return elector;
  }
}

/** What the controllers' workers need. */
export interface ControllersOptions {
  /** The declared controllers and the informers each waits for. */
  controllers: { controller: Controller; informers: Informer<KubeObject>[] }[];
  /**
   * Resolves when the workers may start: with the term they run in (leader election), or
   * `undefined` at once without it. When the term's signal aborts, every controller is fenced
   * (in-flight reconciles aborted with its reason).
   */
  leading: Promise<Term | undefined>;
  /** How long in-flight reconciles may finish after the stop. */
  gracefulShutdownTimeoutMs: number;
  /** Flushed (for up to {@link EVENT_FLUSH_MS}) once the workers have stopped. */
  recorders: EventRecorder[];
  /** The manager's logger. */
  log: Logger;
}

/**
 * The controllers' workers (group `controllers`, started last, stopped first): each controller
 * starts once this replica leads and its own informers have synced, and runs until the group
 * stops; then in-flight reconciles get the grace period, and queued Events are flushed.
 */
export function controllersRunnable(o: ControllersOptions): Runnable {
  let done: Promise<unknown> = Promise.resolve();
  const runAll = async (signal: AbortSignal) => {
    const term = await Promise.race([o.leading, whenAborted(signal).then(() => null)]);
    if (signal.aborted || term === null) return;
    term?.signal.addEventListener("abort", () => {
      for (const { controller } of o.controllers) controller.fence(term.signal.reason);
    }, { once: true });
    const stopped = whenAborted(signal);
    await Promise.all(o.controllers.map(async ({ controller, informers }) => {
      o.log.info(MESSAGES.startingWorkers, {
        controller: controller.name,
        workerCount: controller.workers,
      });
      // Wait for the caches, but not past shutdown (a missing CRD may keep them unsynced).
      await Promise.race([Promise.all(informers.map((i) => i.reflector.waitForSync())), stopped]);
      if (signal.aborted) return;
      o.log.info("Caches synced; reconciling", { controller: controller.name });
      await controller.run(signal, o.gracefulShutdownTimeoutMs);
    }));
  };
  return {
    name: "controllers",
    start: (signal) => {
      done = runAll(signal);
    },
    stopped: async () => {
      await done;
      // Events are best effort; give the queued ones a moment to be written.
      await Promise.race([
        Promise.all(o.recorders.map((r) => r.flush())),
        new Promise((r) => setTimeout(r, EVENT_FLUSH_MS)),
      ]);
    },
  };
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
