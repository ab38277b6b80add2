/**
 * The namespace-quota controller tested the way a user of this library tests theirs: only
 * `./testing`, `./kube` and `./runtime` (their entry modules) and the example's own controller.ts.
 * The test starts a control plane of its own (etcd and kube-apiserver, `components: "minimal"`,
 * in a temporary folder; the binaries are the cached ones), runs the controller in this process
 * under an identity of its own behind a fault proxy, and checks what it does through the apiserver
 * and its audit log: a labelled Namespace gets its quota, an edited quota is put back by the
 * controller's own write, the controller recovers from a cut connection, removing the label
 * removes the quota. Each convergence within 15 s (the reconcile-within-15-s requirement of
 * docs/scenarios.md; 30 s after the cut, which adds the reconnect).
 *
 * Run alone: `deno test -A examples/namespace-quota/controller_test.ts`; `deno task test` runs it
 * with the rest of the suite.
 */
import { deepStrictEqual, ok } from "node:assert/strict";
import type { Namespace, ResourceQuota } from "kubernetes-types/core/v1.d.ts";
import { isNotFound, KubeClient, loadClusterConfig, NAMESPACES } from "../../lib/kube/mod.ts";
import { Manager } from "../../lib/runtime/mod.ts";
import { startControlPlane, startFaultProxy } from "../../lib/testing/mod.ts";
import {
  addNamespaceQuotaController,
  LABEL,
  PODS_ANNOTATION,
  QUOTA_NAME,
  RESOURCE_QUOTAS,
} from "./controller.ts";

/** Bound of each convergence (ms). */
const CONVERGE_MS = 15_000;
/** The controller's user: what the audit log names its requests by. */
const CONTROLLER_USER = "namespace-quota-controller";

/** Polls `fn` every 100 ms until it returns true, at most `timeoutMs`; a throw is "not yet". */
async function eventually(what: string, fn: () => Promise<boolean>, timeoutMs = CONVERGE_MS) {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (let i = 0; i < 10_000; i++) {
    try {
      if (await fn()) return;
      last = undefined;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what} (last error: ${last})`);
}

Deno.test("namespace-quota on ./testing: quota kept in labelled namespaces", async (t) => {
  await using plane = await startControlPlane({ components: "minimal" });
  const admin = plane.client();
  // The controller connects through a fault proxy, under a user of its own (system:masters: the
  // example has no RBAC of its own to bind).
  await using proxy = startFaultProxy(plane.server);
  const kubeconfig = await plane.kubeconfigFor(CONTROLLER_USER, ["system:masters"], {
    server: proxy.url,
  });
  const client = new KubeClient(loadClusterConfig({ kubeconfig }));
  const manager = new Manager({ client });
  addNamespaceQuotaController(manager);
  const stop = new AbortController();
  const run = manager.run(stop.signal);

  const ns = "quota-test";
  const quota = () => admin.get<ResourceQuota>(RESOURCE_QUOTAS, QUOTA_NAME, { namespace: ns });
  const podsIs = (pods: string) => async () => (await quota()).spec?.hard?.pods === pods;
  try {
    await admin.create<Namespace>(NAMESPACES, { metadata: { name: ns } });

    await t.step("a labelled namespace gets the quota, owned by the namespace", async () => {
      await admin.patch(NAMESPACES, ns, { metadata: { labels: { [LABEL]: "true" } } });
      await eventually("quota created", async () => !!(await quota()));
      const q = await quota();
      deepStrictEqual(q.spec?.hard, { pods: "10", "requests.cpu": "4", "requests.memory": "8Gi" });
      const n = await admin.get<Namespace>(NAMESPACES, ns);
      const owner = q.metadata?.ownerReferences?.[0];
      deepStrictEqual([owner?.kind, owner?.uid, owner?.controller], [
        "Namespace",
        n.metadata?.uid,
        true,
      ]);
    });

    await t.step("an edited quota is put back by the controller's own write", async () => {
      const since = Date.now();
      await admin.patch(RESOURCE_QUOTAS, QUOTA_NAME, { spec: { hard: { pods: "99" } } }, {
        namespace: ns,
      });
      await eventually("quota restored", podsIs("10"));
      // The audit log says who wrote: the edit is the admin's, the restore the controller's
      // (a level-based controller may also send a no-op apply from a stale cache, so not "one").
      const patches = (await plane.auditEvents({ sinceMs: since }))
        .filter((e) => e.objectRef?.resource === "resourcequotas" && e.verb === "patch");
      const by = (user: string) => patches.filter((e) => e.user?.username === user);
      deepStrictEqual(by("admin").length, 1);
      const restores = by(CONTROLLER_USER);
      ok(restores.length >= 1, "no patch of the quota by the controller after the edit");
      deepStrictEqual(restores.map((e) => e.responseStatus?.code), restores.map(() => 200));
      ok(
        Date.parse(restores[0].stageTimestamp) >= Date.parse(by("admin")[0].stageTimestamp),
        "the controller's patch came before the edit",
      );
    });

    await t.step("after a cut connection, the annotation still changes the quota", async () => {
      proxy.cut();
      await new Promise((r) => setTimeout(r, 500));
      proxy.resume();
      await admin.patch(NAMESPACES, ns, { metadata: { annotations: { [PODS_ANNOTATION]: "3" } } });
      await eventually("quota follows the annotation", podsIs("3"), 2 * CONVERGE_MS);
      ok(proxy.accepted > 1, `the controller never reconnected (${proxy.accepted} connections)`);
    });

    await t.step("removing the label removes the quota", async () => {
      await admin.patch(NAMESPACES, ns, { metadata: { labels: { [LABEL]: null } } });
      await eventually("quota removed", async () => {
        try {
          await quota();
          return false;
        } catch (err) {
          return isNotFound(err);
        }
      });
    });

    await t.step("the manager stops with exit code 0", async () => {
      stop.abort();
      deepStrictEqual(await run, 0);
    });
  } finally {
    stop.abort();
    await run;
    client.close();
  }
});
