/**
 * The sharded write fence on the client's write path (lib/runtime/shard_elector.ts
 * {@link ShardFence}, lib/kube/transport.ts `signalFor`): a write in flight to a namespace is
 * aborted when the Lease fence of that namespace's shard closes; a write in flight to another
 * shard's namespace is not. Against a loopback server that holds the writes' answers.
 */
import { assert, assertEquals, assertRejects } from "../assert.ts";
import { KubeClient } from "../../lib/kube/client.ts";
import { FencedError, isFenced } from "../../lib/kube/errors.ts";
import { CONFIGMAPS } from "../../lib/kube/resources.ts";
import { FakeClock } from "../../lib/runtime/clock.ts";
import { LeaseFence } from "../../lib/runtime/leader.ts";
import { ShardFence } from "../../lib/runtime/shard_elector.ts";
import { shardOf } from "../../lib/runtime/shards.ts";

/** The first `ns-<i>` of shard `k` of `n`. */
function namespaceOf(k: number, n: number): string {
  for (let i = 0; i < 10_000; i++) if (shardOf(`ns-${i}`, n) === k) return `ns-${i}`;
  throw new Error(`no namespace of shard ${k}`);
}

Deno.test("shard fence: a write in flight is aborted when its shard's fence closes; a write to another shard goes on", async () => {
  let arrived = 0;
  let release!: () => void;
  const released = new Promise<void>((r) => release = r);
  // Holds every write's answer until `release` (or until the client aborts it).
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, async (req) => {
    if (req.method !== "GET") {
      await req.text();
      arrived++;
      await Promise.race([
        released,
        new Promise((r) => req.signal.addEventListener("abort", r, { once: true })),
      ]);
    }
    return Response.json({});
  });
  const clock = new FakeClock();
  const terms = [new AbortController(), new AbortController()];
  const fences = terms.map((t, i) => {
    const f = new LeaseFence(3_000, () => clock.now(), () => clock.now(), clock);
    f.renewed(f.stamp());
    f.begin({ number: i + 1, signal: t.signal });
    return f;
  });
  const fence = new ShardFence(2, (k) => fences[k], (k) => fences[k].signal);
  const client = new KubeClient({
    server: `http://127.0.0.1:${server.addr.port}`,
    auth: { kind: "token", token: "test" },
    namespace: "default",
    source: "test server",
  }, { maxRetries: 0, writeFence: fence });
  const cm = (namespace: string) => ({
    apiVersion: "v1",
    kind: "ConfigMap",
    metadata: { name: "x", namespace },
  });
  try {
    const [ns0, ns1] = [namespaceOf(0, 2), namespaceOf(1, 2)];
    const w0 = client.create(CONFIGMAPS, cm(ns0));
    const w1 = client.create(CONFIGMAPS, cm(ns1));
    for (let i = 0; i < 200 && arrived < 2; i++) await new Promise((r) => setTimeout(r, 10));
    assertEquals(arrived, 2, "both writes are in flight");
    // Shard 0's term ends (lost): its write in flight is aborted, shard 1's is not.
    terms[0].abort(new FencedError("NotHeld", "shard 0 lost", undefined, undefined, true));
    const err = await assertRejects(() => w0);
    assert(isFenced(err), String(err));
    assert(!fence.signalFor("POST", `/api/v1/namespaces/${ns1}/configmaps`)!.aborted);
    release();
    await w1; // positive control: the other shard's write completes
    // Cluster-scoped writes go under a shard still held (shard 1 here).
    assertEquals(
      fence.signalFor("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles"),
      fences[1].signal,
    );
  } finally {
    release();
    for (const t of terms) t.abort();
    client.close();
    await server.shutdown();
  }
});
