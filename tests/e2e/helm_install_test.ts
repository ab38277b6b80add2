/**
 * The chart installed with the pinned `helm` on the local control plane (issue 28): `helm install`
 * (cluster-wide, and namespace-scoped with `watchNamespaces`), an AppService becomes Ready, `helm
 * upgrade` with a changed value rolls the Deployment while the old replicas keep running until
 * their Pods are deleted — the Lease passes from holder to holder without two ever holding it (the
 * audit log's Lease writes) — and, AppServices deleted first as docs/operations.md's Uninstall
 * says, `helm uninstall` leaves nothing of the release but the CRD it keeps.
 *
 * The local control plane runs no containers, so the test plays the kubelet of the release's Pods
 * ({@link runReplicaKubelet}): they are scheduled to a Node kwok does not manage (the chart's
 * `nodeSelector`), and for each Pod bound there the test starts the operator as a local process
 * with that Pod's identity — a token of the chart's ServiceAccount bound to the Pod,
 * APPSERVICE_POD_NAME its name, the Pod's own args — and reports the Pod Ready once the process's
 * /readyz answers; a Pod being deleted gets SIGTERM, and its deletion is confirmed once the process
 * has exited, as a kubelet does within the grace period. So a rollout runs as it does in a real
 * cluster: new replicas start as standbys beside the old ones, old ones stop one by one.
 *
 * The release gets names of its own (`fullnameOverride`) and a fresh namespace, and takes over the
 * shared CRD (`--take-ownership`; kept on uninstall), so it meets no other test's objects; the
 * keeper policy of lease_fence.ts keeps the apiserver's Lease informer alive when the release's
 * policy binding is deleted (kubernetes/kubernetes issue 130887).
 */
import type { Pod } from "kubernetes-types/core/v1.d.ts";
import { assert, assertEquals } from "../assert.ts";
import type { KubeClient, KubeObject } from "../../lib/kube/client.ts";
import { PODS } from "../../lib/kube/resources.ts";
import { APPSERVICES } from "../../lib/appservice/schema.ts";
import { admin, appService, cluster, dropNamespace, getAs, sleep } from "./harness.ts";
import { installCrd, newNamespace, type Operator, startOperator, waitFor } from "./harness.ts";
import { podOf, tokenBoundToPod } from "./identity.ts";
import { auditEvents, isWrite, receivedMs } from "./audit.ts";
import { addTestNode, kubeletStatus, NODES, removeTestNode } from "./test_node.ts";
import { CHART, helmBinary, kubectlBinary, parseObjects, runOk } from "./chart.ts";
import { ensureKeeper } from "./lease_fence.ts";
import { rt, writeTokenKubeconfig } from "./resources.ts";

const AS = APPSERVICES as never;
const DEPLOYMENTS = rt("apps/v1", "Deployment", "deployments", true);
const CRD = "customresourcedefinition.apiextensions.k8s.io/appservices.apps.our-org.com";

type Deployment = KubeObject & {
  spec?: { replicas?: number; template?: { spec?: { containers?: { args?: string[] }[] } } };
  status?: {
    observedGeneration?: number;
    replicas?: number;
    updatedReplicas?: number;
    readyReplicas?: number;
  };
};

/** Waits until Deployment `ns/name` has rolled out: every replica updated and Ready, no extra. */
async function rolledOut(ns: string, name: string): Promise<Deployment> {
  const c = await admin();
  return await waitFor(`Deployment ${ns}/${name} rolled out`, async () => {
    const d = await c.get<Deployment>(DEPLOYMENTS, name, { namespace: ns });
    const want = d.spec?.replicas ?? 1;
    const s = d.status ?? {};
    const done = s.observedGeneration === d.metadata?.generation && s.updatedReplicas === want &&
      s.readyReplicas === want && s.replicas === want;
    return done ? d : undefined;
  }, 120_000);
}

/** The taint of the Node whose kubelet the test plays: only the release's Pods tolerate it. */
const REPLICA_TAINT = "e2e.apps.our-org.com/replica-kubelet";

/** Flags of the Deployment the harness sets itself (its own free loopback ports). */
const HARNESS_FLAGS = /^--(metrics-bind-address|health-probe-bind-address)=/;

/** One replica the test's kubelet ran: its Pod, the process, and how the process ended. */
interface Replica {
  pod: string;
  /** The Pod's IP, given when the Pod was first seen (one per replica, never reused). */
  ip: string;
  /** Set once the process has started (undefined while its token and kubeconfig are made). */
  op?: Operator;
  /** The exit code once the process ended after its Pod's deletion. */
  exit?: number;
}

/** The test's kubelet for the release's Pods: {@link runReplicaKubelet}. */
interface ReplicaKubelet {
  /** Every replica started so far, in the order their Pods were seen. */
  replicas: Replica[];
  /**
   * The first error of a replica's life (a start that failed, an exit code but 0) or of the
   * kubelet's own loop, if any; the test reports it at its end.
   */
  failure(): Error | undefined;
  /**
   * Stops watching, SIGTERMs what still runs, removes the Pods left and the Node; every promise
   * of the loop and of each replica is awaited (their errors go to {@link failure}).
   */
  stop(): Promise<void>;
}

/**
 * Plays the kubelet of Node `node` for the operator's Pods in `ns` (polled every 100 ms until
 * `stop()`; each step bounded): a Pod bound there gets a process — the operator with a token of
 * ServiceAccount `ns/sa` bound to that Pod, APPSERVICE_POD_NAME its name and the Pod's own args
 * (but the bind addresses, which are the harness's) — and is reported Running and Ready once the
 * process's /readyz answers, with an IP of 10.244.250.0/24 its own (given when the Pod is first
 * seen, so replicas started together never share one); a Pod with a deletionTimestamp gets
 * SIGTERM, and once the process has exited its deletion is confirmed (grace period 0, uid
 * precondition). Errors of the loop and of each replica are kept for `failure()`, never left as an
 * unhandled rejection.
 */
function runReplicaKubelet(c: KubeClient, ns: string, sa: string, node: string, dir: string) {
  const replicas: Replica[] = [];
  const byUid = new Map<string, Promise<void>>();
  const stopping = new Map<string, Promise<void>>();
  let failure: Error | undefined;
  let running = true;
  const fail = (err: unknown) => failure ??= err instanceof Error ? err : new Error(String(err));

  const start = async (pod: Pod, r: Replica) => {
    const info = await cluster();
    const token = await tokenBoundToPod(ns, sa, pod as KubeObject);
    const kubeconfig = `${dir}/kubeconfig-${r.pod}`;
    await writeTokenKubeconfig(kubeconfig, info.server, info.caCertFile, token, ns);
    const args = (pod.spec!.containers[0].args ?? []).filter((a) => !HARNESS_FLAGS.test(a));
    r.op = await startOperator([`--kubeconfig=${kubeconfig}`, ...args], {
      APPSERVICE_POD_NAME: r.pod,
    });
    await r.op.waitReady();
    await c.patch(PODS, r.pod, {
      status: kubeletStatus(pod, r.ip, true),
    }, {
      namespace: ns,
      subresource: "status",
      type: "strategic",
    });
  };
  const terminate = async (
    pod: Pod,
    r: Replica | undefined,
    started: Promise<void> | undefined,
  ) => {
    await started?.catch(() => {});
    if (r?.op) {
      r.exit = await r.op.stop();
      if (r.exit !== 0) {
        fail(new Error(`replica ${r.pod} exited ${r.exit}: ${r.op.stderr().slice(-2000)}`));
      }
    }
    await c.delete(PODS, pod.metadata!.name!, {
      namespace: ns,
      gracePeriodSeconds: 0,
      preconditions: { uid: pod.metadata!.uid! },
    }).catch(() => {});
  };
  const loop = (async () => {
    while (running) {
      const pods = await c.list<Pod & KubeObject>(PODS, {
        namespace: ns,
        fieldSelector: `spec.nodeName=${node}`,
      }).catch(() => ({ items: [] as Pod[] }));
      for (const p of pods.items) {
        const uid = p.metadata!.uid!;
        if (p.metadata?.deletionTimestamp) {
          if (!stopping.has(uid)) {
            const r = replicas.find((x) => x.pod === p.metadata!.name);
            stopping.set(uid, terminate(p, r, byUid.get(uid)).catch((err) => void fail(err)));
          }
        } else if (!byUid.has(uid)) {
          if (replicas.length >= 254) throw new Error("more than 254 replicas: no Pod IP left");
          const r: Replica = { pod: p.metadata!.name!, ip: `10.244.250.${replicas.length + 1}` };
          replicas.push(r);
          byUid.set(uid, start(p, r).catch((err) => void fail(err)));
        }
      }
      await sleep(100);
    }
  })().catch((err) => void fail(err));
  return {
    replicas,
    failure: () => failure,
    async stop() {
      running = false;
      await loop;
      await Promise.all([...byUid.values()]);
      await Promise.all([...stopping.values()]);
      for (const r of replicas) if (r.op && r.exit === undefined) r.exit = await r.op.stop();
      await removeTestNode(c, ns, node);
    },
  } satisfies ReplicaKubelet;
}

/**
 * The holders of Lease writes in `ns` at or after `sinceMs`, from the audit log: every successful
 * write of the operator (dry runs left out) as the Pod name of its bound token, in the order
 * received, runs of one holder merged.
 */
async function leaseWriters(ns: string, sinceMs: number): Promise<string[]> {
  const writes = (await auditEvents(sinceMs)).filter((e) =>
    e.objectRef?.resource === "leases" && e.objectRef.namespace === ns && isWrite(e) &&
    (e.responseStatus?.code ?? 0) < 300
  ).sort((x, y) => receivedMs(x) - receivedMs(y));
  const runs: string[] = [];
  for (const e of writes) if (runs.at(-1) !== podOf(e)) runs.push(podOf(e));
  return runs;
}

/** Waits until AppService `ns/name` is Ready with `replicas` Pods of its current generation. */
const ready = (ns: string, name: string, replicas: number) =>
  waitFor(`${ns}/${name} Ready with ${replicas}`, async () => {
    const a = await getAs(ns, name);
    return a.status?.ready === true && a.status.readyReplicas === replicas &&
      a.status.observedGeneration === a.metadata.generation;
  }, 60_000);

/**
 * The release's life: install, an AppService Ready in `apps`, upgrade, uninstall. `scoped`: the
 * chart's namespace-scoped mode, watching `apps` only, and an AppService in another namespace
 * stays untouched throughout.
 */
async function lifecycle(t: Deno.TestContext, scoped: boolean): Promise<void> {
  await installCrd();
  await ensureKeeper();
  const c = await admin();
  const helm = await helmBinary();
  const kubectl = await kubectlBinary();
  const release = await newNamespace("helm");
  const apps = await newNamespace("helmapps");
  const name = `e2e-${release}`;
  const dir = await Deno.makeTempDir({ prefix: "helm-" });
  // Out of the tests' cluster-wide finalizer policy binding (the chart's covers only the watched
  // namespaces; the release leaves the policy to the tests' one: finalizerPolicy.enabled=false).
  const outside = scoped ? await newNamespace("helmout", { finalizerPolicy: false }) : undefined;
  // The Node whose kubelet the test plays for the release's Pods (runReplicaKubelet).
  const node = `helm-node-${release}`;
  const common = [
    ...["--namespace", release, "--set", `fullnameOverride=${name}`],
    ...["--set", `nodeSelector.type=${node}`],
    // Tainted: only the release's Pods (which tolerate it) go there, not the AppServices' Pods.
    ...["--set", `tolerations[0].key=${REPLICA_TAINT},tolerations[0].operator=Exists`],
    // The tests' own finalizer policy (installCrd) stays theirs: not taken over and deleted here.
    ...["--set", "finalizerPolicy.enabled=false"],
    ...(scoped ? ["--set", `watchNamespaces={${apps}}`] : []),
  ];
  if (outside) await c.create(AS, appService(outside, "out", { image: "nginx:1.27" }));
  let installed = false;
  await addTestNode(c, node, node, "127.0.0.3");
  await c.patch(NODES, node, { spec: { taints: [{ key: REPLICA_TAINT, effect: "NoSchedule" }] } });
  const kubelet = runReplicaKubelet(c, release, name, node, dir);
  let completed = false;
  try {
    await t.step("helm install: every object created, the Deployment rolled out", async () => {
      await runOk(helm, [
        "install",
        "e2e",
        CHART,
        ...common,
        "--take-ownership", // the CRD exists already (the other tests' installCrd)
        "--wait=watcher",
        "--timeout=2m",
      ]);
      installed = true;
      await rolledOut(release, name);
      // Each replica's Pod has an IP of its own (two started together once got the same).
      const ips = (await c.list<Pod & KubeObject>(PODS, { namespace: release })).items
        .map((p) => p.status?.podIP);
      assertEquals(ips.length, 2, `${ips}`);
      assertEquals(new Set(ips).size, 2, `Pod IPs shared: ${ips}`);
      assert(ips.every((ip) => ip?.startsWith("10.244.250.")), `${ips}`);
      const manifest = parseObjects(await runOk(helm, ["get", "manifest", "e2e", "-n", release]));
      const kinds = new Set(manifest.map((o) => o.kind));
      for (
        const k of [
          "CustomResourceDefinition",
          "Deployment",
          "PodDisruptionBudget",
          "ValidatingAdmissionPolicyBinding",
          "NetworkPolicy",
        ]
      ) assert(kinds.has(k), `${k} not in the release`);
    });

    await t.step(
      "an AppService becomes Ready (the operator as the release's replicas)",
      async () => {
        await c.create(AS, appService(apps, "web", { image: "nginx:1.27", replicas: 2 }));
        await ready(apps, "web", 2);
      },
    );

    await t.step(
      "helm upgrade with a changed value rolls the replicas; the Lease never has two holders",
      async () => {
        const before = await rolledOut(release, name);
        const old = kubelet.replicas.filter((r) => r.op).map((r) => r.pod);
        assertEquals(old.length, 2, "the release's two replicas run before the upgrade");
        const since = Date.now();
        await runOk(helm, [
          "upgrade",
          "e2e",
          CHART,
          ...common,
          "--reuse-values",
          "--set",
          "logLevel=debug",
          "--wait=watcher",
          "--timeout=2m",
        ]);
        const after = await rolledOut(release, name);
        assert(after.metadata!.generation! > before.metadata!.generation!, "not rolled");
        assert(after.spec?.template?.spec?.containers?.[0].args?.includes("--log-level=debug"));
        // Every old replica ran until its Pod was deleted, then stopped cleanly (exit 0: drained,
        // Lease released).
        await waitFor("the old replicas stopped", () => {
          const ended = kubelet.replicas.filter((r) => old.includes(r.pod) && r.exit !== undefined);
          return ended.length === old.length;
        }, 120_000);
        assertEquals(kubelet.failure(), undefined);
        // A replica of the new ReplicaSet holds the Lease and serves: a scale is applied.
        await c.patch(AS, "web", { spec: { replicas: 3 } }, { namespace: apps });
        await ready(apps, "web", 3);
        // The audit log's successful Lease writes, as runs of one writer: each holder's writes
        // form one run (a holder that wrote again after another had written would be two at
        // once), the Lease changed hands at least once (the old holder's Pod was deleted), and
        // the last writer is a new replica.
        const runs = await leaseWriters(release, since);
        console.log(`Lease writers during the upgrade: ${runs.join(" -> ")}`);
        assert(runs.length >= 2, `the Lease never changed hands: ${runs.join(" -> ")}`);
        assertEquals(new Set(runs).size, runs.length, `two holders at once: ${runs.join(" -> ")}`);
        assert(old.includes(runs[0]), `first writer not an old replica: ${runs.join(" -> ")}`);
        assert(!old.includes(runs.at(-1)!), `last writer not a new replica: ${runs.join(" -> ")}`);
        assert(!runs.includes(""), `a Lease write without a Pod-bound token: ${runs.join(" -> ")}`);
      },
    );

    if (outside) {
      await t.step("the AppService outside the watched namespace was never touched", async () => {
        // web went Ready and was scaled meanwhile: the operator was working.
        const out = await getAs(outside, "out");
        assertEquals(out.status, undefined);
        assertEquals(out.metadata.finalizers, undefined);
      });
    }
    await t.step("AppServices first, then helm uninstall: only the kept CRD is left", async () => {
      const manifest = await runOk(helm, ["get", "manifest", "e2e", "-n", release]);
      const objects = parseObjects(manifest);
      // Positive control of the check below: it names every object of the release now.
      const before = await runOk(kubectl, ["get", "-o", "name", "-f", "-"], manifest);
      assertEquals(before.trim().split("\n").length, objects.length, before);
      await runOk(kubectl, [
        "delete",
        "appservices.apps.our-org.com",
        "--all",
        "-n",
        apps,
        "--timeout=2m",
      ]);
      await runOk(helm, ["uninstall", "e2e", "-n", release, "--wait=watcher", "--timeout=2m"]);
      installed = false;
      // The Deployment's Pods went with it: every replica was stopped, cleanly.
      await waitFor("every replica stopped", () => {
        return kubelet.replicas.every((r) => !r.op || r.exit !== undefined);
      }, 120_000);
      assertEquals(kubelet.failure(), undefined);
      const left = await runOk(
        kubectl,
        ["get", "--ignore-not-found", "-o", "name", "-f", "-"],
        manifest,
      );
      assertEquals(left.trim(), CRD);
    });
    completed = true;
  } finally {
    await kubelet.stop();
    if (installed) {
      await c.delete(AS, "web", { namespace: apps }).catch(() => {});
      await runOk(helm, ["uninstall", "e2e", "-n", release, "--timeout=2m"]).catch(() => {});
    }
    await dropNamespace(apps);
    await dropNamespace(release);
    if (outside) await dropNamespace(outside);
    await Deno.remove(dir, { recursive: true });
    // Not thrown over the error the body threw: reported beside it.
    const failure = kubelet.failure();
    if (failure && !completed) console.error(`replica kubelet: ${failure.stack ?? failure}`);
  }
  // The kubelet's background work has ended (stop above): an error of it fails the test.
  const failure = kubelet.failure();
  if (failure) throw failure;
}

Deno.test("Helm install: install, an AppService Ready, upgrade rolls the operator, uninstall leaves only the CRD", async (t) => {
  await lifecycle(t, false);
});

Deno.test("Helm install namespace-scoped: the same life watching one namespace; another untouched", async (t) => {
  await lifecycle(t, true);
});
