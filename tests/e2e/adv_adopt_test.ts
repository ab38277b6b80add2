/**
 * Objects of an AppService's names that are not (visibly) its own.
 *
 * - `kubectl delete as web --cascade=orphan`, then the AppService made again under the same name
 *   (how one changes what cannot be changed in place, as with a StatefulSet): the garbage
 *   collector left the Pods and the Service, with the operator's labels and no owner. A user
 *   expects the new AppService to take them over, as a ReplicaSet or StatefulSet adopts the
 *   orphans its selector matches. It stayed at `0/2` with `PodNameConflict` and
 *   `ServiceNameConflict` for ever, while its Pods and Service served.
 * - An owned Pod whose `app.kubernetes.io/managed-by` label is removed by hand falls out of the
 *   operator's cache (it watches only labelled Pods). The next image change never finished: the
 *   Pod was neither seen nor replaced, its ordinal's create answered AlreadyExists, and the
 *   AppService said `0/2 Pods ready` with no reason, for ever. The operator's labels are its own:
 *   they are put back, and the rollout goes on.
 *
 * - A mutating admission policy that rewrites the informational `app.kubernetes.io/name` label
 *   must not start a fight over it: only the labels the operator relies on (`managed-by`,
 *   `instance`) are put back.
 *
 * Objects without the operator's labels stay someone else's (a Pod or Service of the same name made
 * by another party is never adopted; see reconcile_test.ts).
 */
import type { Pod, Service } from "kubernetes-types/core/v1.d.ts";
import { assert, assertEquals } from "../assert.ts";
import type { KubeClient } from "../../lib/kube/client.ts";
import { isNotFound } from "../../lib/kube/errors.ts";
import { PODS, type ResourceType, SERVICES } from "../../lib/kube/resources.ts";
import { type AppService, APPSERVICES } from "../../lib/appservice/schema.ts";
import { isPodReady } from "../../lib/appservice/pods.ts";
import {
  admin,
  appService,
  dropNamespace,
  getAs,
  installCrd,
  newNamespace,
  startOperator,
  waitFor,
} from "./harness.ts";
import { describe, operatorWrites } from "./audit.ts";
import { mutationPolicy } from "./resources.ts";

const AS = APPSERVICES as unknown as ResourceType;
/** Bound for taking over the orphans (s): S20's bound for a Service to converge. */
const ADOPT_WITHIN_SECONDS = 15;

/** The Pods named `<name>-<n>` in `ns`, whoever owns them. */
async function podsOf(c: KubeClient, ns: string, name: string): Promise<Pod[]> {
  const l = await c.list<Pod>(PODS, { namespace: ns });
  return l.items.filter((p) => new RegExp(`^${name}-[0-9]+$`).test(p.metadata!.name!));
}

Deno.test("orphans of an AppService's name are adopted; lost labels are put back", async (t) => {
  await installCrd();
  const c = await admin();
  const ns = await newNamespace("adv-adopt");
  const op = await startOperator();
  const spec = { image: "nginx:1.27", replicas: 2, ports: [{ containerPort: 80, name: "http" }] };
  try {
    await op.waitReady();

    await t.step("delete --cascade=orphan, then the same AppService again: adopted", async () => {
      await c.create(AS, appService(ns, "web", spec));
      await waitFor("web Ready", async () => (await getAs(ns, "web")).status?.ready === true);
      const before = await podsOf(c, ns, "web");
      const svcBefore = await c.get<Service>(SERVICES, "web", { namespace: ns });
      await c.delete(AS, "web", { namespace: ns, propagationPolicy: "Orphan" });
      await waitFor("web gone, its Pods orphaned", async () => {
        try {
          await getAs(ns, "web");
          return false;
        } catch (err) {
          if (!isNotFound(err)) throw err;
        }
        const pods = await podsOf(c, ns, "web");
        return pods.length === 2 && pods.every((p) => !p.metadata?.ownerReferences?.length);
      }, 30_000);
      const t0 = Date.now();
      const again = await c.create<AppService>(AS, appService(ns, "web", spec));
      const uid = again.metadata.uid!;
      const a = await waitFor(
        "web Ready with the orphans adopted",
        async () => {
          const x = await getAs(ns, "web");
          const d = x.status?.conditions?.find((k) => k.type === "Degraded");
          return x.status?.ready === true && d?.status === "False" ? x : undefined;
        },
        60_000,
      ).catch(async (err) => {
        const x = await getAs(ns, "web");
        throw new Error(`${err.message}\n${JSON.stringify(x.status?.conditions, null, 1)}`);
      });
      const took = (Date.now() - t0) / 1000;
      console.log(`adopted and Ready in ${took} s: ${a.status?.replicasSummary}`);
      assert(took <= ADOPT_WITHIN_SECONDS, `took ${took} s`);
      const after = await podsOf(c, ns, "web");
      assertEquals(
        after.map((p) => p.metadata!.uid).sort(),
        before.map((p) => p.metadata!.uid).sort(),
        "the running Pods are kept, not replaced",
      );
      for (const p of after) {
        const owner = p.metadata?.ownerReferences?.find((r) => r.controller);
        assertEquals(owner?.uid, uid, `${p.metadata!.name} owner`);
        assert(isPodReady(p));
      }
      const svc = await c.get<Service>(SERVICES, "web", { namespace: ns });
      assertEquals(svc.metadata!.uid, svcBefore.metadata!.uid, "the Service is kept");
      assertEquals(svc.metadata?.ownerReferences?.find((r) => r.controller)?.uid, uid);
    });

    await t.step(
      "an owned Pod's labels removed by hand: put back; a rollout completes",
      async () => {
        await c.create(AS, appService(ns, "lab", spec));
        await waitFor("lab Ready", async () => (await getAs(ns, "lab")).status?.ready === true);
        await c.patch(PODS, "lab-1", {
          metadata: { labels: { "app.kubernetes.io/managed-by": null } },
        }, { namespace: ns });
        await c.patch(AS, "lab", { spec: { image: "nginx:1.28" } }, { namespace: ns });
        await waitFor("both Pods at nginx:1.28 and Ready", async () => {
          const x = await getAs(ns, "lab");
          const pods = await podsOf(c, ns, "lab");
          return x.status?.ready === true &&
            x.status.observedGeneration === x.metadata.generation &&
            pods.length === 2 &&
            pods.every((p) =>
              p.spec!.containers[0].image === "nginx:1.28" && isPodReady(p) &&
              p.metadata?.labels?.["app.kubernetes.io/managed-by"] === "appservice-operator"
            );
        }, 60_000).catch(async (err) => {
          const x = await getAs(ns, "lab");
          const pods = await podsOf(c, ns, "lab");
          throw new Error(
            `${err.message}\n${JSON.stringify(x.status?.conditions, null, 1)}\n${
              pods.map((p) =>
                `${p.metadata!.name} ${p.spec!.containers[0].image} ${
                  JSON.stringify(p.metadata!.labels)
                }`
              ).join("\n")
            }`,
          );
        });
      },
    );
    await t.step(
      "a mutating policy that rewrites the informational name label: no label fight",
      async () => {
        const name = `e2e-rename-${ns}`;
        const remove = await mutationPolicy(c, name, ns, {
          resources: ["pods", "services"],
          operations: ["CREATE", "UPDATE"],
          applyConfiguration:
            'Object{metadata: Object.metadata{labels: {"app.kubernetes.io/name": ' +
            '"platform"}}}',
          probe: {
            apiVersion: "v1",
            kind: "Pod",
            metadata: { generateName: "probe-" },
            spec: { containers: [{ name: "c", image: "nginx:1" }] },
          },
          inForce: (p) => p.metadata?.labels?.["app.kubernetes.io/name"] === "platform",
        });
        try {
          const since = Date.now();
          await c.create(AS, appService(ns, "renamed", { ...spec, replicas: 1 }));
          await waitFor("renamed Ready", async () => (await getAs(ns, "renamed")).status?.ready);
          await c.patch(AS, "renamed", { spec: { replicas: 3 } }, { namespace: ns });
          await waitFor("renamed Ready at 3", async () => {
            const a = await getAs(ns, "renamed");
            return a.status?.ready && a.status.readyReplicas === 3;
          });
          const podPatches = (await operatorWrites(since, ns)).filter((e) =>
            e.objectRef?.resource === "pods" && e.verb === "patch"
          );
          assertEquals(podPatches, [], `label patches on Pods:\n${describe(podPatches)}`);
          // The Service: created once (server-side apply), then left alone.
          const svcPatches = (await operatorWrites(since, ns)).filter((e) =>
            e.objectRef?.resource === "services" && e.verb === "patch"
          );
          assertEquals(svcPatches.length, 1, `Service patches:\n${describe(svcPatches)}`);
        } finally {
          await remove();
        }
      },
    );
  } finally {
    const code = await op.stop();
    await dropNamespace(ns);
    assertEquals(code, 0, op.stderr().slice(-3000));
  }
});
