/**
 * Status truthfulness: what `kubectl get as` says (READY, REPLICAS, REASON, MESSAGE) matches what
 * `kubectl get pods` shows, in the states a rollout or an app can end up in.
 *
 * - A rollout stalled on its first new Pod (here: unschedulable, as with a request no Node can
 *   take): the old Pods are Ready and serving (new Pods come first, S22). REPLICAS once said `0/3`
 *   and the message "0/3 Pods ready", because only Pods at the new spec were counted; a user
 *   reading that thinks the app is down. It must say 3/3 ready, how many are at the new spec, and
 *   `Available` True.
 * - A Pod whose app exited 0 with `restartPolicy: OnFailure` (or Never) is Succeeded and is never
 *   restarted. The status said `ReplicasNotReady` "1/2 Pods ready" and Progressing
 *   `WaitingForReady`, waiting for ever for something that cannot happen. It must name the Pod
 *   and that it completed.
 * - A Pod stuck terminating (a finalizer nobody removes, a Node that is gone): it holds its slot
 *   until it is gone (its replacement is made in a free slot). The status once said
 *   `ReplicasNotReady` "1/2 Pods ready" and Progressing "1 terminating"; it must name the Pod,
 *   since when, and what holds it (`Degraded`, reason PodStuckTerminating, and its podStatuses
 *   entry).
 */
import type { Pod } from "kubernetes-types/core/v1.d.ts";
import { assert, assertEquals } from "../assert.ts";
import type { KubeClient } from "../../lib/kube/client.ts";
import { PODS, type ResourceType } from "../../lib/kube/resources.ts";
import { APPSERVICES } from "../../lib/appservice/schema.ts";
import { isPodReady } from "../../lib/appservice/pods.ts";
import {
  admin,
  appService,
  dropNamespace,
  getAs,
  installCrd,
  newNamespace,
  sleep,
  startOperator,
  waitFor,
} from "./harness.ts";
import { describe, operatorWrites } from "./audit.ts";
import { EVENT_SERIES_MIN_INTERVAL_MS } from "../../lib/runtime/events.ts";

const AS = APPSERVICES as unknown as ResourceType;

/** The Pods of AppService `name`, not being deleted. */
async function pods(c: KubeClient, ns: string, name: string): Promise<Pod[]> {
  const l = await c.list<Pod>(PODS, {
    namespace: ns,
    labelSelector: `app.kubernetes.io/instance=${name}`,
  });
  return l.items.filter((p) => !p.metadata?.deletionTimestamp);
}

Deno.test("status matches the Pods: a stalled rollout, a completed Pod, a Pod stuck terminating", async (t) => {
  await installCrd();
  const c = await admin();
  const ns = await newNamespace("adv-status");
  const op = await startOperator();
  try {
    await op.waitReady();

    await t.step(
      "a rollout stalled on its first new Pod: 3/3 ready, 1/3 updated, Available",
      async () => {
        await c.create(AS, appService(ns, "web", { image: "nginx:1.27", replicas: 3 }));
        await waitFor("web Ready", async () => (await getAs(ns, "web")).status?.ready === true);
        await c.patch(AS, "web", {
          spec: { image: "nginx:1.28", resources: { requests: { cpu: "5000" } } },
        }, { namespace: ns });
        const a = await waitFor("web reports the unschedulable new Pod", async () => {
          const x = await getAs(ns, "web");
          const r = x.status?.conditions?.find((k) => k.type === "Ready");
          return x.status?.observedGeneration === x.metadata.generation &&
              r?.reason === "Unschedulable"
            ? x
            : undefined;
        }, 30_000);
        const live = await pods(c, ns, "web");
        const readyPods = live.filter(isPodReady).length;
        const ready = a.status!.conditions!.find((k) => k.type === "Ready")!;
        console.log(
          `kubectl get pods: ${readyPods}/${live.length} Ready; status: readyReplicas ${a.status?.readyReplicas}, REPLICAS ${a.status?.replicasSummary}, message: ${ready.message}`,
        );
        // Surge first (S22): the three old Pods keep serving beside the new one.
        assertEquals(readyPods, 3);
        assertEquals(a.status?.readyReplicas, readyPods, "readyReplicas vs Ready Pods");
        assertEquals(a.status?.replicasSummary, "3/3");
        assertEquals(a.status?.updatedReplicas, 1);
        assert(ready.message.includes("3/3 Pods ready"), ready.message);
        assert(ready.message.includes("1/3 at the current spec"), ready.message);
        assertEquals(a.status?.ready, false, "not Ready: not every Pod is at the spec");
        const available = a.status!.conditions!.find((k) => k.type === "Available")!;
        assertEquals(available.status, "True", available.message);
      },
    );

    await t.step("a Pod that completed (restartPolicy OnFailure) is named", async () => {
      await c.create(
        AS,
        appService(ns, "once", { image: "busybox:1.36", replicas: 2, restartPolicy: "OnFailure" }),
      );
      await waitFor("once Ready", async () => (await getAs(ns, "once")).status?.ready === true);
      const now = new Date().toISOString();
      // What the kubelet reports when the app exits 0 under OnFailure.
      await c.patch(PODS, "once-0", {
        status: {
          phase: "Succeeded",
          conditions: [
            { type: "Ready", status: "False", reason: "PodCompleted", lastTransitionTime: now },
            {
              type: "ContainersReady",
              status: "False",
              reason: "PodCompleted",
              lastTransitionTime: now,
            },
          ],
          containerStatuses: [{
            name: "app",
            image: "busybox:1.36",
            imageID: "",
            ready: false,
            restartCount: 0,
            state: {
              terminated: { exitCode: 0, reason: "Completed", startedAt: now, finishedAt: now },
            },
          }],
        },
      }, { namespace: ns, subresource: "status", type: "merge" });
      const a = await waitFor("once reports once-0", async () => {
        const x = await getAs(ns, "once");
        return x.status?.ready === false && x.status.readyReplicas === 1 ? x : undefined;
      }, 30_000);
      const ready = a.status!.conditions!.find((k) => k.type === "Ready")!;
      const progressing = a.status!.conditions!.find((k) => k.type === "Progressing")!;
      console.log(`Ready: ${ready.reason}: ${ready.message}`);
      console.log(
        `Progressing: ${progressing.status} ${progressing.reason}: ${progressing.message}`,
      );
      assertEquals(ready.reason, "Completed");
      assert(ready.message.includes("once-0"), ready.message);
      assert(ready.message.includes("not restarted"), ready.message);
      assertEquals(progressing.status, "False", "nothing is in progress: the Pod will not return");
      const entry = a.status?.podStatuses?.find((p) => p.name === "once-0");
      assertEquals(entry?.reason, "Completed");
      assertEquals(
        (await c.get<Pod>(PODS, "once-0", { namespace: ns })).status?.phase,
        "Succeeded",
      );
    });
    await t.step("a Pod stuck terminating (a finalizer, a lost Node) is named", async () => {
      await c.create(AS, appService(ns, "held", { image: "nginx:1.27", replicas: 2 }));
      await waitFor("held Ready", async () => (await getAs(ns, "held")).status?.ready === true);
      await c.patch(PODS, "held-0", { metadata: { finalizers: ["e2e.example.com/hold"] } }, {
        namespace: ns,
      });
      const t0 = Date.now();
      await c.delete(PODS, "held-0", { namespace: ns, gracePeriodSeconds: 1 });
      try {
        const a = await waitFor("held names held-0 as stuck terminating", async () => {
          const x = await getAs(ns, "held");
          const r = x.status?.conditions?.find((k) => k.type === "Degraded");
          return r?.message.includes("held-0") && r.reason === "PodStuckTerminating"
            ? x
            : undefined;
        }, 90_000).catch(async (err) => {
          const x = await getAs(ns, "held");
          throw new Error(`${err.message}\n${JSON.stringify(x.status, null, 1)}`);
        });
        const r = a.status!.conditions!.find((k) => k.type === "Degraded")!;
        console.log(`after ${(Date.now() - t0) / 1000} s: ${r.reason}: ${r.message}`);
        assert(r.message.includes("e2e.example.com/hold"), r.message);
        assertEquals(a.status?.replicasSummary, "2/2", "its replacement serves in a free slot");
        const entry = a.status?.podStatuses?.find((p) => p.name === "held-0");
        assertEquals(entry?.phase, "Terminating");
        assertEquals(entry?.reason, "PodStuckTerminating");
      } finally {
        await c.patch(PODS, "held-0", { metadata: { finalizers: null } }, { namespace: ns });
      }
      await waitFor("held Ready again", async () => (await getAs(ns, "held")).status?.ready);
    });

    await t.step(
      "at rest in these states (stalled, completed, recovered): zero writes (S9)",
      async () => {
        await sleep(EVENT_SERIES_MIN_INTERVAL_MS + 2_000); // the last Event series count goes out
        const since = Date.now();
        await sleep(20_000);
        const writes = await operatorWrites(since, ns);
        assertEquals(writes.length, 0, `writes at rest:\n${describe(writes)}`);
      },
    );
  } finally {
    const code = await op.stop();
    await dropNamespace(ns);
    assertEquals(code, 0, op.stderr().slice(-3000));
  }
});
