/**
 * The controller runtime end to end (issue 4): a reconcile that fails is retried with growing
 * delay and the process stays up; the operator started before its CRD exists, or without
 * permission to list, is not ready, retries with capped backoff and recovers by itself (S11);
 * a CRD deleted at runtime makes it not ready until it is back; the metrics endpoint serves
 * controller-runtime's metric names.
 */
import type { Pod } from "kubernetes-types/core/v1.d.ts";
import { assert, assertEquals } from "../assert.ts";
import type { KubeObject } from "../../lib/kube/client.ts";
import { isNotFound } from "../../lib/kube/errors.ts";
import { CRDS, PODS, type ResourceType } from "../../lib/kube/resources.ts";
import { type AppService, APPSERVICES, FINALIZER } from "../../lib/appservice/schema.ts";
import {
  admin,
  appService,
  cluster,
  dropNamespace,
  getAs,
  installCrd,
  isRunning,
  type LogLine,
  logsOf,
  metricSum,
  newNamespace,
  type Operator,
  sleep,
  startOperator,
  waitFor,
} from "./harness.ts";
import {
  CLUSTER_ROLE_BINDINGS,
  CLUSTER_ROLES,
  mintToken,
  RBAC,
  ROLE_BINDINGS,
  ROLES,
  rt,
  SERVICE_ACCOUNTS,
} from "./resources.ts";

const CRD_NAME = "appservices.apps.our-org.com";

async function readyz(op: Operator): Promise<{ status: number; body: string }> {
  const r = await fetch(`http://127.0.0.1:${op.healthPort}/readyz`);
  return { status: r.status, body: await r.text() };
}

function condition(as: AppService, type: string) {
  return as.status?.conditions?.find((c) => c.type === type);
}

async function deleteIgnoringNotFound(
  r: ResourceType,
  name: string,
  namespace?: string,
): Promise<void> {
  await (await admin()).delete(r, name, { namespace }).catch((err) => {
    if (!isNotFound(err)) throw err;
  });
}

Deno.test("controller: a failing reconcile is retried with growing delay; the process stays up", async () => {
  await installCrd();
  const c = await admin();
  const ns = await newNamespace("retry");
  // A Pod of the name the AppService wants, not its own: every reconcile fails (PodNameConflict).
  // (Not a quota or policy: a write the apiserver refuses is retried slowly instead, S19.)
  await c.create<Pod>(PODS, {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name: "q-0", namespace: ns },
    spec: { containers: [{ name: "c", image: "nginx:1.27" }] },
  });
  const op = await startOperator([`--watch-namespace=${ns}`]);
  try {
    await op.waitReady();
    const labels = { controller: "appservice" };
    const m0 = await op.metrics();
    const retries0 = metricSum(m0, "workqueue_retries_total", labels);
    const errors0 = metricSum(m0, "controller_runtime_reconcile_errors_total", labels);
    await c.create(APPSERVICES as never, appService(ns, "q", { image: "nginx:1.27" }));

    const degraded = await waitFor("Degraded=True PodNameConflict", async () => {
      const a = await getAs(ns, "q");
      const d = condition(a, "Degraded");
      return d?.status === "True" && d.reason === "PodNameConflict" ? d : undefined;
    }, 30_000);
    assert(/not owned/i.test(degraded.message ?? ""), degraded.message);
    assertEquals(condition(await getAs(ns, "q"), "Ready")?.status, "False");

    // Logged with its key, retried with a growing delay (5 ms doubling).
    const errs = await waitFor(
      "six Reconciler error lines",
      () => {
        const l = logsOf(op, "Reconciler error").filter((x) =>
          x.properties?.namespace === ns && x.properties?.name === "q"
        );
        return l.length >= 6 ? l : undefined;
      },
      30_000,
      100,
    );
    for (const e of errs) {
      assertEquals(e.level, "ERROR");
      assertEquals(e.properties?.controller, "appservice");
      assert(typeof e.properties?.reconcileID === "string");
      assert(/not owned/i.test(String(e.properties?.error)), String(e.properties?.error));
    }
    const delays = errs.map((e) => e.properties?.retryInMs as number);
    assertEquals(delays.slice(0, 6), [5, 10, 20, 40, 80, 160], `delays ${delays}`);
    for (let i = 1; i < delays.length; i++) assert(delays[i] > delays[i - 1], `delays ${delays}`);
    assertEquals(errs.map((e) => e.properties?.retries).slice(0, 6), [1, 2, 3, 4, 5, 6]);

    // The metrics rise, and keep rising while the failure lasts.
    const m1 = await op.metrics();
    const retries1 = metricSum(m1, "workqueue_retries_total", labels);
    const errors1 = metricSum(m1, "controller_runtime_reconcile_errors_total", labels);
    assert(retries1 >= retries0 + 6, `workqueue_retries_total ${retries0} -> ${retries1}`);
    assert(errors1 >= errors0 + 6, `reconcile_errors_total ${errors0} -> ${errors1}`);
    await waitFor(
      "workqueue_retries_total rises again",
      async () => metricSum(await op.metrics(), "workqueue_retries_total", labels) > retries1,
      20_000,
    );
    assert(
      metricSum(await op.metrics(), "controller_runtime_reconcile_errors_total", labels) > errors1,
    );
    assert(await isRunning(op), "the operator died");
    const h = await fetch(`http://127.0.0.1:${op.healthPort}/healthz`);
    await h.body?.cancel();
    assertEquals(h.status, 200);

    // Once the cause is gone, the next retry succeeds (the backoff may have grown to seconds).
    await c.delete(PODS, "q-0", { namespace: ns, gracePeriodSeconds: 0 });
    const ready = await waitFor("Ready after the other Pod is gone", async () => {
      const a = await getAs(ns, "q");
      return a.status?.ready ? a : undefined;
    }, 90_000);
    assertEquals(condition(ready, "Degraded")?.status, "False");
    assertEquals(condition(ready, "Ready")?.status, "True");
    const pod = await c.get<Pod>(PODS, "q-0", { namespace: ns });
    assert(pod.metadata?.ownerReferences?.some((r) => r.controller && r.name === "q"));
    assert(await isRunning(op));
  } finally {
    assertEquals(await op.stop(), 0);
    await dropNamespace(ns);
  }
});

/** Strips our finalizer from every AppService, deletes the CRD and waits until it is gone. */
async function removeCrd(): Promise<void> {
  const c = await admin();
  try {
    const all = await c.list<AppService>(APPSERVICES as never, {});
    for (const as of all.items) {
      if (!as.metadata.finalizers?.includes(FINALIZER)) continue;
      await c.patch(
        APPSERVICES as never,
        as.metadata.name!,
        { metadata: { finalizers: as.metadata.finalizers.filter((f) => f !== FINALIZER) } },
        { namespace: as.metadata.namespace, type: "merge" },
      ).catch((err) => {
        if (!isNotFound(err)) throw err;
      });
    }
  } catch (err) {
    if (!isNotFound(err)) throw err; // no CRD: nothing to strip
  }
  await deleteIgnoringNotFound(CRDS, CRD_NAME);
  await waitFor("CRD gone", async () => {
    try {
      await c.get(CRDS, CRD_NAME);
      return false;
    } catch (err) {
      return isNotFound(err);
    }
  }, 60_000);
  await waitFor("AppService API no longer served", async () => {
    try {
      await c.list(APPSERVICES as never, { namespace: "default", limit: 1 });
      return false;
    } catch (err) {
      return isNotFound(err);
    }
  }, 30_000);
}

/** "List failed" lines of one resource's reflector. */
function listFailures(op: Operator, resource: string): LogLine[] {
  return logsOf(op, "List failed").filter((l) => l.properties?.resource === resource);
}

/** Bounded, growing, capped retries: not a tight loop. */
function assertBackoff(lines: LogLine[], windowMs: number): void {
  const delays = lines.map((l) => l.properties?.retryInMs as number);
  // 800 ms doubling (full jitter) to 30 s: about four attempts in 10 s; a tight loop has hundreds.
  assert(lines.length >= 2 && lines.length <= 8, `${lines.length} List failures in ${windowMs} ms`);
  for (const d of delays) assert(d >= 800 && d <= 30_000, `retryInMs ${d} outside [800, 30000]`);
  assert(delays[delays.length - 1] > delays[0], `delays do not grow: ${delays}`);
}

Deno.test("controller S11: started before the CRD exists, not ready, retries, recovers by itself", async () => {
  const c = await admin();
  const ns = await newNamespace("nocrd");
  let op: Operator | undefined;
  try {
    await removeCrd();
    op = await startOperator();
    const started = Date.now();
    await waitFor("probe server up", async () => (await readyz(op!)).status > 0, 60_000);
    // Pods and Services sync; the AppService informer does not, and /readyz says so.
    const notReady = await waitFor(
      "only the AppService informer unsynced",
      async () => {
        const r = await readyz(op!);
        return r.status === 500 && !/\[-\]informer-(pods|services)/.test(r.body) ? r : undefined;
      },
      30_000,
      200,
    );
    assert(
      /\[-\]informer-appservices failed: not synced \(.*(404|NotFound|not found)/i.test(
        notReady.body,
      ),
      notReady.body,
    );
    // Watch the retries for about 10 s.
    await sleep(Math.max(0, 10_000 - (Date.now() - started)));
    const r10 = await readyz(op);
    assertEquals(r10.status, 500);
    const fails = listFailures(op, "appservices");
    console.log(
      `List failures in ${Date.now() - started} ms: ${fails.length}, retryInMs ${
        fails.map((l) => l.properties?.retryInMs)
      }`,
    );
    assertBackoff(fails, Date.now() - started);
    // The log says what to do (docs/troubleshooting.md), and the body's text has no stray newline.
    for (const l of fails) {
      assert(
        /is its CustomResourceDefinition installed\?/.test(String(l.properties?.hint)),
        JSON.stringify(l),
      );
      assert(!/\n/.test(String(l.properties?.error)), JSON.stringify(l.properties?.error));
    }
    assert(!/\n\)/.test(notReady.body), notReady.body);
    assert(await isRunning(op));

    // The CRD appears: ready by itself, and it reconciles.
    const tCrd = Date.now();
    await installCrd();
    await op.waitReady(60_000);
    console.log(`ready ${Date.now() - tCrd} ms after the CRD was applied`);
    assert(logsOf(op, "Caches synced; reconciling").length === 1);
    await c.create(APPSERVICES as never, appService(ns, "late", { image: "nginx:1.27" }));
    await waitFor("Pod late-0", () => c.get<Pod>(PODS, "late-0", { namespace: ns }), 60_000);
    await waitFor("late Ready", async () => (await getAs(ns, "late")).status?.ready, 60_000);
    assertEquals(await op.stop(), 0);
  } finally {
    await op?.stop("SIGKILL", 10_000);
    await installCrd();
    await dropNamespace(ns);
  }
});

Deno.test("controller: the CRD deleted at runtime — /readyz names the failing informer, ready again once re-created", async () => {
  await installCrd();
  let op: Operator | undefined;
  try {
    op = await startOperator();
    await op.waitReady();
    await removeCrd();
    // The AppService informer was synced; it keeps failing (404) and, past the bound
    // (INFORMER_FAILING_NOT_READY_MS, 30 s), readiness says so. Pods and Services stay fine.
    const notReady = await waitFor(
      "/readyz not ready after the CRD was deleted",
      async () => {
        const r = await readyz(op!);
        return r.status === 500 ? r : undefined;
      },
      120_000,
      500,
    );
    assert(
      /\[-\]informer-appservices failed: list\/watch failing for \d+ s \(\d+ attempts\): .*(404|NotFound|not found)/i
        .test(notReady.body),
      notReady.body,
    );
    assert(!/\[-\]informer-(pods|services)/.test(notReady.body), notReady.body);
    // Every check is listed, the passing ones too (controller-runtime's healthz format).
    assert(/^\[\+\]informer-pods ok$/m.test(notReady.body), notReady.body);
    assert(notReady.body.endsWith("healthz check failed\n"), notReady.body);
    assert(logsOf(op, "Watch failed").some((l) => l.properties?.resource === "appservices"));
    assert(await isRunning(op));

    // The CRD is back: the next attempt (at most one capped backoff away) succeeds; ready again.
    await installCrd();
    await op.waitReady(120_000);
    assertEquals((await readyz(op)).body, "ok\n");
    assertEquals(await op.stop(), 0);
  } finally {
    await op?.stop("SIGKILL", 10_000);
    await installCrd();
  }
});

Deno.test("controller S11: without permission to list, not ready, retries, recovers once granted", async () => {
  await installCrd();
  const c = await admin();
  const info = await cluster();
  const ns = await newNamespace("norbac");
  const sa = "operator";
  const grant = `e2e-${ns}-list`;
  const dir = await Deno.makeTempDir({ prefix: "sa-" });
  let op: Operator | undefined;
  try {
    await c.create(SERVICE_ACCOUNTS, {
      apiVersion: "v1",
      kind: "ServiceAccount",
      metadata: { name: sa, namespace: ns },
    } as KubeObject);
    // Only the Lease in its own namespace; nothing to list.
    await c.create(ROLES, {
      apiVersion: RBAC,
      kind: "Role",
      metadata: { name: "lease", namespace: ns },
      rules: [{
        apiGroups: ["coordination.k8s.io"],
        resources: ["leases"],
        verbs: ["get", "create", "update"],
      }],
    } as KubeObject);
    await c.create(ROLE_BINDINGS, {
      apiVersion: RBAC,
      kind: "RoleBinding",
      metadata: { name: "lease", namespace: ns },
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: "lease" },
      subjects: [{ kind: "ServiceAccount", name: sa, namespace: ns }],
    } as KubeObject);
    // A bound token (TokenRequest), mounted as Kubernetes would in a Pod.
    await Deno.writeTextFile(`${dir}/token`, await mintToken(c, ns, sa, 3600));
    await Deno.copyFile(info.caCertFile, `${dir}/ca.crt`);
    await Deno.writeTextFile(`${dir}/namespace`, ns);
    const port = new URL(info.server).port;

    // In-cluster configuration; the Lease namespace defaults to the service account's.
    op = await startOperator([
      "--kubeconfig=", // empty: in-cluster configuration from the environment
      "--leader-elect",
      "--leader-election-id=norbac",
      `--watch-namespace=${ns}`,
      "--leader-elect-lease-duration=4s",
      "--leader-elect-renew-deadline=3s",
      "--leader-elect-retry-period=1s",
    ], {
      KUBERNETES_SERVICE_HOST: "127.0.0.1",
      KUBERNETES_SERVICE_PORT: port,
      APPSERVICE_SERVICE_ACCOUNT_DIR: dir,
    });
    const started = Date.now();
    await waitFor(
      "connected in cluster",
      () => {
        const l = logsOf(op!, "Connected")[0];
        return l ? l : undefined;
      },
      60_000,
      100,
    );
    const connected = logsOf(op, "Connected")[0];
    assertEquals(connected.properties?.source, "in-cluster");
    assertEquals(connected.properties?.user, `system:serviceaccount:${ns}:${sa}`);
    await waitFor(
      "Lease in the service account namespace",
      async () => {
        const l = await c.get<KubeObject & { spec?: { holderIdentity?: string } }>(
          rt("coordination.k8s.io/v1", "Lease", "leases", true),
          "norbac",
          { namespace: ns },
        );
        return !!l.spec?.holderIdentity;
      },
      30_000,
      200,
    );

    await sleep(Math.max(0, 10_000 - (Date.now() - started)));
    const r = await readyz(op);
    assertEquals(r.status, 500);
    for (
      const inf of ["appservices", "pods", "services", "poddisruptionbudgets", "resourcequotas"]
    ) {
      assert(
        new RegExp(`\\[-\\]informer-${inf} failed: not synced \\(.*(403|[Ff]orbidden)`).test(
          r.body,
        ),
        r.body,
      );
      const fails = listFailures(op, inf);
      assertBackoff(fails, Date.now() - started);
      assert(
        fails.every((l) => /check its RBAC/.test(String(l.properties?.hint))),
        JSON.stringify(fails[0]),
      );
    }
    assert(await isRunning(op));

    // Grant list/watch: ready by itself.
    const tGrant = Date.now();
    await c.create(CLUSTER_ROLES, {
      apiVersion: RBAC,
      kind: "ClusterRole",
      metadata: { name: grant },
      rules: [
        { apiGroups: ["apps.our-org.com"], resources: ["appservices"], verbs: ["list", "watch"] },
        { apiGroups: [""], resources: ["pods", "services"], verbs: ["list", "watch"] },
        { apiGroups: ["policy"], resources: ["poddisruptionbudgets"], verbs: ["list", "watch"] },
        { apiGroups: [""], resources: ["resourcequotas"], verbs: ["list", "watch"] },
      ],
    } as KubeObject);
    await c.create(CLUSTER_ROLE_BINDINGS, {
      apiVersion: RBAC,
      kind: "ClusterRoleBinding",
      metadata: { name: grant },
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: grant },
      subjects: [{ kind: "ServiceAccount", name: sa, namespace: ns }],
    } as KubeObject);
    await op.waitReady(60_000);
    console.log(`ready ${Date.now() - tGrant} ms after list/watch was granted`);
    assertEquals(await op.stop(), 0);
  } finally {
    await op?.stop("SIGKILL", 10_000);
    await deleteIgnoringNotFound(CLUSTER_ROLE_BINDINGS, grant);
    await deleteIgnoringNotFound(CLUSTER_ROLES, grant);
    await Deno.remove(dir, { recursive: true });
    await dropNamespace(ns);
  }
});

/** Every metric the issue names (controller-runtime's and client-go's names). */
const METRICS = [
  "controller_runtime_reconcile_total",
  "controller_runtime_reconcile_errors_total",
  "controller_runtime_terminal_reconcile_errors_total",
  "controller_runtime_reconcile_panics_total",
  "controller_runtime_reconcile_timeouts_total",
  "controller_runtime_reconcile_time_seconds",
  "controller_runtime_max_concurrent_reconciles",
  "controller_runtime_active_workers",
  "workqueue_depth",
  "workqueue_adds_total",
  "workqueue_queue_duration_seconds",
  "workqueue_work_duration_seconds",
  "workqueue_retries_total",
  "workqueue_unfinished_work_seconds",
  "workqueue_longest_running_processor_seconds",
  "rest_client_requests_total",
  "rest_client_request_duration_seconds",
  "leader_election_master_status",
  "process_resident_memory_bytes",
  "process_cpu_seconds_total",
  "process_start_time_seconds",
];

Deno.test("controller: /metrics serves every metric named in the issue; --sync-period requeues", async () => {
  await installCrd();
  const c = await admin();
  const ns = await newNamespace("metrics");
  const op = await startOperator([
    "--leader-elect",
    `--leader-election-namespace=${ns}`,
    "--leader-election-id=metrics",
    `--watch-namespace=${ns}`,
    "--max-concurrent-reconciles=3",
    "--sync-period=2s",
    "--leader-elect-lease-duration=4s",
    "--leader-elect-renew-deadline=3s",
    "--leader-elect-retry-period=1s",
  ]);
  try {
    await op.waitReady();
    await c.create(APPSERVICES as never, appService(ns, "m", { image: "nginx:1.27" }));
    await waitFor("m Ready", async () => (await getAs(ns, "m")).status?.ready, 60_000);
    const text = await op.metrics();
    const res = await fetch(`http://127.0.0.1:${op.metricsPort}/metrics`);
    await res.body?.cancel();
    assertEquals(res.status, 200);
    assert(/^text\/plain/.test(res.headers.get("content-type") ?? ""));
    const missing = METRICS.filter((name) => {
      const typed = new RegExp(`^# TYPE ${name} (counter|gauge|histogram)$`, "m").test(text);
      const sample = new RegExp(`^${name}(_bucket|_sum|_count)?(\\{[^}]*\\})? \\S+$`, "m")
        .test(text);
      return !typed || !sample;
    });
    assertEquals(missing, [], "metrics without a TYPE line or a sample");
    const ctl = { controller: "appservice" };
    const q = { name: "appservice", controller: "appservice" };
    assert(metricSum(text, "process_resident_memory_bytes") > 0);
    assert(metricSum(text, "process_cpu_seconds_total") > 0);
    assertEquals(metricSum(text, "controller_runtime_max_concurrent_reconciles", ctl), 3);
    assertEquals(metricSum(text, "leader_election_master_status", { name: "metrics" }), 1);
    assert(
      metricSum(text, "controller_runtime_reconcile_total", { ...ctl, result: "success" }) > 0,
    );
    assert(metricSum(text, "controller_runtime_reconcile_time_seconds_count", ctl) > 0);
    assert(metricSum(text, "workqueue_adds_total", q) > 0);
    assert(metricSum(text, "workqueue_queue_duration_seconds_count", q) > 0);
    assert(metricSum(text, "workqueue_work_duration_seconds_count", q) > 0);
    assert(metricSum(text, "rest_client_requests_total", { method: "POST", code: "201" }) > 0);
    assert(metricSum(text, "rest_client_requests_total", { method: "GET", code: "200" }) > 0);
    for (const l of text.split("\n").filter((l) => l.startsWith("rest_client_requests_total"))) {
      assert(/host="127\.0\.0\.1:\d+"/.test(l), l);
    }
    assert(metricSum(text, "rest_client_request_duration_seconds_count", { verb: "POST" }) > 0);
    assert(metricSum(text, "rest_client_request_duration_seconds_count", { verb: "GET" }) > 0);
    for (
      const name of [
        "controller_runtime_terminal_reconcile_errors_total",
        "controller_runtime_reconcile_panics_total",
        "controller_runtime_reconcile_timeouts_total",
      ]
    ) assertEquals(metricSum(text, name, ctl), 0, name);

    // The probes as controller-runtime serves them: ?verbose lists every check, and each check
    // has its own path.
    const probe = async (path: string) => {
      const r = await fetch(`http://127.0.0.1:${op.healthPort}${path}`);
      return [r.status, await r.text()] as const;
    };
    const [vs, verbose] = await probe("/readyz?verbose");
    assertEquals(vs, 200, verbose);
    for (const check of ["apiserver", "informer-appservices", "informer-pods"]) {
      assert(new RegExp(`^\\[\\+\\]${check} ok$`, "m").test(verbose), verbose);
    }
    assert(verbose.endsWith("healthz check passed\n"), verbose);
    assertEquals(await probe("/healthz?verbose"), [
      200,
      "[+]lease ok\n[+]ping ok\nhealthz check passed\n",
    ]);
    assertEquals(await probe("/readyz/informer-appservices"), [200, "ok\n"]);
    assertEquals(await probe("/healthz/lease"), [200, "ok\n"]);
    assertEquals((await probe("/readyz/no-such-check"))[0], 404);

    // --sync-period=2s: the unchanged AppService is reconciled again, without any write.
    const before = metricSum(text, "controller_runtime_reconcile_total", ctl);
    const writes = (t: string) =>
      ["POST", "PATCH", "DELETE"].reduce(
        (s, method) => s + metricSum(t, "rest_client_requests_total", { method }, { absent: 0 }),
        0,
      );
    const writesBefore = writes(text);
    await sleep(5_000);
    const after = await op.metrics();
    const n = metricSum(after, "controller_runtime_reconcile_total", ctl) - before;
    assert(n >= 2 && n <= 4, `${n} reconciles in 5 s with --sync-period=2s`);
    assertEquals(writes(after), writesBefore, "a periodic reconcile wrote");
  } finally {
    assertEquals(await op.stop(), 0);
    await dropNamespace(ns);
  }
});
