/**
 * S24 (docs/scenarios.md), status writes: a status write computed from an AppService older than
 * the newest one is answered 409 Conflict and redone. After a scaling the reconciler wrote status
 * and, woken by its Pods' watch events, computed the next status from the cached AppService that
 * its own write had already replaced (its watch event not yet delivered): 409. Here: 20 scalings,
 * each awaited as a user would (the new count Ready, no Pod left terminating), and the
 * apiserver's audit log must show no 409 on `appservices/status`, and few status writes per
 * scaling.
 */
import { assert, assertEquals } from "../assert.ts";
import type { ResourceType } from "../../lib/kube/resources.ts";
import { APPSERVICES } from "../../lib/appservice/schema.ts";
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
import { operatorWrites } from "./audit.ts";

const AS = APPSERVICES as unknown as ResourceType;
/** Scalings made. */
const SCALINGS = 20;

Deno.test("S24: 20 scalings cause no 409 on status writes", async () => {
  await installCrd();
  const c = await admin();
  const ns = await newNamespace("s24s");
  const op = await startOperator();
  try {
    await op.waitReady();
    await c.create(AS, appService(ns, "scaled", { image: "nginx:1.27", replicas: 1 }));
    const settled = async (n: number) =>
      await waitFor(`scaled: ${n} Ready`, async () => {
        const a = await getAs(ns, "scaled");
        // Settled as the operator sees it: no Pod left terminating, so no status write of the
        // operator is due when the next scaling lands. A scaling that lands during such a write
        // is refused with 409 by design (the write's resourceVersion precondition, S13): that
        // is a real race with the user, not the operator reading its own stale cache.
        return a.status?.observedGeneration === a.metadata.generation && a.status?.ready &&
          a.status.readyReplicas === n && a.status.replicas === n &&
          a.status.podStatuses?.length === n;
      }, 30_000);
    await settled(1);
    const since = Date.now();
    const sizes = [3, 1, 4, 2, 5, 1, 2, 3, 1, 4, 2, 5, 3, 1, 2, 4, 1, 3, 2, 1];
    assertEquals(sizes.length, SCALINGS);
    for (const n of sizes) {
      await c.patch(AS, "scaled", { spec: { replicas: n } }, { namespace: ns });
      await settled(n);
    }
    const writes = (await operatorWrites(since, ns)).filter((e) =>
      e.objectRef?.resource === "appservices" && e.objectRef.subresource === "status"
    );
    const conflicts = writes.filter((e) => e.responseStatus?.code === 409);
    console.log(
      `S24: ${SCALINGS} scalings: ${writes.length} status writes, ${conflicts.length} answered 409`,
    );
    // Positive control: the scalings were written (each changes the counts).
    assert(writes.length >= SCALINGS, `only ${writes.length} status writes seen`);
    assertEquals(conflicts.length, 0, `${conflicts.length} status writes answered 409`);
  } finally {
    const code = await op.stop();
    await dropNamespace(ns);
    assertEquals(code, 0, op.stderr().slice(-3000));
  }
});
