/**
 * A controller runtime for Deno on lib/kube, in the manner of controller-runtime and kube-rs's
 * kube-runtime: shared informers (list + watch into an indexed cache), a keyed work queue with
 * per-key backoff, controllers declared from their primary, owned and watched resources with
 * predicates and a reconcile function, one Lease for leader election, `/healthz` `/readyz`
 * `/metrics` (controller-runtime's metric names), Events and structured logs; and the helpers a
 * reconcile needs (controller-runtime `controllerutil` and apimachinery `meta`): status conditions,
 * owner references, server-side apply, create-or-patch, finalizers, predicates and their
 * composition.
 *
 * A controller in a few lines (see examples/namespace-quota/ for a whole one):
 *
 * ```ts
 * const manager = new Manager({ client, ...options });
 * const widgets = manager.informer<Widget>(WIDGETS);
 * const pods = manager.informer<Pod>(PODS, { labelSelector: "app.kubernetes.io/managed-by=me" });
 * manager.add({
 *   name: "widget",
 *   for: widgets,
 *   predicates: [generationChanged],
 *   owns: [{ informer: pods }],
 *   reconcile: async (key, ctx) => { ... },
 * });
 * Deno.exit(await manager.run(signal));
 * ```
 *
 * @module
 */
export {
  apply,
  type ApplyOptions,
  createOrPatch,
  type CreateOrPatchOptions,
  KeyChangedError,
  type ObjectKey,
  type OperationResult,
} from "./apply.ts";
export { type Clock, FakeClock, realClock } from "./clock.ts";
export {
  type Condition,
  type ConditionInput,
  type ConditionStatus,
  conditionTimeNow,
  findStatusCondition,
  isStatusConditionFalse,
  isStatusConditionPresentAndEqual,
  isStatusConditionTrue,
  removeStatusCondition,
  setStatusCondition,
} from "./conditions.ts";
export {
  Controller,
  type ControllerDefinition,
  type ControllerOptions,
  controllerOwnerKeys,
  DEFAULT_MAX_CONCURRENT_RECONCILES,
  DEFAULT_SYNC_PERIOD_MS,
  defaultErrorPolicy,
  type ErrorDecision,
  type ErrorPolicy,
  type Informer,
  type InformerReflector,
  isPanic,
  type MappedWatch,
  type OwnedWatch,
  Reconcile,
  type ReconcileConstructors,
  type ReconcileContext,
  type ReconcileFn,
  type ReconcileResult,
  TerminalError,
} from "./controller.ts";
export { EventRecorder, type EventRecorderOptions, type EventSpec } from "./events.ts";
export {
  finalizer,
  type FinalizerEvent,
  type FinalizerOptions,
  hasFinalizer,
} from "./finalizer.ts";
export {
  AlreadyOwnedError,
  claim,
  type Claims,
  controllerOf,
  controllerReference,
  hasControllerReference,
  hasOwnerReference,
  InvalidOwnerError,
  isControlledBy,
  type OwnerIdentity,
  removeOwnerReference,
  setControllerReference,
  setOwnerReference,
} from "./ownership.ts";
export { jsonEqual, type JsonObject, mergePatch } from "./merge_patch.ts";
export { type InformerStatus, ListenError, type ServerName } from "./health.ts";
export { type LeadershipState } from "./leader.ts";
export {
  boundHex,
  checkShardCount,
  fnv1a64,
  MAX_SHARDS,
  namespaceOfPath,
  SHARD_KEY_FIELD,
  shardBounds,
  shardOf,
  shardOfHash,
  shardSelector,
} from "./shards.ts";
export {
  fairShare,
  memberLabelValue,
  memberLeaseName,
  SHARD_MEMBER_LABEL,
  ShardElector,
  type ShardElectorOptions,
  ShardFence,
  type ShardHooks,
  shardLeaseName,
  type ShardMoveReason,
} from "./shard_elector.ts";
export {
  HASH_FIRST_ANNOTATION,
  HASH_LAST_ANNOTATION,
  MAX_NAMESPACE_LENGTH,
  namespaceHashVariables,
  type PolicyVariable,
  SHARD_LEASE_LABEL,
  type ShardLeaseMetadata,
  shardLeaseMetadata,
} from "./shard_fence_cel.ts";
export { type ShardMode, ShardReflector, type ShardReflectorOptions } from "./shard_reflector.ts";
export { type ShardMetrics } from "./metrics.ts";
export { type FenceStamp, LeaseFence, type Term } from "./lease_fence.ts";
export { TerminatingNamespaces } from "./namespaces.ts";
export { MAX_REPLACED_VERSIONS, WrittenVersions } from "./written.ts";
export {
  defaultLogFormat,
  errorText,
  log,
  LOG_FORMAT_CHOICES,
  LOG_FORMATS,
  LOG_LEVELS,
  type LogFormat,
  type LogFormatChoice,
  type Logger,
  type LoggingOptions,
  type LogLevelName,
  type LogProperties,
  setupLogging,
} from "./log.ts";
export {
  DEFAULT_GRACEFUL_SHUTDOWN_TIMEOUT_MS,
  type InformerOptions,
  Manager,
  type ManagerOptions,
} from "./manager.ts";
export { MESSAGES } from "./messages.ts";
export {
  Metrics,
  type MetricsOptions,
  RECONCILE_TIME_BUCKETS,
  type RequestSample,
  REST_CLIENT_DURATION_BUCKETS,
  WORKQUEUE_DURATION_BUCKETS,
} from "./metrics.ts";
export {
  allOf,
  and,
  annotationsChanged,
  anyOf,
  deletionOrFinalizersChanged,
  generationChanged,
  ignoreDeletes,
  labelsChanged,
  not,
  or,
  type Predicate,
  resourceVersionChanged,
} from "./predicates.ts";
export {
  HIGH_PRIORITY_RUN,
  type QueueHooks,
  type QueueOptions,
  type QueuePriority,
  WorkQueue,
} from "./queue.ts";
export {
  type LogLevelFn,
  Reflector,
  type ReflectorEvent,
  type ReflectorLogger,
  type ReflectorMemory,
  type ReflectorMetrics,
  type ReflectorOptions,
  type ReflectorState,
} from "./reflector.ts";
export {
  CONTROLLER_UID_INDEX,
  controllerUidIndex,
  type IndexFunc,
  objectKey,
  type ReplaceCounts,
  type Replacement,
  splitKey,
  Store,
  type StoreHandler,
  type StoreOptions,
} from "./store.ts";
export {
  type EnqueueEvent,
  enqueueSpan,
  requestSpan,
  type RequestTarget,
  requestTarget,
  type SpanRef,
  TRACER_NAME,
  tracingEnabled,
} from "./tracing.ts";
