/**
 * S24 of docs/scenarios.md: every Pod of an AppService crash-loops, cannot start or cannot be
 * scheduled.
 *
 * 1. The conditions tell the truth: `Degraded` is True with the failure's reason and names the
 *    Pods, `Progressing` does not say a healthy "waiting for Ready" (it names the stuck Pods, and
 *    after `progressDeadlineSeconds` it is False with ProgressDeadlineExceeded), as `Ready` already
 *    says.
 * 2. Status writes are bounded while only counters and messages change: two Pods crash-looping for
 *    3 minutes (a restart every {@link CRASH_EVERY_MS} per Pod, the kubelet's back-off message
 *    growing) cost a bounded number of status writes; a state change (both Pods Ready) is written
 *    at once and in few writes.
 *
 * As tests/e2e/stuck_test.ts: kwok marks Pods Ready at once, so the AppServices request more CPU
 * than a kwok Node has and the scheduler binds their Pods to a Node kwok does not manage
 * (test_node.ts), whose kubelet this test plays.
 */
import type { ContainerStatus, Pod, PodStatus } from "kubernetes-types/core/v1.d.ts";
import { assert, assertEquals } from "../assert.ts";
import type { KubeClient } from "../../lib/kube/client.ts";
import { EVENTS, PODS, type ResourceType } from "../../lib/kube/resources.ts";
import { type AppService, APPSERVICES } from "../../lib/appservice/schema.ts";
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
import { type AuditEvent, operatorWrites } from "./audit.ts";
import { addTestNode, removeTestNode } from "./test_node.ts";

const AS = APPSERVICES as unknown as ResourceType;
/** More CPU than a kwok Node has (tests/cluster NODE_RESOURCES: 32), less than the test Node. */
const ON_TEST_NODE = { requests: { cpu: "40" } };
/** More CPU than any Node has: the scheduler cannot place the Pod. */
const NOWHERE = { requests: { cpu: "5000" } };
const IMAGE = "registry.invalid/team/app:1.0";
/** How often each crash-looping Pod crashes in the write-count test (ms). */
const CRASH_EVERY_MS = 5_000;
/** How long the write-count test lets the Pods crash-loop (ms). */
const LOOP_FOR_MS = 180_000;

/** The condition `type` of an AppService. */
const cond = (a: AppService, type: string) => a.status?.conditions?.find((x) => x.type === type);

/** The kubelet's back-off after `restarts` restarts (10 s doubling, 5 min cap), as it prints it. */
function backOff(restarts: number): string {
  const s = Math.min(10 * 2 ** Math.max(0, restarts - 1), 300);
  return s >= 60 ? `${Math.floor(s / 60)}m${s % 60}s` : `${s}s`;
}

/**
 * What a kubelet reports for a Pod whose one container is: crash-looping after `restarts`
 * restarts, waiting with `waiting` (reason, message), or running and Ready.
 */
type Kubelet =
  | { crash: number }
  | { waiting: string; message: string }
  | { ready: true };

/** The Pod status a kubelet writes for `k`. */
function kubeletStatus(pod: Pod, k: Kubelet): PodStatus {
  const now = new Date().toISOString();
  const ready = "ready" in k;
  const cs: ContainerStatus = {
    name: "app",
    image: pod.spec!.containers[0].image!,
    imageID: "",
    ready,
    started: ready,
    restartCount: "crash" in k ? k.crash : 0,
    state: "crash" in k
      ? {
        waiting: {
          reason: "CrashLoopBackOff",
          message: `back-off ${backOff(k.crash)} restarting failed container=app pod=${
            pod.metadata!.name
          }_${pod.metadata!.namespace}(${pod.metadata!.uid})`,
        },
      }
      : "waiting" in k
      ? { waiting: { reason: k.waiting, message: k.message } }
      : { running: { startedAt: now } },
  };
  if ("crash" in k) {
    cs.lastState = {
      terminated: { reason: "Error", exitCode: 1, startedAt: now, finishedAt: now },
    };
  }
  const readyCond = ready ? { status: "True" } : {
    status: "False",
    reason: "ContainersNotReady",
    message: "containers with unready status: [app]",
  };
  return {
    phase: "waiting" in k ? "Pending" : "Running",
    hostIP: "127.0.0.3",
    podIP: ready ? "10.0.0.9" : undefined,
    startTime: now,
    conditions: [
      { type: "PodScheduled", status: "True", lastTransitionTime: now },
      { type: "Initialized", status: "True", lastTransitionTime: now },
      { type: "Ready", ...readyCond, lastTransitionTime: now },
      { type: "ContainersReady", ...readyCond, lastTransitionTime: now },
    ],
    containerStatuses: [cs],
  };
}

/** Writes a kubelet status to a Pod (strategic merge on the status subresource, as the kubelet). */
async function setKubelet(c: KubeClient, ns: string, pod: string, k: Kubelet): Promise<void> {
  const p = await c.get<Pod>(PODS, pod, { namespace: ns });
  await c.patch(PODS, pod, { status: kubeletStatus(p, k) }, {
    namespace: ns,
    subresource: "status",
    type: "strategic",
  });
}

/** Waits until `pod` is bound to `node` by the scheduler. */
async function bound(c: KubeClient, ns: string, pod: string, node: string): Promise<void> {
  await waitFor(`${pod} bound to ${node}`, async () => {
    const p = await c.get<Pod>(PODS, pod, { namespace: ns });
    return p.spec?.nodeName === node;
  }, 30_000);
}

/** The operator's status writes (`appservices/status`) of `name` in `ns` since `sinceMs`. */
async function statusWrites(sinceMs: number, ns: string, name?: string): Promise<AuditEvent[]> {
  return (await operatorWrites(sinceMs, ns)).filter((e) =>
    e.objectRef?.resource === "appservices" && e.objectRef.subresource === "status" &&
    (!name || e.objectRef.name === name)
  );
}

/** The operator's Event writes in `ns` since `sinceMs`. */
async function eventWrites(sinceMs: number, ns: string): Promise<AuditEvent[]> {
  return (await operatorWrites(sinceMs, ns)).filter((e) => e.objectRef?.resource === "events");
}

/**
 * Runs `body` with a namespace (`prefix` plus a suffix), a Node kwok does not manage and a ready
 * operator; removes them all afterwards and checks the operator exited 0.
 */
async function withTestNode(
  prefix: string,
  body: (c: KubeClient, ns: string, node: string) => Promise<void>,
): Promise<void> {
  await installCrd();
  const c = await admin();
  const ns = await newNamespace(prefix);
  const node = `e2e-${prefix}-${ns.slice(-6)}`;
  await addTestNode(c, node, "e2e-s24", "127.0.0.3");
  const op = await startOperator();
  try {
    await op.waitReady();
    await body(c, ns, node);
  } finally {
    const code = await op.stop();
    await removeTestNode(c, ns, node);
    await dropNamespace(ns);
    assertEquals(code, 0, op.stderr().slice(-3000));
  }
}

/** The conditions of `a` as one line per condition, for messages. */
const show = (a: AppService) =>
  (a.status?.conditions ?? []).map((x) => `${x.type}=${x.status} ${x.reason}: ${x.message}`).join(
    "\n",
  );

Deno.test("S24: the conditions of an AppService whose Pods crash-loop, cannot start or cannot be scheduled name it", async (t) => {
  await withTestNode("s24c", async (c, ns, node) => {
    await c.create(
      AS,
      appService(ns, "crash", { image: IMAGE, replicas: 2, resources: ON_TEST_NODE }),
    );
    await c.create(AS, appService(ns, "config", { image: IMAGE, resources: ON_TEST_NODE }));
    await c.create(AS, appService(ns, "huge", { image: IMAGE, resources: NOWHERE }));
    // Deadline 10 s: after it, Progressing is False with ProgressDeadlineExceeded.
    await c.create(
      AS,
      appService(ns, "deadline", {
        image: IMAGE,
        replicas: 2,
        resources: ON_TEST_NODE,
        progressDeadlineSeconds: 10,
      }),
    );
    for (const p of ["crash-0", "crash-1", "config-0", "deadline-0", "deadline-1"]) {
      await bound(c, ns, p, node);
    }
    for (const p of ["crash-0", "crash-1", "deadline-0", "deadline-1"]) {
      await setKubelet(c, ns, p, { crash: 3 });
    }
    await setKubelet(c, ns, "config-0", {
      waiting: "CreateContainerConfigError",
      message: 'secret "db-credentials" not found',
    });

    const cases = [
      { name: "crash", reason: "CrashLoopBackOff", pods: ["crash-0", "crash-1"] },
      { name: "config", reason: "CreateContainerConfigError", pods: ["config-0"] },
      { name: "huge", reason: "Unschedulable", pods: ["huge-0"] },
    ];
    for (const k of cases) {
      await t.step(`${k.reason}: Degraded and Progressing say what Ready says`, async () => {
        // Wait for the status that has seen every stuck Pod: the kubelet states are set one Pod
        // at a time, so a status written between two of them names only the first.
        const a = await waitFor(
          `${k.name}: Ready reason ${k.reason} naming ${k.pods}`,
          async () => {
            const x = await getAs(ns, k.name);
            const degraded = cond(x, "Degraded")?.message ?? "";
            return cond(x, "Ready")?.reason === k.reason &&
                k.pods.every((p) => degraded.includes(p))
              ? x
              : undefined;
          },
          30_000,
        );
        // The conditions are written together: the same status carries all three.
        console.log(`S24 ${k.name}:\n${show(a)}`);
        const degraded = cond(a, "Degraded")!;
        const progressing = cond(a, "Progressing")!;
        assertEquals(degraded.status, "True", `Degraded:\n${show(a)}`);
        assertEquals(degraded.reason, k.reason, `Degraded:\n${show(a)}`);
        for (const p of k.pods) {
          assert(degraded.message.includes(p), `Degraded: ${degraded.message}`);
        }
        assert(
          progressing.reason !== "WaitingForReady" && progressing.reason !== "Creating",
          `Progressing says a healthy start:\n${show(a)}`,
        );
        assert(
          progressing.message.includes(k.reason) && progressing.message.includes(k.pods[0]),
          `Progressing does not name the failure:\n${show(a)}`,
        );
      });
    }

    await t.step(
      "after progressDeadlineSeconds: Progressing False ProgressDeadlineExceeded, Degraded True",
      async () => {
        const a = await waitFor("deadline: ProgressDeadlineExceeded", async () => {
          const x = await getAs(ns, "deadline");
          return cond(x, "Progressing")?.reason === "ProgressDeadlineExceeded" ? x : undefined;
        }, 40_000);
        console.log(`S24 deadline:\n${show(a)}`);
        assertEquals(cond(a, "Progressing")!.status, "False");
        assertEquals(cond(a, "Degraded")!.status, "True", show(a));
        assertEquals(cond(a, "Degraded")!.reason, "CrashLoopBackOff", show(a));
      },
    );

    await t.step("recovered: Degraded False again, Progressing Complete", async () => {
      for (const p of ["crash-0", "crash-1"]) await setKubelet(c, ns, p, { ready: true });
      const a = await waitFor("crash: Ready True", async () => {
        const x = await getAs(ns, "crash");
        return cond(x, "Ready")?.status === "True" ? x : undefined;
      }, 30_000);
      assertEquals(cond(a, "Degraded")!.status, "False", show(a));
      assertEquals(cond(a, "Progressing")!.reason, "Complete", show(a));
    });
  });
});

Deno.test("S24: status writes while 2 Pods crash-loop for 3 minutes are bounded; recovery is written at once", async (t) => {
  await withTestNode("s24w", async (c, ns, node) => {
    await c.create(
      AS,
      appService(ns, "loop", { image: IMAGE, replicas: 2, resources: ON_TEST_NODE }),
    );
    for (const p of ["loop-0", "loop-1"]) await bound(c, ns, p, node);
    const restarts = { "loop-0": 1, "loop-1": 1 };
    for (const p of ["loop-0", "loop-1"] as const) await setKubelet(c, ns, p, { crash: 1 });
    await waitFor("loop: Ready reason CrashLoopBackOff", async () => {
      const x = await getAs(ns, "loop");
      return cond(x, "Ready")?.reason === "CrashLoopBackOff";
    }, 30_000);

    await t.step("3 minutes of crashes: status writes bounded", async () => {
      const since = Date.now();
      // The test's kubelet: each Pod crashes every CRASH_EVERY_MS, the two half a period apart.
      const end = since + LOOP_FOR_MS;
      for (let i = 0; i < 1_000 && Date.now() < end; i++) {
        const p = i % 2 === 0 ? "loop-0" : "loop-1";
        restarts[p]++;
        await setKubelet(c, ns, p, { crash: restarts[p] });
        await sleep(CRASH_EVERY_MS / 2);
      }
      const crashes = restarts["loop-0"] + restarts["loop-1"] - 2;
      // Let the last deferred write (if any) go out.
      await sleep(35_000);
      const writes = await statusWrites(since, ns, "loop");
      const events = await eventWrites(since, ns);
      const conflicts = writes.filter((e) => e.responseStatus?.code === 409).length;
      console.log(
        `S24: ${crashes} crashes of 2 Pods in ${LOOP_FOR_MS / 1000} s (+35 s): ` +
          `${writes.length} status writes (${conflicts} answered 409), ${events.length} Event writes`,
      );
      // What the status says at the end is the last crash's (counters are not lost, only late).
      const a = await getAs(ns, "loop");
      const counts = a.status?.podStatuses?.map((p) => p.restartCount);
      assertEquals(counts, [restarts["loop-0"], restarts["loop-1"]], JSON.stringify(a.status));
      // Positive control of the counting: the crashes did change the status.
      assert(writes.length >= 1, "no status write seen at all");
      // At most one write per 30 s while only counters and messages change, plus the tail.
      const bound = Math.ceil((LOOP_FOR_MS + 35_000) / 30_000) + 2;
      assert(
        writes.length <= bound,
        `${writes.length} status writes for ${crashes} crashes (bound ${bound})`,
      );
      // Events: one series per Pod and back-off text, each updated at most every 10 s.
      const evBound = 2 * (Math.ceil((LOOP_FOR_MS + 35_000) / 10_000) + 7);
      assert(events.length <= evBound, `${events.length} Event writes (bound ${evBound})`);
      // The Event series carries the latest back-off, not its first.
      const evs = (await c.list<{ note?: string; series?: { count?: number } } & Pod>(EVENTS, {
        namespace: ns,
      })).items.filter((e) => (e as unknown as { reason?: string }).reason === "CrashLoopBackOff");
      const latest = `back-off ${backOff(restarts["loop-0"])}`;
      assert(
        evs.some((e) => e.note?.includes("loop-0") && e.note.includes(latest)),
        `no Event names ${latest} for loop-0: ${JSON.stringify(evs.map((e) => e.note))}`,
      );
    });

    await t.step("the Pods recover: Ready at once, in few status writes", async () => {
      const since = Date.now();
      for (const p of ["loop-0", "loop-1"]) await setKubelet(c, ns, p, { ready: true });
      await waitFor("loop: Ready True", async () => {
        const x = await getAs(ns, "loop");
        return cond(x, "Ready")?.status === "True";
      }, 5_000);
      await sleep(3_000);
      const writes = await statusWrites(since, ns, "loop");
      console.log(`S24: recovery of 2 Pods: ${writes.length} status writes`);
      assert(writes.length >= 1 && writes.length <= 3, `${writes.length} status writes`);
    });
  });
});
