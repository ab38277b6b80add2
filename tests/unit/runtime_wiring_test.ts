/**
 * The generic runtime's wiring, without a cluster: shared informers, a controller declared from
 * its primary, owned and watched resources (what each cache change enqueues), predicates, indexes
 * added to a shared store, and the error policy's requeue decisions. No Manager is run: the
 * stores are fed directly, as the reflector would feed them.
 */
import type { ConfigMap } from "kubernetes-types/core/v1.d.ts";
import { assert, assertEquals, assertRejects } from "../assert.ts";
import { KubeClient, type KubeObject } from "../../lib/kube/client.ts";
import { CONFIGMAPS, PODS, type ResourceType } from "../../lib/kube/resources.ts";
import { FakeClock } from "../../lib/runtime/clock.ts";
import { Controller, controllerOwnerKeys, Reconcile } from "../../lib/runtime/controller.ts";
import { Manager } from "../../lib/runtime/manager.ts";
import { Metrics } from "../../lib/runtime/metrics.ts";
import { DEFAULT_LOG_ROOT, log, setupLogging } from "../../lib/runtime/log.ts";
import {
  anyOf,
  deletionOrFinalizersChanged,
  generationChanged,
  ignoreDeletes,
  passes,
} from "../../lib/runtime/predicates.ts";
import { CONTROLLER_UID_INDEX, controllerUidIndex, Store } from "../../lib/runtime/store.ts";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const WIDGETS: ResourceType = {
  apiVersion: "example.com/v1",
  kind: "Widget",
  plural: "widgets",
  namespaced: true,
};

function manager(watchNamespace = ""): Manager {
  const client = new KubeClient({
    server: "https://127.0.0.1:1",
    auth: { kind: "token", token: "unused" },
    namespace: "default",
    source: "test",
  });
  return new Manager({
    client,
    metrics: new Metrics(),
    freezeCache: true,
    metricsBindAddress: "0",
    healthProbeBindAddress: "0",
    leaderElect: false,
    leaderElectionNamespace: "default",
    leaderElectionId: "test",
    leaseDurationSeconds: 15,
    renewDeadlineMs: 10_000,
    retryPeriodMs: 2_000,
    identity: "test",
    gracefulShutdownTimeoutMs: 1_000,
    watchNamespace,
    watchIdleTimeoutMs: 60_000,
    useWatchList: false,
  });
}

function obj(
  ns: string,
  name: string,
  meta: Partial<NonNullable<KubeObject["metadata"]>> = {},
): KubeObject {
  return { metadata: { namespace: ns, name, uid: `uid-${name}`, resourceVersion: "1", ...meta } };
}

function ownedBy(owner: KubeObject, kind = "Widget", apiVersion = "example.com/v1") {
  return [{
    apiVersion,
    kind,
    name: owner.metadata!.name!,
    uid: owner.metadata!.uid!,
    controller: true,
  }];
}

/** Keys waiting in the controller's queue, taken out (each marked done). */
async function drainKeys(c: Controller): Promise<string[]> {
  const out: string[] = [];
  while (c.queue.depth > 0) {
    const k = await c.queue.get();
    if (k === undefined) break;
    out.push(k);
    c.queue.done(k);
  }
  return out.sort();
}

Deno.test("runtime: one informer per resource, namespace and selectors, shared; unique names", () => {
  const m = manager("team-a");
  const a = m.informer(PODS, { labelSelector: "x=1" });
  const b = m.informer(PODS, { labelSelector: "x=1" });
  const c = m.informer(PODS, { labelSelector: "x=2" });
  const d = m.informer(PODS, { labelSelector: "x=1", namespace: "" });
  assert(a === b, "same key, same informer");
  assert(a !== c && a !== d && c !== d);
  assertEquals([a.name, c.name, d.name], ["pods", "pods-2", "pods-3"]);
  assertEquals(a.namespace, "team-a", "the manager's watch namespace by default");
  assertEquals(d.namespace, undefined, '"" watches all namespaces');
  const ns = m.informer({
    apiVersion: "v1",
    kind: "Namespace",
    plural: "namespaces",
    namespaced: false,
  });
  assertEquals(ns.namespace, undefined, "cluster-scoped: no namespace");
});

Deno.test("runtime: an informer's cache transform applies to its shared store; another is refused", async () => {
  const m = manager("team-a");
  const strip = (o: KubeObject & { spec?: unknown }) => {
    o.spec = undefined;
    return o;
  };
  const a = m.informer<KubeObject & { spec?: unknown }>(PODS, { transform: strip });
  const b = m.informer<KubeObject & { spec?: unknown }>(PODS, { transform: strip });
  const c = m.informer<KubeObject & { spec?: unknown }>(PODS); // no transform asked: shares a's
  assert(a === b && b === c);
  a.store.upsert({ ...obj("team-a", "p"), spec: { containers: [] } });
  assertEquals(a.store.get("team-a/p")?.spec, undefined);
  await assertRejects(
    () => m.informer<KubeObject & { spec?: unknown }>(PODS, { transform: (o) => o }),
    /another cache transform/,
  );
});

Deno.test("runtime: a declared controller enqueues primary keys (with predicates), owners of owned objects, and mapped keys", async () => {
  const m = manager();
  const widgets = m.informer<KubeObject>(WIDGETS);
  const pods = m.informer<KubeObject>(PODS);
  const configMaps = m.informer<ConfigMap>(CONFIGMAPS);
  const c = m.add({
    name: "widgets",
    for: widgets,
    predicates: [anyOf(generationChanged, deletionOrFinalizersChanged), ignoreDeletes],
    owns: [{ informer: pods }],
    watches: [{
      informer: configMaps,
      map: (cm: ConfigMap) =>
        cm.data?.widget ? [`${cm.metadata?.namespace}/${cm.data.widget}`] : [],
    }],
    reconcile: () => Promise.resolve(Reconcile.done),
  });
  const w = obj("ns", "w1", { generation: 1 });
  widgets.store.upsert(structuredClone(w));
  assertEquals(await drainKeys(c), ["ns/w1"], "create");
  widgets.store.upsert({
    ...structuredClone(w),
    metadata: { ...w.metadata, resourceVersion: "2" },
  });
  assertEquals(await drainKeys(c), [], "a status/metadata-only update does not enqueue");
  widgets.store.upsert(obj("ns", "w1", { generation: 2, resourceVersion: "3" }));
  assertEquals(await drainKeys(c), ["ns/w1"], "a spec change (generation) does");
  widgets.store.upsert(obj("ns", "w1", { generation: 2, resourceVersion: "4", finalizers: ["f"] }));
  assertEquals(await drainKeys(c), ["ns/w1"], "a finalizer change does");
  widgets.store.remove(obj("ns", "w1"));
  assertEquals(await drainKeys(c), [], "removal is ignored (ignoreDeletes)");

  // Owned: the controller owner of the primary's kind and group, in the object's namespace.
  pods.store.upsert({ ...obj("ns", "p1", { ownerReferences: ownedBy(w) }) });
  pods.store.upsert(
    obj("ns", "p2", { ownerReferences: ownedBy(obj("ns", "rs"), "ReplicaSet", "apps/v1") }),
  );
  pods.store.upsert(
    obj("ns", "p3", {
      ownerReferences: ownedBy(obj("ns", "w1", { uid: "other" }), "Widget", "other.io/v1"),
    }),
  );
  pods.store.upsert(obj("ns", "p4"));
  assertEquals(await drainKeys(c), ["ns/w1"]);
  pods.store.remove(obj("ns", "p1", { ownerReferences: ownedBy(w) }));
  assertEquals(await drainKeys(c), ["ns/w1"], "a deleted owned object enqueues its owner");
  // The owned store got the controller-UID index.
  pods.store.upsert(obj("ns", "p5", { ownerReferences: ownedBy(w) }));
  assertEquals(pods.store.byIndex(CONTROLLER_UID_INDEX, "uid-w1").map((p) => p.metadata?.name), [
    "p5",
  ]);
  await drainKeys(c);

  // Watched with a mapping: both states of an update are mapped.
  configMaps.store.upsert({
    metadata: { namespace: "ns", name: "cm", resourceVersion: "1" },
    data: { widget: "a" },
  });
  assertEquals(await drainKeys(c), ["ns/a"]);
  configMaps.store.upsert({
    metadata: { namespace: "ns", name: "cm", resourceVersion: "2" },
    data: { widget: "b" },
  });
  assertEquals(await drainKeys(c), ["ns/a", "ns/b"]);
});

Deno.test("runtime: informers shared by two controllers feed both; duplicate names are refused", async () => {
  const m = manager();
  const widgets = m.informer<KubeObject>(WIDGETS);
  const pods = m.informer<KubeObject>(PODS, {
    indexes: { [CONTROLLER_UID_INDEX]: controllerUidIndex },
  });
  const one = m.add({
    name: "one",
    for: widgets,
    owns: [{ informer: pods }],
    reconcile: () => Promise.resolve(Reconcile.done),
  });
  const two = m.add({
    name: "two",
    for: m.informer<KubeObject>(PODS, { indexes: { [CONTROLLER_UID_INDEX]: controllerUidIndex } }),
    reconcile: () => Promise.resolve(Reconcile.done),
  });
  let threw = false;
  try {
    m.add({ name: "one", for: widgets, reconcile: () => Promise.resolve(Reconcile.done) });
  } catch {
    threw = true;
  }
  assert(threw, "a second controller named one");
  pods.store.upsert(obj("ns", "p", { ownerReferences: ownedBy(obj("ns", "w")) }));
  assertEquals(await drainKeys(one), ["ns/w"]);
  assertEquals(await drainKeys(two), ["ns/p"]);
});

Deno.test("runtime: controllerOwnerKeys for namespaced and cluster-scoped owners", () => {
  const ns = controllerOwnerKeys({
    apiVersion: "v1",
    kind: "Namespace",
    plural: "namespaces",
    namespaced: false,
  });
  assertEquals(
    ns(obj("team", "q", { ownerReferences: ownedBy(obj("", "team"), "Namespace", "v1") })),
    ["team"],
  );
  assertEquals(
    ns(obj("team", "q", { ownerReferences: ownedBy(obj("", "x"), "Namespace", "x/v1") })),
    [],
  );
  const w = controllerOwnerKeys(WIDGETS);
  assertEquals(
    w(obj("ns", "p", { ownerReferences: ownedBy(obj("ns", "w"), "Widget", "example.com/v2") })),
    ["ns/w"],
  );
  const notController = ownedBy(obj("ns", "w")).map((r) => ({ ...r, controller: false }));
  assertEquals(w(obj("ns", "p", { ownerReferences: notController })), []);
});

Deno.test("predicates: AND across a watch's list, OR with anyOf, omitted decisions pass", () => {
  const a = obj("ns", "a", { generation: 1 });
  const b = obj("ns", "a", { generation: 1, resourceVersion: "2" });
  assert(passes([], { type: "update", oldObj: a, newObj: b }));
  assert(!passes([generationChanged], { type: "update", oldObj: a, newObj: b }));
  assert(passes([generationChanged], { type: "create", obj: a }));
  assert(!passes([generationChanged, ignoreDeletes], { type: "delete", obj: a }));
  const deleting = obj("ns", "a", { generation: 1, deletionTimestamp: "2024-01-01T00:00:00Z" });
  assert(passes([anyOf(generationChanged, deletionOrFinalizersChanged)], {
    type: "update",
    oldObj: a,
    newObj: deleting,
  }));
});

Deno.test("store: addIndex indexes cached objects at once; same function again is a no-op, another throws", () => {
  const s = new Store<KubeObject>();
  s.upsert(obj("ns", "p", { ownerReferences: ownedBy(obj("ns", "w")) }));
  s.addIndex(CONTROLLER_UID_INDEX, controllerUidIndex);
  s.addIndex(CONTROLLER_UID_INDEX, controllerUidIndex);
  assertEquals(s.byIndex(CONTROLLER_UID_INDEX, "uid-w").length, 1);
  let threw = false;
  try {
    s.addIndex(CONTROLLER_UID_INDEX, () => []);
  } catch {
    threw = true;
  }
  assert(threw);
  s.remove(obj("ns", "p"));
  assertEquals(s.byIndex(CONTROLLER_UID_INDEX, "uid-w").length, 0);
});

Deno.test("controller: the error policy decides the requeue (after a delay, backoff, or none)", async () => {
  const clock = new FakeClock();
  const calls: { key: string; at: number }[] = [];
  const c = new Controller({
    name: "test",
    syncPeriodMs: 0,
    clock,
    reconcile: (key) => {
      calls.push({ key, at: clock.now() });
      return Promise.reject(new Error(key));
    },
    errorPolicy: (err, key) => {
      assert(err instanceof Error && err.message === key);
      if (key === "ns/after") return { next: Reconcile.after(2_000) };
      if (key === "ns/terminal") return { next: Reconcile.terminal };
      return undefined;
    },
  });
  const stop = new AbortController();
  const run = c.run(stop.signal, 1_000);
  const count = (k: string) => calls.filter((x) => x.key === k).length;
  c.enqueue("ns/after");
  c.enqueue("ns/terminal");
  c.enqueue("ns/default");
  for (let i = 0; i < 500 && calls.length < 3; i++) await sleep(2);
  assertEquals(calls.length, 3);
  assertEquals(c.queue.delayed, 2, "after and default wait; terminal is dropped");
  clock.advance(5);
  for (let i = 0; i < 500 && count("ns/default") < 2; i++) await sleep(2);
  assertEquals(count("ns/default"), 2, "default: backoff 5 ms");
  clock.advance(1_994);
  await sleep(10);
  assertEquals(count("ns/after"), 1);
  clock.advance(1);
  for (let i = 0; i < 500 && count("ns/after") < 2; i++) await sleep(2);
  assertEquals(count("ns/after"), 2, "after(2 s)");
  assertEquals(count("ns/terminal"), 1);
  stop.abort();
  await run;
});

Deno.test("runtime names: the metric prefix and the log root are the user's; the defaults are this operator's", async () => {
  const own = await new Metrics({ prefix: "widget_operator" }).text();
  for (
    const name of [
      "widget_operator_reflector_lists_total",
      "widget_operator_reflector_relists_total",
      "widget_operator_reflector_watch_errors_total",
      "widget_operator_reflector_watches_open",
      "widget_operator_leader_election_changes_total",
    ]
  ) assert(own.includes(`# TYPE ${name} `), name);
  assert(!own.includes("appservice_"), "a default name left");
  const defaults = await new Metrics().text();
  assert(defaults.includes("# TYPE appservice_reflector_lists_total "));
  assert(defaults.includes("# TYPE appservice_leader_election_changes_total "));
  let refused: unknown;
  try {
    new Metrics({ prefix: "not-a-name" });
  } catch (err) {
    refused = err;
  }
  assert(refused instanceof Error, "a prefix that is not a metric name was accepted");

  const category = (l: unknown) => (l as { category: readonly string[] }).category;
  assertEquals(category(log("manager")), [DEFAULT_LOG_ROOT, "manager"]);
  assertEquals(DEFAULT_LOG_ROOT, "appservice-operator");
  try {
    await setupLogging("error", "json", { root: "widget-operator" });
    assertEquals(category(log("manager")), ["widget-operator", "manager"]);
  } finally {
    await setupLogging("error", "json");
  }
  assertEquals(category(log("manager")), ["appservice-operator", "manager"]);
});

Deno.test("runtime: an owned watch's priority predicate puts its owner's key in the high lane", async () => {
  const m = manager();
  const widgets = m.informer<KubeObject>(WIDGETS);
  const pods = m.informer<KubeObject>(PODS);
  const c = m.add({
    name: "widgets",
    for: widgets,
    owns: [{
      informer: pods,
      priority: {
        create: () => false,
        update: (a, b) => a.metadata?.labels?.ready !== b.metadata?.labels?.ready,
        delete: () => true,
      },
    }],
    reconcile: () => Promise.resolve(Reconcile.done),
  });
  const w1 = obj("ns", "w1"), w2 = obj("ns", "w2");
  widgets.store.upsert(w1);
  widgets.store.upsert(w2);
  await drainKeys(c);
  // A new primary first (normal), then an owned create (normal): FIFO.
  widgets.store.upsert(obj("ns", "w3"));
  pods.store.upsert(obj("ns", "p1", { ownerReferences: ownedBy(w1) }));
  assertEquals(c.queue.depthHigh, 0, "an owned create is normal");
  // An owned update the predicate passes: its owner goes before w3, which was added first.
  pods.store.upsert(obj("ns", "p2", { ownerReferences: ownedBy(w2) }));
  await drainKeys(c);
  widgets.store.upsert(obj("ns", "w4"));
  pods.store.upsert(
    obj("ns", "p2", { ownerReferences: ownedBy(w2), resourceVersion: "2", labels: { ready: "1" } }),
  );
  assertEquals(c.queue.depthHigh, 1);
  assertEquals(await c.queue.get(), "ns/w2");
  assertEquals(await c.queue.get(), "ns/w4");
  c.queue.done("ns/w2");
  c.queue.done("ns/w4");
  // An owned update the predicate does not pass stays normal; a delete passes.
  pods.store.upsert(
    obj("ns", "p2", { ownerReferences: ownedBy(w2), resourceVersion: "3", labels: { ready: "1" } }),
  );
  assertEquals([c.queue.depth, c.queue.depthHigh], [1, 0]);
  await drainKeys(c);
  pods.store.remove(obj("ns", "p1", { ownerReferences: ownedBy(w1) }));
  assertEquals(c.queue.depthHigh, 1, "a deleted owned object's owner is high");
});
