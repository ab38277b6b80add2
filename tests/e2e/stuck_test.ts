/**
 * S18 of docs/scenarios.md: a Pod of an AppService cannot start, and the AppService says why.
 *
 * kwok plays a healthy kubelet, so this test plays a failing one: it adds a Node that kwok does not
 * manage (no `kwok.x-k8s.io/node` annotation; tests/cluster starts kwok with
 * `--manage-nodes-with-annotation-selector`), the AppServices of the table request more CPU than a
 * kwok Node has, so the real scheduler binds their Pods to that Node, and the test writes their
 * status as a kubelet would (Pending, a waiting or terminated container with the kubelet's reason
 * and message). The Unschedulable row asks for more CPU than any Node has: the scheduler's own
 * decision (PodScheduled=False, reason Unschedulable).
 *
 * Each further reason is one line of {@link CASES}. For each: the Ready condition's reason is the
 * cause and its message names the Pod; `status.podStatuses` carries the container state; one
 * Warning Event per Pod and reason, whose `series.count` grows when the reason comes back (the
 * kubelet's ErrImagePull ⇄ ImagePullBackOff cycle); `kubectl get as` shows the reason; and once
 * nothing changes the operator writes nothing (S9).
 */
import type { ContainerStatus, Pod, PodStatus } from "kubernetes-types/core/v1.d.ts";
import { assert, assertEquals } from "../assert.ts";
import type { KubeClient, KubeObject } from "../../lib/kube/client.ts";
import { EVENTS, PODS, type ResourceType } from "../../lib/kube/resources.ts";
import { type AppService, APPSERVICES } from "../../lib/appservice/schema.ts";
import {
  admin,
  appService,
  cluster,
  dropNamespace,
  getAs,
  installCrd,
  newNamespace,
  sleep,
  startOperator,
  waitFor,
} from "./harness.ts";
import { describe, quietWindowWrites } from "./audit.ts";
import { addTestNode, removeTestNode } from "./test_node.ts";

const AS = APPSERVICES as unknown as ResourceType;
/** More CPU than a kwok Node has (tests/cluster NODE_RESOURCES: 32), less than the test Node. */
const ON_TEST_NODE = { requests: { cpu: "40" } };
/** More CPU than any Node has: the scheduler cannot place the Pod. */
const NOWHERE = { requests: { cpu: "5000" } };
const IMAGE = "registry.invalid/team/app:1.0";

/** An events.k8s.io/v1 Event (the fields read here). */
interface Ev extends KubeObject {
  type?: string;
  reason?: string;
  note?: string;
  series?: { count?: number; lastObservedTime?: string };
  regarding?: { kind?: string; name?: string };
  related?: { kind?: string; name?: string };
}

/** What the test's kubelet reports for the one container, or the scheduler's decision. */
type KubeletState =
  | { waiting: string; message: string; last?: { reason: string; exitCode: number } }
  | { terminated: string; exitCode: number };
/** A kubelet state, or "scheduler" for a Pod that is never placed. */
type Kubelet = KubeletState | "scheduler";

const waiting = (
  reason: string,
  message: string,
  last?: { reason: string; exitCode: number },
): KubeletState => ({ waiting: reason, message, last });
const terminated = (reason: string, exitCode: number): KubeletState => ({
  terminated: reason,
  exitCode,
});

/**
 * One line per reason: AppService name, what the kubelet (or scheduler) says, and the text the
 * Ready condition's message must carry besides `<reason>: <pod>:`.
 */
const CASES: { name: string; reason: string; kubelet: Kubelet; says: string }[] = [
  {
    name: "pull-backoff",
    reason: "ImagePullBackOff",
    kubelet: waiting("ImagePullBackOff", `Back-off pulling image "${IMAGE}"`),
    says: `Back-off pulling image "${IMAGE}"`,
  },
  {
    name: "pull-err",
    reason: "ErrImagePull",
    kubelet: waiting("ErrImagePull", `failed to pull image "${IMAGE}": not found`),
    says: "not found",
  },
  {
    name: "bad-name",
    reason: "InvalidImageName",
    kubelet: waiting("InvalidImageName", `Failed to apply default image tag "${IMAGE}"`),
    says: "Failed to apply default image tag",
  },
  {
    name: "config",
    reason: "CreateContainerConfigError",
    kubelet: waiting("CreateContainerConfigError", 'secret "db-credentials" not found'),
    says: 'secret "db-credentials" not found',
  },
  {
    name: "crashloop",
    reason: "CrashLoopBackOff",
    kubelet: waiting("CrashLoopBackOff", "back-off 40s restarting failed container=app", {
      reason: "Error",
      exitCode: 1,
    }),
    says: "exit code 1",
  },
  {
    name: "oom",
    reason: "OOMKilled",
    kubelet: terminated("OOMKilled", 137),
    says: "exit code 137",
  },
  { name: "exit2", reason: "Error", kubelet: terminated("Error", 2), says: "exit code 2" },
  { name: "huge", reason: "Unschedulable", kubelet: "scheduler", says: "Insufficient cpu" },
];

/** The status a kubelet writes for a Pod whose one container is in `k`'s state. */
function kubeletStatus(pod: Pod, k: KubeletState, restartCount = 0): PodStatus {
  const now = new Date().toISOString();
  const cs: ContainerStatus = {
    name: "app",
    image: pod.spec!.containers[0].image!,
    imageID: "",
    ready: false,
    started: false,
    restartCount,
    state: "waiting" in k ? { waiting: { reason: k.waiting, message: k.message } } : {
      terminated: { reason: k.terminated, exitCode: k.exitCode, startedAt: now, finishedAt: now },
    },
  };
  if ("waiting" in k && k.last) {
    cs.lastState = {
      terminated: {
        reason: k.last.reason,
        exitCode: k.last.exitCode,
        startedAt: now,
        finishedAt: now,
      },
    };
  }
  const notReady = {
    status: "False",
    reason: "ContainersNotReady",
    message: "containers with unready status: [app]",
    lastTransitionTime: now,
  };
  return {
    phase: "waiting" in k && !k.last ? "Pending" : "Running",
    hostIP: "127.0.0.2",
    startTime: now,
    conditions: [
      { type: "PodScheduled", status: "True", lastTransitionTime: now },
      { type: "Initialized", status: "True", lastTransitionTime: now },
      { type: "Ready", ...notReady },
      { type: "ContainersReady", ...notReady },
    ],
    containerStatuses: [cs],
  };
}

/** Writes a kubelet status to a Pod (strategic merge on the status subresource, as the kubelet). */
async function setKubelet(
  c: KubeClient,
  ns: string,
  pod: string,
  k: KubeletState,
  restarts = 0,
) {
  const p = await c.get<Pod>(PODS, pod, { namespace: ns });
  await c.patch(PODS, pod, { status: kubeletStatus(p, k, restarts) }, {
    namespace: ns,
    subresource: "status",
    type: "strategic",
  });
}

/** The Ready condition of an AppService. */
const readyOf = (a: AppService) => a.status?.conditions?.find((x) => x.type === "Ready");

/** Warning Events about `as` in `ns`. */
async function warnings(c: KubeClient, ns: string): Promise<Ev[]> {
  return (await c.list<Ev>(EVENTS, { namespace: ns })).items.filter((e) =>
    e.type === "Warning" && e.regarding?.kind === "AppService"
  );
}

/** Runs the cluster's kubectl; returns stdout. */
async function kubectl(...args: string[]): Promise<string> {
  const info = await cluster();
  const out = await new Deno.Command(`${info.binDir}/kubectl`, {
    args: [`--kubeconfig=${info.kubeconfig}`, ...args],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stdout);
  if (!out.success) {
    throw new Error(`kubectl ${args.join(" ")}: ${new TextDecoder().decode(out.stderr)}`);
  }
  return text;
}

Deno.test("S18: the AppService names why a Pod is stuck (status, condition, Events, kubectl get)", async (t) => {
  await installCrd();
  const c = await admin();
  const ns = await newNamespace("s18");
  const node = `e2e-stuck-${ns.slice(-6)}`;
  // A Node kwok does not manage: this test is its kubelet.
  await addTestNode(c, node, "e2e-stuck", "127.0.0.2");
  const op = await startOperator();
  try {
    await op.waitReady();

    for (const k of CASES) {
      await c.create(
        AS,
        appService(ns, k.name, {
          image: IMAGE,
          resources: k.kubelet === "scheduler" ? NOWHERE : ON_TEST_NODE,
        }),
      );
    }
    await c.create(
      AS,
      appService(ns, "many", { image: IMAGE, replicas: 3, resources: ON_TEST_NODE }),
    );

    // The scheduler binds every Pod but the unschedulable one to the test's Node; then the
    // test's kubelet reports.
    const bound = async (pod: string) =>
      await waitFor(`${pod} bound to ${node}`, async () => {
        const p = await c.get<Pod>(PODS, pod, { namespace: ns });
        return p.spec?.nodeName === node ? p : undefined;
      }, 30_000);
    for (const k of CASES) {
      if (k.kubelet === "scheduler") continue;
      await bound(`${k.name}-0`);
      await setKubelet(
        c,
        ns,
        `${k.name}-0`,
        k.kubelet,
        "last" in k.kubelet && k.kubelet.last ? 4 : 0,
      );
    }
    for (const i of [0, 1, 2]) await bound(`many-${i}`);
    await setKubelet(c, ns, "many-2", CASES[4].kubelet as KubeletState, 4);
    await setKubelet(c, ns, "many-1", CASES[0].kubelet as KubeletState);
    await setKubelet(c, ns, "many-0", CASES[0].kubelet as KubeletState);

    for (const k of CASES) {
      await t.step(`${k.reason}: condition, podStatuses and a Warning Event name it`, async () => {
        const pod = `${k.name}-0`;
        const a = await waitFor(`${k.name} Ready=False reason ${k.reason}`, async () => {
          const x = await getAs(ns, k.name);
          return readyOf(x)?.reason === k.reason ? x : undefined;
        }, 30_000).catch(async (err) => {
          const x = await getAs(ns, k.name);
          throw new Error(`${err.message}\nstatus: ${JSON.stringify(x.status, null, 1)}`);
        });
        const ready = readyOf(a)!;
        assertEquals(ready.status, "False");
        assert(
          ready.message.startsWith(`${k.reason}: ${pod}: `) && ready.message.includes(k.says),
          `Ready message: ${ready.message}`,
        );
        const ps = a.status!.podStatuses!.find((p) => p.name === pod) as Record<string, unknown>;
        assertEquals(ps.reason, k.reason, JSON.stringify(ps));
        if (k.kubelet !== "scheduler") {
          // deno-lint-ignore no-explicit-any
          const cs = (ps.containers as any[])?.[0];
          assert(cs, `no container state in ${JSON.stringify(ps)}`);
          assertEquals(cs.name, "app");
          if ("waiting" in k.kubelet) {
            assertEquals(cs.state?.waiting?.reason, k.kubelet.waiting);
            assertEquals(cs.state?.waiting?.message, k.kubelet.message);
            if (k.kubelet.last) {
              assertEquals(cs.lastState?.terminated?.reason, k.kubelet.last.reason);
              assertEquals(cs.lastState?.terminated?.exitCode, k.kubelet.last.exitCode);
              assertEquals(cs.restartCount, 4);
            }
          } else {
            assertEquals(cs.state?.terminated?.reason, k.kubelet.terminated);
            assertEquals(cs.state?.terminated?.exitCode, k.kubelet.exitCode);
          }
        }
        const evs = await waitFor(`a Warning Event ${k.reason} for ${pod}`, async () => {
          const l = (await warnings(c, ns)).filter((e) =>
            e.reason === k.reason && e.related?.name === pod
          );
          return l.length > 0 ? l : undefined;
        }, 15_000);
        assertEquals(evs.length, 1, `Events: ${JSON.stringify(evs)}`);
        assert(evs[0].note?.includes(pod), `note: ${evs[0].note}`);
      });
    }

    await t.step("several stuck Pods: a stable choice (lowest ordinal) and a count", async () => {
      const a = await waitFor("many names ImagePullBackOff", async () => {
        const x = await getAs(ns, "many");
        return readyOf(x)?.reason === "ImagePullBackOff" ? x : undefined;
      }, 30_000);
      const msg = readyOf(a)!.message;
      assert(msg.startsWith("ImagePullBackOff: many-0: "), msg);
      assert(msg.includes("0/3"), `no count in: ${msg}`);
      assert(msg.includes("CrashLoopBackOff") && msg.includes("many-2"), msg);
    });

    await t.step("repeats are one Event per Pod and reason, series.count grows", async () => {
      const pod = "pull-backoff-0";
      const k = CASES[0].kubelet as KubeletState;
      const err = waiting("ErrImagePull", `failed to pull image "${IMAGE}": not found`);
      // The kubelet's cycle: ErrImagePull, back-off, pull again, back-off again.
      for (
        const [state, reason] of [[err, "ErrImagePull"], [k, "ImagePullBackOff"], [
          err,
          "ErrImagePull",
        ], [k, "ImagePullBackOff"]] as const
      ) {
        await setKubelet(c, ns, pod, state);
        await waitFor(`pull-backoff reports ${reason}`, async () => {
          const x = await getAs(ns, "pull-backoff");
          return readyOf(x)?.reason === reason;
        }, 15_000);
      }
      const series = await waitFor(
        "ImagePullBackOff series.count 3",
        async () => {
          const l = (await warnings(c, ns)).filter((e) => e.related?.name === pod);
          const back = l.filter((e) => e.reason === "ImagePullBackOff");
          return back.length === 1 && (back[0].series?.count ?? 1) >= 3 ? l : undefined;
        },
        30_000,
        1_000,
      ).catch(async (e) => {
        throw new Error(`${e.message}\n${JSON.stringify(await warnings(c, ns), null, 1)}`);
      });
      const byReason = Object.groupBy(series, (e) => e.reason ?? "");
      assertEquals(Object.keys(byReason).sort(), ["ErrImagePull", "ImagePullBackOff"]);
      assertEquals(byReason.ErrImagePull!.length, 1, "one ErrImagePull Event object");
      assert(
        (byReason.ErrImagePull![0].series?.count ?? 1) >= 2,
        JSON.stringify(byReason.ErrImagePull),
      );
      console.log(
        `S18: ${pod}: ImagePullBackOff series.count ${
          byReason.ImagePullBackOff![0].series?.count
        }, ` +
          `ErrImagePull series.count ${byReason.ErrImagePull![0].series?.count}`,
      );
    });

    await t.step("kubectl get as shows the reason; kubectl describe as reads well", async () => {
      const table = await kubectl("get", "as", "-n", ns);
      console.log(`kubectl get as -n ${ns}\n${table}`);
      const header = table.split("\n")[0];
      assert(/\bREASON\b/.test(header), `no REASON column: ${header}`);
      for (const k of CASES) {
        const row = table.split("\n").find((l) => l.startsWith(`${k.name} `));
        assert(row?.includes(k.reason), `row of ${k.name}: ${row}`);
      }
      const described = await kubectl("describe", "as", "-n", ns, "crashloop");
      console.log(`kubectl describe as -n ${ns} crashloop\n${described}`);
      assert(described.includes("CrashLoopBackOff"), described);
      // The Event series shows as "(xN over ...)".
      const pulling = await kubectl("describe", "as", "-n", ns, "pull-backoff");
      console.log(`kubectl describe as -n ${ns} pull-backoff\n${pulling}`);
      assert(/ImagePullBackOff.*\(x[3-9] over/.test(pulling), pulling);
    });

    await t.step("stuck and unchanged: the operator writes nothing (S9)", async () => {
      await sleep(12_000); // the last Event series update goes out within its bound
      const since = Date.now();
      await sleep(20_000);
      // Positive control: a new AppService the operator must act on, seen by the same filter.
      const writes = await quietWindowWrites(
        since,
        () => c.create(AS, appService(ns, "control-s9", { image: "nginx:1.27" })),
        { namespace: ns },
      );
      assertEquals(writes.length, 0, `writes while nothing changed:\n${describe(writes)}`);
    });
  } finally {
    const code = await op.stop();
    await removeTestNode(c, ns, node);
    await dropNamespace(ns);
    assertEquals(code, 0, op.stderr().slice(-3000));
  }
});
