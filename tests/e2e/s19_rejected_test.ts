/**
 * S19 at write time (docs/scenarios.md): what only the write can tell — a
 * ValidatingAdmissionPolicy refusing the Pods or the Service, a ResourceQuota refusing a Pod — is
 * reported (condition Degraded with a reason naming the refused write, and a Warning Event) and
 * retried slowly: at most 5 refused attempts in the first minute (counted in the apiserver's audit
 * log). A spec change (new generation) is tried at once and converges.
 */
import { assert, assertEquals } from "../assert.ts";
import { type ResourceType, SERVICES } from "../../lib/kube/resources.ts";
import type { KubeClient, KubeObject } from "../../lib/kube/client.ts";
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
import { type AuditEvent, auditEvents, describe } from "./audit.ts";
import { denyPolicy, dryRunRefused, podRefused, RESOURCE_QUOTAS } from "./resources.ts";

const AS = APPSERVICES as unknown as ResourceType;
const EVENTS: ResourceType = {
  apiVersion: "events.k8s.io/v1",
  kind: "Event",
  plural: "events",
  namespaced: true,
};

/** S19 bound: refused attempts of one write in the first minute. */
const MAX_REFUSED_FIRST_MINUTE = 5;

/** Refused writes of the operator to `resource` in `ns` (dry runs included), `fromMs`..`toMs`. */
function refused(events: AuditEvent[], ns: string, resource: string, fromMs: number, toMs: number) {
  return events.filter((e) =>
    e.objectRef?.namespace === ns && e.objectRef?.resource === resource &&
    ["create", "patch", "update"].includes(e.verb) && (e.responseStatus?.code ?? 0) >= 400 &&
    Date.parse(e.stageTimestamp) >= fromMs && Date.parse(e.stageTimestamp) <= toMs
  );
}

async function degraded(ns: string, name: string, reason: string) {
  return await waitFor(`${name} Degraded ${reason}`, async () => {
    const a = await getAs(ns, name);
    const d = a.status?.conditions?.find((x) => x.type === "Degraded");
    return d?.status === "True" && d.reason === reason ? d : undefined;
  }, 30_000);
}

async function warningEvent(c: KubeClient, ns: string, name: string, reason: string) {
  return await waitFor(`${name} Warning Event ${reason}`, async () => {
    const l = await c.list<
      KubeObject & { reason?: string; type?: string; regarding?: { name?: string } }
    >(EVENTS, { namespace: ns });
    return l.items.find((e) =>
      e.type === "Warning" && e.reason === reason && e.regarding?.name === name
    );
  }, 30_000);
}

async function ready(ns: string, name: string, replicas: number, timeoutMs = 60_000) {
  return await waitFor(
    `${name} Ready`,
    async () => {
      const a = await getAs(ns, name);
      return a.status?.ready === true && a.status.observedGeneration === a.metadata.generation &&
          a.status.readyReplicas === replicas
        ? a
        : undefined;
    },
    timeoutMs,
    100,
  );
}

Deno.test("S19: writes refused by admission or quota are reported and retried slowly", async (t) => {
  await installCrd();
  const c = await admin();
  const nsPolicy = await newNamespace("s19p");
  const nsQuota = await newNamespace("s19q");
  const cleanups: (() => Promise<void>)[] = [];
  const op = await startOperator();
  const figures: string[] = [];
  try {
    await op.waitReady();
    cleanups.push(
      await denyPolicy(c, `e2e-s19-pods-${nsPolicy}`, nsPolicy, {
        resource: "pods",
        operations: ["CREATE", "UPDATE"],
        expression: "!object.spec.containers.exists(c, c.image.endsWith(':blocked'))",
        message: "images tagged :blocked are not allowed here (e2e policy)",
      }),
      await denyPolicy(c, `e2e-s19-svc-${nsPolicy}`, nsPolicy, {
        resource: "services",
        operations: ["CREATE", "UPDATE"],
        expression: "!has(object.spec.ports) || !object.spec.ports.exists(p, p.port == 6666)",
        message: "port 6666 is not allowed here (e2e policy)",
      }),
    );
    await c.create(RESOURCE_QUOTAS, {
      apiVersion: "v1",
      kind: "ResourceQuota",
      metadata: { name: "one-pod", namespace: nsQuota },
      spec: { hard: { pods: "1" } },
    } as never);
    // Both policies in force (a refused dry run says so), and the quota counted.
    await podRefused(c, nsPolicy, "nginx:blocked");
    await dryRunRefused(c, "the Service refused (policy in force)", SERVICES, {
      apiVersion: "v1",
      kind: "Service",
      metadata: { generateName: "probe-", namespace: nsPolicy },
      spec: { ports: [{ port: 6666 }] },
    } as KubeObject);
    await waitFor(
      "quota counted",
      async () => {
        const q = await c.get<KubeObject & { status?: { hard?: Record<string, string> } }>(
          RESOURCE_QUOTAS,
          "one-pod",
          { namespace: nsQuota },
        );
        return q.status?.hard?.pods === "1";
      },
      30_000,
      500,
    );

    const t0 = Date.now();
    await c.create(AS, appService(nsPolicy, "blocked", { image: "nginx:blocked", replicas: 2 }));
    await c.create(
      AS,
      appService(nsPolicy, "badport", {
        image: "nginx:1.27",
        ports: [{ name: "odd", containerPort: 6666 }],
      }),
    );
    await c.create(AS, appService(nsQuota, "quota", { image: "nginx:1.27", replicas: 2 }));

    await t.step("reported: Degraded names the refused write, and a Warning Event", async () => {
      const d1 = await degraded(nsPolicy, "blocked", "PodCreateRejected");
      assert(d1.message.includes(":blocked are not allowed"), d1.message);
      const d2 = await degraded(nsPolicy, "badport", "ServiceRejected");
      assert(d2.message.includes("port 6666"), d2.message);
      const d3 = await degraded(nsQuota, "quota", "PodCreateRejected");
      assert(d3.message.includes("exceeded quota"), d3.message);
      for (const d of [d1, d2, d3]) console.log(`S19 Degraded ${d.reason}: ${d.message}`);
      await warningEvent(c, nsPolicy, "blocked", "PodCreateRejected");
      await warningEvent(c, nsPolicy, "badport", "ServiceRejected");
      await warningEvent(c, nsQuota, "quota", "PodCreateRejected");
    });

    await t.step(
      `at most ${MAX_REFUSED_FIRST_MINUTE} refused attempts in the first minute`,
      async () => {
        const wait = t0 + 61_000 - Date.now();
        if (wait > 0) await sleep(wait);
        const events = await auditEvents(t0);
        const counts: [string, AuditEvent[]][] = [
          ["Pod creates refused by the policy", refused(events, nsPolicy, "pods", t0, t0 + 60_000)],
          [
            "Service writes refused by the policy",
            refused(events, nsPolicy, "services", t0, t0 + 60_000),
          ],
          ["Pod creates refused by the quota", refused(events, nsQuota, "pods", t0, t0 + 60_000)],
        ];
        for (const [what, list] of counts) {
          const line = `S19 ${what}: ${list.length} in the first minute`;
          figures.push(line);
          console.log(line);
        }
        for (const [what, list] of counts) {
          assert(list.length >= 1, `${what}: none (the test did not provoke a refusal)`);
          assert(
            list.length <= MAX_REFUSED_FIRST_MINUTE,
            `${what}: ${list.length} > ${MAX_REFUSED_FIRST_MINUTE}\n${describe(list)}`,
          );
        }
        // The Pods that the quota admits exist all along.
        const a = await getAs(nsQuota, "quota");
        assertEquals(a.status?.readyReplicas, 1);
      },
    );

    await t.step("a spec change is tried at once and converges", async () => {
      const t1 = Date.now();
      await c.patch(AS, "blocked", { spec: { image: "nginx:1.27" } }, { namespace: nsPolicy });
      await c.patch(AS, "badport", { spec: { ports: [{ name: "web", containerPort: 8080 }] } }, {
        namespace: nsPolicy,
      });
      await c.delete(RESOURCE_QUOTAS, "one-pod", { namespace: nsQuota });
      await c.patch(AS, "quota", { spec: { env: [{ name: "QUOTA", value: "gone" }] } }, {
        namespace: nsQuota,
      });
      for (
        const [ns, name, n] of [[nsPolicy, "blocked", 2], [nsPolicy, "badport", 1], [
          nsQuota,
          "quota",
          2,
        ]] as const
      ) {
        await ready(ns, name, n, 60_000);
        const s = (Date.now() - t1) / 1000;
        const line = `S19 ${name}: Ready ${s.toFixed(1)} s after the spec change`;
        figures.push(line);
        console.log(line);
        const d = (await getAs(ns, name)).status?.conditions?.find((x) => x.type === "Degraded");
        assertEquals(d?.status, "False", JSON.stringify(d));
      }
      // "At once": the first write after the change left within a few seconds, not after the
      // slow-retry delay.
      const events = (await auditEvents(t1)).filter((e) =>
        ["create", "patch"].includes(e.verb) &&
        ["pods", "services"].includes(e.objectRef?.resource ?? "") &&
        [nsPolicy, nsQuota].includes(e.objectRef?.namespace ?? "")
      );
      for (const [ns, res] of [[nsPolicy, "pods"], [nsPolicy, "services"], [nsQuota, "pods"]]) {
        const first = events.find((e) =>
          e.objectRef?.namespace === ns && e.objectRef?.resource === res &&
          !e.requestURI.includes("dryRun")
        );
        assert(first, `no ${res} write in ${ns} after the change`);
        const s = (Date.parse(first.stageTimestamp) - t1) / 1000;
        figures.push(`S19 first ${res} write in ${ns} ${s.toFixed(1)} s after the change`);
        assert(s < 5, `first ${res} write in ${ns} ${s.toFixed(1)} s after the change`);
      }
    });
  } finally {
    console.log(figures.join("\n"));
    for (const f of cleanups) await f();
    const code = await op.stop();
    await dropNamespace(nsPolicy);
    await dropNamespace(nsQuota);
    assertEquals(code, 0, op.stderr().slice(-3000));
  }
});
