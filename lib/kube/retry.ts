/**
 * The retry layer of the REST client: which outcomes of an attempt are tried again and after how
 * long ({@link afterFailure}, {@link afterAnswer}: pure), and the loop that applies them
 * ({@link Sender}): the client-side token bucket, the Retry-After gate, the credential (fetched
 * again after a 401), one attempt through the transport (transport.ts), the decision.
 *
 * Rules followed: client-go `rest.Request` (`Retry-After` honoured up to `maxRetries`, reads
 * retried on connection errors and 5xx other than 501, a 401 makes the credential be fetched
 * again once).
 *
 * Retry-After is client-wide (docs/scenarios.md S16): a 429, or a 503 with `Retry-After`, closes
 * the client's {@link RetryAfterGate} for every later request until the Retry-After has passed.
 * A request waits at the gate up to `maxThrottleWaitMs`; one that would wait longer fails at once
 * with a client-side 429 (`retryAfterSeconds` = the remaining wait, nothing sent), so that a work
 * queue can requeue its key for then instead of holding a worker. Why client-wide, and how the
 * gate reopens: docs/design/client.md.
 *
 * @module
 */
import type { CredentialProvider } from "./credentials.ts";
import { ApiError, fencedByServer, FencedError } from "./errors.ts";
import { type RawRequest, requestUrl } from "./params.ts";
import { type RetryAfterGate, sleep, type TokenBucket } from "./throttle.ts";
import {
  answerStatus,
  type Attempt,
  type Failure,
  IDEMPOTENT,
  type OutgoingRequest,
  type Transport,
  type WriteFence,
} from "./transport.ts";

/**
 * Largest Retry-After honoured (s), so a broken header cannot stop the client for good. API
 * Priority and Fairness sends at most 32 (`maxRetryAfter` in dropped_requests_tracker.go).
 */
export const MAX_RETRY_AFTER_SECONDS = 300;

/** Where a request stands in its retries. */
export interface RetryState {
  /** Attempts made so far that count against `maxRetries` (0 for the first). */
  attempt: number;
  /** Retries allowed (0: none; a 401 still fetches the credential again once). */
  maxRetries: number;
  /** The credential was fetched again after a 401 already. */
  retriedAuth: boolean;
  /** A read ended by the stall rule was sent again already. */
  retriedStalled: boolean;
}

/** What to do after an attempt. */
export type RetryDecision =
  /** Send again after `delayMs`; `free`: the attempt does not count against `maxRetries`. */
  | { type: "retry"; delayMs: number; free?: boolean; refreshCredential?: boolean }
  /** Give up: throw the attempt's error. */
  | { type: "fail" };

/** Back-off before the next attempt without a Retry-After (ms): 200 ms doubling, at most 5 s. */
export const backoffMs = (attempt: number): number => Math.min(200 * 2 ** attempt, 5_000);

/**
 * The decision after an attempt that got no answer (pure):
 * - the caller's abort and the fence are final;
 * - a read ended by the stall rule is sent again at once, once, at no cost to its retries; a
 *   write or a watch fails (a write may or may not have reached the apiserver; a watch is
 *   resumed by its consumer);
 * - a request whose HTTP client was closed before it left is sent again whatever its method;
 * - a read (not a watch) that got no answer is retried after {@link backoffMs}.
 */
export function afterFailure(
  f: Failure,
  req: Pick<RawRequest, "method" | "stream">,
  st: RetryState,
): RetryDecision {
  const read = IDEMPOTENT.has(req.method);
  const left = st.attempt < st.maxRetries;
  switch (f.type) {
    case "aborted":
    case "fenced":
      return { type: "fail" };
    case "stalled":
      return !req.stream && read && !st.retriedStalled
        ? { type: "retry", delayMs: 0, free: true }
        : { type: "fail" };
    case "closed":
      return left ? { type: "retry", delayMs: 0 } : { type: "fail" };
    case "network":
      return read && !req.stream && left
        ? { type: "retry", delayMs: backoffMs(st.attempt) }
        : { type: "fail" };
  }
}

/**
 * The decision after an error answer (pure; a 2xx is returned before). `gated`: the client has a
 * Retry-After gate, which makes the next attempt wait out a Retry-After by itself.
 * - 401 the first time: fetch the credential again and resend at once;
 * - throttled (429, or 503 with a Retry-After) whatever the method, and 5xx but 501 of a read
 *   (not a watch): retried while retries are left, unless the Retry-After is longer than
 *   `maxThrottleWaitMs` (the caller gets it at once); with a Retry-After the wait is the gate's
 *   (or, without a gate, this request's alone, at least 50 ms), without one {@link backoffMs}
 *   (at least 50 ms).
 */
export function afterAnswer(
  a: { status: number; retryAfter?: number },
  req: Pick<RawRequest, "method" | "stream">,
  st: RetryState,
  o: { maxThrottleWaitMs: number; gated: boolean },
): RetryDecision {
  if (a.status === 401 && !st.retriedAuth) {
    return { type: "retry", delayMs: 0, refreshCredential: true };
  }
  const throttled = isThrottledAnswer(a.status, a.retryAfter);
  const retryable = throttled ||
    (IDEMPOTENT.has(req.method) && !req.stream && a.status >= 500 && a.status !== 501);
  const waitable = a.retryAfter === undefined || a.retryAfter * 1000 <= o.maxThrottleWaitMs;
  if (!retryable || !waitable || st.attempt >= st.maxRetries) return { type: "fail" };
  if (a.retryAfter === undefined) {
    return { type: "retry", delayMs: Math.max(backoffMs(st.attempt), 50) };
  }
  if (!o.gated || a.retryAfter < 0.05) {
    return { type: "retry", delayMs: Math.max(a.retryAfter * 1000, 50) };
  }
  return { type: "retry", delayMs: 0 };
}

/** Whether an answer is throttled: 429, or 503 with a Retry-After. */
export const isThrottledAnswer = (status: number, retryAfter?: number): boolean =>
  status === 429 || (status === 503 && retryAfter !== undefined);

/** The Retry-After gate as the sender uses it (a real one, or {@link NO_GATE}). */
export type Gate = Pick<RetryAfterGate, "closedForMs" | "acquire" | "release">;

/** The gate of a client with `retryAfterGate: false`: always open. */
export const NO_GATE: Gate = {
  closedForMs: () => 0,
  acquire: () => Promise.resolve(),
  release: () => {},
};

/** What a {@link Sender} sends with. */
export interface SenderOptions {
  /** The apiserver's base URL, e.g. `https://10.0.0.1:6443`. */
  server: string;
  /** One attempt. */
  transport: Transport;
  /** The credential of each attempt. */
  creds: CredentialProvider;
  /** Client-side rate limit. */
  bucket: TokenBucket;
  /** The Retry-After gate. */
  gate: Gate;
  /** Retries (see {@link RetryState.maxRetries}). */
  maxRetries: number;
  /** Longest wait at the gate a request accepts (ms). */
  maxThrottleWaitMs: number;
  /** The write fence in force now (read per attempt), if any. */
  fence: () => WriteFence | undefined;
}

type Slot = Awaited<ReturnType<CredentialProvider["get"]>>;

/** Sends a request with retries (see the module doc); one per client. */
export class Sender {
  #o: SenderOptions;

  /** A sender with the given parts. */
  constructor(o: SenderOptions) {
    this.#o = o;
  }

  /**
   * Sends `req` with retries and returns the successful Response.
   * @throws ApiError (or FencedError for the Lease-holder policy's refusal) for an error answer
   *   after retries; a {@link NetworkError}/`UnreachableError` when no answer came; the
   *   signal's reason when aborted; the fence's error when it refused the write.
   */
  async send(req: OutgoingRequest): Promise<Response> {
    const url = requestUrl(this.#o.server, req.path, req.query);
    const body = req.body === undefined ? undefined : JSON.stringify(req.body);
    const isWrite = !IDEMPOTENT.has(req.method);
    const st: RetryState = {
      attempt: 0,
      maxRetries: req.noRetry ? 0 : this.#o.maxRetries,
      retriedAuth: false,
      retriedStalled: false,
    };
    for (;; st.attempt++) {
      const cred = await this.#admit(req);
      let attempt: Attempt;
      try {
        const fence = isWrite ? this.#o.fence() : undefined;
        attempt = await this.#o.transport.send({
          req,
          url,
          body,
          authorization: cred.authorization,
          httpClient: cred.httpClient,
          fence,
        });
      } catch (err) {
        // The write fence refused it: nothing was sent.
        this.#o.gate.release();
        throw err;
      } finally {
        cred.release();
      }
      const d = attempt.type === "answer"
        ? await this.#answered(req, attempt, st)
        : this.#failed(req, attempt.failure, st);
      if (d instanceof Response) return d;
      if (d.free) st.attempt--;
      if (d.delayMs > 0) await sleep(d.delayMs, req.signal);
    }
  }

  /** Decides after a failure (releasing the gate slot); throws when it gives up. */
  #failed(req: RawRequest, f: Failure, st: RetryState): RetryDecision & { type: "retry" } {
    this.#o.gate.release();
    const d = afterFailure(f, req, st);
    this.#o.transport.report(f, req, d.type === "retry");
    if (d.type === "fail") throw f.error;
    if (f.type === "stalled") st.retriedStalled = true;
    return d;
  }

  /** Releases the gate slot with a throttled answer's Retry-After; decides; throws on giving up. */
  async #answered(
    req: RawRequest,
    a: Attempt & { type: "answer" },
    st: RetryState,
  ): Promise<Response | RetryDecision & { type: "retry" }> {
    const { resp, retryAfter } = a;
    const throttled = isThrottledAnswer(resp.status, retryAfter);
    this.#o.gate.release(
      throttled && retryAfter !== undefined
        ? Math.min(retryAfter, MAX_RETRY_AFTER_SECONDS)
        : undefined,
    );
    if (resp.ok) return resp;
    const status = answerStatus(resp.status, resp.statusText, await resp.text().catch(() => ""));
    this.#o.transport.settle(resp);
    const d = afterAnswer({ status: resp.status, retryAfter }, req, st, {
      maxThrottleWaitMs: this.#o.maxThrottleWaitMs,
      gated: this.#o.gate !== NO_GATE,
    });
    if (d.type === "fail") {
      // The Lease-holder admission policy's refusal is a fenced write, not an API error; the
      // fence that let it leave is told.
      const err = fencedByServer(
        new ApiError(resp.status, status, {
          retryAfterSeconds: retryAfter,
          request: `${req.method} ${req.path}`,
        }),
      );
      if (err instanceof FencedError) {
        try {
          this.#o.fence()?.refused?.(err);
        } catch { /* feedback only: the refusal is thrown either way */ }
      }
      throw err;
    }
    if (d.refreshCredential) {
      st.retriedAuth = true;
      this.#o.creds.invalidate();
    }
    return d;
  }

  /**
   * Waits for a token, a slot of the Retry-After gate and the credential, and takes the gate
   * again if it closed meanwhile (another request may have met a 429).
   * @throws a client-side 429 when the gate would keep the request longer than
   *   `maxThrottleWaitMs`; what the credential provider throws; the signal's reason
   */
  async #admit(req: RawRequest): Promise<Slot> {
    const label = `${req.method} ${req.path}`;
    await this.#o.bucket.wait(req.signal);
    for (let i = 0; i < 100; i++) {
      await this.#acquireGate(label, req.signal);
      let cred: Slot;
      try {
        cred = await this.#o.creds.get(req.signal);
      } catch (err) {
        this.#o.gate.release();
        throw err;
      }
      if (this.#o.gate.closedForMs() <= 0) return cred;
      this.#o.gate.release();
      cred.release();
    }
    throw new Error(`${label}: the Retry-After gate kept closing`);
  }

  /**
   * Takes a slot of the Retry-After gate. A wait longer than `maxThrottleWaitMs` is not taken: it
   * throws a client-side 429 with the remaining wait (nothing is sent).
   */
  #acquireGate(label: string, signal?: AbortSignal): Promise<void> {
    return this.#o.gate.acquire(this.#o.maxThrottleWaitMs, (waitMs) =>
      new ApiError(429, {
        kind: "Status",
        status: "Failure",
        reason: "TooManyRequests",
        code: 429,
        message: `not sent: the apiserver asked this client to wait ${
          Math.ceil(waitMs / 1000)
        } s more (Retry-After)`,
      }, { retryAfterSeconds: waitMs / 1000, request: label }), signal);
  }
}
