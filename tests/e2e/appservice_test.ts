/**
 * The vertical slice end to end on the local control plane: create, update, delete an AppService
 * with the operator running; kwok makes the Pods Running and Ready.
 */
import type { Pod, Service } from "kubernetes-types/core/v1.d.ts";
import { assert, assertEquals } from "../assert.ts";
import { PODS, SERVICES } from "../../lib/kube/resources.ts";
import { isNotFound } from "../../lib/kube/errors.ts";
import { APPSERVICES, FINALIZER } from "../../lib/appservice/schema.ts";
import { SPEC_HASH_ANNOTATION } from "../../lib/appservice/pods.ts";
import {
  admin,
  appService,
  deleteInOrder,
  dropNamespace,
  getAs,
  installCrd,
  newNamespace,
  startOperator,
  waitFor,
} from "./harness.ts";

Deno.test("AppService lifecycle: create, Ready, image change, ports, delete", async (t) => {
  await installCrd();
  const c = await admin();
  const ns = await newNamespace("slice");
  const op = await startOperator();
  try {
    await op.waitReady();

    await t.step(
      "create: Pod with image, env, ports, ownerReference; finalizer; Ready",
      async () => {
        await c.create(
          APPSERVICES as never,
          appService(ns, "web", {
            image: "nginx:1.27",
            env: [{ name: "GREETING", value: "hello" }],
            ports: [{ containerPort: 8080, name: "http" }],
            resources: { requests: { cpu: "100m", memory: "64Mi" } },
          }),
        );
        const pod = await waitFor(
          "Pod web-0",
          () => c.get<Pod>(PODS, "web-0", { namespace: ns }),
          30_000,
        );
        const ctr = pod.spec!.containers[0];
        assertEquals(ctr.image, "nginx:1.27");
        assertEquals(ctr.env, [{ name: "GREETING", value: "hello" }]);
        assertEquals(ctr.ports?.[0].containerPort, 8080);
        assertEquals(ctr.resources?.requests?.cpu, "100m");
        assertEquals(pod.spec!.restartPolicy, "Always");
        const owner = pod.metadata!.ownerReferences![0];
        const as = await getAs(ns, "web");
        assertEquals(owner.kind, "AppService");
        assertEquals(owner.uid, as.metadata.uid);
        assertEquals(owner.controller, true);
        assert(as.metadata.finalizers?.includes(FINALIZER), "finalizer missing");
        const ready = await waitFor("status.ready", async () => {
          const a = await getAs(ns, "web");
          return a.status?.ready === true ? a : undefined;
        }, 60_000);
        assertEquals(ready.status?.readyReplicas, 1);
        assertEquals(ready.status?.replicasSummary, "1/1");
        assert(ready.status?.lastReconciliation, "lastReconciliation missing");
        const cond = ready.status?.conditions?.find((x) => x.type === "Ready");
        assertEquals(cond?.status, "True");
        assertEquals(cond?.observedGeneration, ready.metadata.generation);
        assertEquals(ready.status?.podStatuses?.[0].name, "web-0");
        assertEquals(ready.status?.podStatuses?.[0].phase, "Running");
        assert(ready.status?.podStatuses?.[0].podIP, "podIP missing");
        const svc = await waitFor(
          "Service web",
          () => c.get<Service>(SERVICES, "web", { namespace: ns }),
        );
        assertEquals(svc.spec?.ports?.[0].port, 8080);
        assertEquals(svc.spec?.selector?.["app.kubernetes.io/instance"], "web");
      },
    );

    await t.step("change the image: the Pod is replaced and follows", async () => {
      const before = await c.get<Pod>(PODS, "web-0", { namespace: ns });
      await c.patch(APPSERVICES as never, "web", { spec: { image: "nginx:1.28" } }, {
        namespace: ns,
      });
      // The new Pod first (in the free slot, web-1), then the old one goes.
      const after = await waitFor("one Pod, with nginx:1.28", async () => {
        const l = (await c.list<Pod>(PODS, {
          namespace: ns,
          labelSelector: "app.kubernetes.io/instance=web",
        })).items;
        return l.length === 1 && l[0].spec!.containers[0].image === "nginx:1.28" ? l[0] : undefined;
      }, 60_000);
      assert(after.metadata!.uid !== before.metadata!.uid, "Pod was not replaced");
      assert(
        after.metadata!.annotations![SPEC_HASH_ANNOTATION] !==
          before.metadata!.annotations![SPEC_HASH_ANNOTATION],
      );
      await waitFor("Ready again at the new generation", async () => {
        const a = await getAs(ns, "web");
        const cond = a.status?.conditions?.find((x) => x.type === "Ready");
        return a.status?.ready && cond?.observedGeneration === a.metadata.generation;
      }, 60_000);
    });

    await t.step("remove the ports: the Service is deleted", async () => {
      await c.patch(APPSERVICES as never, "web", { spec: { ports: null } }, { namespace: ns });
      await waitFor("Service gone", async () => {
        try {
          await c.get(SERVICES, "web", { namespace: ns });
          return false;
        } catch (err) {
          return isNotFound(err);
        }
      }, 30_000);
    });

    await t.step("delete: the Pod goes first, then the AppService", async () => {
      await deleteInOrder(ns, "web");
      const pods = await c.list<Pod>(PODS, {
        namespace: ns,
        labelSelector: "app.kubernetes.io/instance=web",
      });
      assertEquals(pods.items.map((p) => p.metadata?.name), []);
    });

    await t.step("logs are JSON lines with controller, namespace, name, reconcileID", () => {
      const created = op.logs().find((l) => l.message === "Created Pod");
      assert(created, "no 'Created Pod' log line");
      const props = created.properties as Record<string, unknown>;
      assertEquals(props.controller, "appservice");
      assertEquals(props.namespace, ns);
      assertEquals(props.name, "web");
      assert(typeof props.reconcileID === "string");
    });
  } finally {
    assertEquals(await op.stop(), 0);
    await dropNamespace(ns);
  }
});
