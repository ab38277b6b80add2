/**
 * Typed errors for the Kubernetes client: {@link ApiError} carries a `metav1.Status`,
 * {@link ConfigError} a one-line description of an unusable kubeconfig or credential,
 * {@link NetworkError} (and its {@link UnreachableError}) a request that got no answer, and
 * {@link FencedError} a write the client refused to send (its write fence was closed) or that the
 * apiserver refused because this replica is not the Lease's holder (the server-side fence).
 *
 * Code branches on `code` and `reason` (the metav1.StatusReason values of the Kubernetes API
 * conventions, "Response Status Kind"), never on message text.
 *
 * @module
 */

/** The `metav1.Status` object the apiserver returns with an error (Kubernetes API conventions). */
export interface Status {
  /** Always `Status`. */
  kind?: "Status";
  /** Always `v1`. */
  apiVersion?: string;
  /** `Failure` for an error. */
  status?: "Success" | "Failure";
  /** Human-readable description; never branch on it. */
  message?: string;
  /** Machine-readable reason, e.g. `NotFound`, `Conflict`, `AlreadyExists`, `Expired`, `Invalid`. */
  reason?: string;
  /** What the error is about: the object, its fields' causes, and a suggested retry delay (s). */
  details?: {
    name?: string;
    group?: string;
    kind?: string;
    uid?: string;
    /**
     * metav1.StatusCause list. Its Go field `Type` (a CauseType such as `FieldValueInvalid` or
     * `NamespaceTerminating`) is serialized as `reason`.
     */
    causes?: { reason?: string; message?: string; field?: string }[];
    retryAfterSeconds?: number;
  };
  /** HTTP status code this Status stands for. */
  code?: number;
}

/**
 * An HTTP error answer from the apiserver (or a watch ERROR event), with the decoded
 * `metav1.Status`. `code` is the HTTP status code; `reason` the StatusReason ("" when the body was
 * not a Status, e.g. a proxy's plain-text 502).
 */
export class ApiError extends Error {
  /** HTTP status code, e.g. 404, 409, 410, 422. */
  readonly code: number;
  /** metav1.StatusReason, e.g. "NotFound"; "" when unknown. */
  readonly reason: string;
  /** The full Status, when the body held one. */
  readonly status?: Status;
  /** Seconds to wait from a `Retry-After` header or `details.retryAfterSeconds`, if given. */
  readonly retryAfterSeconds?: number;
  /** HTTP verb and path of the request that failed, for logs (never carries credentials). */
  readonly request?: string;

  /** Builds an ApiError from an HTTP code and an optional decoded Status. */
  constructor(
    code: number,
    status?: Status,
    opts: { retryAfterSeconds?: number; request?: string } = {},
  ) {
    const reason = status?.reason ?? "";
    super(
      `${opts.request ? opts.request + ": " : ""}${code}${reason ? " " + reason : ""}: ${
        status?.message ?? "no message"
      }`,
    );
    this.name = "ApiError";
    this.code = code;
    this.reason = reason;
    this.status = status;
    this.retryAfterSeconds = opts.retryAfterSeconds ?? status?.details?.retryAfterSeconds;
    this.request = opts.request;
  }
}

/** Why a {@link FencedError} was raised. */
export type FenceReason =
  /** The fence has no open term: the Lease is not held (not yet, or no longer). */
  | "NotHeld"
  /** It holds the Lease, but its last successful renewal is older than the renew deadline. */
  | "Stale"
  /**
   * Sent, and refused by the apiserver: deploy/'s ValidatingAdmissionPolicy found that the Lease
   * names another holder (see {@link isLeaseHolderRefusal}). Nothing was stored.
   */
  | "NotLeaseHolder";

/**
 * A write the client refused to send because its write fence was closed at the moment of sending
 * (docs/scenarios.md S13: only the Lease holder with a fresh renewal writes), or one the apiserver
 * refused because the Lease names another holder (docs/scenarios.md S23, reason `NotLeaseHolder`,
 * built by {@link fencedByServer}).
 * Nothing was stored either way, so it is always safe to retry later; a reconcile that meets it
 * ends and is requeued, and it is not a reconcile error. Raised by a `WriteFence`
 * (lib/kube/client.ts), e.g. the Lease holder's `LeaseFence` (lib/runtime/lease_fence.ts), and by
 * the client for the apiserver's refusal.
 */
export class FencedError extends Error {
  /** Why the fence was closed. */
  readonly reason: FenceReason;
  /** HTTP verb and path of the refused request, for logs. */
  readonly request: string;
  /** Milliseconds since the start of the last successful Lease renewal; undefined if none. */
  readonly renewalAgeMs?: number;

  /** The apiserver's answer, for reason `NotLeaseHolder`. */
  readonly apiError?: ApiError;

  /**
   * True when the write had already been handed to fetch and was aborted in flight (the term of
   * writes ended under it): it may have reached the apiserver. False when nothing left this
   * process, or (reason `NotLeaseHolder`) when the apiserver answered with its refusal.
   */
  readonly inFlight: boolean;

  /**
   * Builds a FencedError for `request` (verb and path); `apiError` is the apiserver's refusal
   * when `reason` is `NotLeaseHolder`; `inFlight` marks a write aborted after it was handed to
   * fetch ({@link FencedError.inFlight}).
   */
  constructor(
    reason: FenceReason,
    request: string,
    renewalAgeMs?: number,
    apiError?: ApiError,
    inFlight = false,
  ) {
    super(
      inFlight
        ? `${request}: aborted; may have reached the apiserver: ${
          reason === "NotHeld"
            ? "leadership ended"
            : `the last Lease renewal started ${Math.round(renewalAgeMs ?? 0)} ms ago, ` +
              "past the renew deadline"
        }`
        : reason === "NotLeaseHolder"
        ? `${request}: refused by the apiserver: not the Lease holder (${
          apiError?.status?.message ?? "no message"
        })`
        : `${request}: not sent: ${
          reason === "NotHeld"
            ? "this process does not hold the Lease"
            : `the last Lease renewal started ${Math.round(renewalAgeMs ?? 0)} ms ago, ` +
              "past the renew deadline"
        }`,
    );
    this.name = "FencedError";
    this.reason = reason;
    this.request = request;
    this.renewalAgeMs = renewalAgeMs;
    this.apiError = apiError;
    this.inFlight = inFlight;
  }
}

/**
 * The phrase deploy/lease_fence_policy.yaml starts its refusal with (`messageExpression`), which
 * the apiserver returns inside its own message (`pods "p" is forbidden: ValidatingAdmissionPolicy
 * '<policy>' with binding '<binding>' denied request: <our message>`). A policy's refusal can carry only the reasons
 * Forbidden, Invalid, Unauthorized or RequestEntityTooLarge, none of them ours alone, so this
 * phrase is the contract between the policy and the client; keep the two in step.
 */
export const LEASE_FENCE_PHRASE = "not the Lease holder";

/**
 * True for the apiserver's refusal of a write by deploy/'s Lease-holder admission policy
 * (docs/scenarios.md S23): 403 Forbidden from a ValidatingAdmissionPolicy whose message starts with
 * {@link LEASE_FENCE_PHRASE} (`... ValidatingAdmissionPolicy '<policy>' ... denied request: not
 * the Lease holder: ...`). The one place where a message is read: no reason or cause tells a
 * policy's refusal apart from RBAC's.
 */
export function isLeaseHolderRefusal(err: unknown): err is ApiError {
  if (!(err instanceof ApiError) || err.code !== 403) return false;
  const msg = err.status?.message ?? "";
  return msg.includes("ValidatingAdmissionPolicy '") &&
    msg.includes(`denied request: ${LEASE_FENCE_PHRASE}`);
}

/** The Lease a Lease-holder policy's refusal names ({@link refusingLease}). */
export interface RefusingLease {
  /** The Lease's namespace. */
  namespace: string;
  /** The Lease's name. */
  name: string;
  /** Its holder as the apiserver saw it ("" for none, e.g. released). */
  holder: string;
}

/**
 * The Lease named by the apiserver's refusal in `err` (a {@link FencedError} of reason
 * `NotLeaseHolder`), read from the policies' message (deploy/lease_fence_policy.yaml,
 * shard_fence_policy.yaml: `... is not the holder of Lease <namespace>/<name> (held by
 * '<holder>')`); undefined for any other error or message.
 */
export function refusingLease(err: unknown): RefusingLease | undefined {
  if (!(err instanceof FencedError) || err.reason !== "NotLeaseHolder") return undefined;
  const msg = err.apiError?.status?.message ?? "";
  const m = / is not the holder of Lease ([a-z0-9.-]+)\/([a-z0-9.-]+) \(held by '([^']*)'\)/
    .exec(msg);
  return m ? { namespace: m[1], name: m[2], holder: m[3] } : undefined;
}

/**
 * The error a client throws for an error answer: a {@link FencedError} (reason `NotLeaseHolder`)
 * for the Lease-holder policy's refusal ({@link isLeaseHolderRefusal}), else `err` itself.
 */
export function fencedByServer(err: ApiError): ApiError | FencedError {
  return isLeaseHolderRefusal(err)
    ? new FencedError("NotLeaseHolder", err.request ?? "", undefined, err)
    : err;
}

/**
 * True for a {@link FencedError}: a write refused by the client's fence (never sent) or by the
 * apiserver's Lease-holder policy (nothing stored).
 */
export const isFenced = (err: unknown): err is FencedError => err instanceof FencedError;

/**
 * True for an answer asking the client to come back later: 429 TooManyRequests (API Priority and
 * Fairness, or the client's own Retry-After gate refusing to send before the server's
 * Retry-After), or 503 with a Retry-After (an overloaded or shutting-down apiserver).
 * `retryAfterSeconds` says how long, when known.
 */
export const isThrottled = (err: unknown): err is ApiError =>
  err instanceof ApiError &&
  (err.code === 429 || (err.code === 503 && err.retryAfterSeconds !== undefined));

/**
 * A kubeconfig, in-cluster configuration or credential that cannot be used as given. The message
 * is one line naming the file or field, fit to print as the process's only error output.
 */
export class ConfigError extends Error {
  /** Builds a ConfigError with a one-line message. */
  constructor(message: string) {
    super(message);
    this.name = "ConfigError";
  }
}

function hasCode(err: unknown, code: number, reason?: string): boolean {
  return err instanceof ApiError && (err.code === code || (!!reason && err.reason === reason));
}

/** True for 404 / reason NotFound. */
export const isNotFound = (err: unknown): boolean => hasCode(err, 404, "NotFound");
/** True for 409 / reason Conflict (a stale resourceVersion on update; optimistic concurrency). */
export const isConflict = (err: unknown): boolean =>
  err instanceof ApiError && (err.reason === "Conflict" || (err.code === 409 && !err.reason));
/** True for 409 with reason AlreadyExists (create of an existing name). */
export const isAlreadyExists = (err: unknown): boolean =>
  err instanceof ApiError && err.reason === "AlreadyExists";
/** True for 410 Gone / reason Expired or Gone: the resourceVersion is too old (watch must relist). */
export const isGone = (err: unknown): boolean =>
  err instanceof ApiError &&
  (err.code === 410 || err.reason === "Expired" || err.reason === "Gone");
/** True for 422 / reason Invalid (validation failed; `status.details.causes` names the fields). */
export const isInvalid = (err: unknown): boolean => hasCode(err, 422, "Invalid");
/** True for 403 / reason Forbidden (RBAC denied, or a namespace being terminated). */
export const isForbidden = (err: unknown): boolean => hasCode(err, 403, "Forbidden");
/** True for 429 / reason TooManyRequests (API Priority and Fairness or rate limiting). */
export const isTooManyRequests = (err: unknown): boolean => hasCode(err, 429, "TooManyRequests");
/** True for 401 / reason Unauthorized (credential missing, expired or not accepted). */
export const isUnauthorized = (err: unknown): boolean => hasCode(err, 401, "Unauthorized");

/** StatusCause type of a create refused in a namespace being deleted (core/v1 `NamespaceTerminatingCause`). */
export const NAMESPACE_TERMINATING_CAUSE = "NamespaceTerminating";

/**
 * True for a 403 because the namespace is being deleted: the NamespaceLifecycle admission plugin
 * (k8s.io/apiserver/pkg/admission/plugin/namespace/lifecycle) refuses every create there with
 * Forbidden and appends a StatusCause of type {@link NAMESPACE_TERMINATING_CAUSE} (field
 * `metadata.namespace`). Branches on the cause type, never on the message. The cause type is
 * the StatusCause's `reason` in JSON (metav1.StatusCause: `Type CauseType json:"reason"`), not a
 * `type` key.
 */
export const isNamespaceTerminating = (err: unknown): boolean =>
  err instanceof ApiError && err.code === 403 &&
  !!err.status?.details?.causes?.some((c) => c.reason === NAMESPACE_TERMINATING_CAUSE);

/**
 * True for a 404 naming the namespace itself (`details.kind` "namespaces"): the same admission
 * plugin's answer to a create once the namespace is gone (its live lookup's NotFound).
 */
export const isNamespaceNotFound = (err: unknown): boolean =>
  err instanceof ApiError && err.code === 404 && err.status?.details?.kind === "namespaces";

/**
 * True when nothing can be created in the namespace any more: it is being deleted
 * ({@link isNamespaceTerminating}) or already gone ({@link isNamespaceNotFound}).
 */
export const isNamespaceClosed = (err: unknown): boolean =>
  isNamespaceTerminating(err) || isNamespaceNotFound(err);

/**
 * One line saying why a request got no answer, from an error of `fetch` (or one wrapping it as
 * `cause`): the innermost message of the cause chain, without Deno's
 * `error sending request for url (…): ` prefix, e.g. `client error (Connect): tcp connect error:
 * Connection refused (os error 111)` or `… dns error: failed to lookup address information: …`,
 * instead of the bare `fetch failed`. At most 5 causes deep.
 *
 * @param err what fetch (or a wrapper) threw
 */
export function networkErrorReason(err: unknown): string {
  let msg = String((err as Error)?.message ?? err);
  let e: unknown = err;
  for (let depth = 0; depth < 5; depth++) {
    const cause = (e as { cause?: unknown })?.cause;
    if (!(cause instanceof Error) || !cause.message) break;
    msg = cause.message;
    e = cause;
  }
  return msg.split("\n")[0].replace(/^error sending request for url \([^)]*\): /, "");
}

/**
 * How a request failed to get an answer ({@link NetworkError.kind}):
 * - `timeout`: no answer within the request timeout (or a WatchList's headers within it);
 * - `refused`: the connection was refused (nothing listens at the address);
 * - `tls`: the TLS handshake failed (e.g. a certificate the trusted CAs do not sign);
 * - `dns`: the host name did not resolve;
 * - `unreachable`: any other failure of the path (a reset connection, a dead proxy, ...);
 * - `stalled`: ended by the client's stall rule: it sat on a connection presumed dead while a
 *   later request got an answer (lib/kube/client.ts, "Connection health").
 */
export type NetworkErrorKind = "timeout" | "refused" | "tls" | "dns" | "unreachable" | "stalled";

/**
 * A request that got no answer from the apiserver: the path failed, the apiserver said nothing
 * (an answer of any status is an {@link ApiError} instead). A write that fails so may or may not
 * have reached the apiserver. `cause` is the underlying error (fetch's, or the abort reason).
 * Branch on `kind`, never on the message; {@link networkErrorIn} finds one in a cause chain.
 */
export class NetworkError extends Error {
  /** How it failed; see {@link NetworkErrorKind}. */
  readonly kind: NetworkErrorKind;
  /** HTTP verb of the request, e.g. `GET`. */
  readonly method: string;
  /** Path of the request without the query. */
  readonly path: string;
  /** One line: why no answer came (e.g. `tcp connect error: Connection refused (os error 111)`). */
  readonly reason: string;

  /**
   * The error of one request that got no answer; the message is `<label>: <detail>`.
   * @param kind see {@link NetworkErrorKind}
   * @param request verb and path; `label` (default `METHOD path`) starts the message
   * @param reason one line: why no answer came
   * @param detail the message after the label; default `reason`
   * @param options the underlying error as `cause`
   */
  constructor(
    kind: NetworkErrorKind,
    request: { method: string; path: string; label?: string },
    reason: string,
    detail: string = reason,
    options?: ErrorOptions,
  ) {
    super(`${request.label ?? `${request.method} ${request.path}`}: ${detail}`, options);
    this.name = "NetworkError";
    this.kind = kind;
    this.method = request.method;
    this.path = request.path;
    this.reason = reason;
  }
}

/**
 * A request that got no answer from the apiserver through the connection (a refused or reset
 * connection, a TLS failure, a timeout): a {@link NetworkError} whose message names the host and,
 * when the request went through a proxy, that proxy (`cannot reach 10.0.0.1:6443 through proxy
 * http://proxy:3128 (HTTPS_PROXY): tcp connect error`), so a dead proxy is not blamed on the
 * apiserver. {@link isUnreachable} finds one in a cause chain.
 */
export class UnreachableError extends NetworkError {
  /** The apiserver's `host:port`. */
  readonly host: string;
  /** The proxy the request went through (`url (source)`), if any. */
  readonly proxy?: string;
  /**
   * The error of one request that got no answer.
   * @param label the request, e.g. `GET /api/v1/pods`
   * @param host the apiserver's `host:port`
   * @param proxy the proxy used, if any (a description for the message)
   * @param reason why no answer came, one line
   * @param options the underlying error as `cause`; `kind` (default `unreachable`)
   */
  constructor(
    label: string,
    host: string,
    proxy: string | undefined,
    reason: string,
    options?: ErrorOptions & { kind?: Exclude<NetworkErrorKind, "stalled"> },
  ) {
    const space = label.indexOf(" ");
    super(
      options?.kind ?? "unreachable",
      space < 0
        ? { method: "", path: label, label }
        : { method: label.slice(0, space), path: label.slice(space + 1), label },
      reason,
      `cannot reach ${host}${proxy ? ` through proxy ${proxy}` : ""}: ${reason}`,
      options,
    );
    this.name = "UnreachableError";
    this.host = host;
    this.proxy = proxy;
  }
}

/** The first error of `err`'s `cause` chain (5 deep, `err` itself first) that `is` accepts. */
function inCauseChain<E>(err: unknown, is: (e: unknown) => e is E): E | undefined {
  let e: unknown = err;
  for (let depth = 0; depth < 5 && e; depth++) {
    if (is(e)) return e;
    e = (e as { cause?: unknown }).cause;
  }
  return undefined;
}

/**
 * The {@link NetworkError} in `err`'s cause chain (5 deep), when there is one and its kind is
 * one of `kinds` (any kind when none are given); else undefined.
 */
export function networkErrorIn(
  err: unknown,
  ...kinds: NetworkErrorKind[]
): NetworkError | undefined {
  const e = inCauseChain(err, (x): x is NetworkError => x instanceof NetworkError);
  return e && (kinds.length === 0 || kinds.includes(e.kind)) ? e : undefined;
}

/**
 * Whether `err`, or an error in its `cause` chain (5 deep), is a {@link NetworkError} of one of
 * `kinds` (any kind when none are given): the request got no answer.
 */
export function isNetworkError(err: unknown, ...kinds: NetworkErrorKind[]): boolean {
  return networkErrorIn(err, ...kinds) !== undefined;
}

/** Whether `err`, or an error in its `cause` chain (5 deep), is an {@link UnreachableError}. */
export function isUnreachable(err: unknown): boolean {
  return inCauseChain(err, (x): x is UnreachableError => x instanceof UnreachableError) !==
    undefined;
}
