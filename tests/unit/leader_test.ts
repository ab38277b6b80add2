/**
 * Leader election units: the MicroTime format, option validation (client-go NewLeaderElector's
 * rules), and the Lease record a candidate writes, against an in-memory Lease API that checks
 * resourceVersion and the apiserver's Lease validation. The Lease behaviour between processes is
 * tested end to end (tests/e2e/leader_test.ts).
 */
import type { Lease } from "kubernetes-types/coordination/v1.d.ts";
import { assert, assertEquals, assertRejects } from "../assert.ts";
import { FLAGS, parseFlags } from "../../lib/cli.ts";
import type { KubeClient } from "../../lib/kube/client.ts";
import { ApiError, FencedError, isFenced, LEASE_FENCE_PHRASE } from "../../lib/kube/errors.ts";
import { EVENTS } from "../../lib/kube/resources.ts";
import type { HandoverReport } from "../../lib/runtime/handover.ts";
import { FakeClock } from "../../lib/runtime/clock.ts";
import {
  LeaderElector,
  type LeaderElectorOptions,
  LEASE_DURATION_SECONDS,
  microTime,
  RENEW_DEADLINE_MS,
  RETRY_PERIOD_MS,
} from "../../lib/runtime/leader.ts";

const MICRO_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/;

/** One Lease held in memory, with optimistic concurrency and the apiserver's validation. */
class FakeLeaseApi {
  lease?: Lease;
  rv = 0;
  /** When set, every call fails with it (a cut connection). */
  failWith?: Error;
  writes: { verb: string; spec: Lease["spec"] }[] = [];
  /** Every Lease request, in order: get, create, update, watch. */
  calls: string[] = [];
  /** Watches open now. */
  watchers = 0;
  /** When set, opening a watch fails with it (the verb not granted, a cut connection). */
  watchFailsWith?: Error;
  #listeners = new Set<(ev: { type: "ADDED" | "MODIFIED"; object: Lease }) => void>();
  /**
   * The Lease-holder policy, when set: the holder the apiserver's informer shows (it lags the
   * stored Lease; the test moves it), and the probes it answered.
   */
  policy?: { informerHolder: string; probes: { from: string; admitted: boolean }[] };

  #check(spec: Lease["spec"]): void {
    const d = spec?.leaseDurationSeconds;
    if (d !== undefined && !(Number.isInteger(d) && d > 0)) {
      throw new ApiError(422, { reason: "Invalid", message: "leaseDurationSeconds must be > 0" });
    }
    for (const t of [spec?.acquireTime, spec?.renewTime]) {
      if (t !== undefined && !MICRO_TIME.test(t)) {
        throw new ApiError(422, { reason: "Invalid", message: `bad MicroTime ${t}` });
      }
    }
  }

  client(): KubeClient {
    const api = {
      watch: (_rt: unknown, o: { signal?: AbortSignal }) => this.#watch(o.signal),
      get: (_rt: unknown, _name: string) => {
        this.calls.push("get");
        if (this.failWith) return Promise.reject(this.failWith);
        if (!this.lease) {
          return Promise.reject(new ApiError(404, { reason: "NotFound", message: "not found" }));
        }
        return Promise.resolve(structuredClone(this.lease));
      },
      create: (rt: unknown, obj: Lease) => {
        if (this.failWith) return Promise.reject(this.failWith);
        if (rt === EVENTS) return this.#probe(obj as unknown as { reportingInstance: string });
        this.calls.push("create");
        if (this.lease) {
          return Promise.reject(new ApiError(409, { reason: "AlreadyExists", message: "exists" }));
        }
        try {
          this.#check(obj.spec);
        } catch (err) {
          return Promise.reject(err);
        }
        this.lease = structuredClone(obj);
        this.lease.metadata = { ...obj.metadata, resourceVersion: String(++this.rv) };
        this.writes.push({ verb: "create", spec: structuredClone(obj.spec) });
        this.#notify("ADDED");
        return Promise.resolve(structuredClone(this.lease));
      },
      update: (_rt: unknown, obj: Lease) => {
        this.calls.push("update");
        if (this.failWith) return Promise.reject(this.failWith);
        if (!this.lease) {
          return Promise.reject(new ApiError(404, { reason: "NotFound", message: "not found" }));
        }
        if (obj.metadata?.resourceVersion !== this.lease.metadata?.resourceVersion) {
          return Promise.reject(new ApiError(409, { reason: "Conflict", message: "modified" }));
        }
        try {
          this.#check(obj.spec);
        } catch (err) {
          return Promise.reject(err);
        }
        this.lease = structuredClone(obj);
        this.lease.metadata = { ...obj.metadata, resourceVersion: String(++this.rv) };
        this.writes.push({ verb: "update", spec: structuredClone(obj.spec) });
        this.#notify("MODIFIED");
        return Promise.resolve(structuredClone(this.lease));
      },
    };
    return api as unknown as KubeClient;
  }

  /** Another writer (kubectl) changes the Lease without touching its spec: a new resourceVersion. */
  touch(): void {
    this.lease!.metadata = { ...this.lease!.metadata, resourceVersion: String(++this.rv) };
    this.#notify("MODIFIED");
  }

  #notify(type: "ADDED" | "MODIFIED"): void {
    for (const l of this.#listeners) l({ type, object: structuredClone(this.lease!) });
  }

  /** A watch of the Lease: its current state as ADDED, then every write, until `signal` aborts. */
  async *#watch(signal?: AbortSignal) {
    this.calls.push("watch");
    if (this.watchFailsWith) throw this.watchFailsWith;
    const queue: { type: "ADDED" | "MODIFIED"; object: Lease }[] = [];
    let wake = () => {};
    const listener = (ev: (typeof queue)[number]) => (queue.push(ev), wake());
    this.#listeners.add(listener);
    this.watchers++;
    try {
      if (this.lease) yield { type: "ADDED" as const, object: structuredClone(this.lease) };
      for (let i = 0; i < 10_000 && !signal?.aborted; i++) {
        if (!queue.length) {
          await new Promise<void>((r) => {
            wake = r;
            signal?.addEventListener("abort", () => r(), { once: true });
          });
        }
        while (queue.length && !signal?.aborted) yield queue.shift()!;
      }
    } finally {
      this.#listeners.delete(listener);
      this.watchers--;
    }
  }

  /** deploy/'s Lease-holder policy on a dry-run Event by replica `reportingInstance`. */
  #probe(ev: { reportingInstance: string }): Promise<unknown> {
    if (!this.policy) return Promise.reject(new ApiError(404, { reason: "NotFound" }));
    const from = ev.reportingInstance;
    const holder = this.policy.informerHolder;
    const admitted = holder.startsWith(`${from.split("_")[0]}_`);
    this.policy.probes.push({ from, admitted });
    if (admitted) return Promise.resolve({});
    const refusal = new ApiError(403, {
      reason: "Forbidden",
      message: `events "x" is forbidden: ValidatingAdmissionPolicy 'p' with binding 'b' denied ` +
        `request: ${LEASE_FENCE_PHRASE}: Pod '${from}' is not the holder of Lease ns/lease ` +
        `(held by '${holder}')`,
    });
    return Promise.reject(new FencedError("NotLeaseHolder", "POST events", undefined, refusal));
  }
}

function elector(
  api: FakeLeaseApi,
  identity: string,
  clock: FakeClock,
  extra: Partial<LeaderElectorOptions> = {},
): LeaderElector {
  return new LeaderElector({
    client: api.client(),
    namespace: "ns",
    name: "lease",
    identity,
    leaseDurationSeconds: 4,
    renewDeadlineMs: 3_000,
    retryPeriodMs: 1_000,
    clock,
    random: () => 0,
    sealTakeover: false,
    ...extra,
  });
}

/** Lets pending promise callbacks run (the fake API answers at once). */
async function flush(): Promise<void> {
  for (let i = 0; i < 5; i++) await new Promise((r) => setTimeout(r, 0));
}

Deno.test("leader: microTime is RFC 3339 with six fractional digits, in UTC", () => {
  const ms = Date.UTC(2006, 0, 2, 15, 4, 5, 123);
  assertEquals(microTime(ms), "2006-01-02T15:04:05.123000Z");
  assertEquals(microTime(Date.UTC(2024, 11, 31, 23, 59, 59, 0)), "2024-12-31T23:59:59.000000Z");
  for (const t of [0, 1, 999, 1_700_000_000_001, Date.now()]) {
    const s = microTime(t);
    assert(MICRO_TIME.test(s), s);
    assertEquals(Date.parse(s), t);
  }
});

Deno.test("leader: defaults and flags are client-go's (15 s, 10 s, 2 s)", () => {
  assertEquals(LEASE_DURATION_SECONDS, 15);
  assertEquals(RENEW_DEADLINE_MS, 10_000);
  assertEquals(RETRY_PERIOD_MS, 2_000);
  const names = FLAGS.map((f) => f.name);
  for (
    const n of [
      "leader-elect",
      "leader-election-namespace",
      "leader-election-id",
      "leader-elect-lease-duration",
      "leader-elect-renew-deadline",
      "leader-elect-retry-period",
    ]
  ) assert(names.includes(n), `flag --${n} missing`);
  const r = parseFlags([], () => undefined);
  assert(r.kind === "run");
  assertEquals(r.values["leader-elect"], false);
  assertEquals(r.values["leader-elect-lease-duration"], 15_000);
  assertEquals(r.values["leader-elect-renew-deadline"], 10_000);
  assertEquals(r.values["leader-elect-retry-period"], 2_000);
  // Empty: main.ts falls back to the service account's or the kubeconfig context's namespace.
  assertEquals(r.values["leader-election-namespace"], "");
  const f = parseFlags([
    "--leader-elect",
    "--leader-election-namespace=ops",
    "--leader-elect-lease-duration=4s",
    "--leader-elect-renew-deadline=3s",
    "--leader-elect-retry-period=1s",
  ], () => undefined);
  assert(f.kind === "run");
  assertEquals(f.values["leader-election-namespace"], "ops");
  assertEquals(f.values["leader-elect-lease-duration"], 4_000);
  assertEquals(f.values["leader-elect-renew-deadline"], 3_000);
  assertEquals(f.values["leader-elect-retry-period"], 1_000);
});

Deno.test("leader: option validation (client-go NewLeaderElector rules)", async () => {
  const api = new FakeLeaseApi();
  const clock = new FakeClock();
  const make = (o: Partial<LeaderElectorOptions>) => () => elector(api, "a", clock, o);
  // Valid: the defaults, and the short timings the e2e tests use.
  new LeaderElector({ client: api.client(), namespace: "ns", name: "l", identity: "a" });
  make({})();
  await assertRejects(
    make({ leaseDurationSeconds: 3, renewDeadlineMs: 3_000 }),
    /leaseDuration must be greater than renewDeadline/,
  );
  await assertRejects(
    make({ renewDeadlineMs: 1_200, retryPeriodMs: 1_000 }),
    /renewDeadline must be greater than retryPeriod\*JitterFactor/,
  );
  await assertRejects(make({ retryPeriodMs: 0 }), /retryPeriod must be greater than zero/);
  await assertRejects(make({ retryPeriodMs: -1 }), /retryPeriod must be greater than zero/);
  await assertRejects(make({ renewDeadlineMs: 0 }), /renewDeadline must be greater than zero/);
  await assertRejects(make({ leaseDurationSeconds: 0 }), /leaseDuration must be a whole number/);
  await assertRejects(make({ leaseDurationSeconds: 4.5 }), /leaseDuration must be a whole number/);
  await assertRejects(make({ identity: "" }), /identity must not be empty/);
});

Deno.test("leader: acquire, renew, expiry takeover, release and takeover; valid records", async () => {
  const api = new FakeLeaseApi();
  const clock = new FakeClock();
  const a = elector(api, "a", clock);
  const b = elector(api, "b", clock);

  // a creates the Lease.
  assert(await a.tryAcquireOrRenew());
  let spec = api.lease!.spec!;
  assertEquals(spec.holderIdentity, "a");
  assertEquals(spec.leaseDurationSeconds, 4);
  assertEquals(spec.leaseTransitions, 0);
  assert(MICRO_TIME.test(spec.acquireTime!) && MICRO_TIME.test(spec.renewTime!));
  const acquired = spec.acquireTime;

  // b cannot take a Lease that is held and renewed.
  assertEquals(await b.tryAcquireOrRenew(), false);
  assertEquals(b.observedHolder, "a");
  clock.advance(1_000);
  assert(await a.tryAcquireOrRenew()); // renew keeps acquireTime, moves renewTime
  spec = api.lease!.spec!;
  assertEquals(spec.acquireTime, acquired);
  assertEquals(spec.renewTime, microTime(clock.now()));
  assertEquals(spec.leaseTransitions, 0);
  clock.advance(3_999);
  // b observed a's renew only now (its own clock): not expired yet for b.
  assertEquals(await b.tryAcquireOrRenew(), false);

  // a stops renewing: b takes over one lease duration after it last saw a change.
  clock.advance(3_999);
  assertEquals(await b.tryAcquireOrRenew(), false);
  clock.advance(1);
  assert(await b.tryAcquireOrRenew());
  spec = api.lease!.spec!;
  assertEquals(spec.holderIdentity, "b");
  assertEquals(spec.leaseTransitions, 1);
  assertEquals(spec.acquireTime, microTime(clock.now()));

  // A stale writer loses on resourceVersion (409 is a failed try, not an error).
  const errors: unknown[] = [];
  const stale = elector(api, "c", clock, { onError: (e) => errors.push(e) });
  assertEquals(await stale.tryAcquireOrRenew(), false); // both see b's record now...
  assertEquals(await a.tryAcquireOrRenew(), false);
  clock.advance(4_000); // ...and both find it expired at once
  const before = api.rv;
  const racing = [stale.tryAcquireOrRenew(), a.tryAcquireOrRenew()];
  const won = await Promise.all(racing);
  assertEquals(won.filter(Boolean).length, 1, `exactly one wins: ${won}`);
  assertEquals(api.rv, before + 1);
  assertEquals(errors, []);
});

Deno.test("leader: release clears the holder with a valid update; the next holder counts a transition", async () => {
  const api = new FakeLeaseApi();
  const clock = new FakeClock();
  const stopped: string[] = [];
  const a = elector(api, "a", clock, { onStoppedLeading: (r) => stopped.push(r) });
  const b = elector(api, "b", clock);
  const stop = new AbortController();
  const run = a.run(stop.signal);
  await flush();
  assert(a.isLeader);
  assertEquals(await b.tryAcquireOrRenew(), false);
  stop.abort();
  assertEquals(await run, "stopped");
  assert(await a.release());
  assertEquals(stopped, ["released"]);
  const spec = api.lease!.spec!;
  assertEquals(spec.holderIdentity, "");
  assertEquals(spec.leaseDurationSeconds, 1);
  assertEquals(spec.leaseTransitions, 0);
  assert(MICRO_TIME.test(spec.renewTime!));
  assertEquals(await a.release(), false, "a second release writes nothing");
  // b takes the released Lease at once, without waiting for any duration.
  assert(await b.tryAcquireOrRenew());
  assertEquals(api.lease!.spec!.holderIdentity, "b");
  assertEquals(api.lease!.spec!.leaseDurationSeconds, 4);
  assertEquals(api.lease!.spec!.leaseTransitions, 1);
});

Deno.test("leader: a leader that cannot renew within the renew deadline has lost (self-fencing)", async () => {
  const api = new FakeLeaseApi();
  const clock = new FakeClock();
  const events: string[] = [];
  const errors: unknown[] = [];
  const a = elector(api, "a", clock, {
    onStartedLeading: () => events.push("started"),
    onStoppedLeading: (r) => events.push(r),
    onError: (e) => errors.push(e),
  });
  const stop = new AbortController();
  let result: string | undefined;
  const run = a.run(stop.signal).then((r) => result = r);
  await flush();
  assertEquals(events, ["started"]);
  for (let i = 0; i < 3; i++) {
    clock.advance(1_000);
    await flush();
  }
  assert(a.isLeader);
  const lastRenew = clock.now();
  api.failWith = new TypeError("connection reset");
  // Retries every retry period; until the deadline it still leads.
  for (let i = 0; i < 2; i++) {
    clock.advance(1_000);
    await flush();
    assertEquals(result, undefined);
    assert(a.isLeader);
  }
  clock.advance(1_000); // lastRenew + renew deadline (3 s)
  await flush();
  await run;
  assertEquals(result, "lost");
  assertEquals(events, ["started", "lost"]);
  assert(!a.isLeader);
  assertEquals(clock.now() - lastRenew, 3_000);
  // Two failed renewals; at the deadline itself no attempt is made (the fence is already closed).
  assert(errors.length >= 2, `attempts reported: ${errors.length}`);
  assert(!a.fence.open, "the fence is closed");
  // A lost leader does not release (it must not write any more).
  api.failWith = undefined;
  assertEquals(await a.release(), false);
  assertEquals(api.lease!.spec!.holderIdentity, "a");
});

Deno.test("leader: a renewal failing shortly before the renew deadline does not put the loss off past it", async () => {
  const api = new FakeLeaseApi();
  const clock = new FakeClock();
  const base = api.client();
  // Once set, each update fails 150 ms after it is sent (a connection that answers late with an
  // error; an attempt is two updates, the second from a fresh read): attempts at +1 s and +2.3 s
  // fail at +1.3 s and +2.6 s, the second shortly before the deadline (+3 s).
  let failSlowly = false;
  const client = {
    ...base,
    update: (...args: Parameters<KubeClient["update"]>) =>
      failSlowly
        ? new Promise((_, reject) =>
          clock.setTimer(() => reject(new TypeError("connection reset")), 150)
        )
        : base.update(...args),
  } as unknown as KubeClient;
  const a = elector(api, "a", clock, { client });
  const stop = new AbortController();
  let result: string | undefined;
  const run = a.run(stop.signal).then((r) => result = r);
  await flush();
  for (let i = 0; i < 3; i++) {
    clock.advance(1_000);
    await flush();
  }
  assert(a.isLeader);
  const lastRenew = clock.now();
  failSlowly = true;
  let lostAfter: number | undefined;
  for (let i = 0; i < 60 && lostAfter === undefined; i++) {
    clock.advance(100);
    await flush();
    if (result !== undefined) lostAfter = clock.now() - lastRenew;
  }
  await run;
  assertEquals(result, "lost");
  // At the deadline, as client-go's renew loop (bounded by it); before, the loss came a retry
  // period after the last failed attempt (+3.8 s here).
  assertEquals(lostAfter, 3_000);
});

Deno.test("leader S13: the fence counts from the Lease write, not from a slow read before it", async () => {
  const api = new FakeLeaseApi();
  const clock = new FakeClock();
  let unblock!: () => void;
  const held = new Promise<void>((r) => unblock = r);
  const base = api.client() as unknown as Record<string, (...a: unknown[]) => Promise<unknown>>;
  // The read hangs (a connection stalled) far past the renew deadline, then the write goes fast.
  const slow = { ...base, get: async (...a: unknown[]) => (await held, base.get(...a)) };
  const a = elector(api, "a", clock, { client: slow as unknown as KubeClient });
  const attempt = a.tryAcquireOrRenew();
  clock.advance(10_000);
  unblock();
  assert(await attempt);
  assert(a.fence.open, "a fresh Lease with a closed fence");
  assertEquals(a.fence.renewalAgeMs(), 0);
});

Deno.test("leader: a Lease deleted while another holds it is not taken before that holder's term ran out", async () => {
  const api = new FakeLeaseApi();
  const clock = new FakeClock();
  const a = elector(api, "a", clock);
  const b = elector(api, "b", clock);
  assert(await a.tryAcquireOrRenew());
  assertEquals(await b.tryAcquireOrRenew(), false); // b saw a's renewal now
  api.lease = undefined; // `kubectl delete lease`
  clock.advance(1_000);
  assertEquals(await b.tryAcquireOrRenew(), false, "b took a deleted Lease a may still hold");
  assertEquals(api.lease, undefined);
  // a, still alive, re-creates it at its next renewal and b keeps seeing it.
  assert(await a.tryAcquireOrRenew());
  assertEquals(api.lease!.spec!.holderIdentity, "a");
  assertEquals(await b.tryAcquireOrRenew(), false);
  // Deleted again and a gone for good: b takes it a lease duration after a's last renewal.
  api.lease = undefined;
  clock.advance(3_999);
  assertEquals(await b.tryAcquireOrRenew(), false);
  clock.advance(1);
  assert(await b.tryAcquireOrRenew());
  assertEquals(api.lease!.spec!.holderIdentity, "b");
  // A candidate that never saw a holder creates a missing Lease at once.
  const fresh = new FakeLeaseApi();
  assert(await elector(fresh, "c", clock).tryAcquireOrRenew());
});

Deno.test("leader issue 25: renewTime and acquireTime are the times the Lease write is sent", async () => {
  const api = new FakeLeaseApi();
  const clock = new FakeClock();
  const start = clock.now();
  let unblock!: () => void;
  let held = new Promise<void>((r) => unblock = r);
  const base = api.client() as unknown as Record<string, (...a: unknown[]) => Promise<unknown>>;
  // Every read hangs 4.5 s (a stalled connection, as measured in issue 25), then the write goes.
  const slow = { ...base, get: async (...a: unknown[]) => (await held, base.get(...a)) };
  const a = elector(api, "a", clock, { client: slow as unknown as KubeClient });
  // Acquire (create, the Lease is missing): stamped after the read.
  let attempt = a.tryAcquireOrRenew();
  clock.advance(4_500);
  unblock();
  assert(await attempt);
  assertEquals(api.writes[0].verb, "create");
  assertEquals(api.writes[0].spec?.acquireTime, microTime(start + 4_500));
  assertEquals(api.writes[0].spec?.renewTime, microTime(start + 4_500));
  // Renew (update from the record written last, no read): renewTime when sent, acquireTime kept.
  clock.advance(1_000);
  assert(await a.tryAcquireOrRenew());
  assertEquals(api.writes[1].verb, "update");
  assertEquals(api.writes[1].spec?.renewTime, microTime(start + 5_500));
  assertEquals(api.writes[1].spec?.acquireTime, microTime(start + 4_500));
  // Take over an expired Lease of another holder: both times when sent.
  const b = elector(api, "b", clock, { client: slow as unknown as KubeClient });
  held = new Promise<void>((r) => unblock = r);
  attempt = b.tryAcquireOrRenew();
  unblock();
  assert(!(await attempt), "b took a Lease it has just seen renewed");
  held = new Promise<void>((r) => unblock = r);
  attempt = b.tryAcquireOrRenew();
  clock.advance(4_001);
  unblock();
  assert(await attempt);
  // The expiry counts from b's observation, made when the read answered (start + 5.5 s), not
  // when the attempt began.
  assertEquals(api.writes[2].spec?.holderIdentity, "b");
  assertEquals(api.writes[2].spec?.acquireTime, microTime(start + 9_501));
  assertEquals(api.writes[2].spec?.renewTime, microTime(start + 9_501));
});

Deno.test("leader: state candidate → leading(term 1) → lost → leading(term 2) → released; each term's signal ends with it", async () => {
  const api = new FakeLeaseApi();
  const clock = new FakeClock();
  const a = elector(api, "a", clock);
  const b = elector(api, "b", clock);
  assertEquals(a.state.kind, "candidate");
  assert(!a.fence.open);
  assert(await a.tryAcquireOrRenew());
  const s1 = a.state;
  assert(s1.kind === "leading", s1.kind);
  assertEquals(s1.term.number, 1);
  assert(a.fence.open && !s1.term.signal.aborted);
  // A renewal stays in the same term.
  clock.advance(1_000);
  assert(await a.tryAcquireOrRenew());
  assert(a.state.kind === "leading" && a.state.term === s1.term);
  // b takes the Lease over once it ran out on b's clock; a, seeing another holder, has lost
  // (whatever the record's age) and does not take it back in the same attempt.
  assertEquals(await b.tryAcquireOrRenew(), false);
  clock.advance(4_000);
  assert(await b.tryAcquireOrRenew());
  assertEquals(await a.tryAcquireOrRenew(), false);
  assertEquals(a.state.kind, "lost");
  assert(s1.term.signal.aborted);
  const reason = s1.term.signal.reason;
  assert(isFenced(reason) && reason.reason === "NotHeld" && reason.inFlight, String(reason));
  assert(a.fence.signal.aborted && !a.fence.open);
  // From lost, a later acquisition starts a new term with a signal of its own.
  clock.advance(4_000);
  assert(await a.tryAcquireOrRenew());
  const s2 = a.state;
  assert(s2.kind === "leading" && s2.term.number === 2 && !s2.term.signal.aborted);
  assert(!a.fence.signal.aborted && a.fence.open);
  assert(await a.release());
  assertEquals(a.state.kind, "released");
  assert(s2.term.signal.aborted && !a.fence.open);
  assertEquals(await a.release(), false, "released twice");
});

Deno.test("leader: stopped while it acquires, the term ends before any write and nothing is released", async () => {
  const api = new FakeLeaseApi();
  const clock = new FakeClock();
  const stop = new AbortController();
  const started: string[] = [];
  const base = api.client() as unknown as Record<string, (...a: unknown[]) => Promise<unknown>>;
  // The create answers after the stop was requested.
  const client = {
    ...base,
    create: async (...a: unknown[]) => {
      const r = await base.create(...a);
      stop.abort();
      return r;
    },
  };
  const a = elector(api, "a", clock, {
    client: client as unknown as KubeClient,
    onStartedLeading: () => started.push("started"),
  });
  assertEquals(await a.run(stop.signal), "stopped");
  assertEquals(a.state.kind, "released");
  assert(!a.fence.open);
  assertEquals(started, []);
  assertEquals(await a.release(), false);
  assertEquals(api.lease!.spec!.holderIdentity, "a", "the Lease runs out by itself");
});

/**
 * Seal tests: `a` ("pod-a_1") holds the Lease; the policy's informer shows `informerHolder`; `b`
 * ("pod-b_2", sealing, its reports in `reports`) has seen a's Lease, which has now expired for it.
 */
async function sealSetup(informerHolder: string) {
  const api = new FakeLeaseApi();
  const clock = new FakeClock();
  const reports: HandoverReport[] = [];
  const a = elector(api, "pod-a_1", clock);
  assert(await a.tryAcquireOrRenew());
  api.policy = { informerHolder, probes: [] };
  const b = await sealSetupB(api, clock, reports);
  return { api, clock, reports, a, b };
}

/** A sealing candidate "pod-b_2" that has seen the current Lease, which has now expired for it. */
async function sealSetupB(api: FakeLeaseApi, clock: FakeClock, reports: HandoverReport[]) {
  const b = elector(api, "pod-b_2", clock, {
    sealTakeover: true,
    onHandover: (r) => reports.push(r),
  });
  assertEquals(await b.tryAcquireOrRenew(), false);
  clock.advance(4_000);
  return b;
}

Deno.test("leader: a takeover is sealed: the new holder writes itself only after the apiserver's policy refuses the previous one", async () => {
  const { api, clock, reports, a, b } = await sealSetup("pod-a_1");

  // b writes its marker, then probes every 20 ms while the apiserver's informer lags.
  const abort = new AbortController();
  const taking = b.tryAcquireOrRenew(abort.signal, abort.signal);
  await flush();
  const marker = api.lease!.spec!.holderIdentity!;
  assert(marker.startsWith("handover:"), marker);
  assert(!marker.includes("_"), `a marker must not hold '_': ${marker}`);
  assertEquals(api.lease!.spec!.acquireTime, api.writes[0].spec!.acquireTime, "not an acquisition");
  for (let i = 0; i < 3; i++) {
    clock.advance(20);
    await flush();
  }
  assertEquals(api.lease!.spec!.holderIdentity, marker, "b took the Lease before the seal held");
  assert(api.policy!.probes.length >= 3 && api.policy!.probes.every((p) => !p.admitted));
  // The informer catches up with the marker: the next probe's refusal names it; b takes the Lease.
  api.policy!.informerHolder = marker;
  clock.advance(20);
  await flush();
  assert(await taking);
  const spec = api.lease!.spec!;
  assertEquals(spec.holderIdentity, "pod-b_2");
  assertEquals(spec.leaseTransitions, 1);
  assertEquals(spec.acquireTime, microTime(clock.now()));
  assertEquals(reports.length, 1);
  assertEquals(reports[0].step, "seal");
  assertEquals(reports[0].outcome, "in-force");
  assertEquals(reports[0].previous, "pod-a_1");
  assertEquals(reports[0].holder, marker);
  // a, still running, sees the marker's successor and may not write.
  assertEquals(await a.tryAcquireOrRenew(), false);
  assertEquals(a.fence.open, false);
});

Deno.test("leader: a seal without a policy in force waits for nothing; one that never holds ends at the renew deadline", async () => {
  // No policy: the first probe is admitted, the takeover follows at once.
  const { api, clock, reports, b } = await sealSetup("pod-b_x"); // admits b: as with no policy
  assert(await b.tryAcquireOrRenew());
  assertEquals(reports.map((r) => `${r.step} ${r.outcome} ${r.probes}`), ["seal not-in-force 1"]);
  // A policy stuck on the old holder: the seal gives up at the renew deadline (3 s) and takes.
  const c = elector(api, "pod-c_3", clock, {
    sealTakeover: true,
    onHandover: (r) => reports.push(r),
  });
  api.policy!.informerHolder = "pod-b_2";
  assertEquals(await c.tryAcquireOrRenew(), false);
  clock.advance(4_000);
  const abort = new AbortController();
  const taking = c.tryAcquireOrRenew(abort.signal, abort.signal);
  for (let i = 0; i < 200 && reports.length < 2; i++) {
    clock.advance(20);
    await flush();
  }
  assert(await taking);
  assertEquals(reports[1].outcome, "timeout");
  assertEquals(reports[1].holder, "pod-b_2");
  assert(reports[1].waitedMs >= 3_000 && reports[1].waitedMs < 3_100, `${reports[1].waitedMs}`);
  assertEquals(api.lease!.spec!.holderIdentity, "pod-c_3");
});

Deno.test("leader issue 27: a leader renews with one update from the record it wrote last; a conflict falls back to a read", async () => {
  const api = new FakeLeaseApi();
  const clock = new FakeClock();
  const a = elector(api, "a", clock);
  const b = elector(api, "b", clock);
  assert(await a.tryAcquireOrRenew());
  assertEquals(api.calls, ["get", "create"]);
  const term = a.state.kind === "leading" ? a.state.term : undefined;
  // At rest: one request per renewal.
  api.calls = [];
  for (let i = 0; i < 3; i++) {
    clock.advance(1_000);
    assert(await a.tryAcquireOrRenew());
  }
  assertEquals(api.calls, ["update", "update", "update"]);
  assertEquals(api.lease!.spec!.renewTime, microTime(clock.now()));
  // Someone else wrote the Lease (same holder): the update's 409 is followed by a read and an
  // update, in the same attempt and the same term.
  api.touch();
  api.calls = [];
  clock.advance(1_000);
  assert(await a.tryAcquireOrRenew());
  assertEquals(api.calls, ["update", "get", "update"]);
  assert(a.state.kind === "leading" && a.state.term === term);
  // Another holder wrote it: the 409, then the read shows that holder: lost, nothing written.
  clock.advance(4_000);
  assertEquals(await b.tryAcquireOrRenew(), false); // b first sees a's record now...
  clock.advance(4_000);
  assert(await b.tryAcquireOrRenew()); // ...and takes it once it ran out on b's clock
  api.calls = [];
  assertEquals(await a.tryAcquireOrRenew(), false);
  assertEquals(api.calls, ["update", "get"]);
  assertEquals(a.state.kind, "lost");
  assertEquals(api.lease!.spec!.holderIdentity, "b");
});

Deno.test("leader issue 27: the one-request renewal stamps the fence when the update is sent, and only on success", async () => {
  const api = new FakeLeaseApi();
  const clock = new FakeClock();
  const base = api.client() as unknown as Record<string, (...a: unknown[]) => Promise<unknown>>;
  let gate: Promise<void> | undefined;
  let failNext: Error | undefined;
  // The update may hang (a slow answer) or fail once (a 500) before reaching the store.
  const client = {
    ...base,
    update: async (...a: unknown[]) => {
      if (gate) await gate;
      if (failNext) {
        const err = failNext;
        failNext = undefined;
        throw err;
      }
      return base.update(...a);
    },
  };
  const a = elector(api, "a", clock, { client: client as unknown as KubeClient });
  assert(await a.tryAcquireOrRenew());
  // A renewal whose answer takes 2 s: the fence counts from the sending.
  clock.advance(1_000);
  const sentAt = clock.now();
  let open!: () => void;
  gate = new Promise<void>((r) => open = r);
  const slow = a.tryAcquireOrRenew();
  clock.advance(2_000);
  assertEquals(a.fence.renewalAgeMs(), 3_000, "renewed before the answer");
  open();
  gate = undefined;
  assert(await slow);
  assertEquals(a.fence.renewalAgeMs(), 2_000);
  assertEquals(api.lease!.spec!.renewTime, microTime(sentAt));
  // A renewal that fails (500, then the fallback fails too): the fence keeps its old stamp.
  api.calls = [];
  api.failWith = new ApiError(500, { reason: "InternalError", message: "etcd" });
  assertEquals(await a.tryAcquireOrRenew(), false);
  assertEquals(api.calls, ["update", "get"]);
  assertEquals(a.fence.renewalAgeMs(), 2_000);
  api.failWith = undefined;
  // The fast path fails once (500): the read and update that follow renew, stamped at their send.
  failNext = new ApiError(500, { reason: "InternalError", message: "etcd" });
  api.calls = [];
  assert(await a.tryAcquireOrRenew());
  assertEquals(api.calls, ["get", "update"]); // the failed one never reached the store
  assertEquals(a.fence.renewalAgeMs(), 0);
});

Deno.test("leader issue 27: release is one update from the record written last", async () => {
  const api = new FakeLeaseApi();
  const clock = new FakeClock();
  const a = elector(api, "a", clock);
  assert(await a.tryAcquireOrRenew());
  api.calls = [];
  assert(await a.release());
  assertEquals(api.calls, ["update"]);
  assertEquals(api.lease!.spec!.holderIdentity, "");
  // After another write (409): a read, then the update.
  const b = elector(api, "b", clock);
  assert(await b.tryAcquireOrRenew());
  api.touch();
  api.calls = [];
  assert(await b.release());
  assertEquals(api.calls, ["update", "get", "update"]);
  assertEquals(api.lease!.spec!.holderIdentity, "");
});

/** Candidate `b` of a Lease `a` holds, campaigning with retry period 2.4 s (lease 4 s). */
async function standby(watchLease: boolean) {
  const api = new FakeLeaseApi();
  const clock = new FakeClock();
  const a = elector(api, "a", clock);
  assert(await a.tryAcquireOrRenew());
  const b = elector(api, "b", clock, { retryPeriodMs: 2_400, watchLease });
  const stop = new AbortController();
  const run = b.run(stop.signal);
  await flush();
  assertEquals(b.state.kind, "candidate");
  return { api, clock, a, b, stop, run, t0: clock.now() };
}

Deno.test("leader issue 27: a standby watching the Lease takes it at once when it is released", async () => {
  const { api, clock, a, b, stop, run, t0 } = await standby(true);
  assertEquals(api.watchers, 1, "the standby watches the Lease");
  clock.advance(300);
  await flush();
  assert(await a.release());
  await flush();
  assert(b.isLeader, "the standby did not take the released Lease at once");
  assertEquals(clock.now() - t0, 300, "it waited for time to pass");
  assertEquals(api.lease!.spec!.holderIdentity, "b");
  assertEquals(api.watchers, 0, "the leader still watches");
  stop.abort();
  assertEquals(await run, "stopped");
});

Deno.test("leader issue 27: control: without the watch, the release is seen at the next retry", async () => {
  const { api, clock, a, b, stop, run, t0 } = await standby(false);
  assertEquals(api.watchers, 0);
  clock.advance(300);
  await flush();
  assert(await a.release());
  await flush();
  assertEquals(b.state.kind, "candidate");
  clock.advance(2_400 - 300 - 1);
  await flush();
  assertEquals(b.state.kind, "candidate");
  clock.advance(1);
  await flush();
  assert(b.isLeader);
  assertEquals(clock.now() - t0, 2_400);
  stop.abort();
  assertEquals(await run, "stopped");
});

Deno.test("leader issue 27: a standby watching the Lease tries when it runs out, not at the next retry after", async () => {
  for (const watchLease of [true, false]) {
    const { clock, b, stop, run, t0 } = await standby(watchLease);
    // a stops renewing (SIGKILL). b saw its last renewal at t0: it runs out at t0 + 4 s on b's
    // clock, between b's retries at t0 + 2.4 s and t0 + 4.8 s.
    let tookMs: number | undefined;
    for (let i = 0; i < 60 && tookMs === undefined; i++) {
      clock.advance(100);
      await flush();
      if (b.isLeader) tookMs = clock.now() - t0;
    }
    assertEquals(tookMs, watchLease ? 4_000 : 4_800, `watchLease ${watchLease}`);
    stop.abort();
    assertEquals(await run, "stopped");
  }
});

Deno.test("leader issue 27: a standby whose watch fails still tries every retry period", async () => {
  for (const code of [500, 403]) {
    const api = new FakeLeaseApi();
    const clock = new FakeClock();
    const errors: unknown[] = [];
    const a = elector(api, "a", clock);
    assert(await a.tryAcquireOrRenew());
    api.watchFailsWith = new ApiError(code, { reason: "Failed", message: `watch failed ${code}` });
    const b = elector(api, "b", clock, { retryPeriodMs: 2_400, onError: (e) => errors.push(e) });
    const stop = new AbortController();
    const run = b.run(stop.signal);
    await flush();
    api.calls = [];
    // a keeps renewing; b polls every retry period. A failed watch is reopened a retry period
    // later; one that was refused (403: the verb not granted) is not reopened at all.
    for (let i = 0; i < 10 * 24; i++) {
      clock.advance(100);
      await flush();
      if (i % 10 === 9) assert(await a.tryAcquireOrRenew());
    }
    const count = (verb: string) => api.calls.filter((c) => c === verb).length;
    assertEquals(count("get"), 10, `code ${code}`);
    assertEquals(count("watch"), code === 403 ? 0 : 10, `code ${code}`);
    assert(
      errors.some((e) => e instanceof ApiError && e.code === code),
      "the failure was not told",
    );
    // Released: b takes it at its next retry at the latest.
    assert(await a.release());
    for (let i = 0; i < 24 && !b.isLeader; i++) {
      clock.advance(100);
      await flush();
    }
    assert(b.isLeader, `code ${code}`);
    stop.abort();
    assertEquals(await run, "stopped");
  }
});
