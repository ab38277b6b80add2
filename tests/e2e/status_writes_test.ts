/**
 * One status write on the way to Ready (docs/design/status.md, "One write on the way to Ready"):
 * a step of a healthy rollout (`Progressing` Creating, WaitingForReady, ...) is held for at most
 * `ROLLOUT_STEP_HOLD_MS` waiting for the next one, so an AppService whose Pods become Ready within
 * that bound gets one status write, with the final status; a step that lasts longer is written when
 * the bound expires (the user sees it that late at most), then the final status.
 *
 * Readiness is the test's: it plays the kubelet of a Node kwok does not manage (as rollout_test.ts
 * does); the AppServices request an extended resource only that Node offers. Pods of image tag
 * `fast` are reported Ready {@link FAST_READY_MS} after they are bound, `slow` ones after
 * {@link SLOW_READY_MS}. Status writes are counted in the apiserver's audit log.
 *
 * Pods of tag `late` wait for their Node longer than the hold (a kube-scheduler behind a burst):
 * a MutatingAdmissionPolicy of the test gives them a scheduler name nobody serves, and the test
 * binds them {@link LATE_BIND_MS} after their create (`pods/<name>/binding`, as a scheduler does).
 * The hold runs from the binding (`ROLLOUT_STEP_MAX_HOLD_MS`), so they too cost one write.
 */
import type { Pod } from "kubernetes-types/core/v1.d.ts";
import { assert, assertEquals } from "../assert.ts";
import type { KubeClient, KubeObject } from "../../lib/kube/client.ts";
import { PODS, type ResourceType } from "../../lib/kube/resources.ts";
import { type AppService, APPSERVICES } from "../../lib/appservice/schema.ts";
import { ROLLOUT_STEP_HOLD_MS } from "../../lib/appservice/status.ts";
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
import { type AuditEvent, describe, operatorWrites, receivedMs } from "./audit.ts";
import { mutationPolicy } from "./resources.ts";
import { addTestNode, removeTestNode, runTestKubelet } from "./test_node.ts";

const AS = APPSERVICES as unknown as ResourceType;
/** An extended resource only the test's Node offers. */
const TEST_RESOURCE = "e2e.example.com/status-writes";
/** Bound to Ready for `fast` Pods (ms): well inside the hold. */
const FAST_READY_MS = 200;
/** Bound to Ready for `slow` Pods (ms): well past the hold. */
const SLOW_READY_MS = ROLLOUT_STEP_HOLD_MS + 4_000;
/** Create to binding for `late` Pods (ms): past the hold, well inside the longest hold. */
const LATE_BIND_MS = ROLLOUT_STEP_HOLD_MS + 2_000;
/** The scheduler name given to `late` Pods: no scheduler serves it; the test binds them. */
const LATE_SCHEDULER = "e2e-late-binder";
/** Slack for scheduling and the apiserver on a loaded machine (ms). */
const SLACK_MS = 2_000;

/**
 * Gives Pods of tag `late` created in `ns` the scheduler name {@link LATE_SCHEDULER} (a
 * MutatingAdmissionPolicy and its binding, both named `name`), once in force. Returns a function
 * that deletes both.
 */
function lateSchedulerPolicy(
  c: KubeClient,
  ns: string,
  name: string,
): Promise<() => Promise<void>> {
  return mutationPolicy(c, name, ns, {
    resources: ["pods"],
    operations: ["CREATE"],
    matchCondition: 'object.spec.containers.exists(c, c.image.endsWith(":late"))',
    applyConfiguration: `Object{spec: Object.spec{schedulerName: "${LATE_SCHEDULER}"}}`,
    probe: {
      apiVersion: "v1",
      kind: "Pod",
      metadata: { generateName: "probe-" },
      spec: { containers: [{ name: "c", image: "registry.invalid/probe:late" }] },
    },
    inForce: (p) => p.spec?.schedulerName === LATE_SCHEDULER,
  });
}

/**
 * Plays a scheduler that lags: binds each Pod of `ns` whose scheduler is {@link LATE_SCHEDULER}
 * to `node` once it is {@link LATE_BIND_MS} old (by its creationTimestamp, whole seconds, and the
 * time this loop first saw it), until `signal`. Returns when each Pod was bound (ms, by name).
 */
async function runLateBinder(
  c: KubeClient,
  ns: string,
  node: string,
  signal: AbortSignal,
): Promise<Map<string, number>> {
  const firstSeen = new Map<string, number>();
  const bound = new Map<string, number>();
  while (!signal.aborted) {
    const pods = await c.list<Pod>(PODS, { namespace: ns }).catch(() => ({ items: [] as Pod[] }));
    const now = Date.now();
    for (const p of pods.items) {
      const name = p.metadata!.name!;
      if (p.spec?.schedulerName !== LATE_SCHEDULER || p.spec.nodeName || bound.has(name)) continue;
      if (!firstSeen.has(name)) firstSeen.set(name, now);
      if (now - firstSeen.get(name)! < LATE_BIND_MS) continue;
      await c.create(PODS, {
        apiVersion: "v1",
        kind: "Binding",
        metadata: { name, namespace: ns },
        target: { apiVersion: "v1", kind: "Node", name: node },
      } as KubeObject, { subresource: "binding", response: "none" })
        .then(() => bound.set(name, Date.now()), () => {});
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return bound;
}

/** The operator's status writes of AppService `name` in `ns` since `sinceMs`, oldest first. */
async function statusWrites(sinceMs: number, ns: string, name: string): Promise<AuditEvent[]> {
  return (await operatorWrites(sinceMs, ns))
    .filter((e) =>
      e.objectRef?.resource === "appservices" && e.objectRef.subresource === "status" &&
      e.objectRef.name === name
    )
    .sort((a, b) => receivedMs(a) - receivedMs(b));
}

Deno.test("status: one write on the way to Ready; a longer step is written when its hold expires", async () => {
  await installCrd();
  const c = await admin();
  const ns = await newNamespace("status-writes");
  const node = `e2e-status-${ns.slice(-6)}`;
  await addTestNode(c, node, "e2e-status", "127.0.0.4", { [TEST_RESOURCE]: "100" });
  const kubeletStop = new AbortController();
  const kubelet = runTestKubelet(c, ns, node, kubeletStop.signal, {
    readyAfterMs: (pod) =>
      pod.spec!.containers[0].image!.endsWith(":slow") ? SLOW_READY_MS : FAST_READY_MS,
    terminationMs: 100,
  });
  const removePolicy = await lateSchedulerPolicy(c, ns, `e2e-late-${ns}`);
  const binderStop = new AbortController();
  const binder = runLateBinder(c, ns, node, binderStop.signal);
  const op = await startOperator();
  try {
    await op.waitReady();
    const spec = (tag: string, replicas: number) => ({
      image: `registry.invalid/team/app:${tag}`,
      replicas,
      resources: { requests: { [TEST_RESOURCE]: "1" }, limits: { [TEST_RESOURCE]: "1" } },
    });
    const t0 = Date.now();
    await c.create(AS, appService(ns, "fast", spec("fast", 2)));
    await c.create(AS, appService(ns, "slow", spec("slow", 1)));
    await c.create(AS, appService(ns, "late", spec("late", 2)));
    const created = Date.now();
    for (const name of ["fast", "slow", "late"]) {
      await waitFor(`${name} Ready`, async () => (await getAs(ns, name)).status?.ready, 60_000);
    }
    // Settled: a write after Ready would show here (the hold's timer fires after it).
    await new Promise((r) => setTimeout(r, ROLLOUT_STEP_HOLD_MS + 1_000));

    // Pods Ready within the hold: one status write, and it is the final status.
    const fast = await statusWrites(t0, ns, "fast");
    assertEquals(fast.length, 1, `status writes of fast:\n${describe(fast)}`);
    const fastNow = await getAs(ns, "fast");
    assert(fastNow.status?.ready === true, JSON.stringify(fastNow.status));

    // A step longer than the hold: written when the hold expires, then the final status. This
    // is also the control that the audit filter sees status writes at all.
    const slow = await statusWrites(t0, ns, "slow");
    assertEquals(slow.length, 2, `status writes of slow:\n${describe(slow)}`);
    const stepAfterMs = receivedMs(slow[0]) - created;
    console.log(
      `fast: ${fast.length} status write; slow: first write ${Math.round(stepAfterMs)} ms after ` +
        `the create (hold ${ROLLOUT_STEP_HOLD_MS} ms), ${slow.length} in all`,
    );
    assert(
      stepAfterMs >= ROLLOUT_STEP_HOLD_MS - 100 && stepAfterMs <= ROLLOUT_STEP_HOLD_MS + SLACK_MS,
      `the held step was written ${stepAfterMs} ms after the create`,
    );
    assert(
      receivedMs(slow[0]) < receivedMs(slow[1]) &&
        receivedMs(slow[1]) - created >= SLOW_READY_MS - 100,
      "the step was written before the Pod was Ready",
    );
    const slowNow: AppService = await getAs(ns, "slow");
    assert(slowNow.status?.ready === true, JSON.stringify(slowNow.status));

    // Pods bound past the hold (a lagging scheduler), Ready soon after: the hold runs from the
    // binding, so one write, the final status. The positive control is `slow` above: a step that
    // outlasts its hold is written.
    binderStop.abort();
    const boundAt = await binder;
    assertEquals(boundAt.size, 2, "the test bound both late Pods");
    const firstBind = Math.min(...boundAt.values());
    const late = await statusWrites(t0, ns, "late");
    console.log(
      `late: bound ${Math.round(firstBind - created)} ms after the create, ${late.length} ` +
        `status write(s)`,
    );
    assert(firstBind - created > ROLLOUT_STEP_HOLD_MS, "the Pods were bound after the hold");
    assertEquals(late.length, 1, `status writes of late:\n${describe(late)}`);
    assert((await getAs(ns, "late")).status?.ready === true, "late Ready");
  } finally {
    const code = await op.stop();
    binderStop.abort();
    await binder;
    await removePolicy();
    kubeletStop.abort();
    await kubelet;
    await removeTestNode(c, ns, node);
    await dropNamespace(ns);
    assertEquals(code, 0, "operator exit code");
  }
});
