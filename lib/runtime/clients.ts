/**
 * The clients of their own beside the reconcilers' one, each with its defaults in one place: the
 * Lease's and the metrics reviews'. The manager makes them when it is not given them; main.ts
 * makes them with its user agent and request metrics.
 *
 * @module
 */
import { type ClientOptions, KubeClient } from "../kube/client.ts";
import type { ClusterConfig } from "../kube/config.ts";
import { REVIEW_TIMEOUT_MS } from "./delegated_auth.ts";

/**
 * The Lease's client: no retries (the elector's loop retries within the renew deadline), and no
 * Retry-After gate (the reconcilers' 429s must not hold renewals back). Never the reconcilers'
 * client: that one gets the Lease's write fence, which the Lease's own writes must not pass
 * through; a separate one also keeps renewals out of the reconcilers' rate limit.
 * @param extra further options (user agent, `onRequest`, a shared `health`); the two rules above
 *   win over them
 */
export function leaderElectionClient(config: ClusterConfig, extra: ClientOptions = {}): KubeClient {
  return new KubeClient(config, { ...extra, maxRetries: 0, retryAfterGate: false });
}

/**
 * The client of secure `/metrics`' TokenReviews and SubjectAccessReviews: every replica answers
 * scrapes, leading or not, so no write fence and no reconcile rate limit may hold them up;
 * retries are the reviews' own (delegated_auth.ts), each bounded by {@link REVIEW_TIMEOUT_MS}.
 * Give it no shared `health`: scrapes do not decide whether the reconcilers' path is healthy.
 * @param extra further options (user agent, `onRequest`); retries and timeout stay these
 */
export function reviewClient(config: ClusterConfig, extra: ClientOptions = {}): KubeClient {
  return new KubeClient(config, { ...extra, maxRetries: 0, requestTimeoutMs: REVIEW_TIMEOUT_MS });
}
