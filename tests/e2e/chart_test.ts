/**
 * The Helm chart (charts/appservice-operator) against deploy/, so the two cannot drift:
 * - with default values, `helm template` renders exactly `kubectl kustomize deploy/`'s objects,
 *   object by object, once Helm's own labels and the CRD's keep annotation are removed (the
 *   Namespace only with `namespace.create=true`, as `helm install --create-namespace` makes it
 *   otherwise);
 * - `helm lint --strict` is clean, in both RBAC modes;
 * - namespace-scoped (`watchNamespaces`): a Role and RoleBinding in the watched namespace with
 *   deploy/'s ClusterRole rules on namespaced resources, the ClusterRole left with only the
 *   metrics authentication rules (TokenReview, SubjectAccessReview), `--watch-namespace` set;
 *   with two namespaces, a Role and RoleBinding in each and `--watch-namespace=a,b`;
 * - image by digest, and without leader election no Lease Role nor Lease-holder policy;
 * - both modes' renderings are accepted by the local control plane's apiserver
 *   (`kubectl apply --dry-run=server`).
 */
import { assert, assertEquals } from "../assert.ts";
import type { KubeObject } from "../../lib/kube/client.ts";
import { dropNamespace, installCrd, newNamespace } from "./harness.ts";
import {
  byKey,
  CHART,
  helmBinary,
  helmTemplate,
  kubectlBinary,
  kustomize,
  objectKey,
  OPERATOR_NAMESPACE,
  parseObjects,
  runOk,
} from "./chart.ts";
import type { Rule } from "./resources.ts";

type Rbac = KubeObject & { rules?: Rule[] };

/** The operator container's args in a rendering. */
function operatorArgs(objects: KubeObject[]): string[] {
  const d = objects.find((o) => o.kind === "Deployment") as
    | KubeObject & { spec: { template: { spec: { containers: { args: string[] }[] } } } }
    | undefined;
  assert(d, "no Deployment rendered");
  return d.spec.template.spec.containers[0].args;
}

/** A rule's (group, resource, verb) triples. */
function triples(rules: Rule[]): string[] {
  return rules.flatMap((r) =>
    r.apiGroups.flatMap((g) => r.resources.flatMap((res) => r.verbs.map((v) => `${g}|${res}|${v}`)))
  ).sort();
}

const METRICS_AUTH = [
  "authentication.k8s.io|tokenreviews|create",
  "authorization.k8s.io|subjectaccessreviews|create",
];
/** Cluster-scoped in both modes: metrics authentication and the finalizer policy's start-up check. */
const CLUSTER_ONLY = [
  "admissionregistration.k8s.io|mutatingadmissionpolicies|get",
  "admissionregistration.k8s.io|mutatingadmissionpolicybindings|get",
  ...METRICS_AUTH,
];

Deno.test("Helm chart: renders deploy/, lints clean, namespace-scoped RBAC, server dry-run", async (t) => {
  const deploy = parseObjects(await kustomize());
  const chart = parseObjects(await helmTemplate());

  await t.step("default values render deploy/'s objects, object by object", () => {
    const want = byKey(deploy.filter((o) => o.kind !== "Namespace"));
    const got = byKey(chart);
    assertEquals([...got.keys()].sort(), [...want.keys()].sort(), "objects differ");
    for (const [key, o] of want) assertEquals(got.get(key), o, `${key} differs`);
  });

  await t.step("namespace.create=true renders deploy/'s Namespace too", async () => {
    const got = byKey(parseObjects(await helmTemplate(["namespace.create=true"])));
    const ns = deploy.find((o) => o.kind === "Namespace")!;
    assertEquals(got.get(objectKey(ns)), byKey([ns]).get(objectKey(ns)));
  });

  await t.step("helm lint --strict is clean (both modes, the optional objects)", async () => {
    const helm = await helmBinary();
    await runOk(helm, ["lint", "--strict", CHART]);
    await runOk(helm, ["lint", "--strict", CHART, "--set", "watchNamespaces={apps}"]);
    // The optional objects, plain HTTP metrics and one replica (no PodDisruptionBudget then).
    const optional = "serviceMonitor.enabled=true,prometheusRule.enabled=true";
    await runOk(helm, [
      "lint",
      "--strict",
      CHART,
      "--set",
      `${optional},metrics.secure=false,replicas=1`,
    ]);
    const kinds = parseObjects(await helmTemplate([optional, "replicas=1"])).map((o) => o.kind);
    assert(kinds.includes("ServiceMonitor") && kinds.includes("PrometheusRule"), `${kinds}`);
    assert(!kinds.includes("PodDisruptionBudget"), "a PodDisruptionBudget for one replica");
  });

  await t.step(
    "namespace-scoped: a Role per watched namespace, metrics auth cluster-wide",
    async () => {
      const objects = parseObjects(await helmTemplate(["watchNamespaces={apps}"]));
      const clusterWide = (deploy.find((o) =>
        o.kind === "ClusterRole" &&
        o.metadata?.name === "appservice-operator"
      ) as Rbac).rules!;
      const role = objects.find((o) =>
        o.kind === "Role" && o.metadata?.namespace === "apps"
      ) as Rbac;
      assert(role, "no Role in the watched namespace");
      const binding = objects.find((o) =>
        o.kind === "RoleBinding" && o.metadata?.namespace === "apps"
      ) as KubeObject & { roleRef: { name: string }; subjects: { name: string }[] };
      assertEquals(binding?.roleRef.name, role.metadata?.name);
      assertEquals(binding.subjects[0].name, "appservice-operator");
      assertEquals(
        triples(role.rules!),
        triples(clusterWide).filter((x) => !CLUSTER_ONLY.includes(x)),
      );
      const cr = objects.find((o) =>
        o.kind === "ClusterRole" && o.metadata?.name === "appservice-operator"
      ) as Rbac;
      assertEquals(triples(cr.rules!), CLUSTER_ONLY);
      // Nothing else namespaced outside the watched and the release namespace.
      const elsewhere = objects.filter((o) =>
        o.metadata?.namespace && !["apps", OPERATOR_NAMESPACE].includes(o.metadata.namespace)
      );
      assertEquals(elsewhere.map(objectKey), []);
      assert(operatorArgs(objects).includes("--watch-namespace=apps"));
      // The Lease's namespace: the Lease, and the dry-run Event create that probes the policy.
      const lease = objects.find((o) =>
        o.kind === "Role" && o.metadata?.namespace === OPERATOR_NAMESPACE
      ) as Rbac;
      assertEquals(triples(lease.rules!), [
        "coordination.k8s.io|leases|create",
        "coordination.k8s.io|leases|delete",
        "coordination.k8s.io|leases|get",
        "coordination.k8s.io|leases|list",
        "coordination.k8s.io|leases|update",
        "coordination.k8s.io|leases|watch",
        "events.k8s.io|events|create",
      ]);
    },
  );

  await t.step("two watched namespaces: a Role and RoleBinding in each", async () => {
    const objects = parseObjects(await helmTemplate(["watchNamespaces={a,b}"]));
    for (const kind of ["Role", "RoleBinding"]) {
      const named = objects.filter((o) =>
        o.kind === kind && o.metadata?.name === "appservice-operator"
      );
      assertEquals(named.map((o) => o.metadata?.namespace).sort(), ["a", "b"]);
    }
    assert(operatorArgs(objects).includes("--watch-namespace=a,b"));
  });

  await t.step("image by digest; no leader election: no Lease Role, no Lease policy", async () => {
    const digest = `sha256:${"a".repeat(64)}`;
    const objects = parseObjects(
      await helmTemplate([
        "image.repository=registry.example.com/op",
        `image.digest=${digest}`,
        "leaderElection.enabled=false",
      ]),
    );
    const d = objects.find((o) => o.kind === "Deployment") as KubeObject & {
      spec: { template: { spec: { containers: { image: string }[] } } };
    };
    assertEquals(d.spec.template.spec.containers[0].image, `registry.example.com/op@${digest}`);
    assert(!operatorArgs(objects).includes("--leader-elect"));
    const left = objects.filter((o) =>
      o.kind?.startsWith("ValidatingAdmissionPolicy") || o.metadata?.name?.endsWith("-election")
    );
    assertEquals(left.map(objectKey), []);
  });

  await t.step("both modes pass kubectl apply --dry-run=server", async () => {
    await installCrd();
    const kubectl = await kubectlBinary();
    const apps = await newNamespace("chart");
    try {
      // The release namespace must exist: a dry run creates nothing.
      await runOk(kubectl, ["apply", "-f", `${CHART}/../../deploy/namespace.yaml`]);
      for (const sets of [[], [`watchNamespaces={${apps}}`]]) {
        const out = await runOk(
          kubectl,
          ["apply", "--dry-run=server", "-f", "-"],
          await helmTemplate(sets),
        );
        assert(out.includes("(server dry run)"), out);
      }
    } finally {
      await dropNamespace(apps);
    }
  });
});
