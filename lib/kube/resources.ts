/**
 * Resource types the operator talks to, and how their REST paths are built
 * (`/api/v1/...` for the core group, `/apis/<group>/<version>/...` otherwise; Kubernetes API
 * concepts, "Resource URIs").
 *
 * @module
 */

/** One API resource: enough to build its URLs. */
export interface ResourceType {
  /** `v1` for the core group, otherwise `group/version`, e.g. `apps.our-org.com/v1`. */
  apiVersion: string;
  /** Kind of one object, e.g. `Pod`. */
  kind: string;
  /** Plural resource name used in URLs, e.g. `pods`. */
  plural: string;
  /** Whether objects live in a namespace. */
  namespaced: boolean;
}

/** Core v1 Pods. */
export const PODS: ResourceType = {
  apiVersion: "v1",
  kind: "Pod",
  plural: "pods",
  namespaced: true,
};
/** Core v1 Services. */
export const SERVICES: ResourceType = {
  apiVersion: "v1",
  kind: "Service",
  plural: "services",
  namespaced: true,
};
/** policy/v1 PodDisruptionBudgets. */
export const PODDISRUPTIONBUDGETS: ResourceType = {
  apiVersion: "policy/v1",
  kind: "PodDisruptionBudget",
  plural: "poddisruptionbudgets",
  namespaced: true,
};
/** Core v1 ConfigMaps. */
export const CONFIGMAPS: ResourceType = {
  apiVersion: "v1",
  kind: "ConfigMap",
  plural: "configmaps",
  namespaced: true,
};
/** Core v1 Namespaces. */
export const NAMESPACES: ResourceType = {
  apiVersion: "v1",
  kind: "Namespace",
  plural: "namespaces",
  namespaced: false,
};
/** coordination.k8s.io/v1 Leases (leader election). */
export const LEASES: ResourceType = {
  apiVersion: "coordination.k8s.io/v1",
  kind: "Lease",
  plural: "leases",
  namespaced: true,
};
/** events.k8s.io/v1 Events. */
export const EVENTS: ResourceType = {
  apiVersion: "events.k8s.io/v1",
  kind: "Event",
  plural: "events",
  namespaced: true,
};
/** apiextensions.k8s.io/v1 CustomResourceDefinitions. */
export const CRDS: ResourceType = {
  apiVersion: "apiextensions.k8s.io/v1",
  kind: "CustomResourceDefinition",
  plural: "customresourcedefinitions",
  namespaced: false,
};

/**
 * The URL path of a collection or object.
 *
 * @param rt the resource type
 * @param namespace namespace for namespaced types; omitted lists across all namespaces
 * @param name object name; omitted for the collection
 * @param subresource e.g. `status`
 */
export function resourcePath(
  rt: ResourceType,
  namespace?: string,
  name?: string,
  subresource?: string,
): string {
  let p = rt.apiVersion === "v1" ? "/api/v1" : `/apis/${rt.apiVersion}`;
  if (rt.namespaced && namespace) p += `/namespaces/${encodeURIComponent(namespace)}`;
  p += `/${rt.plural}`;
  if (name !== undefined) p += `/${encodeURIComponent(name)}`;
  if (subresource) p += `/${subresource}`;
  return p;
}
