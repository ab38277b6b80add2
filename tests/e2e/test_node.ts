/**
 * A Node that kwok does not manage, for tests that play its kubelet: they write the status of the
 * Pods bound to it (Pending, waiting reasons, Ready after a delay) as a kubelet would. tests/cluster
 * starts kwok with `--manage-nodes-with-annotation-selector`, so a Node without kwok's annotation
 * is left to the test. Its address is a value in an object, never an address anyone connects to.
 *
 * @module
 */
import type { Pod, PodStatus } from "kubernetes-types/core/v1.d.ts";
import type { KubeClient, KubeObject } from "../../lib/kube/client.ts";
import { isNotFound } from "../../lib/kube/errors.ts";
import { PODS } from "../../lib/kube/resources.ts";
import { rt } from "./resources.ts";

/** core/v1 Node. */
export const NODES = rt("v1", "Node", "nodes", false);

/**
 * Creates the Node `name` (label `type: <type>`) and reports it Ready with 1000 CPUs, 1 TiB of
 * memory, 110 Pods and `extraCapacity` (e.g. an extended resource only this Node offers, so the
 * scheduler binds the Pods that request it here and nowhere else).
 */
export async function addTestNode(
  c: KubeClient,
  name: string,
  type: string,
  address: string,
  extraCapacity: Record<string, string> = {},
): Promise<void> {
  await c.create(NODES, {
    apiVersion: "v1",
    kind: "Node",
    metadata: { name, labels: { "kubernetes.io/hostname": name, type } },
    spec: {},
  } as KubeObject);
  const capacity = { cpu: "1000", memory: "1Ti", pods: "110", ...extraCapacity };
  const now = new Date().toISOString();
  await c.patch(NODES, name, {
    status: {
      capacity,
      allocatable: capacity,
      conditions: [{
        type: "Ready",
        status: "True",
        reason: "KubeletReady",
        message: "played by the test",
        lastHeartbeatTime: now,
        lastTransitionTime: now,
      }],
      addresses: [{ type: "InternalIP", address }],
    },
  }, { subresource: "status", type: "merge" });
}

/**
 * Removes the Pods of `ns` at once (no kubelet will confirm their deletion any more), then the
 * Node `name`. Pods already gone are fine; any other error is thrown.
 */
export async function removeTestNode(c: KubeClient, ns: string, name: string): Promise<void> {
  const pods = await c.list<Pod>(PODS, { namespace: ns }).catch(() => ({ items: [] as Pod[] }));
  for (const p of pods.items) {
    await c.delete(PODS, p.metadata!.name!, { namespace: ns, gracePeriodSeconds: 0 })
      .catch((err) => {
        if (!isNotFound(err)) throw err;
      });
  }
  await c.delete(NODES, name).catch(() => {});
}

/**
 * The status a test's kubelet writes for `pod` (its first container): Running and Ready with
 * `podIP` (a value, never an address anyone connects to), or Pending, waiting on
 * ImagePullBackOff, when `ready` is false.
 */
export function kubeletStatus(pod: Pod, podIP: string, ready: boolean): PodStatus {
  const now = new Date().toISOString();
  const cond = (type: string) =>
    ready ? { type, status: "True", lastTransitionTime: now } : {
      type,
      status: "False",
      reason: "ContainersNotReady",
      message: `containers with unready status: [${pod.spec!.containers[0].name}]`,
      lastTransitionTime: now,
    };
  return {
    phase: ready ? "Running" : "Pending",
    hostIP: "127.0.0.3",
    podIP,
    podIPs: [{ ip: podIP }],
    startTime: now,
    conditions: [
      { type: "PodScheduled", status: "True", lastTransitionTime: now },
      { type: "Initialized", status: "True", lastTransitionTime: now },
      cond("ContainersReady"),
      cond("Ready"),
    ],
    containerStatuses: [{
      name: pod.spec!.containers[0].name,
      image: pod.spec!.containers[0].image!,
      imageID: "",
      ready,
      started: ready,
      restartCount: 0,
      state: ready ? { running: { startedAt: now } } : {
        waiting: {
          reason: "ImagePullBackOff",
          message: `Back-off pulling image "${pod.spec!.containers[0].image}"`,
        },
      },
    }],
  };
}

/** How {@link runTestKubelet} plays a kubelet. */
export interface TestKubeletTimes {
  /** How long after a Pod is first seen bound its status is written (ms). */
  readyAfterMs: (pod: Pod) => number;
  /** How long after a deletion began it is confirmed (ms): the app's graceful stop. */
  terminationMs: number;
}

/**
 * The kubelet of a test Node `node` for the Pods of `ns`: polls the Pods bound to it every 50 ms
 * (bounded by `signal`); `times.readyAfterMs(pod)` after a Pod is first seen it reports it Running
 * and Ready with a Pod IP (a value, never an address anyone connects to), or Pending in
 * ImagePullBackOff when its image tag starts with `never`; it confirms a deletion (grace period
 * 0, uid precondition) `times.terminationMs` after it began. Returns a promise that ends with the
 * signal.
 */
export async function runTestKubelet(
  c: KubeClient,
  ns: string,
  node: string,
  signal: AbortSignal,
  times: TestKubeletTimes,
): Promise<void> {
  const seen = new Map<string, number>(); // uid -> when first seen bound (ms)
  const done = new Set<string>(); // uids whose status was written
  const deleting = new Map<string, number>(); // uid -> when its deletion was first seen
  let ip = 0;
  while (!signal.aborted) {
    const pods = await c.list<Pod>(PODS, { namespace: ns, fieldSelector: `spec.nodeName=${node}` })
      .catch(() => ({ items: [] as Pod[] }));
    const now = Date.now();
    for (const p of pods.items) {
      const uid = p.metadata!.uid!;
      if (p.metadata?.deletionTimestamp) {
        if (!deleting.has(uid)) deleting.set(uid, now);
        if (now - deleting.get(uid)! >= times.terminationMs) {
          await c.delete(PODS, p.metadata.name!, {
            namespace: ns,
            gracePeriodSeconds: 0,
            preconditions: { uid },
          }).catch(() => {});
        }
        continue;
      }
      if (!seen.has(uid)) seen.set(uid, now);
      if (done.has(uid) || now - seen.get(uid)! < times.readyAfterMs(p)) continue;
      ip++;
      const podIP = `10.244.${200 + Math.floor(ip / 250) % 50}.${1 + ip % 250}`;
      const ready = !p.spec!.containers[0].image!.includes(":never");
      await c.patch(PODS, p.metadata!.name!, { status: kubeletStatus(p, podIP, ready) }, {
        namespace: ns,
        subresource: "status",
        type: "strategic",
      }).then(() => done.add(uid), () => {});
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}
