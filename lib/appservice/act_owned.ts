/**
 * The act step for the objects beside the Pods (act.ts does the Pods): the Service, the
 * PodDisruptionBudget, and the cleanup of a deleted AppService's owned objects. A Service found
 * through the API (not in the cache) is adopted when it is an orphan of ours, a conflict when it is
 * someone else's, else converged.
 *
 * @module
 */
import type { Pod, Service } from "kubernetes-types/core/v1.d.ts";
import type { PodDisruptionBudget } from "kubernetes-types/policy/v1.d.ts";
import { isNotFound } from "../kube/errors.ts";
import { PODDISRUPTIONBUDGETS, PODS, SERVICES } from "../kube/resources.ts";
import { errorText } from "../runtime/log.ts";
import { isControlledBy } from "../runtime/ownership.ts";
import { type Actor, FIELD_MANAGER, rethrowIfAbortive, type Turn } from "./act.ts";
import {
  type PdbStep,
  REASON_PDB_REJECTED,
  REASON_SERVICE_REJECTED,
  type ServiceStep,
  serviceWrite,
} from "./plan.ts";
import { MANAGED_BY, MANAGED_SELECTOR, orphanKeys } from "./pods.ts";
import { isWriteRejection } from "./rejections.ts";

/** A Service of the wanted name exists and belongs to someone else. */
class ServiceConflict extends Error {}

/** A PodDisruptionBudget of the wanted name exists and belongs to someone else. */
class PdbConflict extends Error {}

/**
 * Performs the Service step: created with server-side apply, converged with a merge patch
 * (service.ts), adopted when an orphan of ours, deleted when no longer wanted. A Service of the
 * name that is someone else's is never taken over (it would reroute its traffic and go with the
 * AppService): `ServiceNameConflict`.
 */
export async function serviceStep(a: Actor, t: Turn, step: ServiceStep): Promise<void> {
  const { as, ctx, key } = t;
  const { client, events, rejected } = a.deps;
  const name = as.metadata.name!;
  const ns = as.metadata.namespace!;
  const signal = ctx.signal;
  if (step.kind === "none") return;
  if (step.kind === "current") {
    rejected.succeeded(key, "service");
    return;
  }
  if (step.kind === "held") {
    t.failures.push(a.held(REASON_SERVICE_REJECTED, step.refusal));
    return;
  }
  try {
    if (step.kind === "delete") {
      await a.deleteIgnoringNotFound("Service", step.live, signal);
      ctx.logger.info("Deleted Service", { service: name });
      events.record(as, {
        type: "Normal",
        reason: "ServiceDeleted",
        action: "Delete",
        note: `Deleted Service ${name} (no ports declared)`,
      });
      return;
    }
    let live: Service | undefined = step.kind === "converge" ? step.live : undefined;
    let adopt = false;
    if (step.kind === "find") {
      // Not in our cache: it may still exist, made by someone else.
      live = await client.get<Service>(SERVICES, name, { namespace: ns, signal })
        .catch((err) => {
          if (isNotFound(err)) return undefined;
          throw err;
        });
      if (live && !live.metadata?.ownerReferences?.some((r) => r.uid === as.metadata.uid)) {
        // An orphan with this operator's labels for this name (--cascade=orphan) is adopted.
        adopt = orphanKeys(live).includes(key) && await a.canAdopt(t);
        if (!adopt) {
          throw new ServiceConflict(`Service ${name} exists and is not owned by this AppService`);
        }
      }
    }
    const write = serviceWrite(as, live, step.want, adopt);
    if (write.kind !== "none") {
      await client.patch<Service>(
        SERVICES,
        name,
        write.body,
        write.kind === "merge"
          ? { namespace: ns, type: "merge", fieldManager: FIELD_MANAGER, signal, response: "none" }
          : {
            namespace: ns,
            type: "apply",
            fieldManager: FIELD_MANAGER,
            force: true,
            signal,
            response: "none",
          },
      );
      const [verb, reason, action] = !live
        ? ["Created", "ServiceCreated", "Create"]
        : adopt
        ? ["Adopted", "ServiceAdopted", "Adopt"]
        : ["Updated", "ServiceUpdated", "Update"];
      ctx.logger.info(`${verb} Service`, { service: name });
      events.record(as, { type: "Normal", reason, action, note: `${verb} Service ${name}` });
    }
    rejected.succeeded(key, "service");
  } catch (err) {
    rethrowIfAbortive(err);
    if (err instanceof ServiceConflict) {
      t.failures.push({ reason: "ServiceNameConflict", message: err.message });
    } else if (a.namespaceClosed(as, err)) {
      // Its namespace is being deleted (docs/scenarios.md S21): not a failure; nothing more is
      // created there.
    } else if (step.kind !== "delete" && isWriteRejection(err)) {
      t.failures.push(
        a.refusal(t, "service", REASON_SERVICE_REJECTED, `Service ${name}`, err),
      );
    } else {
      t.failures.push({
        reason: "FailedService",
        message: `Service ${name}: ${errorText(err)}`,
        cause: err,
      });
    }
  }
}

/**
 * Performs the PodDisruptionBudget step: server-side apply, or delete. As with the Service, a
 * budget of the name that is not in the cache is read first: someone else's is never taken over
 * (a forced apply would give it our selector and owner, and the AppService's delete would delete
 * it): `PodDisruptionBudgetNameConflict`, no write. An orphan of ours (our labels for this name,
 * no controller) is adopted. A write the apiserver refuses is retried slowly (rejections.ts),
 * `PodDisruptionBudgetRejected`.
 * @returns the apiserver's answer to an apply that went through (to stand for the budget until
 *   the cache shows it), else undefined
 */
export async function pdbStep(
  a: Actor,
  t: Turn,
  step: PdbStep,
): Promise<PodDisruptionBudget | undefined> {
  if (step.kind === "none") return undefined;
  const { as, ctx, key } = t;
  const { events, rejected } = a.deps;
  const name = as.metadata.name!;
  if (step.kind === "held") {
    t.failures.push(a.held(REASON_PDB_REJECTED, step.refusal));
    return undefined;
  }
  try {
    if (step.kind === "apply") {
      const { want } = step;
      let live = step.live;
      let adopt = false;
      if (!live) {
        // Not in our cache: it may still exist, made by someone else.
        live = await a.deps.client.get<PodDisruptionBudget>(PODDISRUPTIONBUDGETS, name, {
          namespace: as.metadata.namespace,
          signal: ctx.signal,
        }).catch((err) => {
          if (isNotFound(err)) return undefined;
          throw err;
        });
        if (live && !isControlledBy(live, as.metadata.uid!)) {
          adopt = orphanKeys(live).includes(key) && await a.canAdopt(t);
          if (!adopt) {
            throw new PdbConflict(
              `PodDisruptionBudget ${name} exists and is not owned by this AppService`,
            );
          }
        }
      }
      const got = await a.deps.client.patch<PodDisruptionBudget>(PODDISRUPTIONBUDGETS, name, want, {
        namespace: as.metadata.namespace,
        type: "apply",
        fieldManager: FIELD_MANAGER,
        force: true,
        signal: ctx.signal,
      });
      rejected.succeeded(key, "pdb");
      const [verb, action] = !live
        ? ["Created", "Create"]
        : adopt
        ? ["Adopted", "Adopt"]
        : ["Updated", "Update"];
      ctx.logger.info(`${verb} PodDisruptionBudget`, {
        maxUnavailable: String(want.spec?.maxUnavailable),
      });
      events.record(as, {
        type: "Normal",
        reason: `PodDisruptionBudget${verb}`,
        action,
        note: `${verb} PodDisruptionBudget ${name} (maxUnavailable ${want.spec?.maxUnavailable})`,
      });
      return got;
    } else {
      await a.deleteIgnoringNotFound("PodDisruptionBudget", step.live, ctx.signal);
      ctx.logger.info("Deleted PodDisruptionBudget");
      events.record(as, {
        type: "Normal",
        reason: "PodDisruptionBudgetDeleted",
        action: "Delete",
        note: `Deleted PodDisruptionBudget ${name}`,
      });
    }
  } catch (err) {
    rethrowIfAbortive(err);
    if (err instanceof PdbConflict) {
      t.failures.push({ reason: "PodDisruptionBudgetNameConflict", message: err.message });
    } else if (a.namespaceClosed(as, err)) {
      // Its namespace is being deleted (docs/scenarios.md S21): not a failure.
    } else if (step.kind === "apply" && isWriteRejection(err)) {
      t.failures.push(
        a.refusal(t, "pdb", REASON_PDB_REJECTED, `PodDisruptionBudget ${name}`, err),
      );
    } else {
      t.failures.push({
        reason: "FailedPodDisruptionBudget",
        message: `PodDisruptionBudget ${name}: ${errorText(err)}`,
        cause: err,
      });
    }
  }
}

/**
 * Owned Pods out of the cache's sight: controlled by `t.as` but without the `managed-by` label the
 * operator's Pod cache selects on (removed by hand, e.g. while the operator was not running, so
 * no create answered AlreadyExists to put it back). Found through the API by the other label of
 * ours, `app.kubernetes.io/instance` (server-side selection: usually an empty answer). A Pod
 * that lost both labels is beyond it; the garbage collector still deletes it with the
 * AppService.
 * @returns those Pods, being deleted or not
 */
export async function outOfSightPods(a: Actor, t: Turn): Promise<Pod[]> {
  const { as, ctx } = t;
  const listed = await a.deps.client.listAll<Pod>(PODS, {
    namespace: as.metadata.namespace,
    labelSelector: `app.kubernetes.io/instance=${as.metadata.name},` +
      `app.kubernetes.io/managed-by!=${MANAGED_BY}`,
    signal: ctx.signal,
  });
  return listed.items.filter((p) => isControlledBy(p, as.metadata.uid!));
}

/**
 * The cleanup of a deleted AppService: deletes its owned Pods, Service and PodDisruptionBudget,
 * found through the API (not the cache: the finalizer goes only when they are really gone;
 * owned objects are found by owner uid, the name may not be a valid label value).
 * @param pdb its owned PodDisruptionBudget as cached, if any (the garbage collector would
 *   remove it after the AppService; this removes it with the Pods it protects)
 * @returns the owned Pods listed (being deleted or not), whether the Service is still there, and
 *   the deletes that failed, as texts
 */
export async function cleanupOwned(
  a: Actor,
  t: Turn,
  pdb: PodDisruptionBudget | undefined,
): Promise<{ pods: Pod[]; service: boolean; failures: string[] }> {
  const { as, ctx } = t;
  const { signal, logger } = ctx;
  const ns = as.metadata.namespace!;
  const uid = as.metadata.uid!;
  const ownedByUs = (o: Pod | Service) => isControlledBy(o, uid);
  const listed = await a.deps.client.listAll<Pod>(PODS, {
    namespace: ns,
    labelSelector: MANAGED_SELECTOR,
    signal,
  });
  // With those out of the cache's sight (managed-by removed by hand): found by the other label.
  const pods = [...listed.items.filter(ownedByUs), ...await outOfSightPods(a, t)];
  let svc: Service | undefined;
  try {
    const s = await a.deps.client.get<Service>(SERVICES, as.metadata.name!, {
      namespace: ns,
      signal,
    });
    if (ownedByUs(s)) svc = s;
  } catch (err) {
    if (!isNotFound(err)) throw err;
  }
  const failures: string[] = [];
  const remove = async (
    kind: "Pod" | "Service" | "PodDisruptionBudget",
    obj: Pod | Service | PodDisruptionBudget,
  ) => {
    try {
      await a.deleteIgnoringNotFound(kind, obj, signal);
      return true;
    } catch (err) {
      rethrowIfAbortive(err);
      failures.push(`${kind} ${obj.metadata?.name}: ${errorText(err)}`);
      return false;
    }
  };
  for (const p of pods) {
    if (p.metadata?.deletionTimestamp) continue;
    if (await remove("Pod", p)) logger.info("Deleted Pod for cleanup", { pod: p.metadata?.name });
  }
  if (svc && !svc.metadata?.deletionTimestamp && await remove("Service", svc)) {
    logger.info("Deleted Service for cleanup", { service: svc.metadata?.name });
  }
  if (pdb && !pdb.metadata?.deletionTimestamp) await remove("PodDisruptionBudget", pdb);
  return { pods, service: svc !== undefined, failures };
}
