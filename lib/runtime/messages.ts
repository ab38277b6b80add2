/**
 * Log messages of the runtime that people and tests match on (log queries, alerts, the
 * end-to-end tests, which import these rather than repeat the text). The runtime logs exactly
 * these strings as the `message` of its JSON lines.
 *
 * @module
 */

/** The `message` of the runtime's log lines that are matched on. */
export const MESSAGES = {
  /** A reflector applied a complete list (initial, or a relist). */
  listed: "Listed",
  /** A watch's resourceVersion was gone (410); the reflector lists again. */
  relisting: "Watch resourceVersion expired (410 Gone); relisting",
  /** A list's resourceVersion was gone (410); the reflector lists again from the newest state. */
  listGone: "List resourceVersion expired (410 Gone); listing again",
  /** A paged list's continue token expired (410, etcd compacted); the list is read in one piece. */
  listContinueExpired: "List continue token expired (410 Gone); falling back to a full list",
  /** A watch was silent past the idle bound and is reopened from its last resourceVersion. */
  watchIdle: "Watch stream idle; reconnecting",
  /** The first reconcile of an outage that failed for want of an answer from the apiserver. */
  reconcileUnreachable: "Reconciler error: the apiserver is unreachable; " +
    "further reconcile errors at debug level until it answers",
  /** A controller's workers start (with leader election: once this process leads). */
  startingWorkers: "Starting workers",
  /** This process acquired the Lease. */
  acquiredLease: "Acquired the Lease; leading",
  /** This process lost the Lease (renewal failed) and fenced every write. */
  lostLease: "Lost the Lease; stopped all writes",
  /** This process gave the Lease up (shutdown). */
  releasedLease: "Released the Lease",
} as const;

/**
 * The `outage` property of the one warning of an apiserver outage (the first list, watch, Event,
 * Lease attempt, membership renewal or shard round that failed for want of an answer;
 * ConnectionHealth.claimReport; a reconcile says it in its message instead): the rest of the
 * outage's failures go to debug.
 */
export const OUTAGE_NOTE =
  "the apiserver is unreachable; further failures at debug level until it answers again";
