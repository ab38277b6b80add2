/**
 * The Pods an AppService wants: names `<name>-<slot>`, the standard labels, a controller
 * ownerReference, and a spec-hash annotation of the Pod template that tells drift
 * (docs/scenarios.md S8) without
 * comparing defaulted Pod specs field by field.
 *
 * Why slots and not generated suffixes: a name is its own create-once guard. There are
 * `replicas + maxSurge` slots (rollout.ts); a Pod of any spec may hold any slot, so old and new
 * Pods live side by side during a rollout, and a reconcile that runs on a stale cache can only get
 * AlreadyExists, never a Pod beyond the slots.
 *
 * @module
 */
import { createHash } from "node:crypto";
import type { Container, Pod } from "kubernetes-types/core/v1.d.ts";
import type { OwnerReference } from "kubernetes-types/meta/v1.d.ts";
import type { KubeObject } from "../kube/client.ts";
import { controllerOf, controllerReference } from "../runtime/ownership.ts";
import { CONTAINER_NAME, GROUP, KIND, VERSION } from "./api.ts";
import type { AppService } from "./schema.ts";

/** Annotation holding the hash of the Pod template a Pod was made from. */
export const SPEC_HASH_ANNOTATION = "apps.our-org.com/spec-hash";
/** Value of `app.kubernetes.io/managed-by` on every owned object; also the field manager. */
export const MANAGED_BY = "appservice-operator";
/** Label selector matching every object this operator manages (informer filter). */
export const MANAGED_SELECTOR = `app.kubernetes.io/managed-by=${MANAGED_BY}`;
/** Name of the single container in each Pod. */
export { CONTAINER_NAME };

/** Labels of every object owned by `as` (recommended labels, Kubernetes docs). */
export function ownedLabels(as: AppService): Record<string, string> {
  return {
    "app.kubernetes.io/name": as.metadata.name!,
    "app.kubernetes.io/instance": as.metadata.name!,
    "app.kubernetes.io/managed-by": MANAGED_BY,
  };
}

/** Store index of {@link orphanKeys}. */
export const ORPHAN_INDEX = "appserviceOrphan";

/**
 * The AppService key (`namespace/name`) an orphan belongs to: a Pod or Service that carries this
 * operator's labels (`managed-by` and `instance`), has no controller ownerReference and is not
 * being deleted — what `kubectl delete --cascade=orphan` leaves behind. Empty for anything else.
 * A store index and a watch mapping: such objects are adopted by the AppService of that name, as
 * controller-runtime's and client-go's ControllerRefManager adopt orphans whose labels match.
 */
export function orphanKeys(obj: KubeObject): string[] {
  const labels = obj.metadata?.labels;
  const instance = labels?.["app.kubernetes.io/instance"];
  if (
    !instance || labels?.["app.kubernetes.io/managed-by"] !== MANAGED_BY ||
    obj.metadata?.deletionTimestamp || controllerOf(obj)
  ) return [];
  return [`${obj.metadata?.namespace}/${instance}`];
}

/**
 * Whether `obj` carries the labels the operator relies on ({@link selectorLabels}: `managed-by`
 * puts it in the operator's cache, `instance` behind the Service) with their values. The `name`
 * label is informational: a policy that rewrites it is left alone.
 */
export function hasSelectorLabels(as: AppService, obj: KubeObject): boolean {
  return Object.entries(selectorLabels(as)).every(([k, v]) => obj.metadata?.labels?.[k] === v);
}

/** Labels a Service selects Pods by (a subset of {@link ownedLabels}). */
export function selectorLabels(as: AppService): Record<string, string> {
  return {
    "app.kubernetes.io/instance": as.metadata.name!,
    "app.kubernetes.io/managed-by": MANAGED_BY,
  };
}

/**
 * The controller ownerReference pointing at `as`. No `blockOwnerDeletion`: the finalizer already
 * orders deletion, and setting it would need `update` on `appservices/finalizers` wherever the
 * OwnerReferencesPermissionEnforcement admission plugin runs.
 */
export function ownerRef(as: AppService): OwnerReference {
  return controllerReference({
    apiVersion: `${GROUP}/${VERSION}`,
    kind: KIND,
    metadata: as.metadata,
  });
}

/** JSON with object keys sorted, so equal values always hash equally. */
export function stableJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(stableJson).join(",")}]`;
  if (v && typeof v === "object") {
    const entries = Object.entries(v as Record<string, unknown>)
      .filter(([, x]) => x !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, x]) => `${JSON.stringify(k)}:${stableJson(x)}`).join(",")}}`;
  }
  return JSON.stringify(v);
}

/**
 * Whether `a` and `b` are the same JSON value: exactly when `stableJson(a) === stableJson(b)`
 * (object keys in any order, keys whose value is undefined ignored) for values whose arrays hold no
 * undefined (JSON has none), without building either text. For the comparisons a reconcile makes
 * every time (the status it computed against the stored one), where the text would only be
 * thrown away.
 */
export function jsonEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  const aArr = Array.isArray(a), bArr = Array.isArray(b);
  if (aArr || bArr) {
    if (!aArr || !bArr || a.length !== b.length) return false;
    for (let i = 0; i < a.length; i++) if (!jsonEqual(a[i], b[i])) return false;
    return true;
  }
  if (a && typeof a === "object" && b && typeof b === "object") {
    const x = a as Record<string, unknown>, y = b as Record<string, unknown>;
    let defined = 0;
    for (const k of Object.keys(x)) {
      if (x[k] === undefined) continue;
      defined++;
      if (!Object.hasOwn(y, k) || !jsonEqual(x[k], y[k])) return false;
    }
    for (const k of Object.keys(y)) if (y[k] !== undefined) defined--;
    return defined === 0;
  }
  // An object's text starts with "{" or "[", a primitive's never does.
  if ((a && typeof a === "object") || (b && typeof b === "object")) return false;
  // Unequal primitives that print alike: NaN, infinities and null; 0 and -0.
  return JSON.stringify(a) === JSON.stringify(b);
}

/** The Pod spec every replica of `as` gets. */
export function podSpec(as: AppService): Pod["spec"] {
  const s = as.spec;
  const container: Container = { name: CONTAINER_NAME, image: s.image };
  if (s.env?.length) container.env = s.env as Container["env"];
  if (s.ports?.length) container.ports = s.ports;
  if (s.resources && Object.keys(s.resources).length) {
    container.resources = s.resources as Container["resources"];
  }
  // Probes only when set: a spec without them keeps the hash (and the Pods) it had before.
  if (s.readinessProbe) container.readinessProbe = s.readinessProbe as Container["readinessProbe"];
  if (s.livenessProbe) container.livenessProbe = s.livenessProbe as Container["livenessProbe"];
  if (s.startupProbe) container.startupProbe = s.startupProbe as Container["startupProbe"];
  return {
    containers: [container],
    restartPolicy: s.restartPolicy ?? "Always",
  };
}

/**
 * Hash (10 hex digits of SHA-256) of the Pod template: image, env, ports, resources, probes,
 * restartPolicy.
 */
export function specHash(as: AppService): string {
  const known = specHashes.get(as.spec);
  if (known !== undefined) return known;
  const hash = createHash("sha256").update(stableJson(podSpec(as))).digest("hex").slice(0, 10);
  specHashes.set(as.spec, hash);
  return hash;
}

/**
 * {@link specHash} by spec object: the informer's objects are replaced, never changed in place
 * (lib/runtime/store.ts: the cache's objects are read-only, deep-frozen in the tests), so a spec
 * hashes once per version instead of at every reconcile and status report of it.
 */
const specHashes = new WeakMap<object, string>();

/** Name of the Pod in slot `ordinal`. */
export function podName(as: AppService, ordinal: number): string {
  return `${as.metadata.name}-${ordinal}`;
}

/**
 * The slot of a Pod named `<name>-<n>` (`n` from 0 to 999, no leading zero), or undefined when
 * the name is not of that form.
 */
export function podOrdinal(as: Pick<AppService, "metadata">, pod: Pod): number | undefined {
  const prefix = `${as.metadata.name}-`;
  const n = pod.metadata?.name ?? "";
  if (!n.startsWith(prefix)) return undefined;
  const rest = n.slice(prefix.length);
  return /^(0|[1-9][0-9]{0,2})$/.test(rest) ? Number(rest) : undefined;
}

/** The full Pod object for slot `ordinal`, at the current spec. */
export function desiredPod(as: AppService, ordinal: number, hash = specHash(as)): Pod {
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: {
      name: podName(as, ordinal),
      namespace: as.metadata.namespace,
      labels: ownedLabels(as),
      annotations: { [SPEC_HASH_ANNOTATION]: hash },
      ownerReferences: [ownerRef(as)],
    },
    spec: podSpec(as),
  };
}

/** Whether the Pod's Ready condition is True. */
export function isPodReady(pod: Pod): boolean {
  return !!pod.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True");
}

/** Sum of container restart counts. */
export function restartCount(pod: Pod): number {
  return (pod.status?.containerStatuses ?? []).reduce((n, c) => n + (c.restartCount ?? 0), 0);
}
