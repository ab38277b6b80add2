/**
 * The AppService controller's cache transform of owned Pods ({@link cachedPod}): what the
 * reconciler and its status read of a Pod is the same before and after it, and the Pod's spec
 * (the apiserver's defaults) is gone. The end-to-end tests (tests/e2e/reconcile_test.ts and the
 * others) run the reconciler over the transformed cache.
 */
import type { Pod } from "kubernetes-types/core/v1.d.ts";
import { assert, assertEquals } from "../assert.ts";
import { cachedPod } from "../../lib/appservice/controller.ts";
import { isPodReady, podOrdinal, restartCount } from "../../lib/appservice/pods.ts";
import { podCause, podStatuses } from "../../lib/appservice/status.ts";
import { controllerUidIndex, Store } from "../../lib/runtime/store.ts";
import type { AppService } from "../../lib/appservice/schema.ts";

/** A Pod as the apiserver lists it after kwok ran it (defaults filled in), managedFields too. */
function listedPod(name: string, ready: boolean): Pod {
  return {
    metadata: {
      name,
      namespace: "ns",
      uid: `uid-${name}`,
      resourceVersion: "42",
      creationTimestamp: "2026-01-01T00:00:00Z",
      labels: {
        "app.kubernetes.io/name": "web",
        "app.kubernetes.io/instance": "web",
        "app.kubernetes.io/managed-by": "appservice-operator",
      },
      annotations: { "apps.our-org.com/spec-hash": "0123456789" },
      ownerReferences: [{
        apiVersion: "apps.our-org.com/v1",
        kind: "AppService",
        name: "web",
        uid: "uid-web",
        controller: true,
      }],
      managedFields: [{ manager: "appservice-operator", operation: "Update" }],
    },
    spec: {
      containers: [{
        name: "app",
        image: "registry.local/web:1.0",
        resources: {},
        terminationMessagePath: "/dev/termination-log",
        terminationMessagePolicy: "File",
        imagePullPolicy: "IfNotPresent",
        volumeMounts: [{
          name: "kube-api-access-abcde",
          readOnly: true,
          mountPath: "/var/run/secrets/kubernetes.io/serviceaccount",
        }],
      }],
      restartPolicy: "Always",
      terminationGracePeriodSeconds: 30,
      dnsPolicy: "ClusterFirst",
      serviceAccountName: "default",
      nodeName: "kwok-node-0",
      securityContext: {},
      schedulerName: "default-scheduler",
      tolerations: [
        {
          key: "node.kubernetes.io/not-ready",
          operator: "Exists",
          effect: "NoExecute",
          tolerationSeconds: 300,
        },
      ],
      volumes: [{
        name: "kube-api-access-abcde",
        projected: {
          sources: [{ serviceAccountToken: { expirationSeconds: 3607, path: "token" } }],
        },
      }],
    },
    status: {
      phase: "Running",
      conditions: [
        { type: "Initialized", status: "True" },
        { type: "Ready", status: ready ? "True" : "False" },
        { type: "PodScheduled", status: "True" },
      ],
      hostIP: "10.0.0.1",
      podIP: "10.244.0.7",
      startTime: "2026-01-01T00:00:01Z",
      containerStatuses: [{
        name: "app",
        ready,
        restartCount: 2,
        image: "registry.local/web:1.0",
        imageID: "",
        started: true,
        state: ready
          ? { running: { startedAt: "2026-01-01T00:00:02Z" } }
          : { waiting: { reason: "CrashLoopBackOff", message: "back-off 10s" } },
      }],
    },
  };
}

const owner = { metadata: { name: "web", uid: "uid-web" } } as unknown as AppService;

Deno.test("pod cache transform: what the reconciler reads is unchanged, the spec is gone", () => {
  for (const ready of [true, false]) {
    const full = listedPod("web-0", ready);
    const cached = cachedPod(listedPod("web-0", ready));
    assertEquals(cached.spec, { nodeName: "kwok-node-0", restartPolicy: "Always" } as never);
    assertEquals(JSON.stringify(cached).includes("tolerations"), false);
    assertEquals(cached.metadata, full.metadata);
    assertEquals(cached.status, full.status);
    assertEquals(podStatuses([cached]), podStatuses([full]));
    assertEquals(isPodReady(cached), isPodReady(full));
    assertEquals(restartCount(cached), restartCount(full));
    assertEquals(podOrdinal(owner, cached), podOrdinal(owner, full));
    assertEquals(controllerUidIndex(cached), controllerUidIndex(full));
    assertEquals(cachedPod(cached), cached, "idempotent");
  }
});

Deno.test("pod cache transform: why a Pod is not Ready reads the same in every state", () => {
  const now = Date.parse("2026-01-01T01:00:00Z");
  const states: ((p: Pod) => void)[] = [
    (p) => {
      // Completed under OnFailure: the restartPolicy decides the message.
      p.spec!.restartPolicy = "OnFailure";
      p.status!.phase = "Succeeded";
    },
    (p) => {
      // Being deleted long past its grace period, no finalizer: the Node is named.
      Object.assign(p.metadata!, { deletionTimestamp: "2026-01-01T00:00:00Z" });
    },
    (p) => {
      Object.assign(p.metadata!, { deletionTimestamp: "2026-01-01T00:00:00Z" });
      p.metadata!.finalizers = ["example.com/hold"];
    },
    (p) => {
      p.status!.conditions = [{ type: "PodScheduled", status: "False", reason: "Unschedulable" }];
    },
    (p) => {
      p.status!.reason = "Evicted";
    },
    () => {},
  ];
  for (const set of states) {
    const full = listedPod("web-0", false);
    set(full);
    const cached = cachedPod(structuredClone(full));
    assertEquals(podCause(cached, now), podCause(full, now));
    assertEquals(podStatuses([cached]), podStatuses([full]));
  }
});

Deno.test("pod cache transform: in a Store, list items and watch events are cached without spec", () => {
  const s = new Store<Pod>({ transform: cachedPod });
  s.replace([listedPod("web-0", true)]);
  s.upsert(listedPod("web-1", false));
  for (const key of ["ns/web-0", "ns/web-1"]) {
    const p = s.get(key);
    assert(p, key);
    assertEquals(Object.keys(p.spec ?? {}).sort(), ["nodeName", "restartPolicy"]);
    assertEquals(p.metadata?.managedFields, undefined);
    assertEquals(p.status?.containerStatuses?.[0].restartCount, 2);
  }
});
