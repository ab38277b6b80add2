/**
 * Least privilege, end to end: deploy/'s RBAC applied, a token minted for its ServiceAccount with
 * the TokenRequest API, the operator run with a kubeconfig holding only that token (and
 * --leader-elect, --metrics-secure), the main scenario (create, a crash-looping Pod reported twice,
 * scale, update, delete), one scrape of /metrics by a ServiceAccount bound to deploy/'s
 * metrics-reader ClusterRole (the operator's TokenReview and SubjectAccessReview), and a second
 * replica standing by for a moment (its watch on the Lease). Then, from the
 * audit log: no request of the operator was forbidden, and every verb the RBAC grants was used
 * (patch on events: the Event series count; create on tokenreviews and subjectaccessreviews: the
 * scrape).
 *
 * Namespace-scoped (the chart with `watchNamespaces`, two namespaces): the chart's ServiceAccount,
 * a Role and RoleBinding in each watched namespace, the Lease Role in the release namespace and the
 * ClusterRole with only TokenReview and SubjectAccessReview; the operator with `--watch-namespace`
 * runs the same scenario in both at once. From the audit log: nothing forbidden, every granted
 * verb used (a Role's in its own namespace), no request outside the watched and the release
 * namespaces but the cluster-scoped reviews; an AppService in another namespace is never touched,
 * and a Pod create there with the operator's token is refused (403, decision forbid) while the
 * same create (dry run) inside is allowed.
 */
import { assert, assertEquals } from "../assert.ts";
import { KubeClient, type KubeObject } from "../../lib/kube/client.ts";
import { loadClusterConfig } from "../../lib/kube/config.ts";
import { isNotFound } from "../../lib/kube/errors.ts";
import { EVENTS, LEASES, PODS, type ResourceType } from "../../lib/kube/resources.ts";
import { FLAGS } from "../../lib/cli.ts";
import { APPSERVICES } from "../../lib/appservice/schema.ts";
import {
  admin,
  appService,
  cluster,
  dropNamespace,
  getAs,
  installCrd,
  logsOf,
  newNamespace,
  REPO,
  sleep,
  startOperator,
  waitFor,
} from "./harness.ts";
import { type AuditEvent, auditEvents, describe } from "./audit.ts";
import { helmTemplate, kubectlBinary, parseObjects, runOk } from "./chart.ts";
import { applyDeployRbac, mintToken, type Rule, writeTokenKubeconfig } from "./resources.ts";
import {
  bindMetricsReader,
  createServiceAccounts,
  scrape,
  servedCertificate,
} from "./secure_metrics.ts";

const AS = APPSERVICES as unknown as ResourceType;

/** User agent of the test's own requests made with the operator's token. */
const PROBE_AGENT = "appservice-e2e-probe";

/** Pod status of a container crashing again and again (kubelet: CrashLoopBackOff). */
function crashLooping(restartCount: number) {
  const now = new Date().toISOString();
  return {
    conditions: [
      { type: "Ready", status: "False", reason: "ContainersNotReady", lastTransitionTime: now },
      { type: "ContainersReady", status: "False", lastTransitionTime: now },
    ],
    containerStatuses: [{
      name: "app",
      image: "nginx:1.27",
      imageID: "",
      ready: false,
      restartCount,
      state: { waiting: { reason: "CrashLoopBackOff", message: "back-off restarting" } },
      lastState: { terminated: { reason: "Error", exitCode: 1, finishedAt: now } },
    }],
  };
}

/** Pod status of a running, Ready container. */
function runningReady() {
  const now = new Date().toISOString();
  return {
    conditions: [
      { type: "Ready", status: "True", lastTransitionTime: now },
      { type: "ContainersReady", status: "True", lastTransitionTime: now },
    ],
    containerStatuses: [{
      name: "app",
      image: "nginx:1.27",
      imageID: "",
      ready: true,
      restartCount: 2,
      started: true,
      state: { running: { startedAt: now } },
    }],
  };
}
/** Removes `label` from Pod `ns/pod` and waits (30 s) until the operator has put `value` back. */
async function labelPutBack(
  c: KubeClient,
  ns: string,
  pod: string,
  label: string,
  value: string,
): Promise<void> {
  await c.patch(PODS, pod, { metadata: { labels: { [label]: null } } }, { namespace: ns });
  await waitFor(`${pod}'s ${label} label put back`, async () => {
    const p = await c.get<KubeObject>(PODS, pod, { namespace: ns });
    return p.metadata?.labels?.[label] === value;
  }, 30_000);
}

/**
 * The main scenario in namespace `ns` (an AppService `app`, through the operator running
 * meanwhile): create, a crash-looping Pod reported twice (Event series), Ready again, scale to
 * 3, labels put back (one through a create answered AlreadyExists), an image update, delete.
 * Uses every verb the operator's RBAC grants on namespaced resources.
 */
async function mainScenario(c: KubeClient, ns: string): Promise<void> {
  await c.create(
    AS,
    appService(ns, "app", { image: "nginx:1.27", ports: [{ containerPort: 80 }] }),
  );
  const ready = (n: number, image: string) =>
    waitFor(`app Ready with ${n} x ${image}`, async () => {
      const a = await getAs(ns, "app");
      return a.status?.ready && a.status.readyReplicas === n &&
        a.status.observedGeneration === a.metadata.generation && a.spec.image === image;
    }, 60_000);
  await ready(1, "nginx:1.27");
  // A Pod that crashes twice: a Warning Event, then its series count (patch on events).
  for (const restarts of [1, 2]) {
    await c.patch(PODS, "app-0", { status: crashLooping(restarts) }, {
      namespace: ns,
      subresource: "status",
      type: "strategic",
    });
    await waitFor(`Ready=False CrashLoopBackOff after ${restarts} restarts`, async () => {
      const a = await getAs(ns, "app");
      const r = a.status?.conditions?.find((x) => x.type === "Ready");
      return r?.reason === "CrashLoopBackOff" &&
        a.status?.podStatuses?.[0]?.restartCount === restarts;
      // A restart count alone is written within 30 s of the last write (S24).
    }, 45_000);
  }
  await waitFor("CrashLoopBackOff Event with series.count 2", async () => {
    const evs = await c.list<KubeObject & { reason?: string; series?: { count?: number } }>(
      EVENTS,
      { namespace: ns },
    );
    return evs.items.some((e) => e.reason === "CrashLoopBackOff" && e.series?.count === 2);
  }, 30_000);
  // The kubelet (kwok's part) reports it Running and Ready again.
  await c.patch(PODS, "app-0", { status: runningReady() }, {
    namespace: ns,
    subresource: "status",
    type: "strategic",
  });
  await ready(1, "nginx:1.27");
  await c.patch(AS, "app", { spec: { replicas: 3 } }, { namespace: ns });
  await ready(3, "nginx:1.27");
  // A label of the operator's removed from a Pod by hand is put back (patch on pods; the
  // same verb adopts orphaned Pods).
  await labelPutBack(c, ns, "app-2", "app.kubernetes.io/instance", "app");
  // Without its managed-by label a Pod leaves the operator's cache: the slot looks empty, the
  // create is answered AlreadyExists, and the operator reads that Pod (get on pods) and puts the
  // label back.
  await labelPutBack(c, ns, "app-1", "app.kubernetes.io/managed-by", "appservice-operator");
  await c.patch(AS, "app", { spec: { image: "nginx:1.28", ports: null } }, { namespace: ns });
  await ready(3, "nginx:1.28");
  await c.delete(AS, "app", { namespace: ns });
  await waitFor("app gone", async () => {
    try {
      await getAs(ns, "app");
      return false;
    } catch (err) {
      return isNotFound(err);
    }
  }, 60_000);
}

/**
 * A step: one scrape of the operator's secure /metrics on `metricsPort` by the ServiceAccount
 * `scraper` of `ns` (bound to the metrics-reader ClusterRole) answers 200; the operator made a
 * TokenReview and a SubjectAccessReview for it.
 */
async function scrapeStep(
  t: Deno.TestContext,
  c: KubeClient,
  ns: string,
  metricsPort: number,
): Promise<void> {
  const tls = Deno.createHttpClient({ caCerts: [await servedCertificate(metricsPort)] });
  try {
    await t.step("a scrape of the secure /metrics by a metrics-reader: 200", async () => {
      const r = await scrape(
        `https://127.0.0.1:${metricsPort}/metrics`,
        tls,
        await mintToken(c, ns, "scraper", 3600),
      );
      assertEquals(r.status, 200);
    });
  } finally {
    tls.close();
  }
}

/**
 * Two steps over the operator's audit `events`: none was forbidden by authorization, and every
 * verb the rules of `objects` (Roles and ClusterRoles) grant was used.
 */
async function checkVerbs(
  t: Deno.TestContext,
  events: AuditEvent[],
  objects: (KubeObject & { rules?: Rule[] })[],
): Promise<void> {
  await t.step("no request of the operator was forbidden", () => {
    // Denied by authorization, not every 403: the NamespaceLifecycle admission plugin answers 403
    // too (a namespace being deleted, e.g. one a previous test left behind), after RBAC allowed it.
    const denied = events.filter((e) =>
      e.responseStatus?.code === 403 &&
      e.annotations?.["authorization.k8s.io/decision"] !== "allow"
    );
    assertEquals(denied, [], `forbidden requests:\n${describe(denied)}`);
  });

  await t.step("every verb the RBAC grants was used", () => {
    const used = new Set<string>();
    for (const e of events) {
      const r = e.objectRef ?? {};
      const res = r.subresource ? `${r.resource}/${r.subresource}` : r.resource;
      used.add(`${r.apiGroup ?? ""}|${res}|${e.verb}`);
      // A Role's verbs must be used in its own namespace.
      if (r.namespace) used.add(`${r.namespace}@${r.apiGroup ?? ""}|${res}|${e.verb}`);
      // A WatchList (a watch with sendInitialEvents=true) does what a list did, and the
      // reflector falls back to a list where the apiserver does not support it.
      const also = (verb: string) => {
        used.add(`${r.apiGroup ?? ""}|${res}|${verb}`);
        if (r.namespace) used.add(`${r.namespace}@${r.apiGroup ?? ""}|${res}|${verb}`);
      };
      if (e.verb === "watch" && e.requestURI?.includes("sendInitialEvents=true")) also("list");
      // A server-side apply that creates the object is authorized as create too (201).
      if (e.verb === "patch" && e.responseStatus?.code === 201) also("create");
    }
    const unused: string[] = [];
    for (const o of objects) {
      for (const rule of o.rules ?? []) {
        for (const g of rule.apiGroups) {
          for (const r of rule.resources) {
            for (const v of rule.verbs) {
              const scope = o.kind === "Role" ? `${o.metadata?.namespace}@` : "";
              if (!used.has(`${scope}${g}|${r}|${v}`)) {
                unused.push(`${o.kind}/${o.metadata?.name}: ${g || "core"} ${r} ${v}`);
              }
            }
          }
        }
      }
    }
    assertEquals(
      unused,
      [],
      `granted but never used:\n${unused.join("\n")}\nused:\n${[...used].sort().join("\n")}`,
    );
  });
}

const SA_NAMESPACE = "appservice-system";
const SA_NAME = "appservice-operator";
const SA_USER = `system:serviceaccount:${SA_NAMESPACE}:${SA_NAME}`;
const LEASE_NAME = FLAGS.find((f) => f.name === "leader-election-id")!.default;

Deno.test("RBAC: the operator works with exactly deploy/'s permissions", async (t) => {
  await installCrd();
  const c = await admin();
  const info = await cluster();
  const objects = await applyDeployRbac(c, REPO);
  const token = await mintToken(c, SA_NAMESPACE, SA_NAME, 3600);
  const dir = await Deno.makeTempDir({ prefix: "rbac-" });
  const kubeconfig = `${dir}/kubeconfig`;
  await writeTokenKubeconfig(kubeconfig, info.server, info.caCertFile, token, SA_NAMESPACE);
  // The operator must create the Lease itself (the `create` verb is checked below).
  await c.delete(LEASES, LEASE_NAME, { namespace: SA_NAMESPACE }).catch((err) => {
    if (!isNotFound(err)) throw err;
  });
  const ns = await newNamespace("rbac");
  const since = Date.now();
  await createServiceAccounts(ns, ["scraper"]);
  const unbind = await bindMetricsReader(`e2e-${ns}-scraper`, ns, ["scraper"]);
  const op = await startOperator([
    `--kubeconfig=${kubeconfig}`,
    "--leader-elect",
    "--metrics-secure",
  ]);
  try {
    await op.waitReady();
    await scrapeStep(t, c, ns, op.metricsPort);
    await t.step(
      "main scenario as the ServiceAccount: create, crash loop, scale, update, delete",
      async () => {
        await mainScenario(c, ns);
      },
    );
    await standbyStep(t, [`--kubeconfig=${kubeconfig}`, "--leader-elect"]);
    await shardedStep(t, [`--kubeconfig=${kubeconfig}`]);
    const logged = op.logs().find((l) => l.message === "Connected");
    assertEquals((logged?.properties as Record<string, unknown>)?.user, SA_USER);
  } finally {
    await unbind();
    assertEquals(await op.stop(), 0);
    await dropNamespace(ns);
    await Deno.remove(dir, { recursive: true });
  }

  const events = (await auditEvents(since)).filter((e) => e.user?.username === SA_USER);
  await checkVerbs(t, events, objects);
});

/** Cluster-scoped names a namespaced request may still touch (no namespace in its objectRef). */
/**
 * Step: a standby as the ServiceAccount (`args`, with `--leader-elect`) runs until it has observed
 * the leader, then stops: the leader never watches its Lease; a standby does after its first
 * attempt (the watch's audit event is written when it ends, at the standby's stop).
 */
async function standbyStep(t: Deno.TestContext, args: string[]): Promise<void> {
  await t.step("a standby as the ServiceAccount: it watches the Lease", async () => {
    const standby = await startOperator(args);
    try {
      await standby.waitReady();
      await waitFor(
        "the standby observed the leader",
        () => logsOf(standby, "Observed leader").length > 0,
        30_000,
      );
      await sleep(1_000);
    } finally {
      assertEquals(await standby.stop(), 0);
    }
  });
}

/**
 * Step: a replica as the ServiceAccount with `--shards 2` (its own Lease names: another
 * `--leader-election-id`) takes both shards and stops gracefully: it lists the Leases each round and
 * deletes its membership Lease at the end, the verbs (list, delete on leases) that only sharded mode
 * uses. Runs after the main scenario, so no AppService of the test is left for it to reconcile.
 */
async function shardedStep(t: Deno.TestContext, args: string[]): Promise<void> {
  await t.step("a sharded replica as the ServiceAccount: takes its shards, leaves", async () => {
    const sharded = await startOperator([
      ...args,
      "--leader-elect",
      "--shards=2",
      "--leader-election-id=rbac-sharded",
    ]);
    try {
      await waitFor(
        "the sharded replica holds both shards",
        () => logsOf(sharded, "Shard moved").length >= 2,
        30_000,
      );
      await sharded.waitReady();
    } finally {
      assertEquals(await sharded.stop(), 0);
    }
  });
}

const CLUSTER_SCOPED_ASKS = new Set([
  "tokenreviews",
  "subjectaccessreviews",
  "selfsubjectreviews",
  // The start-up check of the finalizer policy (lib/appservice/policy.ts), by name.
  "mutatingadmissionpolicies",
  "mutatingadmissionpolicybindings",
]);

Deno.test("RBAC namespace-scoped: the chart's Role per watched namespace is all the operator needs", async (t) => {
  await installCrd();
  const c = await admin();
  const info = await cluster();
  const release = await newNamespace("rbacrel"); // the operator's own namespace (its Lease)
  const ns = await newNamespace("rbacns"); // the two watched namespaces
  const ns2 = await newNamespace("rbacns2");
  // One it must leave alone; out of the tests' cluster-wide finalizer policy binding (the chart's
  // binding would cover only the watched namespaces).
  const outside = await newNamespace("rbacout", { finalizerPolicy: false });
  const name = `e2e-${ns}`; // fullnameOverride: cluster-scoped names of its own
  const user = `system:serviceaccount:${release}:${name}`;
  // The chart's ServiceAccount and RBAC only: the Lease-holder policy is no part of this (and its
  // binding must not be deleted and re-created: docs/security.md).
  const rendered = await helmTemplate([
    `watchNamespaces={${ns},${ns2}}`,
    `fullnameOverride=${name}`,
  ], release);
  const objects = parseObjects(rendered).filter((o) =>
    ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"].includes(o.kind!)
  ) as (KubeObject & { rules?: Rule[] })[];
  const manifest = objects.map((o) => JSON.stringify(o)).join("\n---\n");
  const kubectl = await kubectlBinary();
  await runOk(kubectl, ["apply", "-f", "-"], manifest);
  const dir = await Deno.makeTempDir({ prefix: "rbacns-" });
  const token = await mintToken(c, release, name, 3600);
  const kubeconfig = `${dir}/kubeconfig`;
  await writeTokenKubeconfig(kubeconfig, info.server, info.caCertFile, token, release);
  const since = Date.now();
  await createServiceAccounts(ns, ["scraper"]);
  const unbind = await bindMetricsReader(`e2e-${ns}-scraper`, ns, ["scraper"]);
  // Created before the operator starts: it must never be touched (no status, no Pod).
  await c.create(AS, appService(outside, "out", { image: "nginx:1.27" }));
  const op = await startOperator([
    `--kubeconfig=${kubeconfig}`,
    `--watch-namespace=${ns},${ns2}`,
    "--leader-elect", // the Lease in the context's namespace, the release namespace
    "--metrics-secure",
  ]);
  const probe = new KubeClient(loadClusterConfig({ kubeconfig }), { userAgent: PROBE_AGENT });
  try {
    await op.waitReady();
    await scrapeStep(t, c, ns, op.metricsPort);
    await t.step("main scenario in both watched namespaces at once", async () => {
      await Promise.all([mainScenario(c, ns), mainScenario(c, ns2)]);
    });
    await standbyStep(t, [
      `--kubeconfig=${kubeconfig}`,
      `--watch-namespace=${ns},${ns2}`,
      "--leader-elect",
    ]);
    await shardedStep(t, [`--kubeconfig=${kubeconfig}`, `--watch-namespace=${ns},${ns2}`]);
    await t.step("the AppService outside the watched namespace was never touched", async () => {
      // mainScenario saw its own AppService through every step: the operator was working.
      const out = await getAs(outside, "out");
      assertEquals(out.status, undefined);
      assertEquals(out.metadata.finalizers, undefined);
      const pods = await c.list(PODS, { namespace: outside });
      assertEquals(pods.items.length, 0);
    });
    await t.step("its identity may create a Pod inside the watched namespace only", async () => {
      const pod = (namespace: string) => ({
        apiVersion: "v1",
        kind: "Pod",
        metadata: { name: "probe", namespace },
        spec: { containers: [{ name: "c", image: "nginx:1.27" }] },
      } as KubeObject);
      await probe.create(PODS, pod(ns), { dryRun: true });
      const err = await probe.create(PODS, pod(outside), { dryRun: true }).then(
        () => undefined,
        (e) => e,
      );
      assertEquals(err?.code, 403, `create outside: ${err}`);
    });
  } finally {
    probe.close();
    await unbind();
    assertEquals(await op.stop(), 0);
    await runOk(kubectl, ["delete", "--ignore-not-found", "--wait=false", "-f", "-"], manifest);
    for (const n of [ns, ns2, outside, release]) await dropNamespace(n);
    await Deno.remove(dir, { recursive: true });
  }

  // The operator's requests (its user agent), and the test's own with its token.
  const events = (await auditEvents(since)).filter((e) => e.user?.username === user);
  const probes = (await auditEvents(since, PROBE_AGENT)).filter((e) => e.user?.username === user);
  await t.step("the probe's create: refused outside by RBAC, allowed inside (audit log)", () => {
    const decided = (namespace: string, decision: string) =>
      probes.filter((e) =>
        e.verb === "create" && e.objectRef?.resource === "pods" &&
        e.objectRef.namespace === namespace &&
        e.annotations?.["authorization.k8s.io/decision"] === decision
      );
    const refused = decided(outside, "forbid");
    assertEquals(refused.map((e) => e.responseStatus?.code), [403], describe(probes));
    assertEquals(decided(ns, "allow").length, 1, describe(probes));
  });
  await t.step("the operator asked for nothing outside its namespaces", () => {
    // Non-resource requests (no objectRef, e.g. /version) are in no namespace; RBAC judged them
    // with the rest (nothing forbidden, below).
    const elsewhere = events.filter((e) =>
      e.objectRef &&
      !(e.objectRef.namespace && [ns, ns2, release].includes(e.objectRef.namespace)) &&
      !CLUSTER_SCOPED_ASKS.has(e.objectRef.resource ?? "")
    );
    assertEquals(elsewhere, [], `requests elsewhere:\n${describe(elsewhere)}`);
    // Positive control: it did work in the watched namespaces.
    for (const n of [ns, ns2]) {
      assert(events.some((e) => e.objectRef?.namespace === n && e.verb === "create"), n);
    }
  });
  // The metrics-reader ClusterRole is the scraper's, not the operator's.
  await checkVerbs(
    t,
    events,
    objects.filter((o) => !o.metadata?.name?.endsWith("-metrics-reader")),
  );
});
