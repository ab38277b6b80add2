/**
 * Issue 25, logs that say what happened: a 3 s apiserver outage while 8 workers are busy costs one
 * warning line, not one per failed reconcile. Before, a 2.6 s restart of the apiserver logged 144
 * `Reconciler error ... tcp connect error` lines.
 *
 * The operator reaches the apiserver through a loopback {@link TcpProxy}, runs 8 workers and leads
 * through a Lease (renewed every 2 s, so at least one renewal fails in the outage). The
 * test creates 40 AppServices (2 Pods each) and, as soon as the operator is creating their Pods,
 * cuts the proxy for 3 s (every connection closed, new ones closed at once), then forwards again.
 * - One WARN/ERROR line names the failure to reach the apiserver (whoever failed first: a
 *   reconcile, a watch, an Event), and one line says the connection recovered.
 * - Positive control: the outage did fail reconciles (`controller_runtime_reconcile_errors_total`
 *   rose), and every AppService converges after it.
 *
 * Everything on 127.0.0.1; every wait bounded; the test stops what it started.
 */
import type { Pod } from "kubernetes-types/core/v1.d.ts";
import { assert, assertEquals } from "../assert.ts";
import { PODS, type ResourceType } from "../../lib/kube/resources.ts";
import { type AppService, APPSERVICES } from "../../lib/appservice/schema.ts";
import {
  admin,
  appService,
  dropNamespace,
  installCrd,
  kubeconfigFor,
  logsOf,
  metricSum,
  newNamespace,
  type Operator,
  sleep,
  startOperator,
  waitFor,
} from "./harness.ts";
import { TcpProxy } from "./proxy.ts";
import { MESSAGES } from "../../lib/runtime/messages.ts";

const AS = APPSERVICES as unknown as ResourceType;
const COUNT = 40;
const OUTAGE_MS = 3_000;
/** What a line about the path to the apiserver says (the errors Deno and the client give). */
const CONNECTION_TEXT =
  /cannot reach|unreachable|no answer|connection|connect error|error sending request|reading a body|tls|eof/i;

Deno.test("outage: a 3 s apiserver outage with 8 busy workers is one log line", async () => {
  await installCrd();
  const c = await admin();
  const ns = await newNamespace("outage");
  const dir = await Deno.makeTempDir({ prefix: "outage-" });
  const proxy = TcpProxy.start(c.config.server);
  let op: Operator | undefined;
  try {
    const kubeconfig = await kubeconfigFor(`https://127.0.0.1:${proxy.port}`, dir);
    // With leader election, as deploy/ runs it: the Lease's renewals fail in the outage too.
    op = await startOperator([
      `--kubeconfig=${kubeconfig}`,
      "--max-concurrent-reconciles=8",
      "--leader-elect",
      `--leader-election-namespace=${ns}`,
      "--leader-election-id=outage",
    ]);
    await op.waitReady(60_000);
    await waitFor("leading", () => logsOf(op!, MESSAGES.acquiredLease).length > 0, 30_000);
    const errorsBefore = metricSum(await op.metrics(), "controller_runtime_reconcile_errors_total");

    await Promise.all(
      Array.from(
        { length: COUNT },
        (_, i) => c.create(AS, appService(ns, `app-${i}`, { image: "nginx:1.27", replicas: 2 })),
      ),
    );
    // The operator is at work: its first Pods exist.
    await waitFor(
      "the operator creating Pods",
      async () => {
        const l = await c.list<Pod>(PODS, { namespace: ns, limit: 1 });
        return l.items.length > 0;
      },
      30_000,
      20,
    );
    const logsAtCut = op.logs().length;
    proxy.cut();
    await sleep(OUTAGE_MS);
    proxy.resume();

    await waitFor(
      `${COUNT} AppServices Ready`,
      async () => {
        const l = await c.list<AppService>(AS, { namespace: ns });
        const ready = l.items.filter((a) =>
          a.status?.ready === true && a.status.readyReplicas === 2 &&
          a.status.observedGeneration === a.metadata.generation
        );
        return ready.length === COUNT;
      },
      180_000,
      500,
    );

    const errorsAfter = metricSum(await op.metrics(), "controller_runtime_reconcile_errors_total");
    const after = op.logs().slice(logsAtCut);
    const loud = after.filter((l) => /^(WARN|WARNING|ERROR|FATAL)$/i.test(String(l.level)));
    const aboutConnection = loud.filter((l) => CONNECTION_TEXT.test(JSON.stringify(l)));
    const recovered = after.filter((l) => l.message === "Connection to the apiserver recovered");
    console.log(
      `outage: reconcile errors ${errorsBefore} -> ${errorsAfter}; WARN/ERROR lines ${loud.length} ` +
        `(about the connection ${aboutConnection.length}); recovered lines ${recovered.length}`,
    );
    for (const l of loud.slice(0, 10)) console.log(`  ${JSON.stringify(l).slice(0, 300)}`);
    // Positive control: the outage failed reconciles.
    assert(
      errorsAfter - errorsBefore >= 8,
      `the outage failed reconciles (${errorsBefore} -> ${errorsAfter})`,
    );
    assertEquals(
      aboutConnection.length,
      1,
      `one WARN/ERROR line about the outage; got ${aboutConnection.length}`,
    );
    assertEquals(recovered.length, 1, "one line when the apiserver is back");
  } finally {
    await op?.stop("SIGTERM", 20_000);
    await proxy.close();
    await dropNamespace(ns);
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
});
