/**
 * Authentication and authorization of HTTP requests delegated to the apiserver, as
 * controller-runtime's `pkg/metrics/filters.WithAuthenticationAndAuthorization` does for
 * `/metrics`: the bearer token is checked with a TokenReview (authentication.k8s.io/v1), the user
 * it names with a SubjectAccessReview (authorization.k8s.io/v1) for the request's path and verb
 * (nonResourceAttributes: `/metrics`, `get`), and both answers are cached briefly.
 *
 * Decisions ({@link AuthDecision}):
 * - no bearer token, or a token the apiserver does not authenticate (unknown, expired, signed by
 *   another key, its bound Pod or Secret gone) → 401;
 * - an authenticated user the apiserver does not allow (RBAC: no `get` on nonResourceURL
 *   `/metrics`) → 403;
 * - a review that cannot be made → 503 when it may pass by itself (no answer, timeout, 429, 5xx;
 *   retried first), else 500 (e.g. 403 because this process may not create reviews): the caller
 *   logs why, the client gets no detail.
 *
 * Caches (k8s.io/apiserver's delegating authenticator and webhook authorizer, configured as
 * controller-runtime's filter configures them, see the constants): a token's review for
 * {@link TOKEN_REVIEW_CACHE_TTL_MS} whether it authenticated or not; an allowed review for
 * {@link ACCESS_REVIEW_ALLOW_TTL_MS}, a not-allowed one for {@link ACCESS_REVIEW_DENY_TTL_MS};
 * errors are not cached. So a Prometheus scraping every 15–30 s costs one TokenReview a minute
 * and one SubjectAccessReview every five, and a revoked token or RoleBinding stops working
 * within a minute or five. Concurrent requests with the same token share one review. Tokens are
 * kept only as HMAC-SHA256 digests under a random per-process key (k8s.io/apiserver's token
 * cache does the same), and each cache holds at most {@link AUTH_CACHE_MAX_ENTRIES}.
 *
 * One deliberate difference: when the apiserver answers a TokenReview with
 * `authenticated: false` and a `status.error` (e.g. "invalid bearer token"), k8s.io/apiserver's
 * webhook authenticator turns that into an error and controller-runtime's filter answers 500.
 * The apiserver did answer, and its answer is "not this token": here that is a 401.
 *
 * @module
 */
import type { KubeClient, KubeObject } from "../kube/client.ts";
import { ApiError, ConfigError } from "../kube/errors.ts";
import type { ResourceType } from "../kube/resources.ts";
import { type Clock, realClock, sleepOn } from "./clock.ts";

/**
 * How long a TokenReview's answer is used (ms), authenticated or not: 1 minute.
 * controller-runtime `pkg/metrics/filters`: `DelegatingAuthenticatorConfig{CacheTTL: 1 *
 * time.Minute}`, which k8s.io/apiserver `authenticatorfactory/delegating.go` uses as both the
 * success and the failure TTL (`cache.New(tokenAuth, false, CacheTTL, CacheTTL)`).
 */
export const TOKEN_REVIEW_CACHE_TTL_MS = 60_000;
/**
 * How long an allowing SubjectAccessReview is used (ms): 5 minutes (controller-runtime
 * `DelegatingAuthorizerConfig{AllowCacheTTL: 5 * time.Minute}`, the apiserver's
 * `--authorization-webhook-cache-authorized-ttl` default too).
 */
export const ACCESS_REVIEW_ALLOW_TTL_MS = 300_000;
/**
 * How long a not-allowing SubjectAccessReview is used (ms): 30 s (controller-runtime
 * `DelegatingAuthorizerConfig{DenyCacheTTL: 30 * time.Second}`), so a RoleBinding just added
 * takes effect within half a minute.
 */
export const ACCESS_REVIEW_DENY_TTL_MS = 30_000;
/**
 * Bound of one review including its retries (ms): 10 s (controller-runtime
 * `TokenAccessReviewTimeout: 10 * time.Second`; also Prometheus's default scrape timeout).
 */
export const REVIEW_TIMEOUT_MS = 10_000;
/**
 * Retries of a review that got no answer, 429 or 5xx: first after 500 ms, ×1.5 each time, at most
 * 5 attempts in all, within {@link REVIEW_TIMEOUT_MS} (controller-runtime's WebhookRetryBackoff,
 * copied from k8s.io/apiserver `DefaultAuthWebhookRetryBackoff`: 500 ms, factor 1.5, 5 steps).
 */
export const REVIEW_RETRY = { initialMs: 500, factor: 1.5, attempts: 5 } as const;
/**
 * Most entries each cache keeps: 4,096, the size of k8s.io/apiserver's token cache (32 stripes ×
 * 128). A flood of made-up tokens evicts the oldest entries instead of growing memory.
 */
export const AUTH_CACHE_MAX_ENTRIES = 4_096;

/** Who a token belongs to (authentication.k8s.io/v1 UserInfo). */
export interface UserInfo {
  /** e.g. `system:serviceaccount:monitoring:prometheus`. */
  username: string;
  /** The user's UID, when the authenticator gives one. */
  uid?: string;
  /** e.g. `system:serviceaccounts`, `system:authenticated`. */
  groups?: string[];
  /** Extra attributes (e.g. the bound Pod's name), passed on to the SubjectAccessReview. */
  extra?: Record<string, string[]>;
}

/** The answer of a TokenReview. */
export type TokenReviewAnswer =
  | { authenticated: true; user: UserInfo }
  | { authenticated: false; error?: string };

/** What is asked of the authorizer: a non-resource URL and a verb (lowercase HTTP method). */
export interface AccessAttributes {
  /** URL path, e.g. `/metrics`. */
  path: string;
  /** e.g. `get`. */
  verb: string;
}

/** The answer of a SubjectAccessReview. */
export interface AccessReviewAnswer {
  /** The request is allowed. */
  allowed: boolean;
  /** The authorizer's reason, for debug logs. */
  reason?: string;
}

/** Makes the reviews; {@link kubeReviewer} asks the apiserver, tests hand in their own. */
export interface Reviewer {
  /** Creates a TokenReview of `token`. @throws on no answer or an error answer */
  tokenReview(token: string, signal: AbortSignal): Promise<TokenReviewAnswer>;
  /** Creates a SubjectAccessReview of `user` doing `attrs`. @throws on no answer or an error */
  accessReview(
    user: UserInfo,
    attrs: AccessAttributes,
    signal: AbortSignal,
  ): Promise<AccessReviewAnswer>;
}

const TOKEN_REVIEWS = {
  apiVersion: "authentication.k8s.io/v1",
  kind: "TokenReview",
  plural: "tokenreviews",
  namespaced: false,
} as ResourceType;
const SUBJECT_ACCESS_REVIEWS = {
  apiVersion: "authorization.k8s.io/v1",
  kind: "SubjectAccessReview",
  plural: "subjectaccessreviews",
  namespaced: false,
} as ResourceType;

/**
 * A {@link Reviewer} creating TokenReviews and SubjectAccessReviews with `client` (needs `create`
 * on `tokenreviews.authentication.k8s.io` and `subjectaccessreviews.authorization.k8s.io`). The
 * TokenReview names no audience, so the apiserver checks the token against its own audiences,
 * as controller-runtime's filter (APIAudiences unset) does.
 */
export function kubeReviewer(client: KubeClient): Reviewer {
  return {
    async tokenReview(token, signal) {
      const r = await client.create<
        KubeObject & {
          status?: { authenticated?: boolean; user?: UserInfo; error?: string };
        }
      >(TOKEN_REVIEWS, {
        apiVersion: "authentication.k8s.io/v1",
        kind: "TokenReview",
        spec: { token },
      } as KubeObject, { signal });
      const s = r.status ?? {};
      if (s.authenticated && s.user?.username) return { authenticated: true, user: s.user };
      return { authenticated: false, error: s.error };
    },
    async accessReview(user, attrs, signal) {
      const r = await client.create<
        KubeObject & { status?: { allowed?: boolean; denied?: boolean; reason?: string } }
      >(SUBJECT_ACCESS_REVIEWS, {
        apiVersion: "authorization.k8s.io/v1",
        kind: "SubjectAccessReview",
        spec: {
          user: user.username,
          uid: user.uid,
          groups: user.groups,
          extra: user.extra,
          nonResourceAttributes: { path: attrs.path, verb: attrs.verb },
        },
      } as KubeObject, { signal });
      // "denied" short-circuits other authorizers; both not allowed and no opinion deny here.
      return {
        allowed: r.status?.allowed === true && r.status?.denied !== true,
        reason: r.status?.reason,
      };
    },
  };
}

/**
 * A map whose entries expire `ttlMs` after they are set, on an injected clock, holding at most
 * `maxEntries` (the oldest set is dropped first).
 */
export class TtlCache<V> {
  #entries = new Map<string, { value: V; expiresAtMs: number }>();
  #clock: Clock;
  #max: number;

  /**
   * An empty cache.
   * @param clock time source (ms)
   * @param maxEntries bound of the number of entries
   */
  constructor(clock: Clock = realClock, maxEntries = AUTH_CACHE_MAX_ENTRIES) {
    this.#clock = clock;
    this.#max = Math.max(1, maxEntries);
  }

  /** The value set for `key`, unless absent or expired (an expired entry is dropped). */
  get(key: string): V | undefined {
    const e = this.#entries.get(key);
    if (!e) return undefined;
    if (this.#clock.now() >= e.expiresAtMs) {
      this.#entries.delete(key);
      return undefined;
    }
    return e.value;
  }

  /** Sets `key` to `value` for `ttlMs`; drops expired entries, then the oldest, when full. */
  set(key: string, value: V, ttlMs: number): void {
    this.#entries.delete(key);
    if (this.#entries.size >= this.#max) {
      const now = this.#clock.now();
      for (const [k, e] of this.#entries) if (now >= e.expiresAtMs) this.#entries.delete(k);
      for (const k of this.#entries.keys()) {
        if (this.#entries.size < this.#max) break;
        this.#entries.delete(k);
      }
    }
    this.#entries.set(key, { value, expiresAtMs: this.#clock.now() + ttlMs });
  }

  /** Number of entries held (expired ones included until touched). */
  get size(): number {
    return this.#entries.size;
  }
}

/** What {@link DelegatedAuth.check} decided. */
export type AuthDecision =
  | { status: 200; user: UserInfo }
  | { status: 401; reason: "no bearer token" | "not authenticated"; error?: string }
  | { status: 403; user: UserInfo; reason?: string }
  | { status: 500 | 503; stage: "TokenReview" | "SubjectAccessReview"; error: unknown };

/** Options of {@link DelegatedAuth}; durations in ms. */
export interface DelegatedAuthOptions {
  /** Makes the reviews (e.g. {@link kubeReviewer}). */
  reviewer: Reviewer;
  /** Time source of the caches and retry delays; default the real clock. */
  clock?: Clock;
  /** Default {@link TOKEN_REVIEW_CACHE_TTL_MS}. */
  tokenReviewTtlMs?: number;
  /** Default {@link ACCESS_REVIEW_ALLOW_TTL_MS}. */
  allowTtlMs?: number;
  /** Default {@link ACCESS_REVIEW_DENY_TTL_MS}. */
  denyTtlMs?: number;
  /** Default {@link REVIEW_TIMEOUT_MS}. */
  reviewTimeoutMs?: number;
  /** Default {@link AUTH_CACHE_MAX_ENTRIES}. */
  maxEntries?: number;
}

/** Whether a failed review may pass by itself (no answer, 429, 5xx): retried, then 503. */
export function isTransientReviewError(err: unknown): boolean {
  if (err instanceof ConfigError) return false;
  if (err instanceof ApiError) return err.code === 429 || err.code >= 500;
  return true; // no answer: connection refused or reset, timeout
}

/**
 * The bearer token of an `Authorization` header (`Bearer <token>`, scheme case-insensitive, as
 * k8s.io/apiserver's bearertoken authenticator reads it), or undefined.
 */
export function bearerToken(authorization: string | null | undefined): string | undefined {
  const m = /^\s*bearer\s+(\S+)\s*$/i.exec(authorization ?? "");
  return m?.[1];
}

/** TokenReview + SubjectAccessReview with caches; see the module doc. */
export class DelegatedAuth {
  #reviewer: Reviewer;
  #clock: Clock;
  #tokenTtl: number;
  #allowTtl: number;
  #denyTtl: number;
  #timeoutMs: number;
  #tokens: TtlCache<TokenReviewAnswer>;
  #access: TtlCache<AccessReviewAnswer>;
  #pendingTokens = new Map<string, Promise<TokenReviewAnswer>>();
  #pendingAccess = new Map<string, Promise<AccessReviewAnswer>>();
  #hmacKey?: Promise<CryptoKey>;
  /** Reviews actually sent (after retries: attempts), for tests and measurements. */
  readonly sent = { tokenReviews: 0, accessReviews: 0 };

  /** See {@link DelegatedAuthOptions}. */
  constructor(o: DelegatedAuthOptions) {
    this.#reviewer = o.reviewer;
    this.#clock = o.clock ?? realClock;
    this.#tokenTtl = o.tokenReviewTtlMs ?? TOKEN_REVIEW_CACHE_TTL_MS;
    this.#allowTtl = o.allowTtlMs ?? ACCESS_REVIEW_ALLOW_TTL_MS;
    this.#denyTtl = o.denyTtlMs ?? ACCESS_REVIEW_DENY_TTL_MS;
    this.#timeoutMs = o.reviewTimeoutMs ?? REVIEW_TIMEOUT_MS;
    this.#tokens = new TtlCache(this.#clock, o.maxEntries);
    this.#access = new TtlCache(this.#clock, o.maxEntries);
  }

  /**
   * Decides a request from its `Authorization` header and what it asks for. Never throws: a review
   * that cannot be made is a 500 or 503 decision carrying the error.
   */
  async check(authorization: string | null, attrs: AccessAttributes): Promise<AuthDecision> {
    const token = bearerToken(authorization);
    if (!token) return { status: 401, reason: "no bearer token" };
    let authn: TokenReviewAnswer;
    try {
      authn = await this.#authenticate(token);
    } catch (err) {
      return { status: isTransientReviewError(err) ? 503 : 500, stage: "TokenReview", error: err };
    }
    if (!authn.authenticated) {
      return { status: 401, reason: "not authenticated", error: authn.error };
    }
    let authz: AccessReviewAnswer;
    try {
      authz = await this.#authorize(authn.user, attrs);
    } catch (err) {
      return {
        status: isTransientReviewError(err) ? 503 : 500,
        stage: "SubjectAccessReview",
        error: err,
      };
    }
    if (!authz.allowed) return { status: 403, user: authn.user, reason: authz.reason };
    return { status: 200, user: authn.user };
  }

  /** A digest of the token under a random per-process key: tokens are never kept as keys. */
  async #tokenKey(token: string): Promise<string> {
    this.#hmacKey ??= crypto.subtle.generateKey({ name: "HMAC", hash: "SHA-256" }, false, [
      "sign",
    ]) as Promise<CryptoKey>;
    const mac = await crypto.subtle.sign(
      "HMAC",
      await this.#hmacKey,
      new TextEncoder().encode(token),
    );
    return Array.from(new Uint8Array(mac), (b) => b.toString(16).padStart(2, "0")).join("");
  }

  async #authenticate(token: string): Promise<TokenReviewAnswer> {
    return await this.#lookup(
      this.#tokens,
      this.#pendingTokens,
      await this.#tokenKey(token),
      (s) => {
        this.sent.tokenReviews++;
        return this.#reviewer.tokenReview(token, s);
      },
      () => this.#tokenTtl,
    );
  }

  async #authorize(user: UserInfo, attrs: AccessAttributes): Promise<AccessReviewAnswer> {
    // The whole request is the key, as k8s.io/apiserver's webhook authorizer keys on the spec.
    const extra = Object.entries(user.extra ?? {}).sort(([a], [b]) => a < b ? -1 : a > b ? 1 : 0);
    const key = JSON.stringify([
      user.username,
      user.uid ?? "",
      user.groups ?? [],
      extra,
      attrs.path,
      attrs.verb,
    ]);
    return await this.#lookup(this.#access, this.#pendingAccess, key, (s) => {
      this.sent.accessReviews++;
      return this.#reviewer.accessReview(user, attrs, s);
    }, (answer) => answer.allowed ? this.#allowTtl : this.#denyTtl);
  }

  /**
   * The cached answer for `key`, else the one of a review already in flight for it, else a new
   * review (with retries), cached for `ttlMs(answer)`; errors are not cached.
   */
  async #lookup<V>(
    cache: TtlCache<V>,
    pending: Map<string, Promise<V>>,
    key: string,
    review: (signal: AbortSignal) => Promise<V>,
    ttlMs: (answer: V) => number,
  ): Promise<V> {
    const cached = cache.get(key);
    if (cached) return cached;
    let inFlight = pending.get(key);
    if (!inFlight) {
      inFlight = this.#withRetries(review).then((answer) => {
        cache.set(key, answer, ttlMs(answer));
        return answer;
      }).finally(() => pending.delete(key));
      pending.set(key, inFlight);
    }
    return await inFlight;
  }

  /** Runs `fn`, retrying transient failures with {@link REVIEW_RETRY}, all within the timeout. */
  async #withRetries<T>(fn: (signal: AbortSignal) => Promise<T>): Promise<T> {
    const signal = AbortSignal.timeout(this.#timeoutMs);
    const deadline = this.#clock.now() + this.#timeoutMs;
    let delay: number = REVIEW_RETRY.initialMs;
    for (let attempt = 1;; attempt++) {
      try {
        return await fn(signal);
      } catch (err) {
        const last = attempt >= REVIEW_RETRY.attempts || signal.aborted ||
          this.#clock.now() + delay >= deadline;
        if (last || !isTransientReviewError(err)) throw err;
      }
      await sleepOn(this.#clock, delay, signal);
      delay *= REVIEW_RETRY.factor;
    }
  }
}
