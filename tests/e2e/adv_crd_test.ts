/**
 * Adversarial: the CRD changed while the operator runs, as an upgrade of the CRD does (a new
 * served version, a new printer column): the apiserver rebuilds the resource's storage and ends
 * the watches on it.
 *
 * What a user expects: nothing to notice. The operator stays ready, resumes its watch, and a
 * change made right after the CRD update is reconciled within seconds.
 */
import { assert } from "../assert.ts";
import type { KubeObject } from "../../lib/kube/client.ts";
import { CRDS } from "../../lib/kube/resources.ts";
import { APPSERVICES } from "../../lib/appservice/schema.ts";
import {
  admin,
  appService,
  dropNamespace,
  getAs,
  installCrd,
  logsOf,
  newNamespace,
  type Operator,
  sleep,
  startOperator,
  waitFor,
} from "./harness.ts";

const AS = APPSERVICES as never;
const CRD_NAME = "appservices.apps.our-org.com";
/** A change made after the CRD update is reconciled within this (ms). */
const RECONCILED_WITHIN_MS = 15_000;

type Crd = KubeObject & {
  spec: {
    versions: (Record<string, unknown> & {
      name: string;
      storage: boolean;
      additionalPrinterColumns?: unknown[];
    })[];
  };
};

Deno.test("adv crd: the CRD updated at runtime (new served version, new column) — ready, watching, reconciling", async () => {
  await installCrd();
  const c = await admin();
  const ns = await newNamespace("advcrd");
  let op: Operator | undefined;
  let notReady = 0;
  let polling = true;
  let poller: Promise<void> = Promise.resolve();
  try {
    op = await startOperator([`--watch-namespace=${ns}`]);
    await op.waitReady();
    await c.create(AS, appService(ns, "one", { image: "nginx:1.27" }));
    await waitFor("one Ready", async () => (await getAs(ns, "one")).status?.ready, 60_000);
    poller = (async () => {
      for (let i = 0; polling && i < 10_000; i++) {
        if ((await op!.readyz().catch(() => ({ status: 0 }))).status !== 200) notReady++;
        await sleep(250);
      }
    })();

    for (let round = 1; round <= 2; round++) {
      const crd = await c.get<Crd>(CRDS, CRD_NAME);
      const v1 = crd.spec.versions.find((v) => v.name === "v1")!;
      if (round === 1) {
        // A new served version (same schema, no conversion needed), not the storage version.
        crd.spec.versions.push({ ...structuredClone(v1), name: "v1beta1", storage: false });
      } else {
        v1.additionalPrinterColumns = [
          ...(v1.additionalPrinterColumns ?? []),
          { name: "Restart", type: "string", jsonPath: ".spec.restartPolicy" },
        ];
      }
      await c.update(CRDS, crd);
      const at = Date.now();
      await c.patch(AS, "one", { spec: { replicas: round + 1 } }, { namespace: ns });
      await c.create(AS, appService(ns, `new-${round}`, { image: "nginx:1.27" }));
      await waitFor(
        `round ${round}: both reconciled`,
        async () => {
          const one = await getAs(ns, "one");
          const added = await getAs(ns, `new-${round}`);
          return one.status?.replicas === round + 1 && one.status.ready && added.status?.ready;
        },
        60_000,
        100,
      );
      const ms = Date.now() - at;
      console.log(`round ${round}: reconciled ${ms / 1000} s after the CRD update`);
      assert(ms <= RECONCILED_WITHIN_MS, `reconciled ${ms} ms after the CRD update`);
    }
    polling = false;
    await poller;
    const failed = logsOf(op, "Watch failed").length + logsOf(op, "List failed").length;
    console.log(`not-ready answers: ${notReady}; watch/list failures logged: ${failed}`);
    assert(notReady === 0, `/readyz said not ready ${notReady} times`);
  } finally {
    polling = false;
    await poller;
    await op?.stop("SIGTERM", 20_000);
    await dropNamespace(ns);
    // Back to the committed CRD (v1beta1 was never a storage version, so it may go).
    const crd = await c.get<Crd>(CRDS, CRD_NAME);
    crd.spec.versions = crd.spec.versions.filter((v) => v.name === "v1");
    await c.update(CRDS, crd);
    await installCrd();
  }
});
