/**
 * Units of the sharded informers' side (lib/runtime/shard_reflector.ts, shard_work.ts): shards
 * taken in one round restart the reflector once; the shard-selector probe retries with backoff
 * before it settles on client mode. Reflectors here are stand-ins that list nothing; the
 * behaviour against a real apiserver is tests/e2e/sharding_test.ts.
 */
import { assert, assertEquals } from "../assert.ts";
import type { KubeClient, KubeObject } from "../../lib/kube/client.ts";
import { PODS, type ResourceType } from "../../lib/kube/resources.ts";
import { FakeClock } from "../../lib/runtime/clock.ts";
import type { InformerReflector } from "../../lib/runtime/controller.ts";
import { log } from "../../lib/runtime/log.ts";
import { ShardElector } from "../../lib/runtime/shard_elector.ts";
import { ShardReflector } from "../../lib/runtime/shard_reflector.ts";
import { probeShardMode, type ShardModeProbe, ShardWork } from "../../lib/runtime/shard_work.ts";
import { shardSelector } from "../../lib/runtime/shards.ts";
import { Store } from "../../lib/runtime/store.ts";
import { FakeLeases } from "./fake_leases.ts";

const N = 4;

/** A reflector that is synced at once and runs until stopped. */
function standIn(): InformerReflector {
  return {
    run: (signal) =>
      new Promise<void>((resolve) => {
        if (signal.aborted) resolve();
        else signal.addEventListener("abort", () => resolve(), { once: true });
      }),
    waitForSync: () => Promise.resolve(),
    hasSynced: true,
    lastError: undefined,
    failingSinceMs: undefined,
    failedAttempts: 0,
    state: { phase: "watching" },
    deaf: undefined,
  } as InformerReflector;
}

/** A ShardReflector in server mode whose `make` records each selector it was asked for. */
function counted() {
  const made: (string | undefined)[] = [];
  const reflector = new ShardReflector<KubeObject>({
    shards: N,
    store: new Store<KubeObject>(),
    mode: Promise.resolve("server"),
    make: (selector) => {
      made.push(selector);
      return standIn();
    },
  });
  return { reflector, made };
}

/** Lets pending promise callbacks and 0 ms timers run. */
async function flush(): Promise<void> {
  for (let i = 0; i < 20; i++) await new Promise((r) => setTimeout(r, 0));
}

Deno.test("shard reflector: held sets given in one tick make one reflector, for the newest set", async () => {
  const { reflector, made } = counted();
  const stop = new AbortController();
  const running = reflector.run(stop.signal);
  try {
    await flush();
    assertEquals(made, [], "no shard held: no reflector");
    await Promise.all([
      reflector.setHeld([0]),
      reflector.setHeld([0, 1]),
      reflector.setHeld([0, 1, 2]),
    ]);
    assertEquals(made, [shardSelector([0, 1, 2], N)]);
    assert(reflector.hasSynced);
    // Positive control: a change in a later tick restarts again.
    await reflector.setHeld([0, 1, 2, 3]);
    assertEquals(made.length, 2);
    assertEquals(made[1], shardSelector([0, 1, 2, 3], N));
  } finally {
    stop.abort();
    await running;
  }
});

Deno.test("shard reflector: a replica alone takes every shard in its first round and restarts its reflector once", async () => {
  const { reflector, made } = counted();
  const stop = new AbortController();
  const running = reflector.run(stop.signal);
  const api = new FakeLeases();
  const clock = new FakeClock();
  const work = new ShardWork({
    shards: N,
    controllers: () => [],
    reflectors: [reflector],
    log: log("test"),
  });
  const elector = new ShardElector({
    client: api.client(),
    namespace: "ns",
    id: "op",
    identity: "a_1",
    shards: N,
    leaseDurationSeconds: 4,
    renewDeadlineMs: 3_000,
    retryPeriodMs: 1_000,
    gracefulShutdownTimeoutMs: 1_000,
    hooks: work,
    log: log("test"),
    clock,
    random: () => 0,
  });
  const electing = new AbortController();
  elector.start(electing.signal);
  try {
    for (let i = 0; i < 10 && elector.held().length < N; i++) {
      clock.advance(100);
      await flush();
    }
    await flush();
    assertEquals(elector.held(), [0, 1, 2, 3]);
    assertEquals(work.unsynced(), [], "every shard synced");
    assertEquals(made, [shardSelector([0, 1, 2, 3], N)]);
  } finally {
    electing.abort();
    await elector.stop();
    stop.abort();
    await running;
  }
});

const TARGETS: { resource: ResourceType; namespace?: string }[] = [
  { resource: PODS },
];

/** A detect stand-in answering from `answers` in turn (the last one repeated). */
function detector(answers: ShardModeProbe[]) {
  let calls = 0;
  const detect = () => Promise.resolve(answers[Math.min(calls++, answers.length - 1)]);
  return { detect, calls: () => calls };
}

/** {@link probeShardMode} of the Pods target with `detect` and `backoffMs`. */
function probe(
  detect: () => Promise<ShardModeProbe>,
  backoffMs: number[],
  signal = new AbortController().signal,
) {
  return probeShardMode({} as KubeClient, TARGETS, N, log("test"), signal, detect, backoffMs);
}

const FAILED: ShardModeProbe = { mode: "client", served: [], notServed: [], error: "503" };

Deno.test("shard mode probe: failed probes are retried; the first answer decides", async () => {
  const d = detector([FAILED, FAILED, { mode: "server", served: ["pods"], notServed: [] }]);
  const r = await probe(d.detect, [1, 1, 1, 1]);
  assertEquals(r?.mode, "server");
  assertEquals(d.calls(), 3);
});

Deno.test("shard mode probe: an answer that the selector is not served is final at once", async () => {
  const d = detector([{ mode: "client", served: [], notServed: ["pods"] }]);
  const r = await probe(d.detect, [1, 1]);
  assertEquals(r?.mode, "client");
  assertEquals(d.calls(), 1);
});

Deno.test("shard mode probe: after every wait, client mode with the last error; aborted while waiting, no result", async () => {
  const d = detector([FAILED]);
  const r = await probe(d.detect, [1, 1, 1]);
  assertEquals(r?.mode, "client");
  assertEquals(r?.error, "503");
  assertEquals(d.calls(), 4, "one try, then one after each of the 3 waits");

  const stop = new AbortController();
  const waiting = detector([FAILED]);
  const p = probe(waiting.detect, [60_000], stop.signal);
  await flush();
  stop.abort();
  assertEquals(await p, undefined);
  assertEquals(waiting.calls(), 1);
});
