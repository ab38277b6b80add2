/**
 * The controller builder behind {@link Manager.add} (controller-runtime `pkg/builder`): a
 * {@link ControllerDefinition} becomes a {@link Controller} whose queue is fed by the informers it
 * names — the primary's changes enqueue its own key, owned objects' changes their controller
 * owner's key, watched objects' changes the keys their mapping returns; each filtered by its
 * predicates.
 *
 * @module
 */
import type { KubeObject } from "../kube/client.ts";
import type { ConnectionHealth } from "../kube/connection.ts";
import {
  Controller,
  type ControllerDefinition,
  controllerOwnerKeys,
  type Informer,
} from "./controller.ts";
import type { Metrics } from "./metrics.ts";
import { passes, type Predicate } from "./predicates.ts";
import type { QueuePriority } from "./queue.ts";
import { CONTROLLER_UID_INDEX, controllerUidIndex, objectKey } from "./store.ts";
import { type EnqueueEvent, enqueueSpan, tracingEnabled } from "./tracing.ts";

/** A built controller and the informers whose sync its workers wait for. */
export interface BuiltController {
  /** The controller; its workers start with the manager's controllers group. */
  controller: Controller;
  /** Every informer it reads, each once. */
  informers: Informer<KubeObject>[];
}

/** What a definition leaves open, from the manager's options (undefined: the controller's). */
export interface ControllerDefaults {
  /** Default workers. */
  maxConcurrentReconciles?: number;
  /** Default bound of one reconcile (ms; 0 = none). */
  reconcileTimeoutMs?: number;
  /** Default resync period (ms). */
  syncPeriodMs?: number;
  /** Where the controllers' metrics go. */
  metrics: Metrics;
  /** Health of the path to the apiserver (the manager's client's). */
  health: ConnectionHealth;
}

/** One source of keys: an informer, how its objects map to keys, and its filters. */
interface Source {
  informer: Informer<KubeObject>;
  map(obj: KubeObject): string[];
  predicates?: Predicate<KubeObject>[];
  /** For an update, map the old state too (a changed owner or mapping reaches the old key). */
  mapOld: boolean;
  /** Changes enqueued with high priority (controller.ts `OwnedWatch.priority`); none: normal. */
  priority?: Predicate<KubeObject>;
}

/**
 * Builds the controller of `def` and adds its event handlers to the informers' stores (and the
 * controller-uid index to owned informers).
 */
export function buildController<P extends KubeObject>(
  def: ControllerDefinition<P>,
  defaults: ControllerDefaults,
): BuiltController {
  const primary = def.for;
  const controller = new Controller({
    name: def.name,
    reconcile: def.reconcile,
    errorPolicy: def.errorPolicy,
    maxConcurrentReconciles: def.maxConcurrentReconciles ?? defaults.maxConcurrentReconciles,
    reconcileTimeoutMs: def.reconcileTimeoutMs ?? defaults.reconcileTimeoutMs,
    syncPeriodMs: def.syncPeriodMs ?? defaults.syncPeriodMs,
    allKeys: () => primary.store.keys(),
    metrics: defaults.metrics,
    health: defaults.health,
  });
  // The primary maps to its own key (an update: the new state's, the same). Owned objects map
  // to their controller owner of the primary's kind, watched ones through their function; for
  // those both states of an update are mapped (client-go's EnqueueRequestForOwner does the same).
  const toOwner = controllerOwnerKeys(primary.resource);
  const sources: Source[] = [
    {
      informer: primary,
      map: (obj) => [objectKey(obj)],
      predicates: def.predicates as Predicate<KubeObject>[] | undefined,
      mapOld: false,
    },
    ...(def.owns ?? []).map((w) => {
      w.informer.store.addIndex(CONTROLLER_UID_INDEX, controllerUidIndex);
      return {
        informer: w.informer,
        map: toOwner,
        predicates: w.predicates,
        mapOld: true,
        priority: w.priority,
      };
    }),
    ...(def.watches ?? []).map((w) => ({
      ...w,
      mapOld: true,
      priority: w.priority as Predicate<KubeObject> | undefined,
    })),
  ];
  for (const source of sources) feed(controller, source);
  return { controller, informers: [...new Set(sources.map((w) => w.informer))] };
}

/**
 * Adds the handler that turns `source`'s cache changes into keys of `controller`'s queue. With
 * tracing on, each change that enqueues keys is recorded as one `enqueue` span (tracing.ts) that
 * the keys' reconciles link to; off, nothing of tracing runs.
 */
function feed(controller: Controller, w: Source): void {
  const preds = w.predicates ?? [];
  const enqueue = (
    event: EnqueueEvent["event"],
    obj: KubeObject,
    keys: string[],
    priority: QueuePriority,
  ) => {
    if (keys.length === 0) return;
    const cause = tracingEnabled()
      ? enqueueSpan({
        controller: controller.name,
        event,
        resource: w.informer.resource.plural,
        namespace: obj.metadata?.namespace ?? "",
        name: obj.metadata?.name ?? "",
        resourceVersion: obj.metadata?.resourceVersion ?? "",
        keys: [...new Set(keys)],
      })
      : undefined;
    for (const k of keys) controller.enqueue(k, cause, priority);
  };
  const urgent = w.priority ? [w.priority] : undefined;
  const priorityOf = (c: Parameters<typeof passes<KubeObject>>[1]): QueuePriority =>
    urgent && passes(urgent, c) ? "high" : "normal";
  w.informer.store.addHandler({
    add: (obj) => {
      const c = { type: "create", obj } as const;
      if (passes(preds, c)) enqueue("add", obj, w.map(obj), priorityOf(c));
    },
    update: (oldObj, newObj) => {
      const c = { type: "update", oldObj, newObj } as const;
      if (!passes(preds, c)) return;
      const keys = w.mapOld ? [...w.map(oldObj), ...w.map(newObj)] : w.map(newObj);
      enqueue("update", newObj, keys, priorityOf(c));
    },
    delete: (obj) => {
      const c = { type: "delete", obj } as const;
      if (passes(preds, c)) enqueue("delete", obj, w.map(obj), priorityOf(c));
    },
  });
}
