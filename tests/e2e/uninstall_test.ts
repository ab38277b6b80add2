/**
 * Uninstall as docs/operations.md documents it (issue 28; docs/scenarios.md S27), with
 * AppServices present: first `kubectl delete appservices --all --all-namespaces` while the
 * operator still runs (it clears each finalizer after its cleanup), then `kubectl delete` of
 * deploy/. Afterwards nothing of the product is left — no AppService, no Pod or Service of one,
 * and none of deploy/'s objects: the CRD, the namespace, the RBAC, the Lease-holder policy — and a
 * reinstall accepts a new AppService that becomes Ready (the reinstall was refused: "create
 * not allowed while custom resource definition is terminating").
 *
 * Simplification: the local control plane runs no containers (kwok Pods run nothing), so the
 * operator runs as a local process instead of deploy/'s Deployment, with deploy/'s identity — a
 * token of its ServiceAccount bound to a Pod object of that ServiceAccount (never started), so the
 * Lease-holder admission policy sees a replica as it would in the cluster — and deploy/ is applied
 * and deleted without its Deployment (`kubectl kustomize deploy/` minus that object, through
 * `kubectl apply -f -` and `kubectl delete -f -`). Stopping the process stands for the
 * Deployment's deletion; the order is the documented one.
 *
 * The cluster is shared with the other tests: the keeper policy of lease_fence.ts keeps the
 * apiserver's Lease informer alive when deploy/'s binding is deleted (kubernetes/kubernetes issue
 * 130887), and deploy/'s policy is removed again at the end (other tests run deploy/'s
 * ServiceAccount without Pod-bound tokens).
 */
import { stringify } from "yaml";
import { assert, assertEquals } from "../assert.ts";
import type { KubeObject } from "../../lib/kube/client.ts";
import { isNotFound } from "../../lib/kube/errors.ts";
import { LEASES, PODS, SERVICES } from "../../lib/kube/resources.ts";
import { FLAGS } from "../../lib/cli.ts";
import { APPSERVICES } from "../../lib/appservice/schema.ts";
import {
  admin,
  appService,
  cluster,
  dropNamespace,
  getAs,
  installCrd,
  newNamespace,
  type Operator,
  startOperator,
  waitFor,
} from "./harness.ts";
import { kubectlBinary, kustomize, parseObjects, runOk } from "./chart.ts";
import { podBoundToken } from "./identity.ts";
import { ensureKeeper } from "./lease_fence.ts";
import { waitFinalizerPolicy } from "../cluster/finalizer_policy.ts";
import {
  VALIDATING_ADMISSION_POLICIES,
  VALIDATING_ADMISSION_POLICY_BINDINGS,
  writeTokenKubeconfig,
} from "./resources.ts";

const AS = APPSERVICES as never;
const NAMESPACE = "appservice-system";
const SA = "appservice-operator";
const LEASE_NAME = FLAGS.find((f) => f.name === "leader-election-id")!.default;
const CRD = "customresourcedefinition.apiextensions.k8s.io/appservices.apps.our-org.com";
const MANAGED = "app.kubernetes.io/managed-by=appservice-operator";

/** deploy/ without its Deployment (see the module doc), as one YAML text. */
async function deployWithoutDeployment(): Promise<{ text: string; objects: KubeObject[] }> {
  const objects = parseObjects(await kustomize()).filter((o) => o.kind !== "Deployment");
  return { text: objects.map((o) => stringify(o)).join("---\n"), objects };
}

/**
 * The operator as deploy/'s replica `podName`: a Pod object of deploy/'s ServiceAccount and a
 * token bound to it, `--leader-elect` (the Lease in appservice-system), APPSERVICE_POD_NAME as the
 * downward API sets it.
 */
async function startReplica(podName: string, dir: string): Promise<Operator> {
  const info = await cluster();
  const token = await podBoundToken(NAMESPACE, SA, podName);
  const kubeconfig = `${dir}/kubeconfig-${podName}`;
  await writeTokenKubeconfig(kubeconfig, info.server, info.caCertFile, token, NAMESPACE);
  const op = await startOperator([`--kubeconfig=${kubeconfig}`, "--leader-elect"], {
    APPSERVICE_POD_NAME: podName,
  });
  await op.waitReady();
  return op;
}

/** Waits until AppService `ns/name` is Ready with `replicas` Pods. */
const ready = (ns: string, name: string, replicas: number) =>
  waitFor(`${ns}/${name} Ready`, async () => {
    const a = await getAs(ns, name);
    return a.status?.ready === true && a.status.readyReplicas === replicas;
  }, 60_000);

Deno.test("Uninstall (kustomize): AppServices first, then deploy/; nothing left; a reinstall works", async (t) => {
  const c = await admin();
  const kubectl = await kubectlBinary();
  const dir = await Deno.makeTempDir({ prefix: "uninstall-" });
  await ensureKeeper();
  const deploy = await deployWithoutDeployment();
  const install = async () => {
    await runOk(kubectl, ["apply", "-f", "-"], deploy.text);
    await runOk(kubectl, ["wait", "--for=condition=Established", "--timeout=60s", CRD]);
    // Established is not yet creatable: the finalizer policy's admission plugin answers 503 until
    // it has loaded the new kind (docs/troubleshooting.md), as a user's script would meet it.
    await waitFinalizerPolicy(c, "default", "appservice-e2e");
    // A Lease left by another test's replica would only delay the election.
    await c.delete(LEASES, LEASE_NAME, { namespace: NAMESPACE }).catch((err) => {
      if (!isNotFound(err)) throw err;
    });
  };
  await install();
  const ns = await newNamespace("uninstall");
  let op: Operator | undefined = await startReplica("appservice-operator-uninstall-a", dir);
  try {
    for (const name of ["web", "api"]) {
      await c.create(AS, appService(ns, name, { image: "nginx:1.27", replicas: 2 }));
    }
    await ready(ns, "web", 2);
    await ready(ns, "api", 2);

    await t.step(
      "kubectl delete appservices --all -A, the operator running: all gone",
      async () => {
        await runOk(kubectl, [
          "delete",
          "appservices.apps.our-org.com",
          "--all",
          "--all-namespaces",
          "--timeout=120s",
        ]);
        assertEquals((await c.list(AS)).items.length, 0);
        await waitFor("the AppServices' Pods and Services gone", async () => {
          const pods = await c.list(PODS, { namespace: ns, labelSelector: MANAGED });
          const svcs = await c.list(SERVICES, { namespace: ns, labelSelector: MANAGED });
          return pods.items.length === 0 && svcs.items.length === 0;
        }, 60_000);
      },
    );

    await t.step("the operator stopped, kubectl delete of deploy/: nothing left", async () => {
      // Positive control of the "nothing left" check below: it names every object that exists.
      const before = await runOk(kubectl, ["get", "-o", "name", "-f", "-"], deploy.text);
      assertEquals(before.trim().split("\n").length, deploy.objects.length, before);
      assertEquals(await op!.stop(), 0);
      op = undefined;
      await runOk(kubectl, ["delete", "--timeout=120s", "-f", "-"], deploy.text);
      const left = await runOk(
        kubectl,
        ["get", "--ignore-not-found", "-o", "name", "-f", "-"],
        deploy.text,
      );
      assertEquals(left.trim(), "", `left after the uninstall:\n${left}`);
      const crdNow = await runOk(kubectl, ["get", "--ignore-not-found", "-o", "name", "crd"]);
      assert(!crdNow.includes("appservices.apps.our-org.com"), crdNow);
      const policies = await c.list(VALIDATING_ADMISSION_POLICIES);
      assert(
        !policies.items.some((p) => p.metadata?.name === "appservice-operator-lease-holder"),
        "the Lease-holder policy is left",
      );
      // The namespace of the AppServices (the user's) stays, empty of the product.
      const pods = await c.list(PODS, { namespace: ns, labelSelector: MANAGED });
      assertEquals(pods.items.length, 0);
    });

    await t.step("reinstalled: a new AppService becomes Ready", async () => {
      await install();
      op = await startReplica("appservice-operator-uninstall-b", dir);
      await c.create(AS, appService(ns, "again", { image: "nginx:1.27", replicas: 1 }));
      await ready(ns, "again", 1);
    });
  } finally {
    // The operator still running, the AppService goes with its finalizer cleared.
    await c.delete(AS, "again", { namespace: ns }).catch(() => {});
    if (op) {
      await waitFor("again gone", async () => {
        try {
          await getAs(ns, "again");
          return false;
        } catch (err) {
          return isNotFound(err);
        }
      }, 60_000).catch(() => {});
      assertEquals(await op.stop(), 0);
    }
    await dropNamespace(ns);
    // Other tests run deploy/'s ServiceAccount without Pod-bound tokens: no deploy/ policy for them.
    const policy = deploy.objects.filter((o) => o.kind?.startsWith("ValidatingAdmissionPolicy"));
    for (const o of policy) {
      const rt = o.kind === "ValidatingAdmissionPolicy"
        ? VALIDATING_ADMISSION_POLICIES
        : VALIDATING_ADMISSION_POLICY_BINDINGS;
      await c.delete(rt, o.metadata!.name!).catch((err) => {
        if (!isNotFound(err)) throw err;
      });
    }
    // The CRD and the tests' finalizer binding (deploy/'s matches every namespace) as before.
    await installCrd();
    for (const pod of ["appservice-operator-uninstall-a", "appservice-operator-uninstall-b"]) {
      await c.delete(PODS, pod, { namespace: NAMESPACE }).catch(() => {});
    }
    await Deno.remove(dir, { recursive: true });
  }
});
