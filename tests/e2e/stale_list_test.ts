/**
 * The operator's first list against an apiserver whose watch cache lags (an HA control plane:
 * each kube-apiserver has its own watch cache, fed by its own etcd watch). A second kube-apiserver
 * runs on the test cluster's etcd; its connections for everything but Pods, Services, Events and
 * Leases go through a {@link TcpProxy} that the test stalls, so its cached AppServices stop at an
 * old state while its Pods stay current. A `resourceVersion=0` list there answers from that cache:
 * an AppService scaled from 2 to 4 still says 2, while its 4 Pods are listed. Nothing may act on
 * that state (here: delete the 2 newest Pods as "scaled down"):
 * - an operator restarted against that apiserver: its first list (a WatchList by default, a
 *   paged list with --watch-list=false) must be a consistent read, which that apiserver cannot
 *   serve until its etcd connection comes back: it fails as a list does, within the request
 *   timeout, and is retried;
 * - a standby watching through it, whose cache therefore lags, when it takes over the Lease: the
 *   reconciler reads the AppService from the API before it deletes any Pod.
 *
 * Everything runs on 127.0.0.1; every wait is bounded; the test stops what it started (the second
 * apiserver, the operators, the proxy).
 */
import type { Pod } from "kubernetes-types/core/v1.d.ts";
import { MESSAGES } from "../../lib/runtime/messages.ts";
import { assert, assertEquals } from "../assert.ts";
import type { KubeClient } from "../../lib/kube/client.ts";
import { PODS, type ResourceType } from "../../lib/kube/resources.ts";
import { type AppService, APPSERVICES } from "../../lib/appservice/schema.ts";
import { isPodReady } from "../../lib/appservice/pods.ts";
import { type SecondApiserver, startSecondApiserver } from "./apiserver2.ts";
import {
  admin,
  appService,
  cluster,
  dropNamespace,
  getAs,
  installCrd,
  kubeconfigFor,
  newNamespace,
  type Operator,
  startOperator,
  waitFor,
} from "./harness.ts";
import { TcpProxy } from "./proxy.ts";

const AS = APPSERVICES as unknown as ResourceType;

async function podsOf(c: KubeClient, ns: string, name: string): Promise<Pod[]> {
  const l = await c.list<Pod>(PODS, {
    namespace: ns,
    labelSelector: `app.kubernetes.io/instance=${name}`,
  });
  return l.items;
}

/** Waits until `name` is Ready at its generation with exactly `n` Ready Pods, none terminating. */
async function settled(ns: string, name: string, n: number): Promise<Pod[]> {
  const c = await admin();
  return await waitFor(`${name} settled at ${n} Pods`, async () => {
    const a = await getAs(ns, name);
    const pods = await podsOf(c, ns, name);
    const ok = a.status?.ready === true && a.status.observedGeneration === a.metadata.generation &&
      a.status.readyReplicas === n && pods.length === n &&
      pods.every((p) => !p.metadata?.deletionTimestamp && isPodReady(p));
    return ok && pods;
  }, 90_000);
}

/** `name=uid` of each Pod, sorted, and whether any is terminating. */
const podIds = (pods: Pod[]) =>
  pods.map((p) =>
    `${p.metadata?.name}=${p.metadata?.uid}${p.metadata?.deletionTimestamp ? " (terminating)" : ""}`
  ).sort();

/** What both tests share: a namespace, the lagging second apiserver, operators to stop. */
interface Lagging {
  ns: string;
  /** Admin client of the first apiserver. */
  c: KubeClient;
  /** Client of the second apiserver. */
  c2: KubeClient;
  /** Admin kubeconfig for the second apiserver. */
  kubeconfig: string;
  etcdProxy: TcpProxy;
  /** Operators started; stopped at the end. */
  ops: Operator[];
}

/**
 * Runs `fn` with a fresh namespace and a second apiserver whose connections to etcd, except for
 * Pods, Services, Events and Leases, go through `etcdProxy`; stops everything afterwards.
 */
async function withLaggingApiserver(prefix: string, fn: (l: Lagging) => Promise<void>) {
  const info = await cluster();
  await installCrd();
  const ns = await newNamespace(prefix);
  const dir = await Deno.makeTempDir({ prefix: `${prefix}-` });
  const etcdProxy = TcpProxy.start(Number(new URL(info.etcdEndpoint).port));
  const ops: Operator[] = [];
  let second: SecondApiserver | undefined;
  try {
    second = await startSecondApiserver(info, {
      etcdServers: `http://127.0.0.1:${etcdProxy.port}`,
      direct: [
        "/pods",
        "/services",
        "/events",
        "events.k8s.io/events",
        "coordination.k8s.io/leases",
      ],
      logFile: `${dir}/kube-apiserver-2.log`,
      // A read it cannot serve (etcd stalled) fails after 5 s (504) instead of the default 60 s.
      extraArgs: ["--request-timeout=5s"],
    });
    const kubeconfig = await kubeconfigFor(second.server, dir);
    await fn({ ns, c: await admin(), c2: second.client, kubeconfig, etcdProxy, ops });
  } finally {
    for (const op of ops) await op.stop("SIGTERM", 20_000);
    await second?.stop();
    await etcdProxy.close();
    await dropNamespace(ns);
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
}

/** AppService `web` as the second apiserver's watch cache has it (resourceVersion=0). */
async function cachedWeb(l: Lagging): Promise<AppService | undefined> {
  const list = await l.c2.list<AppService>(AS, { namespace: l.ns, resourceVersion: "0" });
  return list.items.find((x) => x.metadata.name === "web");
}

/** Waits until the second apiserver's cache holds `web` at 2 replicas, 2 ready. */
async function secondCaughtUp(l: Lagging): Promise<void> {
  await waitFor("replicas 2, 2 ready, in the second apiserver's cache", async () => {
    const as = await cachedWeb(l);
    return as?.spec.replicas === 2 && as.status?.readyReplicas === 2;
  }, 30_000);
}

/**
 * Stalls the second apiserver's etcd connection, scales `web` to 4 through the first apiserver
 * and waits until its operator made 4 Pods Ready, stops that operator (`ops[0]`), and checks that
 * the second apiserver's cache still says 2. Returns the Pods' ids.
 */
async function stallAndScaleTo4(l: Lagging): Promise<string[]> {
  l.etcdProxy.pause();
  await l.c.patch(AS, "web", { spec: { replicas: 4 } }, { namespace: l.ns });
  const before = podIds(await settled(l.ns, "web", 4));
  assertEquals(await l.ops[0].stop(), 0);
  assertEquals((await cachedWeb(l))?.spec.replicas, 2, "the second apiserver's cache moved on");
  assertEquals((await podsOf(l.c2, l.ns, "web")).length, 4);
  return before;
}

/**
 * Ends the stall (live connections closed, new ones forwarded) and waits until `op` has
 * reconciled successfully; then the Pods must still be `before`.
 */
async function endStall(l: Lagging, op: Operator, before: string[]): Promise<void> {
  l.etcdProxy.cut();
  l.etcdProxy.resume();
  await waitFor("a successful reconcile", async () => {
    const m = await op.metrics();
    return /^controller_runtime_reconcile_total\{[^}]*result="success"[^}]*\} [1-9]/m.test(m);
  }, 120_000);
  assert(!logged(op, "Deleted Pod"), "a Pod was deleted");
  assertEquals(podIds(await podsOf(l.c, l.ns, "web")), before);
  assertEquals((await getAs(l.ns, "web")).spec.replicas, 4);
}

const logged = (op: Operator, message: string) => op.logs().some((l) => l.message === message);

Deno.test("stale first list: an operator restarted against an apiserver whose watch cache lags deletes no Pod", async (t) => {
  await withLaggingApiserver("stale", async (l) => {
    await t.step("an operator through the first apiserver: 2 Pods Ready", async () => {
      const op = await startOperator([`--watch-namespace=${l.ns}`]);
      l.ops.push(op);
      await op.waitReady();
      await l.c.create(AS, appService(l.ns, "web", { image: "nginx:1.27", replicas: 2 }));
      await settled(l.ns, "web", 2);
      await secondCaughtUp(l);
    });

    let before: string[] = [];
    await t.step(
      "the second's etcd connection stalls; scaled to 4 (its resourceVersion=0 says 2); operator stopped",
      async () => {
        before = await stallAndScaleTo4(l);
      },
    );

    let b: Operator | undefined;
    await t.step("restarted against the second apiserver: no Pod deleted", async () => {
      const op = b = await startOperator([
        `--kubeconfig=${l.kubeconfig}`,
        `--watch-namespace=${l.ns}`,
      ]);
      l.ops.push(op);
      // Either it synced (on a stale list: it then deletes Pods) or its AppService list failed
      // (a consistent read cannot be served while that apiserver's etcd stalls).
      const seen = await waitFor("synced, or a failed AppService list", () => {
        const logs = op.logs();
        const deleted = logs.filter((x) => x.message === "Deleted Pod");
        if (deleted.length > 0) return `deleted: ${JSON.stringify(deleted)}`;
        if (logged(op, "Caches synced; reconciling")) return "synced";
        const failed = logs.some((x) =>
          x.message === "List failed" && JSON.stringify(x).includes("appservices")
        );
        return failed && "list failed";
      }, 60_000);
      assertEquals(seen, "list failed");
      assertEquals(podIds(await podsOf(l.c, l.ns, "web")), before);
    });

    await t.step(
      "the stall ends: synced with the newest state, reconciled, same 4 Pods",
      async () => {
        await endStall(l, b!, before);
      },
    );
  });
});

Deno.test("stale cache at failover: a standby whose apiserver's watch cache lags takes over and deletes no Pod", async (t) => {
  await withLaggingApiserver("stalefo", async (l) => {
    const lease = [
      `--watch-namespace=${l.ns}`,
      "--leader-elect",
      `--leader-election-namespace=${l.ns}`,
      "--leader-election-id=stale-failover",
      "--leader-elect-lease-duration=4s",
      "--leader-elect-renew-deadline=3s",
      "--leader-elect-retry-period=1s",
    ];

    await t.step(
      "leader through the first apiserver, standby through the second; 2 Pods Ready",
      async () => {
        const a = await startOperator(lease);
        l.ops.push(a);
        await waitFor("the first operator leads", () => logged(a, MESSAGES.acquiredLease));
        const b = await startOperator([`--kubeconfig=${l.kubeconfig}`, ...lease]);
        l.ops.push(b);
        await b.waitReady();
        await l.c.create(AS, appService(l.ns, "web", { image: "nginx:1.27", replicas: 2 }));
        await settled(l.ns, "web", 2);
        await secondCaughtUp(l);
        assert(!logged(b, MESSAGES.acquiredLease), "the standby leads");
      },
    );

    let before: string[] = [];
    await t.step(
      "the second's etcd connection stalls; scaled to 4; the leader leaves",
      async () => {
        before = await stallAndScaleTo4(l);
      },
    );

    await t.step("the standby takes over on its stale cache: no Pod deleted", async () => {
      const b = l.ops[1];
      await waitFor("the standby leads", () => logged(b, MESSAGES.acquiredLease), 30_000);
      // Its reconcile either deletes (acting on replicas 2) or fails (the AppService cannot be
      // read consistently through that apiserver while its etcd stalls).
      const seen = await waitFor("a Pod deleted, or a failed reconcile", () => {
        if (logged(b, "Deleted Pod")) return "deleted";
        // The GET fails with the apiserver's 504 or, when no answer comes in time, as unreachable.
        return (logged(b, "Reconciler error") || logged(b, MESSAGES.reconcileUnreachable)) &&
          "failed";
      }, 60_000);
      assertEquals(seen, "failed");
      assertEquals(podIds(await podsOf(l.c, l.ns, "web")), before);
    });

    await t.step("the stall ends: it catches up and reconciles, same 4 Pods", async () => {
      await endStall(l, l.ops[1], before);
    });
  });
});
