/**
 * S25: the initial list is paged and etcd is compacted before its last page. A second
 * kube-apiserver without a watch cache (`--watch-cache=false`: every list, paged or not, is read
 * from etcd, so a continue token lives only as long as its snapshot's revision) serves the
 * operator; 1,100 PodDisruptionBudgets with the operator's label make its PDB informer's list
 * three pages of 500 (the default page size); while the operator starts, the test writes a
 * ConfigMap and compacts etcd to the current revision every ~20 ms, so a later page finds its
 * continue token expired (410). Before: every list started again at page 1, died again on a
 * later page, and the operator never became ready. Now the list falls back to one full list (as
 * client-go's pager does) and completes.
 *
 * Everything on 127.0.0.1; every wait and loop bounded; the test stops what it started.
 */
import { MESSAGES } from "../../lib/runtime/messages.ts";
import { assert, assertEquals } from "../assert.ts";
import { ApiError, isGone } from "../../lib/kube/errors.ts";
import type { KubeObject } from "../../lib/kube/client.ts";
import { CONFIGMAPS, PODDISRUPTIONBUDGETS, type ResourceType } from "../../lib/kube/resources.ts";
import { type AppService, APPSERVICES } from "../../lib/appservice/schema.ts";
import { compactEtcd } from "../cluster/cluster.ts";
import { type SecondApiserver, startSecondApiserver } from "./apiserver2.ts";
import {
  admin,
  appService,
  cluster,
  dropNamespace,
  getAs,
  installCrd,
  kubeconfigFor,
  logsOf,
  newNamespace,
  type Operator,
  sleep,
  startOperator,
  waitFor,
} from "./harness.ts";

const AS = APPSERVICES as unknown as ResourceType;
/** Three pages at the operator's page size (500). */
const PDBS = 1_100;

Deno.test({
  name: "S25: a paged list whose continue token expires mid-list is completed (full list)",
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    const info = await cluster();
    await installCrd();
    const c = await admin();
    const ns = await newNamespace("s25");
    const dir = await Deno.makeTempDir({ prefix: "s25-" });
    let second: SecondApiserver | undefined;
    let op: Operator | undefined;
    let stop = false;
    let churn: Promise<number> | undefined;
    try {
      // 1,100 PDBs with the operator's label (selecting nothing), 25 requests at a time.
      for (let i = 0; i < PDBS; i += 25) {
        await Promise.all(
          Array.from({ length: Math.min(25, PDBS - i) }, (_, j) =>
            c.create(PODDISRUPTIONBUDGETS, {
              apiVersion: "policy/v1",
              kind: "PodDisruptionBudget",
              metadata: {
                name: `pdb-${i + j}`,
                namespace: ns,
                labels: { "app.kubernetes.io/managed-by": "appservice-operator" },
              },
              spec: { maxUnavailable: 1, selector: { matchLabels: { none: `s25-${i + j}` } } },
            } as KubeObject)),
        );
      }
      await c.create(CONFIGMAPS, {
        apiVersion: "v1",
        kind: "ConfigMap",
        metadata: { name: "churn", namespace: ns },
        data: { i: "0" },
      } as KubeObject);
      second = await startSecondApiserver(info, {
        logFile: `${dir}/kube-apiserver-2.log`,
        extraArgs: ["--watch-cache=false"],
      });
      const bump = (i: number) =>
        c.patch(CONFIGMAPS, "churn", { data: { i: String(i) } }, { namespace: ns });

      // The fault exists: on this apiserver a continue token used after a write and a compaction
      // is answered 410.
      const first = await second.client.list(PODDISRUPTIONBUDGETS, { namespace: ns, limit: 500 });
      assert(first.metadata?.continue, "the first page of 500 has a continue token");
      await bump(-1);
      await compactEtcd(info);
      let expired: unknown;
      try {
        await second.client.list(PODDISRUPTIONBUDGETS, {
          namespace: ns,
          limit: 500,
          continue: first.metadata!.continue,
        });
      } catch (err) {
        expired = err;
      }
      assert(
        expired instanceof ApiError && isGone(expired),
        `a continue token after compaction is answered 410; got ${String(expired)}`,
      );

      // Churn: a write and a compaction to the current revision about every 20 ms.
      churn = (async () => {
        let n = 0;
        for (let i = 0; i < 20_000 && !stop; i++) {
          await bump(i);
          await compactEtcd(info);
          n++;
          await sleep(15);
        }
        return n;
      })();
      const kubeconfig = await kubeconfigFor(second.server, dir);
      op = await startOperator([`--kubeconfig=${kubeconfig}`]);
      // Bounded: before, the operator never became ready while the churn went on.
      await op.waitReady(90_000);
      const logs = op.logs();
      const expiredLines = logsOf(op, MESSAGES.listContinueExpired);
      assert(
        expiredLines.length >= 1,
        `the compaction caught a paged list mid-way (a fallback logged); logs: ${
          JSON.stringify(logs.slice(-20))
        }`,
      );
      const pdbListed = logsOf(op, MESSAGES.listed).filter((l) =>
        l.properties?.resource === "poddisruptionbudgets"
      );
      assert(pdbListed.length >= 1, "the PDB informer listed");
      assert(
        Number(pdbListed.at(-1)!.properties!.items) >= PDBS,
        `the PDB list holds every PDB: ${JSON.stringify(pdbListed.at(-1))}`,
      );
      stop = true;
      const rounds = await churn;
      churn = undefined;
      assert(rounds > 0, "the churn ran");
      console.log(
        `S25: ${rounds} compactions; fallbacks logged: ${expiredLines.length}; ` +
          `PDB list lines: ${pdbListed.length}`,
      );

      // And the operator works: an AppService created now converges.
      await c.create(AS, appService(ns, "web", { image: "nginx:1.27", replicas: 1 }));
      await waitFor("AppService web Ready", async () => {
        const a: AppService = await getAs(ns, "web");
        return a.status?.ready === true && a.status.readyReplicas === 1;
      }, 90_000);
      assertEquals((await getAs(ns, "web")).status?.readyReplicas, 1);
    } finally {
      stop = true;
      await churn?.catch(() => 0);
      await op?.stop("SIGTERM", 20_000);
      await second?.stop();
      await dropNamespace(ns);
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    }
  },
});
