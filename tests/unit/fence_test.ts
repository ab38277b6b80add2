/**
 * The write fence (S13): {@link LeaseFence} with injected clocks (a renewal older than the renew
 * deadline blocks writes, on the monotonic and on the wall clock), the client's write path
 * against a loopback server (the check is made after every await, right before fetch; nothing
 * is sent when it fails; reads are never checked), and a {@link LeaderElector} wired as the
 * manager wires it: its fence on the main client, the Lease through a client of its own that
 * keeps writing while the fence is closed.
 */
import { assert, assertEquals, assertRejects } from "../assert.ts";
import { KubeClient } from "../../lib/kube/client.ts";
import { FencedError, isFenced } from "../../lib/kube/errors.ts";
import { CONFIGMAPS } from "../../lib/kube/resources.ts";
import { FakeClock } from "../../lib/runtime/clock.ts";
import { LeaderElector, LeaseFence, type Term } from "../../lib/runtime/leader.ts";
import { FakeServer } from "./fakeapi.ts";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const configMap = (name: string) => ({
  apiVersion: "v1",
  kind: "ConfigMap",
  metadata: { name, namespace: "default" },
});

/** A term as the elector gives one: its signal, and `end` to abort it as the elector does. */
function term(n = 1): Term & { end(): void } {
  const c = new AbortController();
  return {
    number: n,
    signal: c.signal,
    end: () => c.abort(new FencedError("NotHeld", "in flight", undefined, undefined, true)),
  };
}

Deno.test("fence S13: LeaseFence opens on a renewal during a term and closes at the renew deadline (injected clocks)", () => {
  let mono = 1_000;
  let wall = 1_700_000_000_000;
  const f = new LeaseFence(3_000, () => mono, () => wall);
  const refused = (reason: string) => {
    try {
      f.check("POST", "/x");
    } catch (err) {
      assert(err instanceof FencedError, String(err));
      assertEquals(err.reason, reason);
      return err;
    }
    throw new Error("the fence let a write through");
  };
  refused("NotHeld"); // before any term
  assert(!f.open);
  const s = f.stamp(); // an attempt starts
  mono += 400; // ... and succeeds 400 ms later: the age counts from its start
  wall += 400;
  f.renewed(s);
  refused("NotHeld"); // a renewal without a term opens nothing
  const first = term(1);
  f.begin(first);
  const signal = f.signal;
  assert(f.open);
  f.check("POST", "/x");
  assertEquals(f.renewalAgeMs(), 400);
  mono += 2_599;
  wall += 2_599;
  f.check("PATCH", "/x"); // 2,999 ms
  mono += 1;
  wall += 1;
  assertEquals(refused("Stale").renewalAgeMs, 3_000);
  // A renewal reopens it.
  const s2 = f.stamp();
  f.renewed(s2);
  f.check("DELETE", "/x");
  // The wall clock jumping forward (a VM resumed, then NTP): closed although the monotonic
  // clock saw nothing.
  wall += 10_000;
  refused("Stale");
  // ... but the renew loop, which decides the loss, counts on the monotonic clock alone.
  assertEquals(f.monotonicAgeMs(), 0);
  // Stepped back: the monotonic age decides.
  wall -= 20_000;
  f.check("POST", "/x");
  // The term ends (lost or released): closed at once, and writes in flight are aborted with the
  // term's reason.
  assert(!signal.aborted);
  first.end();
  refused("NotHeld");
  assert(signal.aborted);
  assert(isFenced(signal.reason) && signal.reason.reason === "NotHeld");
  // The next term has a signal of its own.
  const second = term(2);
  f.renewed(f.stamp());
  f.begin(second);
  assert(!f.signal.aborted);
  f.check("POST", "/x");
  second.end();
});

Deno.test("fence S13: at the renew deadline a timer aborts the writes in flight (a resumed process cancels them unsent)", () => {
  const clock = new FakeClock();
  const f = new LeaseFence(3_000, () => clock.now(), () => clock.now(), clock);
  const t = term();
  f.renewed(f.stamp());
  f.begin(t);
  const first = f.signal;
  clock.advance(2_000);
  f.renewed(f.stamp()); // renewed in time: the deadline moves
  clock.advance(2_999);
  assert(!first.aborted);
  clock.advance(1);
  // No renewal for 3 s: the signal aborts by itself, without any write being checked; the term
  // itself goes on.
  assert(first.aborted);
  assert(isFenced(first.reason) && first.reason.reason === "Stale");
  assert(!t.signal.aborted);
  // A late renewal (the Lease was not taken meanwhile) opens a new window of the same term.
  f.renewed(f.stamp());
  assert(!f.signal.aborted && f.open);
  t.end();
  assert(f.signal.aborted && !f.open);
  assertEquals(clock.pendingTimers, 0);
});

Deno.test("fence S13: the client checks writes right before fetch, after its awaits; nothing is sent when closed; reads pass", async () => {
  const server = new FakeServer();
  let open = false;
  const checks: string[] = [];
  const client = new KubeClient(server.config(), {
    maxRetries: 1,
    writeFence: {
      check: (method, path) => {
        checks.push(`${method} ${path}`);
        if (!open) throw new FencedError("NotHeld", `${method} ${path}`);
      },
    },
  });
  try {
    // Closed: a write is refused without a request; reads are never checked.
    const err = await assertRejects(() => client.create(CONFIGMAPS, configMap("a")));
    assert(isFenced(err), String(err));
    await client.get(CONFIGMAPS, "a", { namespace: "default" });
    await client.list(CONFIGMAPS, { namespace: "default" });
    assertEquals(server.count("POST", "configmaps"), 0);
    assertEquals(server.count("GET", "configmaps"), 2);
    assertEquals(checks, ["POST /api/v1/namespaces/default/configmaps"]);
    // Open: every write verb is checked before fetch and once more right after it (a process
    // stopped in between cancels the unwritten request on resume), and sent.
    open = true;
    await client.create(CONFIGMAPS, configMap("a"));
    await client.update(CONFIGMAPS, configMap("a"));
    await client.patch(CONFIGMAPS, "a", { data: { k: "v" } }, { namespace: "default" });
    await client.delete(CONFIGMAPS, "a", { namespace: "default" });
    assertEquals(checks.length, 1 + 4 * 2);
    assertEquals(server.received.filter((r) => r.method !== "GET").length, 4);

    // The check comes after the waits: a write held by a Retry-After (429 to an earlier
    // request) while the fence closes is refused when the wait ends.
    let first = true;
    server.handler = () => {
      if (first) {
        first = false;
        return new Response("slow down", { status: 429, headers: { "Retry-After": "0.3" } });
      }
      return undefined;
    };
    const read = client.get(CONFIGMAPS, "c", { namespace: "default" }); // 429, then retried
    await sleep(50); // the 429 has come: the gate is closed for 300 ms
    const posts = server.count("POST", "configmaps");
    const write = client.create(CONFIGMAPS, configMap("c"));
    await sleep(50);
    open = false; // lost while the write waited at the gate
    const refused = await assertRejects(() => write);
    assert(isFenced(refused), String(refused));
    assertEquals(server.count("POST", "configmaps"), posts, "the write was sent");
    await read;
  } finally {
    client.close();
    await server.close();
  }
});

Deno.test("fence S13: a leader's fence on the main client; the Lease client keeps working while it is closed", async () => {
  const server = new FakeServer();
  const main = new KubeClient(server.config(), { maxRetries: 0 });
  const leaseClient = new KubeClient(server.config(), { maxRetries: 0 });
  const stoppedLeading: string[] = [];
  const elector = new LeaderElector({
    client: leaseClient,
    namespace: "default",
    name: "l",
    identity: "a",
    leaseDurationSeconds: 1,
    renewDeadlineMs: 600,
    retryPeriodMs: 200,
    random: () => 0,
    onStoppedLeading: (why) => stoppedLeading.push(why),
  });
  main.setWriteFence(elector.fence);
  const stop = new AbortController();
  try {
    // Not leading: the main client may not write; the Lease client creates the Lease.
    const early = await assertRejects(() => main.create(CONFIGMAPS, configMap("x")));
    assert(isFenced(early) && early.reason === "NotHeld", String(early));
    const run = elector.run(stop.signal);
    for (let i = 0; i < 200 && !elector.isLeader; i++) await sleep(10);
    assert(elector.isLeader, "not leading");
    assertEquals(server.count("POST", "leases"), 1);
    await main.create(CONFIGMAPS, configMap("x"));
    assertEquals(server.count("POST", "configmaps"), 1);

    // Renewals fail from now on: the fence closes at the renew deadline, while the Lease client
    // still sends its attempts.
    server.failLeaseWrites = true;
    const putsBefore = server.count("PUT", "leases");
    let refused: unknown;
    for (let i = 0; i < 200 && !refused; i++) {
      await main.create(CONFIGMAPS, configMap(`y${i}`)).catch((err) => refused = err);
      await sleep(20);
    }
    assert(isFenced(refused), String(refused));
    assert(server.count("PUT", "leases") > putsBefore, "the Lease client stopped");
    const sent = server.count("POST", "configmaps");
    assertEquals(await run, "lost");
    assertEquals(stoppedLeading, ["lost"]);
    assertEquals(elector.state.kind, "lost");
    assert(elector.fence.signal.aborted);
    await assertRejects(() => main.patch(CONFIGMAPS, "x", {}, { namespace: "default" }));
    assertEquals(server.count("POST", "configmaps"), sent);
    assertEquals(server.count("PATCH", "configmaps"), 0);
  } finally {
    stop.abort();
    main.close();
    leaseClient.close();
    await server.close();
  }
});

Deno.test("fence: a write aborted in flight says it may have reached the apiserver", () => {
  const inFlight = new FencedError(
    "NotHeld",
    "write in flight when leadership ended",
    undefined,
    undefined,
    true,
  );
  assert(inFlight.inFlight);
  assert(inFlight.message.includes("aborted; may have reached the apiserver"), inFlight.message);
  assert(!inFlight.message.includes("not sent"), inFlight.message);
  const before = new FencedError("NotHeld", "POST /api/v1/namespaces/ns/pods");
  assert(!before.inFlight);
  assert(before.message.includes("not sent"), before.message);
});
