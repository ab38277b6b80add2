/**
 * The reflector and store against the local control plane, with faults put in the way: paging,
 * 410 Gone after a long cut and an etcd compaction (S1, S3), an apiserver restart mid-watch (S2),
 * a stalled stream (a proxy that stops forwarding without closing), re-established watches with
 * nothing changed (S4), WatchList (and its resumption as a plain watch after a cut once synced),
 * and a list without permission (S11). Counts come from the reflector's events and store
 * handlers, and, where the claim is about the wire, from the apiserver's audit log (each client
 * has its own User-Agent).
 *
 * Every client that a fault is put in front of connects through {@link TcpProxy} on 127.0.0.1;
 * every wait is bounded; each test stops what it started (reflectors, clients, proxies).
 */
import type { ConfigMap, Pod } from "kubernetes-types/core/v1.d.ts";
import { assert, assertEquals } from "../assert.ts";
import { KubeClient, type KubeObject } from "../../lib/kube/client.ts";
import { type ClusterConfig, loadClusterConfig } from "../../lib/kube/config.ts";
import { CONFIGMAPS, PODS, type ResourceType } from "../../lib/kube/resources.ts";
import { objectKey, type Store } from "../../lib/runtime/store.ts";
import { type Running, startReflector, type StoreCall } from "./reflectors.ts";
import { compactEtcd, restartApiserver } from "../cluster/cluster.ts";
import { admin, cluster, dropNamespace, newNamespace, sleep, waitFor } from "./harness.ts";
import { mintToken } from "./resources.ts";
import { TcpProxy } from "./proxy.ts";

// ---------------------------------------------------------------------------------------------
// Helpers

/** A client for `config`, maybe through a proxy, with its own User-Agent (for the audit log). */
function clientFor(config: ClusterConfig, userAgent: string, proxy?: TcpProxy): KubeClient {
  return new KubeClient(proxy ? { ...config, server: proxy.url } : config, {
    userAgent,
    maxRetries: 2,
  });
}

/** Runs `fn` over `items`, `size` at a time. */
async function inBatches<T>(items: T[], size: number, fn: (t: T) => Promise<unknown>) {
  for (let i = 0; i < items.length; i += size) {
    await Promise.all(items.slice(i, i + size).map(fn));
  }
}

const range = (n: number, from = 0) => Array.from({ length: n }, (_, i) => i + from);
const cmName = (i: number) => `cm-${String(i).padStart(4, "0")}`;

/**
 * Label of every ConfigMap these tests create; reflectors select it, so that the
 * `kube-root-ca.crt` ConfigMap kube-controller-manager puts in every namespace is left out.
 */
const LABEL = "watch-e2e";
const SELECTOR = `${LABEL}=yes`;

function configMap(ns: string, name: string, data: Record<string, string> = {}): ConfigMap {
  return {
    apiVersion: "v1",
    kind: "ConfigMap",
    metadata: { name, namespace: ns, labels: { [LABEL]: "yes" } },
    data,
  };
}

async function createConfigMaps(ns: string, names: string[]): Promise<void> {
  const c = await admin();
  await inBatches(names, 20, (name) => c.create(CONFIGMAPS, configMap(ns, name, { v: "0" })));
}

/** The apiserver's state of a resource in a namespace: key → resourceVersion. */
async function serverState(rt: ResourceType, ns: string): Promise<Map<string, string>> {
  const { items } = await (await admin()).listAll<KubeObject>(rt, {
    namespace: ns,
    labelSelector: SELECTOR,
  });
  return new Map(items.map((o) => [objectKey(o), o.metadata!.resourceVersion!]));
}

function storeState<T extends KubeObject>(store: Store<T>): Map<string, string> {
  return new Map(store.list().map((o) => [objectKey(o), o.metadata!.resourceVersion!]));
}

/** Describes how two states differ ("" when equal). */
function stateDiff(want: Map<string, string>, got: Map<string, string>): string {
  const missing = [...want.keys()].filter((k) => !got.has(k));
  const ghosts = [...got.keys()].filter((k) => !want.has(k));
  const stale = [...want].filter(([k, rv]) => got.has(k) && got.get(k) !== rv).map(([k]) => k);
  if (!missing.length && !ghosts.length && !stale.length) return "";
  return `missing ${missing.length} (${missing.slice(0, 3)}), ghosts ${ghosts.length} (${
    ghosts.slice(0, 3)
  }), stale ${stale.length} (${stale.slice(0, 3)})`;
}

/** Waits until the store equals the apiserver's state; throws with the difference. */
async function waitConverged<T extends KubeObject>(
  r: Running<T>,
  rt: ResourceType,
  ns: string,
  timeoutMs: number,
): Promise<void> {
  let diff = "";
  await waitFor(
    `store equal to the apiserver (${rt.plural})`,
    async () => {
      diff = stateDiff(await serverState(rt, ns), storeState(r.store));
      if (diff) throw new Error(diff);
      return true;
    },
    timeoutMs,
    250,
  );
}

/**
 * Server-side view of one client's requests of one verb since `sinceMs`, from the audit log
 * (kube-apiserver logs every request at Metadata level; a watch has a ResponseStarted stage when
 * it starts streaming and a ResponseComplete stage when it ends).
 */
async function audit(userAgent: string, verb: string, sinceMs: number) {
  const info = await cluster();
  const text = await Deno.readTextFile(`${info.dir}/audit.log`);
  const started = new Set<string>();
  const completed = new Set<string>();
  const uris = new Map<string, string>();
  for (const line of text.split("\n")) {
    if (!line.includes(userAgent)) continue;
    let ev;
    try {
      ev = JSON.parse(line);
    } catch {
      continue; // the last line may be half written
    }
    if (ev.userAgent !== userAgent || ev.verb !== verb) continue;
    if (Date.parse(ev.requestReceivedTimestamp) < sinceMs) continue;
    uris.set(ev.auditID, ev.requestURI);
    if (ev.stage === "ResponseStarted") started.add(ev.auditID);
    if (ev.stage === "ResponseComplete") completed.add(ev.auditID);
  }
  return {
    /** Request URIs received, whatever their answer. */
    uris: [...uris.values()],
    /** Streams open now (started, not completed): watches. */
    open: [...started].filter((id) => !completed.has(id)).length,
  };
}

const count = (calls: StoreCall[], type?: StoreCall["type"]) =>
  type ? calls.filter((c) => c.type === type).length : calls.length;

/** The admin connection (client certificate), as a ClusterConfig to copy. */
async function adminConfig(): Promise<ClusterConfig> {
  return loadClusterConfig({ kubeconfig: (await cluster()).kubeconfig });
}

const agent = (what: string) => `watch-e2e-${what}-${crypto.randomUUID().slice(0, 8)}`;

// ---------------------------------------------------------------------------------------------
// Tests

Deno.test("watch: paging — 1,200 ConfigMaps listed in 3 pages of 500 (consistent, the default) or whole from the cache (initialListFromCache), each seen once", async (t) => {
  const ns = await newNamespace("paging");
  const running: Running<ConfigMap>[] = [];
  const listAgent = agent("paging");
  try {
    await t.step("create 1,200 ConfigMaps, 20 at a time", async () => {
      await createConfigMaps(ns, range(1200).map(cmName));
    });

    await t.step("reflector with pageSize 500: 3 pages, 1,200 adds, no other event", async () => {
      const r = startReflector<ConfigMap>(clientFor(await adminConfig(), listAgent), {
        resource: CONFIGMAPS,
        namespace: ns,
        labelSelector: SELECTOR,
        // The default first list is consistent, in pages; with initialListFromCache it is
        // resourceVersion=0, whole from the watch cache (next steps).
        pageSize: 500,
      });
      running.push(r);
      await waitFor("synced", () => r.reflector.hasSynced, 60_000);
      const listed = r.of("listed");
      assertEquals(listed.length, 1);
      assertEquals(listed[0].pages, 3);
      assertEquals(listed[0].items, 1200);
      assertEquals(listed[0].added, 1200);
      assertEquals(r.store.size, 1200);
      assertEquals(count(r.calls, "add"), 1200);
      assertEquals(new Set(r.calls.map((c) => c.key)).size, 1200, "an object was added twice");
      assertEquals(count(r.calls), 1200, "updates or deletes after a plain list");
      assertEquals(stateDiff(await serverState(CONFIGMAPS, ns), storeState(r.store)), "");
    });

    await t.step(
      "the apiserver saw 3 list requests: limit=500, then two continue tokens",
      async () => {
        const lists = await waitFor("3 lists in the audit log", async () => {
          const a = await audit(listAgent, "list", 0);
          return a.uris.length >= 3 && a.uris;
        }, 10_000);
        assertEquals(lists.length, 3, lists.join("\n"));
        assert(lists.every((u) => u.includes("limit=500")), lists.join("\n"));
        assertEquals(lists.filter((u) => u.includes("continue=")).length, 2, lists.join("\n"));
        assert(lists.every((u) => !u.includes("resourceVersion=")), lists.join("\n"));
      },
    );

    const cacheAgent = agent("paging-cache");
    await t.step(
      "initialListFromCache: resourceVersion=0, served whole from the watch cache, same content",
      async () => {
        const r = startReflector<ConfigMap>(clientFor(await adminConfig(), cacheAgent), {
          resource: CONFIGMAPS,
          namespace: ns,
          labelSelector: SELECTOR,
          pageSize: 500,
          initialListFromCache: true,
        });
        running.push(r);
        await waitFor("synced", () => r.reflector.hasSynced, 60_000);
        const listed = r.of("listed");
        assertEquals(listed.length, 1);
        assertEquals(listed[0].pages, 1, "the watch cache pages a resourceVersion=0 list");
        assertEquals(listed[0].items, 1200);
        assertEquals(count(r.calls, "add"), 1200);
        assertEquals(stateDiff(await serverState(CONFIGMAPS, ns), storeState(r.store)), "");
        const lists = await waitFor("1 list in the audit log", async () => {
          const a = await audit(cacheAgent, "list", 0);
          return a.uris.length >= 1 && a.uris;
        }, 10_000);
        assertEquals(lists.length, 1, lists.join("\n"));
        assert(lists[0].includes("resourceVersion=0"), lists[0]);
        assert(lists[0].includes("limit=500"), lists[0]);
      },
    );
  } finally {
    for (const r of running) await r.stop();
    await dropNamespace(ns);
  }
});

Deno.test("watch: 410 after a cut, changes and compaction — one relist, no ghosts, no loop (S1, S3)", async (t) => {
  const info = await cluster();
  const c = await admin();
  const ns = await newNamespace("gone");
  const proxy = TcpProxy.start(info.server);
  let r: Running<ConfigMap> | undefined;
  try {
    const initial = range(300).map(cmName);
    await createConfigMaps(ns, initial);
    r = startReflector<ConfigMap>(clientFor(await adminConfig(), agent("gone"), proxy), {
      resource: CONFIGMAPS,
      namespace: ns,
      labelSelector: SELECTOR,
    });
    const ref = r;

    await t.step("listed and watching through the proxy", async () => {
      await waitFor("synced", () => ref.reflector.hasSynced, 30_000);
      await waitFor("watching", () => ref.reflector.openWatches === 1, 30_000);
      assertEquals(ref.store.size, 300);
    });

    const callsBefore = r.calls.length;
    await t.step("cut; 350 changes; etcd compacted; apiserver's watch cache gone", async () => {
      proxy.cut();
      await waitFor("watch noticed the cut", () => ref.reflector.openWatches === 0, 30_000);
      // 100 deleted (would be ghosts), 150 updated, 100 created.
      await inBatches(initial.slice(0, 100), 20, (n) => c.delete(CONFIGMAPS, n, { namespace: ns }));
      await inBatches(
        initial.slice(100, 250),
        20,
        (n) => c.patch(CONFIGMAPS, n, { data: { v: "1" } }, { namespace: ns }),
      );
      await createConfigMaps(ns, range(100, 1000).map(cmName));
      await compactEtcd(info);
      // The apiserver's watch cache would still serve the old resourceVersion (it keeps events
      // for 75 s, however few): restarting it drops the cache, so only etcd — compacted — can
      // answer, as for a client that fell further behind than the cache reaches.
      await restartApiserver(info);
    });

    await t.step("resume: the store converges to the apiserver's state exactly", async () => {
      proxy.resume();
      await waitConverged(ref, CONFIGMAPS, ns, 90_000);
      assertEquals(ref.store.size, 300);
      assert(!ref.store.get(`${ns}/${cmName(0)}`), "a deleted ConfigMap is still cached (ghost)");
      assertEquals(ref.store.get(`${ns}/${cmName(100)}`)?.data, { v: "1" });
      assertEquals(ref.store.get(`${ns}/${cmName(1099)}`)?.data, { v: "0" });
    });

    await t.step(
      "exactly one relist (410), two lists in all, each change applied once",
      async () => {
        await waitFor("watching again", () => ref.reflector.openWatches === 1, 60_000);
        await sleep(2_000); // a loop would show up as more lists or relists
        const relists = ref.of("relist");
        assertEquals(relists.length, 1, `relists: ${JSON.stringify(relists)}`);
        assertEquals(relists[0].reason, "gone");
        const listed = ref.of("listed");
        assertEquals(listed.length, 2, `lists: ${JSON.stringify(listed)}`);
        assertEquals(
          { added: listed[1].added, updated: listed[1].updated, deleted: listed[1].deleted },
          { added: 100, updated: 150, deleted: 100 },
        );
        const after = ref.calls.slice(callsBefore);
        assertEquals(count(after, "delete"), 100);
        assertEquals(count(after, "update"), 150);
        assertEquals(count(after, "add"), 100);
        assertEquals(ref.reflector.openWatches, 1);
      },
    );
  } finally {
    await r?.stop();
    await proxy.close();
    await dropNamespace(ns);
  }
});

const SERVICEACCOUNTS: ResourceType = {
  apiVersion: "v1",
  kind: "ServiceAccount",
  plural: "serviceaccounts",
  namespaced: true,
};

function pod(ns: string, name: string): Pod {
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name, namespace: ns, labels: { [LABEL]: "yes" } },
    spec: { containers: [{ name: "app", image: "nginx:1.27" }] },
  };
}

Deno.test("watch: apiserver restart mid-watch — one watch per reflector, no lost change, no reconnect burst (S2)", async (t) => {
  const info = await cluster();
  const c = await admin();
  const ns = await newNamespace("restart");
  const cfg = await adminConfig();
  const agents = { cm: agent("restart-cm"), pod: agent("restart-pod") };
  let cms: Running<ConfigMap> | undefined;
  let pods: Running<Pod> | undefined;
  try {
    await createConfigMaps(ns, range(5).map(cmName));
    // Pods are admitted once kube-controller-manager made the namespace's default ServiceAccount.
    await waitFor(
      "ServiceAccount default",
      () => c.get(SERVICEACCOUNTS, "default", { namespace: ns }),
    );
    await c.create(PODS, pod(ns, "p-0"));
    cms = startReflector<ConfigMap>(clientFor(cfg, agents.cm), {
      resource: CONFIGMAPS,
      namespace: ns,
      labelSelector: SELECTOR,
    });
    pods = startReflector<Pod>(clientFor(cfg, agents.pod), {
      resource: PODS,
      namespace: ns,
      labelSelector: SELECTOR,
    });
    const both = [cms, pods] as Running<KubeObject>[];

    await t.step("both reflectors synced and watching", async () => {
      for (const r of both) {
        await waitFor("synced and watching", () => r.reflector.openWatches === 1, 30_000);
      }
      assertEquals(cms!.store.size, 5);
      assertEquals(pods!.store.size, 1);
    });

    const restartedAt = Date.now();
    const errorsBefore = both.map((r) => r.of("error").length);
    const startsBefore = both.map((r) => r.of("watchStarted").length);
    await t.step("restart the apiserver; change things as soon as it is back", async () => {
      await restartApiserver(info);
      await c.create(CONFIGMAPS, configMap(ns, "after-restart", { v: "new" }));
      await c.patch(CONFIGMAPS, cmName(0), { data: { v: "after" } }, { namespace: ns });
      await c.delete(CONFIGMAPS, cmName(1), { namespace: ns });
      await c.patch(PODS, "p-0", { metadata: { annotations: { touched: "after" } } }, {
        namespace: ns,
      });
    });

    await t.step("every change arrives; the stores equal the apiserver", async () => {
      await waitConverged(cms!, CONFIGMAPS, ns, 90_000);
      await waitConverged(pods!, PODS, ns, 90_000);
      assertEquals(cms!.store.get(`${ns}/after-restart`)?.data, { v: "new" });
      assertEquals(cms!.store.get(`${ns}/${cmName(0)}`)?.data, { v: "after" });
      assert(!cms!.store.get(`${ns}/${cmName(1)}`), "deleted ConfigMap still cached");
      assertEquals(pods!.store.get(`${ns}/p-0`)?.metadata?.annotations?.touched, "after");
    });

    await t.step(
      "exactly one watch per reflector, in the client and on the apiserver",
      async () => {
        for (const [i, r] of both.entries()) {
          assertEquals(r.reflector.openWatches, 1);
          const ua = i === 0 ? agents.cm : agents.pod;
          // The audit log is written as requests progress; give it a moment to show the stream.
          const open = await waitFor(`one open watch of ${ua}`, async () => {
            const a = await audit(ua, "watch", restartedAt);
            return a.open === 1 && a;
          }, 15_000);
          assertEquals(open.open, 1);
        }
      },
    );

    await t.step("reconnects were few (backoff, no burst)", async () => {
      for (const [i, r] of both.entries()) {
        const errors = r.of("error").length - errorsBefore[i];
        const starts = r.of("watchStarted").length - startsBefore[i];
        const ua = i === 0 ? agents.cm : agents.pod;
        const received = (await audit(ua, "watch", restartedAt)).uris.length;
        const why = `errors ${errors}, watch attempts ${starts}, watches received ${received}`;
        assert(errors < 10, why);
        assert(starts < 10, why);
        assert(received < 10, why);
        assert(starts >= 1, `the watch was never re-established: ${why}`);
      }
    });
  } finally {
    await cms?.stop();
    await pods?.stop();
    await dropNamespace(ns);
  }
});

/** Client idle bound of the stall test (ms). */
const IDLE_MS = 3_000;

Deno.test("watch: a stalled stream is noticed within the idle bound and resumed from the last resourceVersion", async (t) => {
  const info = await cluster();
  const c = await admin();
  const ns = await newNamespace("stall");
  const proxy = TcpProxy.start(info.server);
  let r: Running<ConfigMap> | undefined;
  try {
    await createConfigMaps(ns, range(10).map(cmName));
    r = startReflector<ConfigMap>(clientFor(await adminConfig(), agent("stall"), proxy), {
      resource: CONFIGMAPS,
      namespace: ns,
      labelSelector: SELECTOR,
      idleTimeoutMs: IDLE_MS,
      watchTimeoutSeconds: { min: 30, max: 40 },
    });
    const ref = r;
    let listRv = "";

    await t.step("synced; a change arrives over the watch", async () => {
      await waitFor("watching", () => ref.reflector.openWatches === 1, 30_000);
      listRv = ref.of("listed")[0].resourceVersion;
      await c.patch(CONFIGMAPS, cmName(0), { data: { v: "1" } }, { namespace: ns });
      await waitFor("update of cm-0", () => ref.store.get(`${ns}/${cmName(0)}`)?.data?.v === "1");
    });

    const idleBefore = r.of("idle").length;
    await t.step("pause: no byte moves, nothing closes; the reflector notices (idle)", async () => {
      proxy.pause();
      await c.patch(CONFIGMAPS, cmName(1), { data: { v: "1" } }, { namespace: ns });
      await c.create(CONFIGMAPS, configMap(ns, cmName(100), { v: "new" }));
      await c.delete(CONFIGMAPS, cmName(2), { namespace: ns });
      // Noticed within the idle bound of the last byte, plus scheduling slack.
      await waitFor("an idle event", () => ref.of("idle").length > idleBefore, 3 * IDLE_MS);
      // Every connection is stalled, so none of the three changes can have arrived.
      assert(ref.store.get(`${ns}/${cmName(2)}`), "a change arrived through a stalled proxy");
      assertEquals(ref.store.get(`${ns}/${cmName(1)}`)?.data, { v: "0" });
    });

    await t.step(
      "resume new connections only: the changes arrive, the stuck one stays stuck",
      async () => {
        proxy.resume();
        const resumedAt = Date.now();
        // The next attempt (at most one idle bound away) goes through a new connection.
        try {
          await waitConverged(ref, CONFIGMAPS, ns, 4 * IDLE_MS);
        } catch (err) {
          // What the reflector did since the pause, to tell a slow reconnect from a lost event.
          console.log(
            `reflector events (resumed at ${new Date(resumedAt).toISOString()}, ` +
              `${proxy.stalledConnections} stalled connections, health ` +
              `${ref.client.health.healthy ? "healthy" : "failing"}):\n  ` +
              ref.events.slice(-12).map((e) => JSON.stringify(e).slice(0, 300)).join("\n  "),
          );
          throw err;
        }
        assert(proxy.stalledConnections >= 1, "the stalled connection was not kept stuck");
        assertEquals(ref.store.get(`${ns}/${cmName(1)}`)?.data, { v: "1" });
        assertEquals(ref.store.get(`${ns}/${cmName(100)}`)?.data, { v: "new" });
        assert(!ref.store.get(`${ns}/${cmName(2)}`), "deleted ConfigMap still cached");
      },
    );

    await t.step("each watch after an idle resumed from the last resourceVersion seen", () => {
      const idles = ref.of("idle").slice(idleBefore);
      assert(idles.length >= 1);
      assert(idles[0].resourceVersion !== listRv, "resumed from the list, not the last event");
      for (const [i, ev] of ref.events.entries()) {
        if (ev.type !== "idle") continue;
        const next = ref.events.slice(i + 1).find((e) => e.type === "watchStarted");
        if (next) assertEquals(next, { type: "watchStarted", resourceVersion: ev.resourceVersion });
      }
    });

    await t.step(
      "quiet idle reconnects: no relist, no duplicate or spurious store event",
      async () => {
        const calls = ref.calls.length;
        const idles = ref.of("idle").length;
        // A quiet stream gets no bookmark for about a minute, so it goes idle every IDLE_MS.
        await waitFor(
          "two more idle reconnects",
          () => ref.of("idle").length >= idles + 2,
          6 * IDLE_MS,
        );
        await waitConverged(ref, CONFIGMAPS, ns, 2 * IDLE_MS);
        assertEquals(ref.calls.length, calls, "store events during quiet reconnects");
        assertEquals(ref.of("listed").length, 1, "relisted");
        assertEquals(ref.of("relist").length, 0);
        // 10 initial adds, cm-0 and cm-1 updated once, cm-0100 added once, cm-0002 deleted once.
        assertEquals(count(ref.calls, "add"), 11);
        assertEquals(count(ref.calls, "update"), 2);
        assertEquals(count(ref.calls, "delete"), 1);
      },
    );
  } finally {
    await r?.stop();
    await proxy.close();
    await dropNamespace(ns);
  }
});

Deno.test("watch: re-established watches with nothing changed cause no store events (S4)", async (t) => {
  const info = await cluster();
  const ns = await newNamespace("quiet");
  let r: Running<ConfigMap> | undefined;
  try {
    await createConfigMaps(ns, range(20).map(cmName));
    r = startReflector<ConfigMap>(clientFor(await adminConfig(), agent("quiet")), {
      resource: CONFIGMAPS,
      namespace: ns,
      labelSelector: SELECTOR,
      watchTimeoutSeconds: { min: 3, max: 4 },
    });
    const ref = r;

    await t.step("synced: 20 adds", async () => {
      await waitFor("watching", () => ref.reflector.openWatches === 1, 30_000);
      assertEquals(count(ref.calls, "add"), 20);
      assertEquals(ref.calls.length, 20);
    });

    await t.step("server timeouts end the watch 3 times: resumed, no store event", async () => {
      const ended = ref.of("watchEnded").length;
      await waitFor("3 server timeouts", () => ref.of("watchEnded").length >= ended + 3, 30_000);
      assertEquals(ref.calls.length, 20);
      assertEquals(ref.of("listed").length, 1);
      assertEquals(ref.of("error").length, 0);
    });

    await t.step("apiserver restart: re-watched (or relisted), still no store event", async () => {
      const starts = ref.of("watchStarted").length;
      await restartApiserver(info);
      await waitFor(
        "watching again after the restart",
        () => ref.of("watchStarted").length > starts && ref.reflector.openWatches === 1,
        60_000,
      );
      // One more server timeout cycle after the reconnect.
      const ended = ref.of("watchEnded").length;
      await waitFor("a server timeout after the restart", () => {
        return ref.of("watchEnded").length > ended;
      }, 30_000);
      assertEquals(ref.calls.length, 20, JSON.stringify(ref.calls.slice(20)));
      for (const l of ref.of("listed").slice(1)) {
        assertEquals({ added: l.added, updated: l.updated, deleted: l.deleted }, {
          added: 0,
          updated: 0,
          deleted: 0,
        });
      }
      assertEquals(stateDiff(await serverState(CONFIGMAPS, ns), storeState(ref.store)), "");
    });
  } finally {
    await r?.stop();
    await dropNamespace(ns);
  }
});

Deno.test("watch: WatchList (sendInitialEvents) — initial state as events, then live changes", async (t) => {
  const c = await admin();
  const ns = await newNamespace("watchlist");
  let r: Running<ConfigMap> | undefined;
  try {
    await createConfigMaps(ns, range(30).map(cmName));
    r = startReflector<ConfigMap>(clientFor(await adminConfig(), agent("watchlist")), {
      resource: CONFIGMAPS,
      namespace: ns,
      labelSelector: SELECTOR,
      useWatchList: true,
    });
    const ref = r;

    await t.step("synced from the initial events, no list request", async () => {
      await waitFor("synced", () => ref.reflector.hasSynced, 30_000);
      const listed = ref.of("listed");
      assertEquals(listed.length, 1);
      assertEquals(listed[0].pages, 0, "fell back to a list: WatchList not served");
      assertEquals(ref.store.size, 30);
      assertEquals(count(ref.calls, "add"), 30);
    });

    await t.step("changes after the initial events reach the store", async () => {
      await c.create(CONFIGMAPS, configMap(ns, cmName(100), { v: "new" }));
      await c.patch(CONFIGMAPS, cmName(0), { data: { v: "1" } }, { namespace: ns });
      await c.delete(CONFIGMAPS, cmName(1), { namespace: ns });
      await waitConverged(ref, CONFIGMAPS, ns, 30_000);
      assertEquals(count(ref.calls, "add"), 31);
      assertEquals(count(ref.calls, "update"), 1);
      assertEquals(count(ref.calls, "delete"), 1);
    });
  } finally {
    await r?.stop();
    await dropNamespace(ns);
  }
});

Deno.test("watch: WatchList — a cut after the initial events resumes a plain watch from the last resourceVersion; 410 re-syncs", async (t) => {
  const info = await cluster();
  const c = await admin();
  const ns = await newNamespace("wl-cut");
  const proxy = TcpProxy.start(info.server);
  const ua = agent("wl-cut");
  let r: Running<ConfigMap> | undefined;
  try {
    await createConfigMaps(ns, range(10).map(cmName));
    r = startReflector<ConfigMap>(clientFor(await adminConfig(), ua, proxy), {
      resource: CONFIGMAPS,
      namespace: ns,
      labelSelector: SELECTOR,
      useWatchList: true,
    });
    const ref = r;

    await t.step(
      "synced from the initial events; a change arrives on the same stream",
      async () => {
        await waitFor("synced", () => ref.reflector.hasSynced, 30_000);
        assertEquals(ref.of("listed").map((l) => l.pages), [0], "fell back to a list");
        await c.patch(CONFIGMAPS, cmName(0), { data: { v: "1" } }, { namespace: ns });
        await waitFor("update of cm-0", () => ref.store.get(`${ns}/${cmName(0)}`)?.data?.v === "1");
        assertEquals(ref.of("watchStarted").length, 0, "the WatchList stream was replaced");
      },
    );

    // The last resourceVersion the reflector applied, read in the same turn as the cut.
    let rvAtCut = "";
    let cutAt = 0;
    const callsBefore = r.calls.length;
    const errorsBefore = r.of("error").length;
    await t.step("cut once synced; changes while cut; resume", async () => {
      const st = ref.reflector.state;
      assert(st.phase === "watching", `state ${JSON.stringify(st)}`);
      rvAtCut = st.memory.resourceVersion;
      cutAt = Date.now();
      proxy.cut();
      await waitFor(
        "a failed attempt after the cut",
        () => ref.of("error").length > errorsBefore && ref.reflector.openWatches === 0,
        30_000,
      );
      await c.patch(CONFIGMAPS, cmName(1), { data: { v: "1" } }, { namespace: ns });
      await c.create(CONFIGMAPS, configMap(ns, cmName(100), { v: "new" }));
      await c.delete(CONFIGMAPS, cmName(2), { namespace: ns });
      proxy.resume();
      await waitConverged(ref, CONFIGMAPS, ns, 60_000);
    });

    await t.step("the reflector resumed as a watch: no new initial events, no list", () => {
      const errors = ref.of("error").slice(errorsBefore);
      assert(errors.length >= 1);
      assertEquals(errors.map((e) => e.phase), errors.map(() => "watch"), "failed as a list");
      const starts = ref.of("watchStarted");
      assert(starts.length >= 1, "no plain watch after the cut");
      for (const s of starts) assertEquals(s.resourceVersion, rvAtCut);
      assertEquals(ref.of("listed").length, 1, "synced again");
      assertEquals(ref.of("relist").length, 0);
      // Exactly the three changes made while cut, each once: nothing replayed.
      const after = ref.calls.slice(callsBefore);
      assertEquals(after.map((x) => `${x.type} ${x.key}`).sort(), [
        `add ${ns}/${cmName(100)}`,
        `delete ${ns}/${cmName(2)}`,
        `update ${ns}/${cmName(1)}`,
      ]);
    });

    await t.step(
      "the apiserver saw only plain watches from that resourceVersion since the cut",
      async () => {
        const watches = await waitFor("a watch since the cut in the audit log", async () => {
          const a = await audit(ua, "watch", cutAt);
          return a.uris.length >= 1 && a.uris;
        }, 10_000);
        for (const uri of watches) {
          assert(!uri.includes("sendInitialEvents"), `initial events asked again: ${uri}`);
          assert(new RegExp(`[?&]resourceVersion=${rvAtCut}(&|$)`).test(uri), uri);
        }
        assertEquals((await audit(ua, "list", cutAt)).uris, [], "listed after the cut");
      },
    );

    const callsBeforeGone = r.calls.length;
    let goneAt = 0;
    await t.step(
      "410 after a cut, changes and compaction: synced again with initial events",
      async () => {
        goneAt = Date.now();
        proxy.cut();
        await waitFor("watch noticed the cut", () => ref.reflector.openWatches === 0, 30_000);
        await c.patch(CONFIGMAPS, cmName(3), { data: { v: "1" } }, { namespace: ns });
        await c.delete(CONFIGMAPS, cmName(4), { namespace: ns });
        await compactEtcd(info);
        // Without its watch cache the apiserver can answer only from etcd, compacted: 410.
        await restartApiserver(info);
        proxy.resume();
        await waitConverged(ref, CONFIGMAPS, ns, 90_000);
        await waitFor("watching again", () => ref.reflector.openWatches === 1, 60_000);
        const relists = ref.of("relist");
        assertEquals(relists.length, 1, JSON.stringify(relists));
        const listed = ref.of("listed");
        assertEquals(listed.length, 2, JSON.stringify(listed));
        assertEquals(listed[1].pages, 0, "re-synced with a list, not initial events");
        assertEquals(
          { added: listed[1].added, updated: listed[1].updated, deleted: listed[1].deleted },
          { added: 0, updated: 1, deleted: 1 },
        );
        assertEquals(ref.calls.length - callsBeforeGone, 2);
        const resync = (await audit(ua, "watch", goneAt)).uris.filter((u) =>
          u.includes("sendInitialEvents=true")
        );
        assertEquals(resync.length, 1, resync.join("\n"));
        assertEquals((await audit(ua, "list", goneAt)).uris, [], "listed instead of WatchList");
      },
    );
  } finally {
    await r?.stop();
    await proxy.close();
    await dropNamespace(ns);
  }
});

Deno.test("watch: without permission to list — not synced, capped backoff, recovers once granted (S11)", async (t) => {
  const c = await admin();
  const ns = await newNamespace("noperm");
  let r: Running<ConfigMap> | undefined;
  try {
    await createConfigMaps(ns, range(3).map(cmName));
    await c.create(SERVICEACCOUNTS, {
      apiVersion: "v1",
      kind: "ServiceAccount",
      metadata: { name: "reader", namespace: ns },
    } as KubeObject);
    const token = await mintToken(c, ns, "reader");
    const ua = agent("noperm");
    const config = { ...await adminConfig(), auth: { kind: "token", token } };
    r = startReflector<ConfigMap>(clientFor(config as ClusterConfig, ua), {
      resource: CONFIGMAPS,
      namespace: ns,
      labelSelector: SELECTOR,
    });
    const ref = r;

    await t.step("403 on list: error events with growing delays, never synced", async () => {
      await waitFor("3 failed lists", () => ref.of("error").length >= 3, 30_000);
      assert(!ref.reflector.hasSynced, "synced without permission");
      const errors = ref.of("error");
      for (const [i, e] of errors.entries()) {
        assertEquals(e.phase, "list");
        assert(e.error instanceof Error && /403 Forbidden/.test(e.error.message), String(e.error));
        // 800 ms doubling (plus up to 100 % jitter), capped at 30 s.
        const base = Math.min(800 * 2 ** i, 30_000);
        assert(
          e.retryInMs >= base && e.retryInMs <= Math.min(2 * base, 30_000),
          `${i}: ${e.retryInMs}`,
        );
      }
      // The apiserver saw exactly the attempts the reflector reported: no hidden retry loop. (The
      // audit line of an answer can land a moment after the answer itself.)
      const lists = await waitFor("the failed lists in the audit log", async () => {
        const n = (await audit(ua, "list", 0)).uris.length;
        return n >= errors.length && n;
      }, 10_000);
      const now = ref.of("error").length;
      assert(lists <= now + 1, `${lists} lists, ${now} errors`);
    });

    await t.step("granted: recovers by itself, lists and watches", async () => {
      await c.create(
        {
          apiVersion: "rbac.authorization.k8s.io/v1",
          kind: "RoleBinding",
          plural: "rolebindings",
          namespaced: true,
        },
        {
          apiVersion: "rbac.authorization.k8s.io/v1",
          kind: "RoleBinding",
          metadata: { name: "reader-view", namespace: ns },
          roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "view" },
          subjects: [{ kind: "ServiceAccount", name: "reader", namespace: ns }],
        } as KubeObject,
      );
      // The next attempt is at most one capped delay away (the 4th is under 13 s).
      await waitFor("synced and watching", () => ref.reflector.openWatches === 1, 60_000);
      assertEquals(ref.store.size, 3);
      await c.create(CONFIGMAPS, configMap(ns, cmName(50)));
      await waitConverged(ref, CONFIGMAPS, ns, 30_000);
    });
  } finally {
    await r?.stop();
    await dropNamespace(ns);
  }
});
