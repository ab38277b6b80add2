/**
 * The chart installed with the pinned `helm` on the local control plane (issue 28): `helm install`
 * (cluster-wide, and namespace-scoped with `watchNamespaces`), an AppService becomes Ready, `helm upgrade` with a changed value rolls the
 * Deployment, and — AppServices deleted first, as docs/operations.md's Uninstall says —
 * `helm uninstall` leaves nothing of the release but the CRD it keeps.
 *
 * Simplification: the local control plane runs no containers (kwok marks the Deployment's Pods
 * Running and Ready, but nothing runs in them), so the operator runs as a local process with the
 * release's identity: a token of the chart's ServiceAccount bound to one of the Deployment's Pods,
 * APPSERVICE_POD_NAME that Pod's name, so the chart's Lease-holder policy judges it as that
 * replica. The upgrade deletes the old Pods (their bound tokens with them), so the process is
 * stopped before it (releasing the Lease) and started again as a replica of the new ReplicaSet;
 * whether two replicas ever hold the Lease at once during a real rollout is leader_test's and
 * fencing_test's subject, not this one's.
 *
 * The release gets names of its own (`fullnameOverride`) and a fresh namespace, and takes over the
 * shared CRD (`--take-ownership`; kept on uninstall), so it meets no other test's objects; the
 * keeper policy of lease_fence.ts keeps the apiserver's Lease informer alive when the release's
 * policy binding is deleted (kubernetes/kubernetes issue 130887).
 */
import { assert, assertEquals } from "../assert.ts";
import type { KubeObject } from "../../lib/kube/client.ts";
import { PODS } from "../../lib/kube/resources.ts";
import { APPSERVICES } from "../../lib/appservice/schema.ts";
import { admin, appService, cluster, dropNamespace, getAs } from "./harness.ts";
import { installCrd, newNamespace, type Operator, startOperator, waitFor } from "./harness.ts";
import { tokenBoundToPod } from "./identity.ts";
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

/** Flags of the Deployment the harness sets itself (its own free loopback ports). */
const HARNESS_FLAGS = /^--(metrics-bind-address|health-probe-bind-address)=/;

/**
 * The operator as a replica of the release: a token of ServiceAccount `ns/sa` bound to one of the
 * live Pods of the Deployment (TokenRequest, boundObjectRef), run with the Deployment's own args
 * (`--leader-elect`, `--watch-namespace`, `--log-level`, ...; the Lease in `ns`) but for the bind
 * addresses, which are the harness's.
 */
async function startAsReplica(ns: string, sa: string, dir: string): Promise<Operator> {
  const c = await admin();
  const info = await cluster();
  const d = await c.get<Deployment>(DEPLOYMENTS, sa, { namespace: ns });
  const args = (d.spec?.template?.spec?.containers?.[0].args ?? []).filter((a) =>
    !HARNESS_FLAGS.test(a)
  );
  const pods = await c.list<KubeObject>(PODS, {
    namespace: ns,
    labelSelector: "app.kubernetes.io/name=appservice-operator",
  });
  const pod = pods.items.find((p) => !p.metadata?.deletionTimestamp);
  assert(pod, `no live Pod of the Deployment in ${ns}`);
  const token = await tokenBoundToPod(ns, sa, pod);
  const kubeconfig = `${dir}/kubeconfig-${pod.metadata!.name}`;
  await writeTokenKubeconfig(kubeconfig, info.server, info.caCertFile, token, ns);
  const op = await startOperator([`--kubeconfig=${kubeconfig}`, ...args], {
    APPSERVICE_POD_NAME: pod.metadata!.name!,
  });
  await op.waitReady();
  return op;
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
  const common = [
    ...["--namespace", release, "--set", `fullnameOverride=${name}`],
    // The tests' own finalizer policy (installCrd) stays theirs: not taken over and deleted here.
    ...["--set", "finalizerPolicy.enabled=false"],
    ...(scoped ? ["--set", `watchNamespaces={${apps}}`] : []),
  ];
  if (outside) await c.create(AS, appService(outside, "out", { image: "nginx:1.27" }));
  let op: Operator | undefined;
  let installed = false;
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
      "an AppService becomes Ready (the operator as a replica of the release)",
      async () => {
        op = await startAsReplica(release, name, dir);
        await c.create(AS, appService(apps, "web", { image: "nginx:1.27", replicas: 2 }));
        await ready(apps, "web", 2);
      },
    );

    await t.step("helm upgrade with a changed value rolls the Deployment", async () => {
      const before = await rolledOut(release, name);
      // The rollout deletes the Pod the local replica's token is bound to (the token dies with
      // it), as it would end the process in that Pod: stop it first, it releases the Lease.
      assertEquals(await op!.stop(), 0);
      op = undefined;
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
      // A replica of the new ReplicaSet takes the Lease and serves: a scale is applied.
      op = await startAsReplica(release, name, dir);
      await c.patch(AS, "web", { spec: { replicas: 3 } }, { namespace: apps });
      await ready(apps, "web", 3);
    });

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
      assertEquals(await op!.stop(), 0);
      op = undefined;
      await runOk(helm, ["uninstall", "e2e", "-n", release, "--wait=watcher", "--timeout=2m"]);
      installed = false;
      const left = await runOk(
        kubectl,
        ["get", "--ignore-not-found", "-o", "name", "-f", "-"],
        manifest,
      );
      assertEquals(left.trim(), CRD);
    });
  } finally {
    if (op) await op.stop();
    if (installed) {
      await c.delete(AS, "web", { namespace: apps }).catch(() => {});
      await runOk(helm, ["uninstall", "e2e", "-n", release, "--timeout=2m"]).catch(() => {});
    }
    await dropNamespace(apps);
    await dropNamespace(release);
    if (outside) await dropNamespace(outside);
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("Helm install: install, an AppService Ready, upgrade rolls the operator, uninstall leaves only the CRD", async (t) => {
  await lifecycle(t, false);
});

Deno.test("Helm install namespace-scoped: the same life watching one namespace; another untouched", async (t) => {
  await lifecycle(t, true);
});
