/**
 * Delegated authentication and authorization of /metrics requests (lib/runtime/delegated_auth.ts)
 * on a manual clock, with a reviewer that records what it is asked: which answers are cached and
 * for how long (controller-runtime's filter: TokenReview 1 min either way, SubjectAccessReview
 * 5 min allowed and 30 s not), that errors are not cached, retried when transient and decided
 * 503 or 500, and that concurrent requests with one token share one review.
 */
import { assert, assertEquals } from "../assert.ts";
import { FakeClock } from "../../lib/runtime/clock.ts";
import {
  ACCESS_REVIEW_ALLOW_TTL_MS,
  ACCESS_REVIEW_DENY_TTL_MS,
  type AccessAttributes,
  type AuthDecision,
  bearerToken,
  DelegatedAuth,
  REVIEW_RETRY,
  type Reviewer,
  TOKEN_REVIEW_CACHE_TTL_MS,
  TtlCache,
  type UserInfo,
} from "../../lib/runtime/delegated_auth.ts";
import { ApiError } from "../../lib/kube/errors.ts";

const GET_METRICS: AccessAttributes = { path: "/metrics", verb: "get" };

/** A reviewer over a table of tokens and allowed users, counting calls; `fail` makes it throw. */
class FakeReviewer implements Reviewer {
  tokens = new Map<string, UserInfo>();
  allowed = new Set<string>();
  calls = { tokenReviews: 0, accessReviews: 0 };
  /** Called with the number of the review (1, 2, ...): an error to throw, or undefined. */
  fail?: (n: number) => Error | undefined;
  /** Resolves pending reviews when set (to hold them in flight). */
  gate?: Promise<void>;

  async tokenReview(token: string) {
    const n = ++this.calls.tokenReviews;
    await this.gate;
    const err = this.fail?.(n);
    if (err) throw err;
    const user = this.tokens.get(token);
    return user
      ? { authenticated: true as const, user }
      : { authenticated: false as const, error: "invalid bearer token" };
  }

  async accessReview(user: UserInfo, attrs: AccessAttributes) {
    const n = ++this.calls.accessReviews;
    await this.gate;
    const err = this.fail?.(n);
    if (err) throw err;
    return { allowed: this.allowed.has(`${user.username} ${attrs.verb} ${attrs.path}`) };
  }
}

function setup() {
  const clock = new FakeClock();
  const reviewer = new FakeReviewer();
  reviewer.tokens.set("reader-token", { username: "reader", groups: ["g"] });
  reviewer.tokens.set("other-token", { username: "other" });
  reviewer.allowed.add("reader get /metrics");
  const auth = new DelegatedAuth({ reviewer, clock });
  return { clock, reviewer, auth };
}

const status = (d: AuthDecision) => d.status;

Deno.test("bearerToken: the scheme is case-insensitive; anything else is no token", () => {
  assertEquals(bearerToken("Bearer abc"), "abc");
  assertEquals(bearerToken("bearer abc"), "abc");
  assertEquals(bearerToken("  BEARER   abc  "), "abc");
  assertEquals(bearerToken("Basic abc"), undefined);
  assertEquals(bearerToken("Bearer"), undefined);
  assertEquals(bearerToken("Bearer a b"), undefined);
  assertEquals(bearerToken(null), undefined);
});

Deno.test("no bearer token: 401 without asking the apiserver", async () => {
  const { auth, reviewer } = setup();
  assertEquals(status(await auth.check(null, GET_METRICS)), 401);
  assertEquals(status(await auth.check("Basic dXNlcjpwdw==", GET_METRICS)), 401);
  assertEquals(reviewer.calls, { tokenReviews: 0, accessReviews: 0 });
});

Deno.test("allowed: 200; TokenReview cached 1 min, SubjectAccessReview 5 min", async () => {
  const { auth, reviewer, clock } = setup();
  const check = () => auth.check("Bearer reader-token", GET_METRICS);
  const d = await check();
  assertEquals(d.status, 200);
  assertEquals(d.status === 200 && d.user.username, "reader");
  assertEquals(reviewer.calls, { tokenReviews: 1, accessReviews: 1 });
  clock.advance(TOKEN_REVIEW_CACHE_TTL_MS - 1);
  assertEquals(status(await check()), 200);
  assertEquals(reviewer.calls, { tokenReviews: 1, accessReviews: 1 }, "both cached");
  clock.advance(1);
  assertEquals(status(await check()), 200);
  assertEquals(reviewer.calls, { tokenReviews: 2, accessReviews: 1 }, "token review expired");
  clock.advance(ACCESS_REVIEW_ALLOW_TTL_MS - TOKEN_REVIEW_CACHE_TTL_MS);
  assertEquals(status(await check()), 200);
  assertEquals(reviewer.calls, { tokenReviews: 3, accessReviews: 2 }, "access review expired");
});

Deno.test("a token the apiserver does not authenticate: 401, and that answer cached 1 min", async () => {
  const { auth, reviewer, clock } = setup();
  const d = await auth.check("Bearer forged", GET_METRICS);
  assertEquals(d, { status: 401, reason: "not authenticated", error: "invalid bearer token" });
  assertEquals(status(await auth.check("Bearer forged", GET_METRICS)), 401);
  assertEquals(reviewer.calls, { tokenReviews: 1, accessReviews: 0 });
  clock.advance(TOKEN_REVIEW_CACHE_TTL_MS);
  assertEquals(status(await auth.check("Bearer forged", GET_METRICS)), 401);
  assertEquals(reviewer.calls.tokenReviews, 2);
});

Deno.test("not allowed: 403, cached 30 s; a binding added then counts after 30 s", async () => {
  const { auth, reviewer, clock } = setup();
  const check = () => auth.check("Bearer other-token", GET_METRICS);
  const d = await check();
  assertEquals(d.status, 403);
  assertEquals(d.status === 403 && d.user.username, "other");
  reviewer.allowed.add("other get /metrics");
  clock.advance(ACCESS_REVIEW_DENY_TTL_MS - 1);
  assertEquals(status(await check()), 403, "the denial is still cached");
  assertEquals(reviewer.calls.accessReviews, 1);
  clock.advance(1);
  assertEquals(status(await check()), 200);
  assertEquals(reviewer.calls.accessReviews, 2);
});

Deno.test("the access review is per user, groups, path and verb", async () => {
  const { auth, reviewer } = setup();
  assertEquals(status(await auth.check("Bearer reader-token", GET_METRICS)), 200);
  assertEquals(
    status(await auth.check("Bearer reader-token", { path: "/metrics", verb: "post" })),
    403,
  );
  assertEquals(
    status(await auth.check("Bearer reader-token", { path: "/debug", verb: "get" })),
    403,
  );
  // Same user name, other groups: a review of its own.
  reviewer.tokens.set("reader-token-2", { username: "reader", groups: ["h"] });
  assertEquals(status(await auth.check("Bearer reader-token-2", GET_METRICS)), 200);
  assertEquals(reviewer.calls, { tokenReviews: 2, accessReviews: 4 });
});

Deno.test("concurrent requests with one token share one review of each kind", async () => {
  const { auth, reviewer } = setup();
  let open!: () => void;
  reviewer.gate = new Promise<void>((r) => open = r);
  const all = Promise.all(
    Array.from({ length: 10 }, () => auth.check("Bearer reader-token", GET_METRICS)),
  );
  await new Promise((r) => setTimeout(r, 10));
  open();
  const ds = await all;
  assert(ds.every((d) => d.status === 200), JSON.stringify(ds));
  assertEquals(reviewer.calls, { tokenReviews: 1, accessReviews: 1 });
});

/** Runs `p` while moving the clock by `stepMs` until it settles (at most `steps` times). */
async function settle<T>(clock: FakeClock, p: Promise<T>, stepMs = 100, steps = 500): Promise<T> {
  let done = false;
  p.finally(() => done = true).catch(() => {});
  for (let i = 0; i < steps && !done; i++) {
    await new Promise((r) => setTimeout(r, 0));
    clock.advance(stepMs);
  }
  return await p;
}

Deno.test("no answer (connection refused): retried with backoff, then 503; not cached", async () => {
  const { auth, reviewer, clock } = setup();
  reviewer.fail = () => new TypeError("error sending request: connection refused");
  const d = await settle(clock, auth.check("Bearer reader-token", GET_METRICS));
  assertEquals(d.status, 503);
  assertEquals(d.status === 503 && d.stage, "TokenReview");
  assertEquals(reviewer.calls.tokenReviews, REVIEW_RETRY.attempts);
  reviewer.fail = undefined;
  assertEquals(status(await auth.check("Bearer reader-token", GET_METRICS)), 200);
  assertEquals(reviewer.calls.tokenReviews, REVIEW_RETRY.attempts + 1, "the error was not cached");
});

Deno.test("429 and 5xx are retried; an attempt that passes gives the answer", async () => {
  const { auth, reviewer, clock } = setup();
  reviewer.fail = (n) =>
    n === 1 ? new ApiError(429, {}) : n === 2 ? new ApiError(500, {}) : undefined;
  const d = await settle(clock, auth.check("Bearer reader-token", GET_METRICS));
  assertEquals(d.status, 200);
  // Each kind failed twice (429, then 500) and passed at the third attempt.
  assertEquals(reviewer.calls, { tokenReviews: 3, accessReviews: 3 });
});

Deno.test("a review this process may not make (403): 500 at once, no retry", async () => {
  const { auth, reviewer } = setup();
  reviewer.fail = () => new ApiError(403, { reason: "Forbidden" });
  const d = await auth.check("Bearer reader-token", GET_METRICS);
  assertEquals(d.status === 500 && d.stage, "TokenReview");
  assertEquals(reviewer.calls.tokenReviews, 1);
});

Deno.test("SubjectAccessReview that cannot be made: 500, and the stage says so", async () => {
  const { auth, reviewer } = setup();
  const original = reviewer.accessReview.bind(reviewer);
  reviewer.accessReview = () => Promise.reject(new ApiError(403, { reason: "Forbidden" }));
  const d = await auth.check("Bearer reader-token", GET_METRICS);
  assertEquals(d.status === 500 && d.stage, "SubjectAccessReview");
  reviewer.accessReview = original;
  assertEquals(status(await auth.check("Bearer reader-token", GET_METRICS)), 200);
});

Deno.test("TtlCache: entries expire on the clock; the oldest goes when full", () => {
  const clock = new FakeClock();
  const c = new TtlCache<number>(clock, 3);
  c.set("a", 1, 1_000);
  c.set("b", 2, 5_000);
  c.set("c", 3, 5_000);
  assertEquals([c.get("a"), c.get("b"), c.get("c")], [1, 2, 3]);
  c.set("d", 4, 5_000); // full: "a" (oldest) goes
  assertEquals([c.get("a"), c.get("d"), c.size], [undefined, 4, 3]);
  clock.advance(5_000);
  c.set("e", 5, 1_000); // full of expired entries: they go first
  assertEquals(c.size, 1);
  assertEquals([c.get("b"), c.get("e")], [undefined, 5]);
});

Deno.test("a flood of made-up tokens is bounded by the cache size", async () => {
  const clock = new FakeClock();
  const reviewer = new FakeReviewer();
  const auth = new DelegatedAuth({ reviewer, clock, maxEntries: 50 });
  for (let i = 0; i < 200; i++) await auth.check(`Bearer t${i}`, GET_METRICS);
  assertEquals(reviewer.calls.tokenReviews, 200);
  // The last 50 are still cached, the first are not.
  await auth.check("Bearer t199", GET_METRICS);
  assertEquals(reviewer.calls.tokenReviews, 200);
  await auth.check("Bearer t0", GET_METRICS);
  assertEquals(reviewer.calls.tokenReviews, 201);
});
