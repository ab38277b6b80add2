/**
 * The complete reconciler on the local control plane (kwok runs the Pods): replicas, rollouts,
 * drift, the Service, status, Events, deletion, and the scenarios S4, S6, S8, S9 of
 * docs/scenarios.md. One operator serves every step.
 */
import type { Pod, Service } from "kubernetes-types/core/v1.d.ts";
import { assert, assertEquals } from "../assert.ts";
import { PODS, type ResourceType, SERVICES } from "../../lib/kube/resources.ts";
import { isNotFound } from "../../lib/kube/errors.ts";
import type { KubeClient, KubeObject } from "../../lib/kube/client.ts";
import { APPSERVICES, FINALIZER } from "../../lib/appservice/schema.ts";
import { isPodReady, SPEC_HASH_ANNOTATION } from "../../lib/appservice/pods.ts";
import { EVENT_SERIES_MIN_INTERVAL_MS } from "../../lib/runtime/events.ts";
import { restartApiserver } from "../cluster/cluster.ts";
import {
  admin,
  appService,
  cluster,
  deleteInOrder,
  dropNamespace,
  getAs,
  installCrd,
  newNamespace,
  sleep,
  startOperator,
  waitFor,
} from "./harness.ts";
import { describe, operatorWrites, quietWindowWrites } from "./audit.ts";
import { denyPolicy, podRefused } from "./resources.ts";

const AS = APPSERVICES as unknown as ResourceType;

async function livePods(c: KubeClient, ns: string, name: string): Promise<Pod[]> {
  const l = await c.list<Pod>(PODS, {
    namespace: ns,
    labelSelector: `app.kubernetes.io/instance=${name}`,
  });
  return l.items;
}

/** `appservice_reflector_watches_open` by resource, from a scrape of the operator's metrics. */
function watchesOpen(text: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (
    const m of text.matchAll(/^appservice_reflector_watches_open\{resource="([^"]+)"\} (\S+)$/gm)
  ) {
    out[m[1]] = Number(m[2]);
  }
  return out;
}

/** Waits until `name` is Ready at its current generation with exactly `n` Pods, none terminating. */
async function settled(c: KubeClient, ns: string, name: string, n: number, timeoutMs = 90_000) {
  return await waitFor(`${name} settled at ${n} Pods`, async () => {
    const a = await getAs(ns, name);
    const pods = await livePods(c, ns, name);
    const ok = a.status?.ready === true && a.status.observedGeneration === a.metadata.generation &&
      a.status.readyReplicas === n && a.status.replicas === n && pods.length === n &&
      pods.every((p) => !p.metadata?.deletionTimestamp && isPodReady(p));
    return ok ? { as: a, pods } : undefined;
  }, timeoutMs);
}

/**
 * A ValidatingAdmissionPolicy (and binding) refusing to create Pods in `ns` whose image ends with
 * `suffix`; resolves once it is in force, with a function removing it.
 */
async function denyPods(c: KubeClient, ns: string, tag: string, suffix: string) {
  const remove = await denyPolicy(c, `e2e-deny-${tag}-${ns}`, ns, {
    resource: "pods",
    operations: ["CREATE"],
    expression: `!object.spec.containers.exists(c, c.image.endsWith('${suffix}'))`,
    message: `images ending ${suffix} blocked by test`,
  });
  await podRefused(c, ns, `nginx${suffix}`);
  return remove;
}

/**
 * Watches the Pods of one AppService in the background and checks on every event that there are
 * never more than `max()` Pods and never more than one ordinal unavailable at once.
 */
function podObserver(c: KubeClient, ns: string, name: string, max: () => number) {
  const ctl = new AbortController();
  const pods = new Map<string, Pod>();
  const violations: string[] = [];
  let maxSeen = 0;
  let maxUnavailable = 0;
  const done = (async () => {
    const { items, resourceVersion } = await c.listAll<Pod>(PODS, {
      namespace: ns,
      labelSelector: `app.kubernetes.io/instance=${name}`,
    });
    for (const p of items) pods.set(p.metadata!.name!, p);
    try {
      for await (
        const ev of c.watch<Pod>(PODS, {
          namespace: ns,
          labelSelector: `app.kubernetes.io/instance=${name}`,
          resourceVersion,
          signal: ctl.signal,
        })
      ) {
        if (ev.type === "BOOKMARK") continue;
        if (ev.type === "DELETED") pods.delete(ev.object.metadata!.name!);
        else pods.set(ev.object.metadata!.name!, ev.object);
        maxSeen = Math.max(maxSeen, pods.size);
        if (pods.size > max()) violations.push(`${pods.size} Pods > ${max()}`);
        const unavailable = [...pods.values()].filter((p) =>
          p.metadata?.deletionTimestamp || !isPodReady(p)
        ).length + Math.max(0, max() - 1 - pods.size);
        maxUnavailable = Math.max(maxUnavailable, unavailable);
      }
    } catch (err) {
      if (!ctl.signal.aborted) violations.push(`watch failed: ${err}`);
    }
  })();
  return {
    stop: async () => {
      ctl.abort();
      await done;
      return { violations, maxSeen, maxUnavailable };
    },
  };
}

Deno.test("reconciler: replicas, rollout, drift, Service, status, Events, deletion", async (t) => {
  await installCrd();
  const c = await admin();
  const ns = await newNamespace("rec");
  const op = await startOperator();
  try {
    await op.waitReady();

    await t.step("only an image: one Pod, restartPolicy Always, Ready", async () => {
      await c.create(AS, appService(ns, "min", { image: "busybox:1.36" }));
      const { pods, as } = await settled(c, ns, "min", 1);
      assertEquals(pods[0].metadata?.name, "min-0");
      assertEquals(pods[0].spec?.restartPolicy, "Always");
      assertEquals(as.status?.replicasSummary, "1/1");
      const types = as.status?.conditions?.map((x) => `${x.type}=${x.status}`).sort();
      assertEquals(types, ["Available=True", "Degraded=False", "Progressing=False", "Ready=True"]);
    });

    await t.step(
      "scale 1 → 5 → 3 → 1, and 1 → 5 → 3 in quick succession: exact counts",
      async () => {
        await c.create(AS, appService(ns, "scale", { image: "nginx:1.27" }));
        await settled(c, ns, "scale", 1);
        for (const n of [5, 3, 1]) {
          await c.patch(AS, "scale", { spec: { replicas: n } }, { namespace: ns });
          const { pods } = await settled(c, ns, "scale", n);
          assertEquals(
            pods.map((p) => p.metadata!.name).sort(),
            Array.from({ length: n }, (_, i) => `scale-${i}`).sort(),
          );
        }
        await c.patch(AS, "scale", { spec: { replicas: 5 } }, { namespace: ns });
        // The second change goes through the scale subresource, as `kubectl scale` does.
        await c.patch(AS, "scale", { spec: { replicas: 3 } }, {
          namespace: ns,
          subresource: "scale",
        });
        const { pods, as } = await settled(c, ns, "scale", 3);
        assertEquals(pods.length, 3);
        assertEquals(as.status?.replicas, 3);
        assertEquals(
          as.status?.selector,
          "app.kubernetes.io/instance=scale,app.kubernetes.io/managed-by=appservice-operator",
        );
        await sleep(1_000);
        assertEquals((await livePods(c, ns, "scale")).length, 3);
      },
    );

    await t.step(
      "image rollout: Pods replaced one at a time, never more than replicas + 1",
      async () => {
        await c.create(AS, appService(ns, "roll", { image: "nginx:1.27", replicas: 3 }));
        const before = await settled(c, ns, "roll", 3);
        const oldUids = new Set(before.pods.map((p) => p.metadata!.uid));
        const obs = podObserver(c, ns, "roll", () => 3 + 1);
        await sleep(300);
        await c.patch(AS, "roll", { spec: { image: "nginx:1.28" } }, { namespace: ns });
        const after = await settled(c, ns, "roll", 3);
        const r = await obs.stop();
        assertEquals(r.violations, []);
        assert(r.maxUnavailable <= 1, `up to ${r.maxUnavailable} Pods unavailable at once`);
        for (const p of after.pods) {
          assertEquals(p.spec!.containers[0].image, "nginx:1.28");
          assert(!oldUids.has(p.metadata!.uid), `${p.metadata!.name} not replaced`);
        }
        const hashes = new Set(
          after.pods.map((p) => p.metadata!.annotations![SPEC_HASH_ANNOTATION]),
        );
        assertEquals(hashes.size, 1);
      },
    );

    await t.step(
      "env, resources, restartPolicy drift (S8): replaced, never updated in place",
      async () => {
        const since = Date.now();
        await c.patch(AS, "roll", {
          spec: {
            env: [{ name: "MODE", value: "blue" }],
            resources: { limits: { memory: "128Mi" } },
            restartPolicy: "OnFailure",
          },
        }, { namespace: ns });
        const { pods } = await settled(c, ns, "roll", 3);
        for (const p of pods) {
          assertEquals(p.spec!.containers[0].env, [{ name: "MODE", value: "blue" }]);
          assertEquals(p.spec!.containers[0].resources?.limits?.memory, "128Mi");
          assertEquals(p.spec!.restartPolicy, "OnFailure");
        }
        const podWrites = (await operatorWrites(since, ns)).filter((e) =>
          e.objectRef?.resource === "pods"
        );
        const updates = podWrites.filter((e) => e.verb === "update" || e.verb === "patch");
        assertEquals(updates, [], `Pod updates attempted:\n${describe(updates)}`);
        const rejected = podWrites.filter((e) => (e.responseStatus?.code ?? 200) === 422);
        assertEquals(rejected, [], describe(rejected));
      },
    );

    await t.step("ports added, changed and removed: the Service follows", async () => {
      await c.patch(AS, "min", { spec: { ports: [{ containerPort: 8080, name: "http" }] } }, {
        namespace: ns,
      });
      const svc = await waitFor(
        "Service min",
        () => c.get<Service>(SERVICES, "min", { namespace: ns }),
      );
      assertEquals(svc.spec?.ports?.map((p) => p.port), [8080]);
      assertEquals(svc.metadata?.ownerReferences?.[0].controller, true);
      await c.patch(AS, "min", {
        spec: {
          ports: [{ containerPort: 9090, name: "metrics" }, {
            containerPort: 53,
            protocol: "UDP",
            name: "dns",
          }],
        },
      }, { namespace: ns });
      await waitFor("Service ports updated", async () => {
        const s = await c.get<Service>(SERVICES, "min", { namespace: ns });
        return s.spec?.ports?.map((p) => `${p.name}/${p.port}/${p.protocol}`).join() ===
          "metrics/9090/TCP,dns/53/UDP";
      });
      await c.patch(AS, "min", { spec: { ports: [] } }, { namespace: ns });
      await waitFor("Service deleted", async () => {
        try {
          await c.get(SERVICES, "min", { namespace: ns });
          return false;
        } catch (err) {
          return isNotFound(err);
        }
      });
      await settled(c, ns, "min", 1);
    });

    await t.step("a Pod deleted by someone else is replaced at once, in a free slot", async () => {
      const old = await c.get<Pod>(PODS, "scale-1", { namespace: ns });
      await c.delete(PODS, "scale-1", { namespace: ns });
      // The replacement does not wait for the deleted Pod to be gone: it takes a free slot
      // (scale-3, or scale-1 if that one was already gone).
      const { pods } = await settled(c, ns, "scale", 3);
      assert(!pods.some((p) => p.metadata!.uid === old.metadata!.uid), "the deleted Pod stayed");
      for (const p of pods) assert(/^scale-[0-3]$/.test(p.metadata!.name!), p.metadata!.name);
    });

    await t.step("a Failed Pod is replaced and reported Degraded meanwhile", async () => {
      const old = await c.get<Pod>(PODS, "scale-2", { namespace: ns });
      await c.patch(PODS, "scale-2", { status: { phase: "Failed" } }, {
        namespace: ns,
        subresource: "status",
      });
      await waitFor("scale-2 replaced", async () => {
        const p = await c.get<Pod>(PODS, "scale-2", { namespace: ns });
        return p.metadata!.uid !== old.metadata!.uid;
      });
      await settled(c, ns, "scale", 3);
    });

    await t.step(
      "status: podStatuses, conditions with observedGeneration; Events recorded",
      async () => {
        const a = await getAs(ns, "scale");
        const names = a.status?.podStatuses?.map((p) => p.name) ?? [];
        assertEquals(names.length, 3, names.join());
        assert(names.every((n) => /^scale-[0-3]$/.test(n)), names.join());
        assertEquals(names, [...names].sort(), "sorted by name");
        for (const p of a.status!.podStatuses!) {
          assertEquals(p.phase, "Running");
          assert(p.podIP, "podIP missing");
          assertEquals(typeof p.restartCount, "number");
        }
        for (const cond of a.status!.conditions!) {
          assertEquals(cond.observedGeneration, a.metadata.generation);
          assert(cond.reason && cond.lastTransitionTime);
        }
        const events = await c.list<
          & KubeObject
          & { reason?: string; regarding?: { name?: string; kind?: string } }
        >(
          { apiVersion: "events.k8s.io/v1", kind: "Event", plural: "events", namespaced: true },
          { namespace: ns },
        );
        const reasons = new Set(
          events.items.filter((e) => e.regarding?.kind === "AppService").map((e) => e.reason),
        );
        for (
          const r of ["PodCreated", "PodDeleted", "PodReplaced", "ServiceCreated", "ServiceDeleted"]
        ) {
          assert(reasons.has(r), `no ${r} Event (have ${[...reasons]})`);
        }
      },
    );

    await t.step("a Service of the same name made by someone else is never adopted", async () => {
      await c.create(SERVICES, {
        apiVersion: "v1",
        kind: "Service",
        metadata: { name: "foreign", namespace: ns, labels: { team: "payments" } },
        spec: {
          selector: { app: "payments" },
          ports: [{ name: "https", port: 443, targetPort: 8443 }],
        },
      } as never);
      await c.create(
        AS,
        appService(ns, "foreign", { image: "nginx:1.27", ports: [{ containerPort: 80 }] }),
      );
      const a = await waitFor("Degraded ServiceNameConflict", async () => {
        const x = await getAs(ns, "foreign");
        const d = x.status?.conditions?.find((k) => k.type === "Degraded");
        return d?.status === "True" && d.reason === "ServiceNameConflict" ? x : undefined;
      });
      assert(
        a.status?.conditions?.find((k) => k.type === "Degraded")?.message.includes("not owned"),
      );
      const svc = await c.get<Service>(SERVICES, "foreign", { namespace: ns });
      assertEquals(svc.spec?.selector, { app: "payments" });
      assertEquals(svc.metadata?.ownerReferences, undefined);
      await c.delete(AS, "foreign", { namespace: ns });
      await waitFor("AppService foreign gone", async () => {
        try {
          await getAs(ns, "foreign");
          return false;
        } catch (err) {
          return isNotFound(err);
        }
      });
      const still = await c.get<Service>(SERVICES, "foreign", { namespace: ns });
      assertEquals(still.spec?.selector, { app: "payments" }, "the foreign Service must survive");
    });

    await t.step(
      "a template an admission policy refuses keeps the running Pods (new Pods first)",
      async () => {
        await c.create(AS, appService(ns, "guard", { image: "nginx:1.27" }));
        const { pods } = await settled(c, ns, "guard", 1);
        const uid = pods[0].metadata!.uid;
        const unblock = await denyPods(c, ns, "guard", ":blocked");
        try {
          await c.patch(AS, "guard", { spec: { image: "nginx:blocked" } }, { namespace: ns });
          const a = await waitFor("Degraded PodCreateRejected", async () => {
            const x = await getAs(ns, "guard");
            const d = x.status?.conditions?.find((k) => k.type === "Degraded");
            return d?.status === "True" && d.reason === "PodCreateRejected" ? x : undefined;
          });
          const message = a.status?.conditions?.find((k) => k.type === "Degraded")?.message ?? "";
          // The new Pod (guard-1, the free slot) was refused; guard-0 keeps serving.
          assert(message.includes("guard-1") && message.includes("blocked by test"), message);
          const now = await c.get<Pod>(PODS, "guard-0", { namespace: ns });
          assertEquals(now.metadata!.uid, uid, "the running Pod was deleted");
          assert(isPodReady(now));
        } finally {
          await unblock();
        }
        // Fixing the spec rolls out normally.
        await c.patch(AS, "guard", { spec: { image: "nginx:1.28" } }, { namespace: ns });
        const fixed = await settled(c, ns, "guard", 1);
        assert(fixed.pods[0].metadata!.uid !== uid);
      },
    );

    await t.step(
      "delete with --cascade=orphan leaves the Pods to the garbage collector's rules",
      async () => {
        await c.create(AS, appService(ns, "orphans", { image: "nginx:1.27", replicas: 2 }));
        await settled(c, ns, "orphans", 2);
        await c.delete(AS, "orphans", { namespace: ns, propagationPolicy: "Orphan" });
        await waitFor("AppService orphans gone", async () => {
          try {
            await getAs(ns, "orphans");
            return false;
          } catch (err) {
            return isNotFound(err);
          }
        });
        const left = await livePods(c, ns, "orphans");
        assertEquals(left.length, 2, "orphaned Pods must stay");
        for (const p of left) await c.delete(PODS, p.metadata!.name!, { namespace: ns });
      },
    );

    await t.step("S9: at rest for 60 s, the operator makes zero writes", async () => {
      await settled(c, ns, "scale", 3);
      // Let the last status writes land, and the last Event series count (written at most
      // EVENT_SERIES_MIN_INTERVAL_MS after the repeat it counts).
      await sleep(EVENT_SERIES_MIN_INTERVAL_MS + 2_000);
      const since = Date.now();
      await sleep(60_000);
      // Positive control: a new AppService the operator must act on, seen by the same filter.
      const writes = await quietWindowWrites(
        since,
        () => c.create(AS, appService(ns, "control-s9", { image: "nginx:1.27" })),
      );
      assertEquals(writes.length, 0, `writes at rest:\n${describe(writes)}`);
      await settled(c, ns, "control-s9", 1);
      await sleep(EVENT_SERIES_MIN_INTERVAL_MS + 2_000); // its Events land before the next window
    });

    await t.step("S4: an apiserver restart (watches re-established) causes no writes", async () => {
      const info = await cluster();
      const watching = watchesOpen(await op.metrics());
      assert(Object.keys(watching).length > 0, "no appservice_reflector_watches_open series");
      for (const [resource, n] of Object.entries(watching)) assert(n > 0, `${resource}: ${n}`);
      const since = Date.now();
      await restartApiserver(info);
      await waitFor("apiserver back", async () => {
        await c.list(AS, { namespace: ns, limit: 1 });
        return true;
      });
      // The old streams ended while the apiserver was down; every reflector watches again (they
      // reconnect with backoff, 0.8 s doubling).
      await waitFor(`every reflector watching again (${JSON.stringify(watching)})`, async () => {
        const now = watchesOpen(await op.metrics());
        return Object.entries(watching).every(([resource, n]) => now[resource] === n);
      }, 60_000);
      // Positive control, and the operator still works afterwards: scaling down deletes a Pod.
      const writes = await quietWindowWrites(
        since,
        () => c.patch(AS, "scale", { spec: { replicas: 2 } }, { namespace: ns }),
      );
      assertEquals(writes.length, 0, `writes after reconnect:\n${describe(writes)}`);
      await settled(c, ns, "scale", 2);
    });

    await t.step(
      "deletion with running Pods: Pods and Service go first, then the AppService",
      async () => {
        await c.patch(AS, "scale", { spec: { ports: [{ containerPort: 80 }] } }, { namespace: ns });
        await waitFor("Service scale", () => c.get<Service>(SERVICES, "scale", { namespace: ns }));
        await deleteInOrder(ns, "scale", { service: true });
        assertEquals(await livePods(c, ns, "scale"), []);
        try {
          await c.get(SERVICES, "scale", { namespace: ns });
          throw new Error("Service still there");
        } catch (err) {
          assert(isNotFound(err), String(err));
        }
      },
    );
  } finally {
    const code = await op.stop();
    await dropNamespace(ns);
    assertEquals(code, 0, op.stderr().slice(-3000));
  }
});

Deno.test("S6: a cleanup that cannot delete a Pod keeps the finalizer, says why, retries", async () => {
  await installCrd();
  const c = await admin();
  const ns = await newNamespace("s6");
  let unblock = async () => {};
  const op = await startOperator();
  try {
    await op.waitReady();
    await c.create(AS, appService(ns, "sticky", { image: "nginx:1.27", replicas: 2 }));
    await settled(c, ns, "sticky", 2);
    // Deny deleting Pods in this namespace (operator and everyone): cleanup must fail.
    unblock = await denyPolicy(c, `e2e-deny-pod-delete-${ns}`, ns, {
      resource: "pods",
      operations: ["DELETE"],
      expression: "false",
      message: "pod deletion blocked by test",
    });
    await waitFor(
      "policy in force",
      async () => {
        try {
          const probe = await c.create<Pod>(PODS, {
            apiVersion: "v1",
            kind: "Pod",
            metadata: { generateName: "probe-", namespace: ns },
            spec: { containers: [{ name: "c", image: "busybox:1" }] },
          });
          try {
            await c.delete(PODS, probe.metadata!.name!, { namespace: ns });
            return false;
          } catch {
            return true;
          }
        } catch {
          return false;
        }
      },
      30_000,
      1_000,
    );
    await c.delete(AS, "sticky", { namespace: ns });
    const stuck = await waitFor("Degraded CleanupFailed", async () => {
      const a = await getAs(ns, "sticky");
      const d = a.status?.conditions?.find((x) => x.type === "Degraded");
      return d?.status === "True" && d.reason === "CleanupFailed" ? a : undefined;
    }, 30_000);
    assert(stuck.metadata.finalizers?.includes(FINALIZER));
    assert(
      stuck.status?.conditions?.find((x) => x.type === "Degraded")?.message.includes(
        "blocked by test",
      ),
    );
    const events = await c.list<KubeObject & { reason?: string; type?: string }>(
      { apiVersion: "events.k8s.io/v1", kind: "Event", plural: "events", namespaced: true },
      { namespace: ns },
    );
    assert(
      events.items.some((e) => e.reason === "CleanupFailed" && e.type === "Warning"),
      "no Warning Event",
    );
    assertEquals(
      (await livePods(c, ns, "sticky")).filter((p) => p.metadata?.name?.startsWith("sticky-"))
        .length,
      2,
    );
    // Unblock: cleanup is retried with backoff and completes.
    await unblock();
    await waitFor(
      "AppService gone after unblocking",
      async () => {
        try {
          await getAs(ns, "sticky");
          return false;
        } catch (err) {
          return isNotFound(err);
        }
      },
      90_000,
      500,
    );
    assertEquals((await livePods(c, ns, "sticky")).length, 0);
  } finally {
    await unblock();
    const code = await op.stop();
    await dropNamespace(ns);
    assertEquals(code, 0);
  }
});
