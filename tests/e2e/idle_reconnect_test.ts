/**
 * Issue 25, logs that say what happened: on an apiserver without bookmarks (`--watch-cache=false`:
 * watches are served from etcd and carry no BOOKMARK), a quiet operator's watches go silent for
 * the idle bound and are reopened. Before, each reopening logged a WARN `Watch stream idle;
 * reconnecting`, counted as a failure of the path, and the recovery that followed ended every
 * other quiet watch as "stalled" (restarts). A reopening that succeeds is the liveness check of a
 * stream that may rightly be quiet: no WARN, no failure, no restart, no relist.
 *
 * The idle bound is set to 15 s (`--watch-idle-timeout=15s`), so the 3 minutes watched here are
 * 12 idle periods of each of the operator's 4 watches: as many reconnects as 15 minutes at the
 * default 75 s.
 * - Over those 3 minutes: no WARN or ERROR line; no list, relist, watch error or watch restart
 *   (`appservice_reflector_lists_total`, `..._relists_total`, `..._watch_errors_total` unchanged, no
 *   `Watch restarted` line).
 * - Positive controls: the idle reconnects happened (their debug lines: at least 8), and the
 *   watches were not deaf: an AppService scaled at the end gets its second Pod within 5 s (a
 *   watch that missed the change would hear of it only at its next reconnect, up to 15 s).
 *
 * Everything on 127.0.0.1; every wait bounded; the test stops what it started.
 */
import type { Pod } from "kubernetes-types/core/v1.d.ts";
import { assert, assertEquals } from "../assert.ts";
import { PODS, type ResourceType } from "../../lib/kube/resources.ts";
import { type AppService, APPSERVICES } from "../../lib/appservice/schema.ts";
import { type SecondApiserver, startSecondApiserver } from "./apiserver2.ts";
import {
  admin,
  appService,
  cluster,
  dropNamespace,
  getAs,
  installCrd,
  kubeconfigFor,
  metricSum,
  newNamespace,
  type Operator,
  sleep,
  startOperator,
  waitFor,
} from "./harness.ts";

const AS = APPSERVICES as unknown as ResourceType;
const IDLE_S = 15;
const QUIET_MS = 180_000;

async function counters(op: Operator) {
  const m = await op.metrics();
  return {
    lists: metricSum(m, "appservice_reflector_lists_total"),
    relists: metricSum(m, "appservice_reflector_relists_total"),
    watchErrors: metricSum(m, "appservice_reflector_watch_errors_total", {}, { absent: 0 }),
  };
}

Deno.test("idle reconnects on an apiserver without bookmarks: no WARN, no restart, not deaf", async () => {
  const info = await cluster();
  await installCrd();
  const c = await admin();
  const ns = await newNamespace("idle");
  const dir = await Deno.makeTempDir({ prefix: "idle-" });
  let second: SecondApiserver | undefined;
  let op: Operator | undefined;
  try {
    second = await startSecondApiserver(info, {
      logFile: `${dir}/kube-apiserver-2.log`,
      extraArgs: ["--watch-cache=false"],
    });
    const kubeconfig = await kubeconfigFor(second.server, dir);
    op = await startOperator([
      `--kubeconfig=${kubeconfig}`,
      `--watch-idle-timeout=${IDLE_S}s`,
      "--log-level=debug",
    ]);
    await op.waitReady(60_000);
    await c.create(AS, appService(ns, "quiet", { image: "nginx:1.27", replicas: 1 }));
    await waitFor("AppService quiet Ready", async () => {
      const a: AppService = await getAs(ns, "quiet");
      return a.status?.ready === true && a.status.readyReplicas === 1;
    }, 90_000);
    // Let the last writes' events arrive, then watch a quiet operator.
    await sleep(3_000);
    const before = await counters(op);
    const from = op.logs().length;
    await sleep(QUIET_MS);
    const after = await counters(op);
    const window = op.logs().slice(from);
    const idle = window.filter((l) => l.message === "Watch stream idle; reconnecting");
    const loud = window.filter((l) => /^(WARN|WARNING|ERROR|FATAL)$/i.test(String(l.level)));
    const restarts = window.filter((l) => l.message === "Watch restarted");
    console.log(
      `idle: ${idle.length} idle reconnects (levels ${[...new Set(idle.map((l) => l.level))]}), ` +
        `${loud.length} WARN/ERROR lines, ${restarts.length} restarts; ` +
        `counters ${JSON.stringify(before)} -> ${JSON.stringify(after)}`,
    );
    for (const l of [...loud, ...restarts].slice(0, 10)) {
      console.log(`  ${JSON.stringify(l).slice(0, 300)}`);
    }
    // Positive control: the idle bound fired (4 watches × 12 periods; at least 8 seen).
    assert(idle.length >= 8, `idle reconnects happened: ${idle.length}`);
    assertEquals(loud.length, 0, "no WARN or ERROR line while quiet");
    assertEquals(restarts.length, 0, "no watch restarted");
    assertEquals(after, before, "no list, relist or watch error while quiet");

    // Not deaf: a change made now is acted on within the idle bound.
    await c.patch(AS, "quiet", { spec: { replicas: 2 } }, { namespace: ns });
    await waitFor(
      "a second Pod within 5 s",
      async () => {
        const l = await c.list<Pod>(PODS, {
          namespace: ns,
          labelSelector: "app.kubernetes.io/instance=quiet",
        });
        return l.items.length >= 2;
      },
      5_000,
      100,
    );
  } finally {
    await op?.stop("SIGTERM", 20_000);
    await second?.stop();
    await dropNamespace(ns);
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
});
