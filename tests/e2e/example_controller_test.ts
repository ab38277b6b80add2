/**
 * The second controller built on the public runtime (examples/namespace-quota), run as its own
 * process against the local control plane: a labelled Namespace gets its default ResourceQuota,
 * an edited or deleted quota is put back, the annotation changes it, removing the label removes
 * it, and SIGTERM stops the process with exit code 0. Requirement: each within 15 s.
 */
import type { Namespace, ResourceQuota } from "kubernetes-types/core/v1.d.ts";
import { assert, assertEquals } from "../assert.ts";
import { isNotFound } from "../../lib/kube/errors.ts";
import { NAMESPACES } from "../../lib/kube/resources.ts";
import {
  LABEL,
  PODS_ANNOTATION,
  QUOTA_NAME,
  RESOURCE_QUOTAS,
} from "../../examples/namespace-quota/controller.ts";
import { admin, dropNamespace, newNamespace, REPO, startOperator, waitFor } from "./harness.ts";

/** Bound of each convergence (ms): the reconcile-within-15-s requirement of the scenarios. */
const CONVERGE_MS = 15_000;

Deno.test("example controller (namespace-quota): quota kept in labelled namespaces", async (t) => {
  const c = await admin();
  const ns = await newNamespace("quota");
  const unlabelled = await newNamespace("quota-none");
  const op = await startOperator([], {}, `${REPO}/examples/namespace-quota/main.ts`);
  const quota = () => c.get<ResourceQuota>(RESOURCE_QUOTAS, QUOTA_NAME, { namespace: ns });
  /** Waits until the quota's `pods` is `pods`, logging how long it took. */
  const podsBecomes = async (what: string, pods: string) => {
    const t0 = performance.now();
    await waitFor(what, async () => (await quota()).spec?.hard?.pods === pods, CONVERGE_MS);
    console.log(`${what}: ${Math.round(performance.now() - t0)} ms`);
  };
  try {
    await op.waitReady();
    await t.step("a labelled namespace gets the quota, owned by the namespace", async () => {
      await c.patch(NAMESPACES, ns, { metadata: { labels: { [LABEL]: "true" } } });
      await waitFor("quota created", () => quota().catch(() => undefined), CONVERGE_MS);
      const q = await quota();
      assertEquals(q.spec?.hard, { pods: "10", "requests.cpu": "4", "requests.memory": "8Gi" });
      const owner = q.metadata?.ownerReferences?.[0];
      const n = await c.get<Namespace>(NAMESPACES, ns);
      assertEquals([owner?.kind, owner?.uid, owner?.controller], [
        "Namespace",
        n.metadata?.uid,
        true,
      ]);
    });
    await t.step("an edited quota is put back", async () => {
      await c.patch(RESOURCE_QUOTAS, QUOTA_NAME, { spec: { hard: { pods: "99" } } }, {
        namespace: ns,
      });
      await podsBecomes("quota restored after an edit", "10");
    });
    await t.step("a deleted quota is re-created", async () => {
      await c.delete(RESOURCE_QUOTAS, QUOTA_NAME, { namespace: ns });
      await waitFor("quota re-created", () => quota().catch(() => undefined), CONVERGE_MS);
    });
    await t.step("the annotation changes the quota", async () => {
      await c.patch(NAMESPACES, ns, { metadata: { annotations: { [PODS_ANNOTATION]: "3" } } });
      await podsBecomes("quota follows the annotation", "3");
    });
    await t.step("an unlabelled namespace gets none; removing the label removes it", async () => {
      const none = await c.get(RESOURCE_QUOTAS, QUOTA_NAME, { namespace: unlabelled }).catch((e) =>
        e
      );
      assert(isNotFound(none), `unexpected quota in ${unlabelled}`);
      await c.patch(NAMESPACES, ns, { metadata: { labels: { [LABEL]: null } } });
      await waitFor("quota removed", async () => {
        try {
          await quota();
          return false;
        } catch (err) {
          return isNotFound(err);
        }
      }, CONVERGE_MS);
    });
    await t.step("SIGTERM: exit code 0", async () => {
      assertEquals(await op.stop(), 0, op.stderr().slice(-2000));
    });
  } finally {
    await op.stop("SIGKILL", 5_000);
    await dropNamespace(ns);
    await dropNamespace(unlabelled);
  }
});
