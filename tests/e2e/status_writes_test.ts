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
 */
import { assert, assertEquals } from "../assert.ts";
import type { ResourceType } from "../../lib/kube/resources.ts";
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
import { addTestNode, removeTestNode, runTestKubelet } from "./test_node.ts";

const AS = APPSERVICES as unknown as ResourceType;
/** An extended resource only the test's Node offers. */
const TEST_RESOURCE = "e2e.example.com/status-writes";
/** Bound to Ready for `fast` Pods (ms): well inside the hold. */
const FAST_READY_MS = 200;
/** Bound to Ready for `slow` Pods (ms): well past the hold. */
const SLOW_READY_MS = ROLLOUT_STEP_HOLD_MS + 4_000;
/** Slack for scheduling and the apiserver on a loaded machine (ms). */
const SLACK_MS = 2_000;

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
    const created = Date.now();
    for (const name of ["fast", "slow"]) {
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
  } finally {
    const code = await op.stop();
    kubeletStop.abort();
    await kubelet;
    await removeTestNode(c, ns, node);
    await dropNamespace(ns);
    assertEquals(code, 0, "operator exit code");
  }
});
