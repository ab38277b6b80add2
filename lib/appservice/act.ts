/**
 * The act step of the AppService reconciler for its Pods (act_owned.ts: Service, budget, cleanup):
 * performs what plan.ts decided, through the API, and collects what failed for the status
 * (docs/design/reconciler.md; the rules of each write: reconcile.ts's module doc).
 *
 * What only the API can tell is decided here, at the write:
 * - **AlreadyExists** on a Pod create: a stale cache (its watch event will come), ours out of the
 *   cache's sight (labels put back), or someone else's Pod of that name (`PodNameConflict`).
 * - **Admission of the template** (dry-run probe): an available Pod goes within the availability
 *   budget only when the current template is admitted.
 * - **Live-spec guard**: a Pod goes only when a read from the API shows the cached spec is the
 *   live one (uid and generation), and an available one only when a plan of the Pods listed from
 *   the API agrees.
 *
 * A {@link Turn} holds one reconcile's state: the AppService read, its failures, and the one live
 * read of the AppService a reconcile makes at most ({@link Actor.live}).
 *
 * @module
 */
import type { Pod, Service } from "kubernetes-types/core/v1.d.ts";
import type { PodDisruptionBudget } from "kubernetes-types/policy/v1.d.ts";
import type { KubeClient } from "../kube/client.ts";
import {
  ApiError,
  isAlreadyExists,
  isConflict,
  isFenced,
  isNamespaceClosed,
  isNotFound,
  isThrottled,
} from "../kube/errors.ts";
import { PODDISRUPTIONBUDGETS, PODS, SERVICES } from "../kube/resources.ts";
import type { ReconcileContext } from "../runtime/controller.ts";
import type { EventRecorder } from "../runtime/events.ts";
import { errorText } from "../runtime/log.ts";
import { isControlledBy } from "../runtime/ownership.ts";
import type { TerminatingNamespaces } from "../runtime/namespaces.ts";
import { APPSERVICES } from "./api.ts";
import {
  agreedDeletes,
  REASON_POD_CREATE_REJECTED,
  type ReconcilePlan,
  templateProven,
} from "./plan.ts";
import {
  desiredPod,
  hasSelectorLabels,
  MANAGED_BY,
  MANAGED_SELECTOR,
  ownerRef,
  selectorLabels,
} from "./pods.ts";
import {
  isQuotaRefusal,
  isWriteRejection,
  type Refusal,
  type RejectedWrites,
} from "./rejections.ts";
import type { Failure } from "./report.ts";
import { type PlannedDelete, planRollout } from "./rollout.ts";
import type { AppService } from "./schema.ts";
import type { OwnPodWrites } from "./written.ts";

/** Field manager of every write (server-side apply and create/update). */
export const FIELD_MANAGER = MANAGED_BY;

/**
 * Rethrows an error that must end the reconcile instead of becoming a reported failure: a write
 * the fence refused (this replica may not write now) or the apiserver throttling us.
 */
export function rethrowIfAbortive(err: unknown): void {
  if (isFenced(err) || isThrottled(err)) throw err;
}

/** What the act step writes through. */
export interface ActDeps {
  /** The API client. */
  client: KubeClient;
  /** Events of the AppService. */
  events: EventRecorder;
  /** Refused writes and their slow retries. */
  rejected: RejectedWrites;
  /** Namespaces being deleted (docs/scenarios.md S21), if tracked. */
  terminating?: TerminatingNamespaces;
  /** Wall clock (ms). */
  now: () => number;
  /**
   * Where the Pods it creates and deletes are noted until the cache shows them (written.ts
   * {@link OwnPodWrites}), if anywhere.
   */
  podWrites?: OwnPodWrites;
}

/** One reconcile's state in the act step. */
export interface Turn {
  /** The key (`namespace/name`). */
  key: string;
  /** The AppService being reconciled. */
  as: AppService;
  /** The reconcile's context (signal, logger). */
  ctx: ReconcileContext;
  /** When the reconcile started (ms): its writes' attempts start after it. */
  startedMs: number;
  /** Failures so far, in the order they happened (the first names `Degraded`). */
  failures: Failure[];
  /** The live read of the AppService, once made: the object, or null when it is gone. */
  live?: Promise<AppService | null>;
}

/** How {@link Actor.deletePods} ended. */
export type DeleteOutcome =
  /** Done (each delete that failed is in the turn's failures). */
  | "ok"
  /** The AppService is gone (the live read answered 404): end the reconcile. */
  | "gone"
  /** The cached spec is older than the live one: nothing deleted, requeue with backoff. */
  | "stale"
  /** The namespace is being deleted (docs/scenarios.md S21): end the reconcile. */
  | "closed";

/** Performs the plan's actions (see the module doc). One per reconciler. */
export class Actor {
  #d: ActDeps;

  /** @param deps see {@link ActDeps} */
  constructor(deps: ActDeps) {
    this.#d = deps;
  }

  /** What it writes through. */
  get deps(): ActDeps {
    return this.#d;
  }

  /** A new turn for one reconcile of `as`. */
  turn(key: string, as: AppService, ctx: ReconcileContext, startedMs: number): Turn {
    return { key, as, ctx, startedMs, failures: [] };
  }

  /**
   * The AppService as the API has it (a consistent read, not the cache), or null when it is gone;
   * read once per turn (a write's answer given with {@link Actor.knowLive} stands for it).
   * @throws what the GET throws but a 404
   */
  live(t: Turn): Promise<AppService | null> {
    t.live ??= this.#d.client.get<AppService>(APPSERVICES, t.as.metadata.name!, {
      namespace: t.as.metadata.namespace,
      signal: t.ctx.signal,
    }).catch((err) => {
      if (isNotFound(err)) return null;
      throw err;
    });
    return t.live;
  }

  /** Records `obj`, the apiserver's answer to a write of the AppService, as the live read. */
  knowLive(t: Turn, obj: AppService): void {
    t.live = Promise.resolve(obj);
  }

  /**
   * Notes a create refused because the namespace is being deleted or is gone; true when it was
   * (the caller then creates nothing more there).
   */
  namespaceClosed(as: AppService, err: unknown): boolean {
    const closed = this.#d.terminating;
    if (closed) return closed.observe(as.metadata.namespace!, as.metadata.uid, err);
    return isNamespaceClosed(err);
  }

  /**
   * Records a refused write and gives the failure to report: the apiserver's answer, how often,
   * and when the next attempt goes (fixed at refusal time, so held reconciles report the same
   * text and write no status).
   */
  refusal(t: Turn, write: string, reason: string, what: string, err: unknown): Failure {
    const r = this.#d.rejected.refused(
      t.key,
      t.as.metadata.generation ?? 0,
      write,
      "",
      isQuotaRefusal(err),
      t.startedMs,
    );
    const inS = Math.round((r.nextAtMs - this.#d.now()) / 1000);
    const answer = err instanceof ApiError && err.status?.message
      ? `${err.code} ${err.reason}: ${err.status.message}`
      : errorText(err);
    r.message = `${what} refused: ${answer} (attempt ${r.attempts}; next in ${inS} s, ` +
      "at once when the spec changes)";
    return { reason, message: r.message, rejected: true };
  }

  /** The failure to report for a write held back by an earlier refusal. */
  held(reason: string, r: Refusal): Failure {
    return { reason, message: r.message, rejected: true, held: true };
  }

  /**
   * Deletes `obj` with its uid as a precondition; gone or replaced meanwhile is no error.
   * @returns true when this delete went through, false when it was already gone or replaced
   */
  async deleteIgnoringNotFound(
    kind: "Pod" | "Service" | "PodDisruptionBudget",
    obj: Pod | Service | PodDisruptionBudget,
    signal: AbortSignal,
  ): Promise<boolean> {
    const rt = kind === "Pod" ? PODS : kind === "Service" ? SERVICES : PODDISRUPTIONBUDGETS;
    try {
      await this.#d.client.delete(rt, obj.metadata!.name!, {
        namespace: obj.metadata!.namespace,
        preconditions: { uid: obj.metadata!.uid },
        signal,
        response: "none",
      });
      return true;
    } catch (err) {
      // Already gone, or replaced by another object of that name (uid precondition: 409).
      if (isNotFound(err) || (err instanceof ApiError && err.code === 409)) return false;
      throw err;
    }
  }

  /**
   * Whether the turn's AppService may adopt orphans now: the live read shows the same uid and no
   * deletionTimestamp (client-go ControllerRefManager's `RecheckDeletionTimestamp`: never adopt
   * for an owner that is going away or was replaced).
   */
  async canAdopt(t: Turn): Promise<boolean> {
    const live = await this.live(t);
    return live !== null && live.metadata.uid === t.as.metadata.uid &&
      !live.metadata.deletionTimestamp;
  }

  /**
   * Adopts orphan Pods: adds the controller ownerReference with a strategic merge patch
   * (ownerReferences merge by uid, others' references stay) carrying the Pod's uid as a
   * precondition. A Pod gone, replaced or taken by another controller meanwhile is skipped.
   * @returns the Pods adopted, as the apiserver answered
   */
  async adoptPods(t: Turn, orphans: Pod[]): Promise<Pod[]> {
    const { as, ctx } = t;
    const out: Pod[] = [];
    for (const p of orphans) {
      try {
        const got = await this.#d.client.patch<Pod>(PODS, p.metadata!.name!, {
          metadata: { uid: p.metadata!.uid, ownerReferences: [ownerRef(as)] },
        }, {
          namespace: as.metadata.namespace,
          type: "strategic",
          fieldManager: FIELD_MANAGER,
          signal: ctx.signal,
        });
        out.push(got);
        ctx.logger.info("Adopted Pod", { pod: p.metadata?.name });
        this.#d.events.record(as, {
          type: "Normal",
          reason: "PodAdopted",
          action: "Adopt",
          note: `Adopted Pod ${p.metadata?.name} (it had this AppService's labels and no owner)`,
          related: p,
        });
      } catch (err) {
        rethrowIfAbortive(err);
        // Gone (404), replaced (uid precondition: 409) or given another controller (422).
        if (isNotFound(err) || (err instanceof ApiError && [409, 422].includes(err.code))) continue;
        throw err;
      }
    }
    return out;
  }

  /**
   * Puts this AppService's selector labels back on a Pod it owns that lost them (a `kubectl
   * label` by hand): without `managed-by` it is out of the operator's sight, without `instance`
   * out of the Service's. A merge patch with the Pod's uid as precondition; a Pod gone (404) or
   * replaced (409) meanwhile is left alone.
   */
  async restoreLabels(t: Turn, obj: Pod): Promise<void> {
    const { as, ctx } = t;
    try {
      await this.#d.client.patch(PODS, obj.metadata!.name!, {
        metadata: { uid: obj.metadata!.uid, labels: selectorLabels(as) },
      }, {
        namespace: as.metadata.namespace,
        type: "merge",
        fieldManager: FIELD_MANAGER,
        signal: ctx.signal,
        response: "none",
      });
    } catch (err) {
      rethrowIfAbortive(err);
      if (isNotFound(err) || isConflict(err)) return;
      throw err;
    }
    ctx.logger.info("Put the AppService's labels back on its Pod", { pod: obj.metadata?.name });
  }

  /**
   * Creates the plan's Pods, lowest free slot first; none while a refused create waits for its
   * slow retry. A create that goes through proves the new template is admitted.
   * @returns Pods created and whether a create failed otherwise than with AlreadyExists, or
   *   undefined when the namespace is being deleted (docs/scenarios.md S21: the reconcile ends)
   */
  async createPods(
    t: Turn,
    p: ReconcilePlan,
  ): Promise<{ created: number; refused: boolean } | undefined> {
    const { as, ctx, key } = t;
    const { client, events, rejected } = this.#d;
    const ns = as.metadata.namespace!;
    let created = 0;
    let refused = false;
    if (p.createHeld && p.rollout.create.length > 0) {
      t.failures.push(this.held(REASON_POD_CREATE_REJECTED, p.createHeld));
    }
    for (const slot of p.create) {
      const pod = desiredPod(as, slot, p.hash);
      try {
        // Only the answer's metadata is read (its uid, for the Event and the record).
        const made = await client.create<Pod>(PODS, pod, {
          fieldManager: FIELD_MANAGER,
          signal: ctx.signal,
          response: "metadata",
        });
        rejected.succeeded(key, "pod-create");
        created++;
        if (made?.metadata?.uid) {
          const { managedFields: _, ...answered } = made.metadata;
          this.#d.podWrites?.created(
            key,
            { ...pod, metadata: { ...pod.metadata, ...answered } },
            this.#d.now(),
          );
        }
        ctx.logger.info("Created Pod", { pod: pod.metadata?.name, specHash: p.hash });
        events.record(as, {
          type: "Normal",
          reason: "PodCreated",
          action: "Create",
          note: `Created Pod ${pod.metadata?.name}`,
          // With its uid: a Pod made again under the same name is another Event, not a repeat.
          related: { ...pod, metadata: { ...pod.metadata, uid: made?.metadata?.uid } },
        });
      } catch (err) {
        rethrowIfAbortive(err);
        if (this.namespaceClosed(as, err)) {
          ctx.logger.info("Namespace is being deleted; creating nothing more in it", {
            error: errorText(err),
          });
          return undefined;
        }
        if (isAlreadyExists(err)) {
          await this.#alreadyExists(t, pod.metadata!.name!, ns);
          continue;
        }
        refused = true;
        if (isWriteRejection(err)) {
          // The other slots would be refused alike: one attempt per retry.
          t.failures.push(
            this.refusal(
              t,
              "pod-create",
              REASON_POD_CREATE_REJECTED,
              `Pod ${pod.metadata?.name}`,
              err,
            ),
          );
          break;
        }
        t.failures.push({
          reason: "FailedCreatePod",
          message: `Pod ${pod.metadata?.name}: ${errorText(err)}`,
          cause: err,
        });
      }
    }
    return { created, refused };
  }

  /**
   * A create answered AlreadyExists: a stale cache (its watch event will come), ours out of the
   * cache's sight (its labels were removed by hand: put back, it comes into sight and its watch
   * event reconciles again), or a Pod of that name that is not ours (`PodNameConflict`).
   */
  async #alreadyExists(t: Turn, name: string, ns: string): Promise<void> {
    const other = await this.#d.client.get<Pod>(PODS, name, { namespace: ns, signal: t.ctx.signal })
      .catch(() => undefined);
    if (other && !isControlledBy(other, t.as.metadata.uid)) {
      t.failures.push({
        reason: "PodNameConflict",
        message: `Pod ${name} exists and is not owned by this AppService`,
      });
    } else if (other && !other.metadata?.deletionTimestamp && !hasSelectorLabels(t.as, other)) {
      await this.restoreLabels(t, other);
    }
  }

  /**
   * Whether the current template is admitted, for deletes within the availability budget: proven
   * by a create or an existing Pod of it (plan.ts `templateProven`), else by a dry run
   * (`generateName`, so it does not collide with a Pod of that name). A spec the CRD accepts but
   * an admission policy, a quota or Pod Security refuses must not cost a running Pod.
   * @returns undefined when the namespace is being deleted (docs/scenarios.md S21)
   */
  async #admitted(
    t: Turn,
    p: ReconcilePlan,
    owned: Pod[],
    made: { created: number; refused: boolean },
  ): Promise<boolean | undefined> {
    const proven = templateProven(made.created, owned, p.hash);
    if (proven || made.refused || p.createHeld) {
      return proven && !made.refused;
    }
    const probe = desiredPod(t.as, 0, p.hash);
    probe.metadata = { ...probe.metadata, generateName: `${t.as.metadata.name}-`, name: undefined };
    try {
      await this.#d.client.create<Pod>(PODS, probe, {
        fieldManager: FIELD_MANAGER,
        dryRun: true,
        signal: t.ctx.signal,
        response: "none",
      });
      this.#d.rejected.succeeded(t.key, "pod-create");
      return true;
    } catch (err) {
      rethrowIfAbortive(err);
      if (this.namespaceClosed(t.as, err)) return undefined;
      const what = "the new Pod template (dry run), keeping the Pods that serve:";
      t.failures.push(
        isWriteRejection(err)
          ? this.refusal(t, "pod-create", REASON_POD_CREATE_REJECTED, what, err)
          : { reason: "FailedCreatePod", message: `${what} ${errorText(err)}`, cause: err },
      );
      return false;
    }
  }

  /**
   * Deletes the plan's Pods, guarded (see the module doc): within-budget deletes need an admitted
   * template; any delete needs the cached spec to be the live one; within-budget deletes need a
   * plan of the Pods listed from the API to agree.
   */
  async deletePods(
    t: Turn,
    p: ReconcilePlan,
    owned: Pod[],
    made: { created: number; refused: boolean },
  ): Promise<DeleteOutcome> {
    const { as, ctx } = t;
    const { signal, logger } = ctx;
    let toDelete: PlannedDelete[] = p.rollout.delete;
    if (toDelete.some((d) => d.withinBudget)) {
      const admitted = await this.#admitted(t, p, owned, made);
      if (admitted === undefined) return "closed";
      if (!admitted) toDelete = toDelete.filter((d) => !d.withinBudget);
    }
    if (toDelete.length > 0) {
      const live = await this.live(t);
      if (live === null) return "gone";
      if (
        live.metadata.uid !== as.metadata.uid ||
        live.metadata.generation !== as.metadata.generation
      ) {
        logger.info(
          "The cached AppService is older than the live one; deleting no Pod until the cache catches up",
        );
        return "stale";
      }
      if (toDelete.some((d) => d.withinBudget)) toDelete = await this.#agreed(t, p, toDelete);
    }
    for (const { pod, why } of toDelete) {
      try {
        if (await this.deleteIgnoringNotFound("Pod", pod, signal)) {
          this.#d.podWrites?.deleted(t.key, pod, this.#d.now());
        }
        logger.info("Deleted Pod", { pod: pod.metadata?.name, reason: why });
        this.#d.events.record(as, {
          type: "Normal",
          reason: why === "SpecChanged" ? "PodReplaced" : "PodDeleted",
          action: "Delete",
          note: `Deleted Pod ${pod.metadata?.name} (${why})`,
          related: pod,
        });
      } catch (err) {
        rethrowIfAbortive(err);
        t.failures.push({
          reason: "FailedDeletePod",
          message: `Pod ${pod.metadata?.name}: ${errorText(err)}`,
          cause: err,
        });
      }
    }
    return "ok";
  }

  /** The deletes a plan of the Pods listed from the API agrees with (plan.ts `agreedDeletes`). */
  async #agreed(t: Turn, p: ReconcilePlan, toDelete: PlannedDelete[]): Promise<PlannedDelete[]> {
    const { as, ctx } = t;
    const listed = await this.#d.client.listAll<Pod>(PODS, {
      namespace: as.metadata.namespace,
      labelSelector: MANAGED_SELECTOR,
      signal: ctx.signal,
    });
    const livePods = listed.items.filter((x) => isControlledBy(x, as.metadata.uid));
    const livePlan = planRollout(
      p.params,
      p.hash,
      as.metadata.name!,
      livePods,
      as.spec.restartPolicy ?? "Always",
      this.#d.now(),
      () => Infinity,
    );
    const { keep, dropped } = agreedDeletes(toDelete, livePlan);
    if (dropped.length > 0) {
      ctx.logger.debug("The cache shows more Pods available than the apiserver; keeping Pods", {
        pods: dropped.map((d) => d.pod.metadata?.name).join(","),
      });
    }
    return keep;
  }
}
