/**
 * Retry-After end to end (issue 11, S16): API Priority and Fairness limits the operator's own
 * user (a ServiceAccount with deploy/'s RBAC) to a PriorityLevelConfiguration of the smallest
 * concurrency with one queue of length 1, and 8 workers reconcile enough AppServices to be
 * rejected with 429. kube-apiserver computes the Retry-After of an APF rejection per priority
 * level (k8s.io/apiserver pkg/util/flowcontrol/dropped_requests_tracker.go): 1 s at first,
 * doubled (at most 32 s) when the level dropped at least 3 × Retry-After requests in the last
 * Retry-After seconds, and lowered by 1 s a second otherwise; so after one 429 every request of
 * the same user (same FlowSchema, same level) is likely rejected too.
 *
 * Measured, for each 429: the gap to the next request of the same client (and of the same method
 * and URL) against its Retry-After, from the operator's own request log (debug level: method,
 * path, code, Audit-Id, Retry-After, send time) and the apiserver's audit log (response codes and
 * receive times per user, joined by audit ID). Asserted: no gap shorter than the Retry-After,
 * every AppService converges, and throttling is no reconcile error (logs and
 * controller_runtime_reconcile_errors_total).
 */
import { assert, assertEquals } from "../assert.ts";
import type { KubeObject } from "../../lib/kube/client.ts";
import { isNotFound } from "../../lib/kube/errors.ts";
import type { ResourceType } from "../../lib/kube/resources.ts";
import { APPSERVICES } from "../../lib/appservice/schema.ts";
import {
  admin,
  apiserverMetrics,
  appService,
  cluster,
  dropNamespace,
  getAs,
  installCrd,
  type LogLine,
  logsOf,
  metricSum,
  newNamespace,
  type Operator,
  REPO,
  startOperator,
  waitFor,
} from "./harness.ts";
import { auditEvents, microTimeMs, receivedMs } from "./audit.ts";
import { operatorIdentity } from "./identity.ts";
import { applyDeployRbac, rt } from "./resources.ts";

const AS = APPSERVICES as unknown as ResourceType;
const FLOWCONTROL = "flowcontrol.apiserver.k8s.io/v1";
const FLOW_SCHEMAS = rt(FLOWCONTROL, "FlowSchema", "flowschemas", false);
const PRIORITY_LEVELS = rt(
  FLOWCONTROL,
  "PriorityLevelConfiguration",
  "prioritylevelconfigurations",
  false,
);
/** AppServices created before the operator starts (each: finalizer, 2 Pods, Service, status). */
const APPS = 24;
const WORKERS = 8;

/** One line of the operator's debug request log (see main.ts). */
interface RequestLine {
  method: string;
  path: string;
  code: string;
  auditId?: string;
  /** Epoch ms (fractional) when the request was handed to fetch. */
  startedAtMs: number;
  /** Epoch ms when the answer's headers came. */
  endedAtMs: number;
  retryAfterSeconds?: number;
}

function requestLines(op: Operator): RequestLine[] {
  return logsOf(op, "Request").filter((l) => l.properties?.client === "main").map((l: LogLine) => {
    const p = l.properties ?? {};
    const startedAtMs = Number(p.startedAtMs);
    return {
      method: String(p.method),
      path: String(p.path),
      code: String(p.code),
      auditId: p.auditId as string | undefined,
      startedAtMs,
      endedAtMs: startedAtMs + Number(p.durationSeconds) * 1000,
      retryAfterSeconds: p.retryAfterSeconds as number | undefined,
    };
  }).sort((a, b) => a.startedAtMs - b.startedAtMs);
}

Deno.test("Retry-After: a throttled operator waits what the apiserver says and converges (S16)", async (t) => {
  await installCrd();
  const deployed = await applyDeployRbac(await admin(), REPO);
  const c = await admin();
  const info = await cluster();
  // Without the finalizer policy: each AppService's writes include the finalizer patch, the load
  // this test was sized for.
  const ns = await newNamespace("throttle", { finalizerPolicy: false });
  const dir = await Deno.makeTempDir({ prefix: "throttle-" });
  const who = await operatorIdentity(deployed, ns, "throttled", dir);
  const name = `e2e-throttle-${crypto.randomUUID().slice(0, 6)}`;
  let op: Operator | undefined;
  try {
    // One seat: a level's nominal seats are the server's concurrency limit (600) split by the
    // levels' nominalConcurrencyShares (rounded up), so a share of 1 next to the default levels'
    // 245 still gets 3 seats. A ballast level of 600 shares dilutes that to 1; it lends all of
    // its seats, so the other levels borrow them and lose nothing. Ours may not borrow.
    await c.create(PRIORITY_LEVELS, {
      apiVersion: FLOWCONTROL,
      kind: "PriorityLevelConfiguration",
      metadata: { name: `${name}-ballast` },
      spec: {
        type: "Limited",
        limited: {
          nominalConcurrencyShares: 600,
          lendablePercent: 100,
          limitResponse: { type: "Reject" },
        },
      },
    } as KubeObject);
    await c.create(PRIORITY_LEVELS, {
      apiVersion: FLOWCONTROL,
      kind: "PriorityLevelConfiguration",
      metadata: { name },
      spec: {
        type: "Limited",
        limited: {
          nominalConcurrencyShares: 1,
          lendablePercent: 0,
          borrowingLimitPercent: 0,
          limitResponse: {
            type: "Queue",
            queuing: { queues: 1, handSize: 1, queueLengthLimit: 1 },
          },
        },
      },
    } as KubeObject);
    const fs = await c.create<KubeObject>(FLOW_SCHEMAS, {
      apiVersion: FLOWCONTROL,
      kind: "FlowSchema",
      metadata: { name },
      spec: {
        priorityLevelConfiguration: { name },
        matchingPrecedence: 500,
        distinguisherMethod: { type: "ByUser" },
        rules: [{
          subjects: [{ kind: "ServiceAccount", serviceAccount: { namespace: ns, name: who.name } }],
          resourceRules: [{
            verbs: ["*"],
            apiGroups: ["*"],
            resources: ["*"],
            namespaces: ["*"],
            clusterScope: true,
          }],
          nonResourceRules: [{ verbs: ["*"], nonResourceURLs: ["*"] }],
        }],
      },
    } as KubeObject);
    // APF classifies the operator's user by our FlowSchema once its configuration is applied: the
    // answer names the matched FlowSchema's UID.
    const http = Deno.createHttpClient({ caCerts: [await Deno.readTextFile(info.caCertFile)] });
    try {
      await waitFor(
        "the FlowSchema in effect",
        async () => {
          const r = await fetch(`${info.server}/api/v1/namespaces/${ns}/pods?limit=1`, {
            headers: { Authorization: `Bearer ${who.token}` },
            client: http,
            signal: AbortSignal.timeout(5_000),
          });
          await r.body?.cancel();
          return r.headers.get("X-Kubernetes-PF-FlowSchema-UID") === fs.metadata?.uid;
        },
        30_000,
        200,
      );
    } finally {
      http.close();
    }
    const seats = await waitFor(
      "one seat for the operator's level",
      async () => {
        const text = await apiserverMetrics();
        const n = metricSum(text, "apiserver_flowcontrol_current_limit_seats", {
          priority_level: name,
        });
        return n === 1 ? n : undefined;
      },
      30_000,
      500,
    );
    console.log(`S16: the operator's priority level has ${seats} seat`);

    for (let i = 0; i < APPS; i++) {
      await c.create(
        AS,
        appService(ns, `app-${i}`, {
          image: "nginx:1.27",
          replicas: 2,
          ports: [{ containerPort: 80 }],
        }),
      );
    }
    const since = Date.now();
    op = await startOperator([
      `--kubeconfig=${who.kubeconfig}`,
      `--watch-namespace=${ns}`,
      `--max-concurrent-reconciles=${WORKERS}`,
      "--log-level=debug",
    ]);
    const started = performance.now();

    await t.step("every AppService converges", async () => {
      await waitFor(
        "every AppService Ready",
        async () => {
          const list = await c.list<KubeObject & { status?: { ready?: boolean } }>(AS, {
            namespace: ns,
          });
          return list.items.length === APPS && list.items.every((a) => a.status?.ready);
        },
        300_000,
        1_000,
      );
      console.log(`S16: ${APPS} AppServices Ready ${Math.round(performance.now() - started)} ms`);
      await getAs(ns, "app-0");
    });

    const audit = (await auditEvents(since)).filter((e) => e.user?.username === who.user);
    const rejected = audit.filter((e) => e.responseStatus?.code === 429);
    await t.step("the apiserver throttled the operator (audit log)", () => {
      console.log(`S16: ${audit.length} requests, ${rejected.length} answered 429`);
      assert(rejected.length > 0, "no 429 at all: the scenario did not happen");
    });

    // A figure, not a check (printed outside the steps): the server-side gap after each 429.
    {
      // Server-side view, for every client version: receive time of the next request of the user
      // (and of the same verb and URI) after the 429's response.
      let anyMin = Infinity;
      let sameMin = Infinity;
      for (const a of rejected) {
        const done = microTimeMs(a.stageTimestamp);
        const later = audit.filter((b) => receivedMs(b) > done);
        if (later.length) anyMin = Math.min(anyMin, ...later.map((b) => receivedMs(b) - done));
        const same = later.filter((b) => b.verb === a.verb && b.requestURI === a.requestURI);
        if (same.length) sameMin = Math.min(sameMin, ...same.map((b) => receivedMs(b) - done));
      }
      console.log(
        `S16 (audit): shortest gap after a 429 to the next request of the user ` +
          `(requests already in flight included): ${anyMin.toFixed(1)} ms; ` +
          `to the same verb+URI: ${sameMin.toFixed(1)} ms (APF's Retry-After is at least 1 s)`,
      );
    }

    await t.step("client log: no request sooner than the Retry-After of a 429", () => {
      const lines = requestLines(op!);
      const throttled = lines.filter((l) => l.code === "429");
      const byAuditId = new Map(lines.filter((l) => l.auditId).map((l) => [l.auditId!, l]));
      // Every 429 the apiserver sent reached the client's log (joined by audit ID).
      const unmatched = rejected.filter((a) => !a.auditID || !byAuditId.has(a.auditID));
      assertEquals(unmatched.map((a) => `${a.verb} ${a.requestURI}`), []);
      const violations: string[] = [];
      let worst = { gapMs: Infinity, retryAfterMs: 0, what: "" };
      let worstSame = { gapMs: Infinity, retryAfterMs: 0, what: "" };
      for (const l of throttled) {
        assert(l.retryAfterSeconds !== undefined, `429 without Retry-After: ${l.method} ${l.path}`);
        const raMs = l.retryAfterSeconds * 1000;
        // Requests handed to fetch after the 429 arrived (those sent before could not know).
        const next = lines.find((x) => x.startedAtMs >= l.endedAtMs);
        const nextSame = lines.find((x) =>
          x.startedAtMs >= l.endedAtMs && x.method === l.method && x.path === l.path
        );
        for (const [n, w] of [[next, "any"], [nextSame, "same"]] as const) {
          if (!n) continue;
          const gapMs = n.startedAtMs - l.endedAtMs;
          const what = `${l.method} ${l.path} -> 429 (Retry-After ${l.retryAfterSeconds} s), ` +
            `then ${n.method} ${n.path} after ${gapMs.toFixed(1)} ms`;
          if (gapMs < raMs) violations.push(what);
          const cur = w === "any" ? worst : worstSame;
          if (gapMs - raMs < cur.gapMs - cur.retryAfterMs) {
            const v = { gapMs, retryAfterMs: raMs, what };
            if (w === "any") worst = v;
            else worstSame = v;
          }
        }
      }
      // The apiserver's view of the same: receive time of each later request of the user against
      // the 429's completion (requests the client sent before it had the 429 excepted).
      const auditViolations: string[] = [];
      let auditWorst = Infinity;
      for (const a of rejected) {
        const l = byAuditId.get(a.auditID!)!;
        const raMs = (l.retryAfterSeconds ?? 0) * 1000;
        const done = microTimeMs(a.stageTimestamp);
        for (const b of audit) {
          const lb = b.auditID ? byAuditId.get(b.auditID) : undefined;
          if (!lb || lb.startedAtMs < l.endedAtMs) continue;
          const gapMs = receivedMs(b) - done;
          auditWorst = Math.min(auditWorst, gapMs - raMs);
          if (gapMs < raMs) {
            auditViolations.push(`${b.verb} ${b.requestURI} ${gapMs.toFixed(1)} ms`);
          }
        }
      }
      console.log(
        `S16 (client): ${throttled.length} answers 429; tightest gap after a 429: ` +
          `${worst.what || "none"}; same method+URL: ${worstSame.what || "none"}; ` +
          `audit: tightest gap minus Retry-After ${auditWorst.toFixed(1)} ms`,
      );
      assertEquals(violations, []);
      assertEquals(auditViolations, []);
    });

    await t.step("throttling is no reconcile error (logs and metrics)", async () => {
      const text = await op!.metrics();
      const errors = metricSum(text, "controller_runtime_reconcile_errors_total");
      const requeueAfter = metricSum(text, "controller_runtime_reconcile_total", {
        result: "requeue_after",
      }, { absent: 0 });
      const throttledLogs = logsOf(op!, "Throttled by the apiserver; requeued");
      console.log(
        `S16: reconcile errors ${errors}, requeue_after ${requeueAfter}, ` +
          `throttled requeues logged ${throttledLogs.length}, 429s counted ` +
          metricSum(text, "rest_client_requests_total", { code: "429" }, { absent: 0 }),
      );
      assertEquals(
        logsOf(op!, "Reconciler error").map((l) => l.properties?.error),
        [],
      );
      assertEquals(errors, 0);
    });
  } finally {
    if (op) await op.stop("SIGTERM", 30_000);
    const levels = [name, `${name}-ballast`].map((n) => [PRIORITY_LEVELS, n] as const);
    for (const [rtype, n] of [[FLOW_SCHEMAS, name] as const, ...levels]) {
      await c.delete(rtype, n).catch((err) => {
        if (!isNotFound(err)) throw err;
      });
    }
    await dropNamespace(ns);
    await who.cleanup();
    await Deno.remove(dir, { recursive: true });
  }
});
