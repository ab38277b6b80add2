/**
 * A Kubernetes client for Deno: configuration found as client-go finds it (kubeconfig,
 * in-cluster, exec plugins), a REST client with typed errors, paging, watch and every patch
 * type, and the addressing of API resources. It knows nothing of controllers; lib/runtime builds
 * informers, work queues and leader election on it.
 *
 * ```ts
 * import { Discovery, KubeClient, loadClusterConfig, isNotFound, PODS } from "./mod.ts";
 * const client = new KubeClient(loadClusterConfig());
 * const pods = await client.listAll(PODS, { namespace: "default" });
 * // any other kind, CRDs included, by discovery (discovery.ts):
 * const widget = { group: "example.com", version: "v1", kind: "Widget" };
 * const widgets = await new Discovery(client).resolve(widget); // a ResourceType, as PODS
 * ```
 *
 * @module
 */
export {
  type CallOptions,
  type ClientOptions,
  type DeleteOptions,
  KubeClient,
  type KubeObject,
  type ListOptions,
  MAX_RETRY_AFTER_SECONDS,
  MAX_THROTTLE_WAIT_MS,
  METADATA_ACCEPT,
  type ObjectList,
  type PartialObject,
  PATCH_CONTENT_TYPES,
  type PatchOptions,
  type RequestInfo,
  type RequestScope,
  type ResponseOptions,
  type WatchOptions,
  type WriteFence,
  type WriteOptions,
  type WriteResponse,
} from "./client.ts";
export {
  type AuthConfig,
  type ClusterConfig,
  type ExecConfig,
  inClusterConfig,
  loadClusterConfig,
  type LoadOptions,
  SERVICE_ACCOUNT_DIR,
} from "./config.ts";
export {
  apiVersionOf,
  Discovery,
  DISCOVERY_MIN_REFRESH_INTERVAL_MS,
  type DiscoveryFetcher,
  type DiscoveryOptions,
  discoveryPath,
  DynamicClient,
  type GroupVersionKind,
  groupVersionKind,
  isNoKindMatch,
  isResourceNotServed,
  type KindRef,
  NoKindMatchError,
  parseResourceList,
  ScopeChangedError,
} from "./discovery.ts";
export {
  ApiError,
  ConfigError,
  fencedByServer,
  FencedError,
  type FenceReason,
  isAlreadyExists,
  isConflict,
  isFenced,
  isForbidden,
  isGone,
  isInvalid,
  isLeaseHolderRefusal,
  isNamespaceTerminating,
  isNetworkError,
  isNotFound,
  isThrottled,
  isTooManyRequests,
  isUnauthorized,
  LEASE_FENCE_PHRASE,
  NetworkError,
  networkErrorIn,
  type NetworkErrorKind,
  networkErrorReason,
  type RefusingLease,
  refusingLease,
  type Status,
} from "./errors.ts";
export {
  CONFIGMAPS,
  CRDS,
  EVENTS,
  LEASES,
  NAMESPACES,
  PODDISRUPTIONBUDGETS,
  PODS,
  resourcePath,
  type ResourceType,
  SERVICES,
} from "./resources.ts";
export {
  GATE_WINDOW_OPEN_AT,
  GATE_WINDOW_STEP_MS,
  RetryAfterGate,
  type RetryAfterGateOptions,
} from "./throttle.ts";
export {
  type ObjectWatchEvent,
  type WatchEvent,
  WatchIdleError,
  WatchRestartError,
} from "./watch.ts";
export {
  ConnectionHealth,
  type ConnectionHealthOptions,
  type HealthEvent,
  isUnreachable,
  type Recovery,
  type Timers,
  UnreachableError,
} from "./connection.ts";
export { warmUpTls } from "./tls_warmup.ts";
export {
  chooseProxy,
  describeProxy,
  noProxyMatches,
  type ProxyChoice,
  type ProxyEnvironment,
  readProxyEnvironment,
  takeProxyEnvironment,
} from "./proxy.ts";
export type {
  FieldsV1,
  ManagedFieldsEntry,
  ObjectMeta,
  OwnerReference,
  Time,
} from "kubernetes-types/meta/v1.d.ts";
