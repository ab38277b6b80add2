/**
 * A Node that kwok does not manage, for tests that play its kubelet: they write the status of the
 * Pods bound to it (Pending, waiting reasons, Ready after a delay) as a kubelet would. tests/cluster
 * starts kwok with `--manage-nodes-with-annotation-selector`, so a Node without kwok's annotation
 * is left to the test. Its address is a value in an object, never an address anyone connects to.
 *
 * @module
 */
import type { Pod } from "kubernetes-types/core/v1.d.ts";
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
