/**
 * S20 (docs/scenarios.md): another field manager holds fields of the owned Service; the
 * AppService's ports change. The AppService is the only source of truth for the Service it
 * controls: the Service's ports, selector and type converge to it within 15 s and fewer than 10
 * writes, whichever way the other manager wrote (server-side apply with the same or different
 * values, client-side `kubectl apply`, a PUT as `kubectl edit` does, a merge or strategic merge
 * patch adding a port, labels/annotations/selector added). Foreign labels and annotations are kept.
 * Writes are counted from the apiserver's audit log.
 */
import { run } from "./chart.ts";
import type { Service, ServicePort } from "kubernetes-types/core/v1.d.ts";
import { assert, assertEquals } from "../assert.ts";
import { type ResourceType, SERVICES } from "../../lib/kube/resources.ts";
import type { KubeClient } from "../../lib/kube/client.ts";
import { APPSERVICES } from "../../lib/appservice/schema.ts";
import {
  admin,
  appService,
  cluster,
  dropNamespace,
  installCrd,
  newNamespace,
  sleep,
  startOperator,
  waitFor,
} from "./harness.ts";
import { describe, operatorWrites, quietWindowWrites } from "./audit.ts";

const AS = APPSERVICES as unknown as ResourceType;

/** S20 bound: seconds from the AppService change to a converged Service. */
const CONVERGE_BOUND_SECONDS = 15;
/** S20 bound: operator writes to the Service, from the foreign write to convergence (exclusive). */
const WRITES_BOUND = 10;

const BEFORE = [{ name: "http", containerPort: 80 }];
const AFTER = [{ name: "http", containerPort: 8080 }, { name: "metrics", containerPort: 9090 }];

/** The ports a Service should have for AppService ports `ports`, in a comparable form. */
function portKeys(ports: { name?: string; containerPort: number }[]): string[] {
  return ports.map((p) => `${p.name}|${p.containerPort}|${p.containerPort}|TCP`).sort();
}

function liveKeys(svc: Service): string[] {
  return (svc.spec?.ports ?? []).map((p: ServicePort) =>
    `${p.name}|${p.port}|${p.targetPort}|${p.protocol}${p.nodePort ? `|np` : ""}${
      p.appProtocol ? `|${p.appProtocol}` : ""
    }`
  ).sort();
}

function selectorOf(name: string): Record<string, string> {
  return {
    "app.kubernetes.io/instance": name,
    "app.kubernetes.io/managed-by": "appservice-operator",
  };
}

/** Whether the Service has exactly the ports and selector that `ports` give. */
function converged(svc: Service, name: string, ports: typeof BEFORE): boolean {
  return JSON.stringify(liveKeys(svc)) === JSON.stringify(portKeys(ports)) &&
    JSON.stringify(svc.spec?.selector) === JSON.stringify(selectorOf(name)) &&
    svc.spec?.type === "ClusterIP";
}

/** Runs kubectl (the cluster's own build) with the admin kubeconfig; stdin optional. */
async function kubectl(args: string[], stdin?: string): Promise<string> {
  const info = await cluster();
  const out = await run(
    `${info.binDir}/kubectl`,
    [`--kubeconfig=${info.kubeconfig}`, ...args],
    stdin,
  );
  const text = out.stdout + out.stderr;
  if (out.code !== 0) throw new Error(`kubectl ${args.join(" ")}: ${text}`);
  return text;
}

interface Case {
  /** AppService (and Service) name. */
  name: string;
  what: string;
  /** The other manager's write. */
  foreign: (c: KubeClient, ns: string, name: string) => Promise<void>;
  /** Checks on the converged Service: what of the foreign write is kept. */
  kept?: (svc: Service) => void;
}

const svcHead = (ns: string, name: string) => ({
  apiVersion: "v1",
  kind: "Service",
  metadata: { name, namespace: ns },
});

const CASES: Case[] = [
  {
    name: "ssa-same",
    what: "server-side apply, same values, no force",
    foreign: async (c, ns, name) => {
      await c.patch(SERVICES, name, {
        ...svcHead(ns, name),
        spec: { ports: [{ name: "http", port: 80, targetPort: 80, protocol: "TCP" }] },
      }, { namespace: ns, type: "apply", fieldManager: "other-tool" });
    },
  },
  {
    name: "ssa-diff",
    what: "server-side apply, different values (force)",
    foreign: async (c, ns, name) => {
      await c.patch(SERVICES, name, {
        ...svcHead(ns, name),
        spec: {
          ports: [
            { name: "web", port: 80, targetPort: 8000, protocol: "TCP" },
            { name: "extra", port: 81, targetPort: 81, protocol: "TCP" },
          ],
        },
      }, { namespace: ns, type: "apply", fieldManager: "other-tool", force: true });
    },
  },
  {
    name: "csa",
    what: "client-side kubectl apply (last-applied annotation)",
    foreign: async (_c, ns, name) => {
      await kubectl(
        ["apply", "-n", ns, "-f", "-"],
        JSON.stringify({
          ...svcHead(ns, name),
          metadata: { name, namespace: ns, labels: { team: "web" } },
          spec: {
            selector: selectorOf(name),
            ports: [
              { name: "http", port: 80, targetPort: 80, protocol: "TCP" },
              { name: "extra", port: 81, targetPort: 81, protocol: "TCP" },
            ],
          },
        }),
      );
    },
    kept: (svc) => {
      assertEquals(svc.metadata?.labels?.team, "web");
      assert(
        svc.metadata?.annotations?.["kubectl.kubernetes.io/last-applied-configuration"],
        "last-applied annotation dropped",
      );
    },
  },
  {
    name: "put",
    what: "update (PUT) as kubectl edit does",
    foreign: async (c, ns, name) => {
      const svc = await c.get<Service>(SERVICES, name, { namespace: ns });
      svc.spec!.ports!.push({ name: "debug", port: 5005, targetPort: 5005, protocol: "TCP" });
      svc.spec!.selector = { ...svc.spec!.selector, tier: "debug" };
      await c.update(SERVICES, svc, { fieldManager: "kubectl-edit" });
    },
  },
  {
    name: "merge",
    what: "JSON merge patch adding a port",
    foreign: async (c, ns, name) => {
      const svc = await c.get<Service>(SERVICES, name, { namespace: ns });
      await c.patch(SERVICES, name, {
        spec: {
          ports: [...svc.spec!.ports!, {
            name: "extra",
            port: 81,
            targetPort: 81,
            protocol: "TCP",
          }],
        },
      }, { namespace: ns, type: "merge", fieldManager: "kubectl-patch" });
    },
  },
  {
    name: "strategic",
    what: "strategic merge patch adding a port",
    foreign: async (c, ns, name) => {
      await c.patch(SERVICES, name, {
        spec: { ports: [{ name: "extra", port: 81, targetPort: 81, protocol: "TCP" }] },
      }, { namespace: ns, type: "strategic", fieldManager: "kubectl-patch" });
    },
  },
  {
    name: "meta",
    what: "labels, annotations and a selector key added by others",
    foreign: async (c, ns, name) => {
      await c.patch(SERVICES, name, {
        metadata: {
          labels: { team: "web" },
          annotations: { "example.com/owner": "web-team" },
        },
        spec: { selector: { tier: "frontend" } },
      }, { namespace: ns, type: "merge", fieldManager: "other-tool" });
    },
    kept: (svc) => {
      assertEquals(svc.metadata?.labels?.team, "web");
      assertEquals(svc.metadata?.annotations?.["example.com/owner"], "web-team");
    },
  },
];

Deno.test("S20: an owned Service converges whatever other field managers own", async (t) => {
  await installCrd();
  const c = await admin();
  const ns = await newNamespace("s20");
  const op = await startOperator();
  const figures: string[] = [];
  try {
    await op.waitReady();
    for (const k of CASES) {
      await t.step(`${k.what}: converges within ${CONVERGE_BOUND_SECONDS} s`, async () => {
        await c.create(AS, appService(ns, k.name, { image: "nginx:1.27", ports: BEFORE }));
        await waitFor(`Service ${k.name}`, async () => {
          const s = await c.get<Service>(SERVICES, k.name, { namespace: ns });
          return converged(s, k.name, BEFORE);
        }, 30_000);
        const sinceForeign = Date.now();
        await k.foreign(c, ns, k.name);
        await sleep(1_000);
        const t0 = Date.now();
        await c.patch(AS, k.name, { spec: { ports: AFTER } }, { namespace: ns });
        let seconds = NaN;
        let svc: Service | undefined;
        try {
          svc = await waitFor(
            `Service ${k.name} converged`,
            async () => {
              const s = await c.get<Service>(SERVICES, k.name, { namespace: ns });
              return converged(s, k.name, AFTER) ? s : undefined;
            },
            30_000,
            100,
          );
          seconds = (Date.now() - t0) / 1000;
        } catch { /* reported below with the figures */ }
        const writes = (await operatorWrites(sinceForeign, ns)).filter((e) =>
          e.objectRef?.resource === "services"
        );
        const line = `S20 ${k.name} (${k.what}): ${
          Number.isNaN(seconds) ? "not converged in 30 s" : `converged in ${seconds.toFixed(1)} s`
        }, ${writes.length} Service writes (${
          writes.filter((w) => (w.responseStatus?.code ?? 0) >= 400).length
        } refused)`;
        figures.push(line);
        console.log(`${line}\n${describe(writes)}`);
        assert(svc, `${line}\n${describe(writes)}`);
        assert(seconds <= CONVERGE_BOUND_SECONDS, line);
        assert(writes.length < WRITES_BOUND, `${line}\n${describe(writes)}`);
        k.kept?.(svc);
        // At rest afterwards: no more writes to it.
        const rest = Date.now();
        await sleep(3_000);
        // Positive control: another AppService with ports, whose Service the operator creates.
        const after = await quietWindowWrites(
          rest,
          () =>
            c.create(
              AS,
              appService(ns, `control-${k.name}`, { image: "nginx:1.27", ports: BEFORE }),
            ),
          { namespace: ns, filter: (e) => e.objectRef?.resource === "services" },
        );
        assertEquals(after.length, 0, `writes after convergence:\n${describe(after)}`);
      });
    }
    await t.step("the AppService keeps owning the Service: still only its controller", async () => {
      for (const k of CASES) {
        const s = await c.get<Service>(SERVICES, k.name, { namespace: ns });
        const owners = (s.metadata?.ownerReferences ?? []).filter((r) => r.controller);
        assertEquals(owners.length, 1);
        assertEquals(owners[0].name, k.name);
      }
    });
  } finally {
    console.log(figures.join("\n"));
    const code = await op.stop();
    await dropNamespace(ns);
    assertEquals(code, 0, op.stderr().slice(-3000));
  }
});
