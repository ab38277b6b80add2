/**
 * Sharded election units (lib/runtime/shard_elector.ts) against an in-memory Lease API with
 * optimistic concurrency, on a fake clock: fair share, taking only free or run-out Leases,
 * giving back above the fair share (work drained before the Lease is released), the per-shard
 * write fence, a shard lost past the renew deadline (the replica goes on), and shutdown. The
 * behaviour between processes on a real apiserver: tests/e2e/shards_smoke_test.ts.
 */
import { assert, assertEquals } from "../assert.ts";
import { isFenced } from "../../lib/kube/errors.ts";
import { FakeLeases } from "./fake_leases.ts";
import { FakeClock } from "../../lib/runtime/clock.ts";
import { log } from "../../lib/runtime/log.ts";
import {
  fairShare,
  memberLeaseName,
  SHARD_MEMBER_LABEL,
  ShardElector,
  type ShardHooks,
  shardLeaseName,
  targetShare,
} from "../../lib/runtime/shard_elector.ts";
import { shardOf } from "../../lib/runtime/shards.ts";
import { HASH_LAST_ANNOTATION, shardLeaseMetadata } from "../../lib/runtime/shard_fence_cel.ts";
import { ShardWork } from "../../lib/runtime/shard_work.ts";
import type { ShardReflector } from "../../lib/runtime/shard_reflector.ts";
import type { Controller } from "../../lib/runtime/controller.ts";
import { WorkQueue } from "../../lib/runtime/queue.ts";
import { Store } from "../../lib/runtime/store.ts";
import type { KubeObject } from "../../lib/kube/client.ts";

/** Hooks that record every call, in order. */
function recorder(): ShardHooks & { calls: string[] } {
  const calls: string[] = [];
  return {
    calls,
    acquired: (k) => calls.push(`acquired ${k}`),
    stopping: (k) => {
      calls.push(`stopping ${k}`);
      return Promise.resolve();
    },
    stopped: (k) => calls.push(`stopped ${k}`),
  };
}

const N = 4;
const ID = "op";

function elector(
  api: FakeLeases,
  identity: string,
  clock: FakeClock,
  hooks: ShardHooks,
  shards = N,
) {
  return new ShardElector({
    client: api.client(),
    namespace: "ns",
    id: ID,
    identity,
    shards,
    leaseDurationSeconds: 4,
    renewDeadlineMs: 3_000,
    retryPeriodMs: 1_000,
    gracefulShutdownTimeoutMs: 1_000,
    hooks,
    log: log("test"),
    clock,
    random: () => 0,
  });
}

/** Lets pending promise callbacks run (the fake API answers at once). */
async function flush(): Promise<void> {
  for (let i = 0; i < 20; i++) await new Promise((r) => setTimeout(r, 0));
}

/** Advances the fake clock in 100 ms steps, letting promises run at each. */
async function run(clock: FakeClock, ms: number): Promise<void> {
  for (let t = 0; t < ms; t += 100) {
    clock.advance(100);
    await flush();
  }
}

/** A namespace of each shard (found by hashing candidates). */
function namespaceOfShard(): string[] {
  const out: string[] = [];
  for (let i = 0; out.filter(Boolean).length < N && i < 10_000; i++) {
    const ns = `ns-${i}`;
    out[shardOf(ns, N)] ??= ns;
  }
  return out;
}

function fenced(fn: () => void): boolean {
  try {
    fn();
    return false;
  } catch (err) {
    if (isFenced(err)) return true;
    throw err;
  }
}

Deno.test("shard elector: fair share is ceil(shards / live members)", () => {
  assertEquals(fairShare(4, 1), 4);
  assertEquals(fairShare(4, 2), 2);
  assertEquals(fairShare(4, 3), 2);
  assertEquals(fairShare(5, 2), 3);
  assertEquals(fairShare(4, 8), 1);
  assertEquals(fairShare(4, 0), 4);
});

Deno.test("shard elector: a replica's share is floor(n / live) plus one for the first n mod live ranks", () => {
  assertEquals([0, 1, 2].map((r) => targetShare(4, 3, r)), [2, 1, 1]);
  assertEquals([0, 1, 2, 3].map((r) => targetShare(6, 4, r)), [2, 2, 1, 1]);
  assertEquals([0, 1].map((r) => targetShare(5, 2, r)), [3, 2]);
  assertEquals(targetShare(4, 1, 0), 4);
  assertEquals(targetShare(4, 0, 0), 4);
  assertEquals([0, 1, 2, 3, 4].map((r) => targetShare(2, 5, r)), [1, 1, 0, 0, 0]);
});

/** Starts electors for `ids` on `api`, `shards` each; returns them and their stop. */
function replicas(api: FakeLeases, clock: FakeClock, ids: string[], shards: number) {
  const stops = ids.map(() => new AbortController());
  const electors = ids.map((id, i) => {
    const e = elector(api, id, clock, recorder(), shards);
    e.start(stops[i].signal);
    return e;
  });
  return {
    electors,
    stop: () => Promise.all(electors.map((e, i) => (stops[i].abort(), e.stop()))),
  };
}

Deno.test("shard elector: 4 shards over 3 replicas settle at 2, 1, 1", async () => {
  const api = new FakeLeases();
  const clock = new FakeClock();
  const r = replicas(api, clock, ["a_1", "b_1", "c_1"], 4);
  try {
    await run(clock, 8_000);
    const counts = r.electors.map((e) => e.held().length);
    assertEquals([...counts].sort(), [1, 1, 2], `held ${counts}`);
    assertEquals(new Set(r.electors.flatMap((e) => e.held())).size, 4);
  } finally {
    await r.stop();
  }
});

Deno.test("shard elector: 6 shards over 3 replicas, a 4th joining: 2, 2, 1, 1", async () => {
  const api = new FakeLeases();
  const clock = new FakeClock();
  const r = replicas(api, clock, ["a_1", "b_1", "c_1"], 6);
  let d: ReturnType<typeof replicas> | undefined;
  try {
    await run(clock, 8_000);
    assertEquals(r.electors.map((e) => e.held().length), [2, 2, 2]);
    d = replicas(api, clock, ["d_1"], 6);
    await run(clock, 10_000);
    const counts = [...r.electors, ...d.electors].map((e) => e.held().length);
    assertEquals([...counts].sort(), [1, 1, 2, 2], `held ${counts}`);
    assertEquals(new Set([...r.electors, ...d.electors].flatMap((e) => e.held())).size, 6);
  } finally {
    await r.stop();
    await d?.stop();
  }
});

Deno.test("shard elector: alone it takes every shard; a second member gets half, given back drained then released; stop releases all", async () => {
  const api = new FakeLeases();
  const clock = new FakeClock();
  const ha = recorder();
  const hb = recorder();
  const a = elector(api, "a_1", clock, ha);
  const b = elector(api, "b_1", clock, hb);
  const stopA = new AbortController();
  const stopB = new AbortController();
  const nss = namespaceOfShard();
  try {
    a.start(stopA.signal);
    await run(clock, 1_000);
    assertEquals(a.held(), [0, 1, 2, 3]);
    for (let k = 0; k < N; k++) assertEquals(api.holder(shardLeaseName(ID, k)), "a_1");
    const member = api.leases.get(memberLeaseName(ID, "a_1"));
    assertEquals(member?.metadata?.labels?.[SHARD_MEMBER_LABEL], ID);
    assertEquals(member?.spec?.holderIdentity, "a_1");
    // Positive control of the fence: every shard's namespace passes.
    for (const ns of nss) a.fence.check("POST", `/api/v1/namespaces/${ns}/pods`);
    a.fence.check("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles");

    b.start(stopB.signal);
    await run(clock, 3_000);
    assertEquals(a.held().length, 2, `a holds ${a.held()}`);
    assertEquals(b.held().length, 2, `b holds ${b.held()}`);
    assertEquals(new Set([...a.held(), ...b.held()]).size, N);
    // A gave back its highest shards: stopping (drain) came before stopped, each once.
    for (const k of b.held()) {
      const stopping = ha.calls.indexOf(`stopping ${k}`);
      const stopped = ha.calls.indexOf(`stopped ${k}`);
      assert(stopping >= 0 && stopped > stopping, ha.calls.join("; "));
      assert(hb.calls.includes(`acquired ${k}`), hb.calls.join("; "));
      assertEquals(api.holder(shardLeaseName(ID, k)), "b_1");
      // A's writes to B's shards are fenced; B's pass.
      assert(fenced(() => a.fence.check("PUT", `/api/v1/namespaces/${nss[k]}/pods/x`)));
      b.fence.check("PUT", `/api/v1/namespaces/${nss[k]}/pods/x`);
    }
    for (const k of a.held()) {
      assert(fenced(() => b.fence.check("PUT", `/api/v1/namespaces/${nss[k]}/pods/x`)));
    }

    // B stops: its shards are released (holder cleared), its membership Lease deleted; A takes
    // them back at once (released Leases are free, and one live member means a share of 4).
    stopB.abort();
    await b.stop();
    assertEquals(b.held(), []);
    assert(!api.leases.has(memberLeaseName(ID, "b_1")));
    for (const k of [0, 1, 2, 3].filter((k) => !a.held().includes(k))) {
      assertEquals(api.holder(shardLeaseName(ID, k)), "");
      assert(hb.calls.indexOf(`stopping ${k}`) < hb.calls.indexOf(`stopped ${k}`));
    }
    await run(clock, 2_000);
    assertEquals(a.held(), [0, 1, 2, 3]);
  } finally {
    stopA.abort();
    stopB.abort();
    await a.stop();
  }
});

Deno.test("shard elector: a held shard is not taken before its Lease runs out on the taker's clock", async () => {
  const api = new FakeLeases();
  const clock = new FakeClock();
  // A dead replica's Lease of shard 0 (and no membership Lease: it is not live).
  const dead = clock.now();
  api.leases.set(shardLeaseName(ID, 0), {
    metadata: { name: shardLeaseName(ID, 0), namespace: "ns", resourceVersion: "1" },
    spec: {
      holderIdentity: "dead_1",
      leaseDurationSeconds: 4,
      renewTime: new Date(dead).toISOString().replace("Z", "000Z"),
    },
  });
  const h = recorder();
  const a = elector(api, "a_1", clock, h);
  const stop = new AbortController();
  try {
    a.start(stop.signal);
    await run(clock, 2_000);
    assertEquals(a.held(), [1, 2, 3]);
    assertEquals(api.holder(shardLeaseName(ID, 0)), "dead_1");
    await run(clock, 4_000);
    assertEquals(a.held(), [0, 1, 2, 3]);
  } finally {
    stop.abort();
    await a.stop();
  }
});

Deno.test("shard elector: a shard whose renewal fails past the renew deadline is lost; its fence closes, the others go on", async () => {
  const api = new FakeLeases();
  const clock = new FakeClock();
  const h = recorder();
  const a = elector(api, "a_1", clock, h);
  const stop = new AbortController();
  const nss = namespaceOfShard();
  try {
    a.start(stop.signal);
    await run(clock, 1_000);
    assertEquals(a.held(), [0, 1, 2, 3]);
    a.fence.check("POST", `/api/v1/namespaces/${nss[2]}/pods`); // positive control
    api.failWrites.add(shardLeaseName(ID, 2));
    await run(clock, 3_500);
    assert(fenced(() => a.fence.check("POST", `/api/v1/namespaces/${nss[2]}/pods`)));
    assertEquals(a.held(), [0, 1, 3]);
    assert(h.calls.includes("stopped 2"), h.calls.join("; "));
    for (const k of [0, 1, 3]) a.fence.check("POST", `/api/v1/namespaces/${nss[k]}/pods`);
    // The Lease writes get through again: the shard is taken again once free on this clock.
    api.failWrites.delete(shardLeaseName(ID, 2));
    await run(clock, 6_000);
    assertEquals(a.held(), [0, 1, 2, 3]);
  } finally {
    stop.abort();
    await a.stop();
  }
});

Deno.test("shard elector: rounds failing for longer than a lease duration make the replica unready, until one succeeds", async () => {
  const api = new FakeLeases();
  const clock = new FakeClock();
  const a = elector(api, "a_1", clock, recorder());
  const stop = new AbortController();
  try {
    a.start(stop.signal);
    await run(clock, 1_000);
    assertEquals(a.held(), [0, 1, 2, 3]);
    assertEquals(a.unready(), undefined);
    api.failList = true;
    await run(clock, 3_000); // within the lease duration (4 s): still ready
    assertEquals(a.unready(), undefined);
    assert(a.failingForMs() > 0);
    await run(clock, 3_000);
    assert(a.failingForMs() > 4_000, `failing for ${a.failingForMs()} ms`);
    assert(a.unready() !== undefined, "failing for more than 4 s");
    api.failList = false;
    await run(clock, 1_500);
    assertEquals(a.unready(), undefined);
    assertEquals(a.failingForMs(), 0);
  } finally {
    stop.abort();
    await a.stop();
  }
});

Deno.test("shard elector: a take that succeeds as the signal aborts is released on stop (the Lease is cleared)", async () => {
  const api = new FakeLeases();
  const clock = new FakeClock();
  const a = elector(api, "a_1", clock, recorder());
  const stop = new AbortController();
  const taken = new Set<string>();
  api.onWrite = (name) => {
    if (!name.includes("-shard-") || api.holder(name) !== "a_1" || taken.has(name)) return;
    taken.add(name);
    // SIGTERM lands while the second take's write is answered (the others are in flight).
    if (taken.size === 2) stop.abort();
  };
  try {
    a.start(stop.signal);
    await run(clock, 1_000);
  } finally {
    stop.abort();
    await a.stop();
  }
  // The round sends its takes together, so every one was written (answered after the abort).
  assertEquals(taken.size, N, "positive control: the takes were written");
  for (let k = 0; k < N; k++) {
    assertEquals(api.holder(shardLeaseName(ID, k)), "", `shard ${k}`);
  }
});

Deno.test("shard elector: the membership Lease is renewed while a round is slow", async () => {
  const api = new FakeLeases();
  const clock = new FakeClock();
  const a = elector(api, "a_1", clock, recorder());
  const stop = new AbortController();
  let open!: () => void;
  const renewTime = () => api.leases.get(memberLeaseName(ID, "a_1"))?.spec?.renewTime;
  try {
    a.start(stop.signal);
    await run(clock, 1_000);
    assertEquals(a.held(), [0, 1, 2, 3]);
    api.listGate = new Promise<void>((r) => open = r);
    await run(clock, 1_500); // the next round now waits in its list
    const before = renewTime();
    await run(clock, 5_000); // longer than the lease duration (4 s)
    assert(renewTime() !== before, `membership not renewed since ${before}`);
  } finally {
    open?.();
    api.listGate = undefined;
    stop.abort();
    await a.stop();
  }
});

Deno.test("shard work: a queue filter drops keys of other shards; dropWhere empties a shard; drainWhere waits for its in-flight key", async () => {
  const q = new WorkQueue({ clock: new FakeClock() });
  let held = new Set(["a", "b"]);
  q.setFilter((key) => held.has(key.split("/")[0]));
  q.add("a/1");
  q.add("b/1");
  q.add("c/1"); // not held: dropped
  q.addAfter("b/2", 10);
  assertEquals(q.depth, 2);
  assertEquals(q.depthWhere((k) => k.startsWith("b/")), 1);
  const taken = await q.get();
  assertEquals(taken, "a/1");
  q.add("a/1"); // dirty while in flight
  // Shard "a" goes: its keys leave, the in-flight one is waited for and not queued again.
  held = new Set(["b"]);
  assertEquals(q.dropWhere((k) => k.startsWith("a/")), 0);
  let drained: boolean | undefined;
  const wait = q.drainWhere((k) => k.startsWith("a/"), 1_000).then((d) => drained = d);
  await flush();
  assertEquals(drained, undefined);
  q.done("a/1");
  await wait;
  assertEquals(drained, true);
  assertEquals(q.depth, 1);
  assertEquals(await q.get(), "b/1");
  // Dropping b removes its delayed add too.
  assertEquals(q.dropWhere((k) => k.startsWith("b/")), 1);
  assertEquals(q.delayed, 0);
});

Deno.test("shard work: a store filter caches only admitted objects, silently; prune drops what it refuses now", () => {
  const store = new Store<KubeObject>();
  const events: string[] = [];
  store.addHandler({
    add: (o) => events.push(`add ${o.metadata?.namespace}`),
    delete: (o) => events.push(`delete ${o.metadata?.namespace}`),
  });
  const obj = (ns: string, rv = "1"): KubeObject => ({
    metadata: { namespace: ns, name: "x", resourceVersion: rv },
  });
  let held = new Set(["a", "b"]);
  store.setFilter((o) => held.has(o.metadata?.namespace ?? ""));
  store.replace([obj("a"), obj("b"), obj("c")]);
  assertEquals(store.keys().sort(), ["a/x", "b/x"]);
  store.upsert(obj("c", "2"));
  store.remove(obj("c", "3"));
  assertEquals(events, ["add a", "add b"]);
  held = new Set(["a"]);
  assertEquals(store.prune(), 1);
  assertEquals(store.keys(), ["a/x"]);
  assertEquals(events, ["add a", "add b"], "pruned without events");
});

Deno.test("shard work: a relist finishing while the shard is given back does not mark it synced nor enqueue its keys", async () => {
  const relists: (() => void)[] = [];
  const reflector = {
    setHeld: () => new Promise<void>((r) => relists.push(r)),
  } as unknown as ShardReflector<KubeObject>;
  const enqueued: number[] = [];
  const controller = {
    queue: new WorkQueue({ clock: new FakeClock() }),
    enqueueAll: () => {
      enqueued.push(1);
      return 1;
    },
  } as unknown as Controller;
  const work = new ShardWork({
    shards: N,
    controllers: () => [controller],
    reflectors: [reflector],
    log: log("test"),
  });
  const nss = namespaceOfShard();
  work.acquired(0);
  work.acquired(1);
  await work.stopping(0, 1_000); // shard 0 given back before its relist ends
  for (const r of relists) r();
  await flush();
  // Positive control: shard 1's relist synced it and enqueued its keys.
  assertEquals(enqueued.length, 1);
  assert(work.takes(`${nss[1]}/x`));
  assert(!work.takes(`${nss[0]}/x`), "shard 0 is leaving: its keys are not taken");
  assertEquals(work.unsynced(), []);
});

Deno.test("shard elector: Leases beyond --shards go once nobody holds them; a held one stays", async () => {
  const api = new FakeLeases();
  const clock = new FakeClock();
  const lease = (name: string, holder: string) => ({
    metadata: { name, namespace: "ns", resourceVersion: String(++api.rv) },
    spec: { holderIdentity: holder, leaseDurationSeconds: 4 },
  });
  api.leases.set(shardLeaseName(ID, 5), lease(shardLeaseName(ID, 5), "")); // released
  api.leases.set(shardLeaseName(ID, 6), lease(shardLeaseName(ID, 6), "old_1")); // held
  api.leases.set(`${ID}-shard-06`, lease(`${ID}-shard-06`, "")); // not a shard Lease's name
  const r = replicas(api, clock, ["a_1"], N);
  try {
    await run(clock, 1_500);
    assert(!api.leases.has(shardLeaseName(ID, 5)), "the released one is deleted");
    assert(api.leases.has(shardLeaseName(ID, 6)), "the held one stays while its record is fresh");
    for (let k = 0; k < N; k++) assertEquals(api.holder(shardLeaseName(ID, k)), "a_1");
    // Its holder gone (the record unchanged for longer than its lease duration): deleted too.
    await run(clock, 5_000);
    assert(!api.leases.has(shardLeaseName(ID, 6)), "the run-out one is deleted");
    assert(api.leases.has(`${ID}-shard-06`), "another name is left alone");
    for (let k = 0; k < N; k++) assert(api.leases.has(shardLeaseName(ID, k)), `shard ${k} kept`);
  } finally {
    await r.stop();
  }
});

Deno.test("shard elector: one count at a time — a replica of another --shards waits until the old count's holders are gone", async () => {
  const api = new FakeLeases();
  const clock = new FakeClock();
  const old = replicas(api, clock, ["a_1"], 4);
  let next: ReturnType<typeof replicas> | undefined;
  try {
    await run(clock, 3_000);
    assertEquals(old.electors[0].held(), [0, 1, 2, 3]);
    next = replicas(api, clock, ["b_1"], 2);
    await run(clock, 10_000);
    // The old count keeps every shard (its share is counted among its own count), the new one
    // takes none while a replica of the old count holds shard Leases.
    assertEquals(old.electors[0].held(), [0, 1, 2, 3]);
    assertEquals(next.electors[0].held(), []);
    for (let k = 0; k < 4; k++) assertEquals(api.holder(shardLeaseName(ID, k)), "a_1");
    await old.stop(); // releases its shard Leases and its membership
    await run(clock, 5_000);
    assertEquals(next.electors[0].held(), [0, 1]);
    for (let k = 0; k < 2; k++) {
      const l = api.leases.get(shardLeaseName(ID, k))!;
      assertEquals(
        l.metadata?.annotations?.[HASH_LAST_ANNOTATION],
        shardLeaseMetadata("op", k, 2)
          .annotations[HASH_LAST_ANNOTATION],
        `shard ${k}'s range is the new count's`,
      );
    }
    for (const k of [2, 3]) assert(!api.leases.has(shardLeaseName(ID, k)), `Lease ${k} swept`);
  } finally {
    await old.stop();
    await next?.stop();
  }
});

Deno.test("shard elector: two counts holding at once — one gives everything back (here, on a tie of join times, the larger count)", async () => {
  const api = new FakeLeases();
  // Without the Lease watch (which on this instant API shows each the other's membership before
  // either has finished its first round, so that one never takes): the rule is for the race.
  api.refuseWatch = true;
  const clock = new FakeClock();
  // Both start on an empty election in the same instant and take shards before seeing each
  // other; their membership Leases carry the same acquireTime.
  const a = replicas(api, clock, ["a_1"], 4);
  const b = replicas(api, clock, ["b_1"], 2);
  try {
    await run(clock, 300);
    assert(a.electors[0].held().length > 0 && b.electors[0].held().length > 0, "both hold");
    await run(clock, 10_000);
    assertEquals(a.electors[0].held(), []);
    assertEquals(b.electors[0].held(), [0, 1]);
  } finally {
    await a.stop();
    await b.stop();
  }
});

/**
 * Starts replica a, then c `phaseMs` later (so that a's rounds and c's renewals are out of
 * phase), kills c (its loops stop, nothing released: a SIGKILL) once settled and returns, per shard c held, how long after c's last renewals (of that shard's Lease
 * and of its membership, the later) a took it (fake clock ms).
 */
async function takeoverAfterKill(watch: boolean, phaseMs: number): Promise<number[]> {
  const api = new FakeLeases();
  api.refuseWatch = !watch;
  const clock = new FakeClock();
  const writes: { name: string; holder: string; at: number }[] = [];
  api.onWrite = (name) => writes.push({ name, holder: api.holder(name), at: clock.now() });
  const a = elector(api, "a_1", clock, recorder());
  const c = elector(api, "c_1", clock, recorder());
  const stopA = new AbortController();
  const stopC = new AbortController();
  try {
    a.start(stopA.signal);
    await run(clock, phaseMs);
    c.start(stopC.signal);
    await run(clock, 6_000);
    const cShards = c.held();
    assertEquals(cShards.length, 2, `c holds ${cShards}`);
    stopC.abort();
    const killedAt = clock.now();
    await run(clock, 8_000);
    assertEquals(a.held(), [0, 1, 2, 3]);
    const lastOfC = (name: string) =>
      Math.max(...writes.filter((w) => w.name === name && w.holder === "c_1").map((w) => w.at));
    const member = lastOfC(memberLeaseName(ID, "c_1"));
    return cShards.map((k) => {
      const name = shardLeaseName(ID, k);
      const taken = writes.find((w) => w.name === name && w.holder === "a_1" && w.at > killedAt);
      return taken!.at - Math.max(member, lastOfC(name));
    });
  } finally {
    stopA.abort();
    await a.stop();
    await c.stop();
  }
}

Deno.test("shard elector: a dead replica's shards are taken a lease duration after its last renewals, not a retry period or two later (the Lease watch)", async () => {
  const watched: number[] = [];
  const polled: number[] = [];
  for (const phaseMs of [100, 500, 900]) {
    watched.push(...await takeoverAfterKill(true, phaseMs));
    polled.push(...await takeoverAfterKill(false, phaseMs));
  }
  console.log(`taken after (ms): watched ${watched}; polled ${polled}`);
  // Lease duration 4 s; the fake clock moves in 100 ms steps.
  assert(watched.every((ms) => ms >= 4_000 && ms <= 4_100), `watched: ${watched}`);
  // Positive control: polling alone (the watch refused) sees renewals and run-outs late.
  assert(polled.some((ms) => ms > 4_100), `polled: ${polled}`);
});
