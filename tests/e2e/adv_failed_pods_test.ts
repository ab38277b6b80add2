/**
 * A Pod that keeps failing is replaced with growing delay, not in a hot loop.
 *
 * With `restartPolicy: Never` (or a Pod the kubelet or an eviction fails), the kubelet does not
 * restart the container: the Pod ends `Failed` and the operator replaces it. An app that exits
 * with an error at start made the operator delete and re-create its Pod as fast as the kubelet
 * failed it — 44 Pods and 89 Events in 30 s on the local control plane, and a status that showed
 * `AllReplicasReady` between two failures. A user expects what the kubelet does for a crashing
 * container (CrashLoopBackOff): the first replacement at once, then 10 s, doubling up to 5 min; the
 * Failed Pod kept meanwhile (its logs and `kubectl describe` stay readable); `Degraded` saying how
 * often it failed and when the next attempt goes; and recovery by itself once the app starts.
 *
 * The test plays the failing kubelet: every Pod of the AppService that kwok reports Running is
 * set Failed (container terminated with reason Error, exit code 1), until told to stop.
 */
import type { Pod } from "kubernetes-types/core/v1.d.ts";
import { assert, assertEquals } from "../assert.ts";
import { PODS, type ResourceType } from "../../lib/kube/resources.ts";
import { APPSERVICES } from "../../lib/appservice/schema.ts";
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

const AS = APPSERVICES as unknown as ResourceType;
/** How long the app keeps failing (ms). */
const FAILING_FOR_MS = 45_000;

Deno.test("a Pod that keeps failing (restartPolicy Never) is replaced with growing delay", async () => {
  await installCrd();
  const c = await admin();
  const ns = await newNamespace("adv-fail");
  const op = await startOperator();
  const created = new Set<string>();
  let failing = true;
  let failedByKubelet = 0;
  const kubelet = (async () => {
    // Bounded: at most one pass every 200 ms for the length of the test.
    for (let i = 0; i < 2_000 && failing; i++) {
      const pods = await c.list<Pod>(PODS, {
        namespace: ns,
        labelSelector: "app.kubernetes.io/instance=crash",
      }).catch(() => ({ items: [] as Pod[] }));
      for (const p of pods.items) {
        created.add(p.metadata!.uid!);
        if (p.status?.phase !== "Running" || p.metadata?.deletionTimestamp) continue;
        const now = new Date().toISOString();
        await c.patch(PODS, p.metadata!.name!, {
          metadata: { uid: p.metadata!.uid },
          status: {
            phase: "Failed",
            conditions: [{
              type: "Ready",
              status: "False",
              reason: "PodFailed",
              lastTransitionTime: now,
            }],
            containerStatuses: [{
              name: "app",
              image: p.spec!.containers[0].image!,
              imageID: "",
              ready: false,
              restartCount: 0,
              state: {
                terminated: { exitCode: 1, reason: "Error", startedAt: now, finishedAt: now },
              },
            }],
          },
        }, { namespace: ns, subresource: "status", type: "merge" }).then(
          () => failedByKubelet++,
          () => {},
        );
      }
      await sleep(200);
    }
  })();
  try {
    await op.waitReady();
    const start = Date.now();
    await c.create(
      AS,
      appService(ns, "crash", { image: "busybox:1.36", restartPolicy: "Never" }),
    );
    // Meanwhile the status should say that it keeps failing and when it is tried again.
    const said = new Set<string>();
    let readyTrueSeen = 0;
    for (let i = 0; i < 1_000 && Date.now() < start + FAILING_FOR_MS; i++) {
      const a = await getAs(ns, "crash");
      const d = a.status?.conditions?.find((x) => x.type === "Degraded");
      if (d?.status === "True") said.add(`${d.reason}: ${d.message}`);
      if (a.status?.ready === true) readyTrueSeen++;
      await sleep(500);
    }
    failing = false;
    await kubelet;
    console.log(
      `${created.size} Pods created and ${failedByKubelet} failed in ${FAILING_FOR_MS / 1000} s; ` +
        `ready=true seen ${readyTrueSeen} times; Degraded said:\n${[...said].join("\n")}`,
    );
    // Immediate, +10 s, +20 s, +40 s: 4 Pods in 45 s (a little slack for timing).
    assert(created.size <= 6, `${created.size} Pods created in ${FAILING_FOR_MS / 1000} s`);
    assert(created.size >= 3, `only ${created.size} Pods: the failed Pod was not replaced`);
    assert(
      [...said].some((m) =>
        m.startsWith("PodFailed: ") && m.includes("crash-0") && /next in \d+ s/.test(m)
      ),
      "Degraded never said that crash-0 keeps failing and when it is tried again",
    );

    // The app starts now: the next replacement (at most the current delay away) is Ready.
    await waitFor("crash Ready after the app stopped failing", async () => {
      const a = await getAs(ns, "crash");
      return a.status?.ready === true &&
        a.status.conditions?.find((x) => x.type === "Degraded")?.status === "False";
    }, 90_000);
  } finally {
    failing = false;
    await kubelet;
    const code = await op.stop();
    await dropNamespace(ns);
    assertEquals(code, 0, op.stderr().slice(-3000));
  }
});
