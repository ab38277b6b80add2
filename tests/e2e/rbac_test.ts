/**
 * Least privilege, end to end: deploy/'s RBAC applied, a token minted for its ServiceAccount with
 * the TokenRequest API, the operator run with a kubeconfig holding only that token (and
 * --leader-elect, --metrics-secure), the main scenario (create, scale, update, delete) and one
 * scrape of /metrics by a ServiceAccount bound to deploy/'s metrics-reader ClusterRole (the
 * operator's TokenReview and SubjectAccessReview). Then, from the audit log: no request of the
 * operator was forbidden, and every verb the RBAC grants was used.
 */
import { parseAllDocuments, stringify } from "yaml";
import { assertEquals } from "../assert.ts";
import type { KubeObject } from "../../lib/kube/client.ts";
import { isNotFound } from "../../lib/kube/errors.ts";
import { NAMESPACES, type ResourceType } from "../../lib/kube/resources.ts";
import { APPSERVICES } from "../../lib/appservice/schema.ts";
import {
  admin,
  appService,
  cluster,
  dropNamespace,
  getAs,
  installCrd,
  newNamespace,
  REPO,
  startOperator,
  waitFor,
} from "./harness.ts";
import { auditEvents, describe } from "./audit.ts";
import {
  bindMetricsReader,
  createServiceAccounts,
  scrape,
  servedCertificate,
} from "./secure_metrics.ts";
import {
  CLUSTER_ROLE_BINDINGS,
  CLUSTER_ROLES,
  mintToken,
  ROLE_BINDINGS,
  ROLES,
  SERVICE_ACCOUNTS,
} from "./resources.ts";

const AS = APPSERVICES as unknown as ResourceType;
const SA_NAMESPACE = "appservice-system";
const SA_NAME = "appservice-operator";
const SA_USER = `system:serviceaccount:${SA_NAMESPACE}:${SA_NAME}`;

interface Rule {
  apiGroups: string[];
  resources: string[];
  verbs: string[];
}

const KINDS: Record<string, ResourceType> = {
  Namespace: NAMESPACES,
  ServiceAccount: SERVICE_ACCOUNTS,
  ClusterRole: CLUSTER_ROLES,
  ClusterRoleBinding: CLUSTER_ROLE_BINDINGS,
  Role: ROLES,
  RoleBinding: ROLE_BINDINGS,
};

async function deployObjects(): Promise<(KubeObject & { rules?: Rule[] })[]> {
  const out: (KubeObject & { rules?: Rule[] })[] = [];
  for (const f of ["namespace.yaml", "serviceaccount.yaml", "rbac.yaml"]) {
    const text = await Deno.readTextFile(`${REPO}/deploy/${f}`);
    for (const doc of parseAllDocuments(text)) {
      const o = doc.toJS() as KubeObject;
      if (o?.kind && KINDS[o.kind]) out.push(o);
    }
  }
  return out;
}

Deno.test("RBAC: the operator works with exactly deploy/'s permissions", async (t) => {
  await installCrd();
  const c = await admin();
  const info = await cluster();
  const objects = await deployObjects();
  for (const o of objects) {
    await c.patch(KINDS[o.kind!], o.metadata!.name!, o, {
      namespace: o.metadata!.namespace,
      type: "apply",
      fieldManager: "appservice-e2e",
      force: true,
    });
  }
  const token = await mintToken(c, SA_NAMESPACE, SA_NAME, 3600);
  const dir = await Deno.makeTempDir({ prefix: "rbac-" });
  const kubeconfig = `${dir}/kubeconfig`;
  await Deno.writeTextFile(
    kubeconfig,
    stringify({
      apiVersion: "v1",
      kind: "Config",
      "current-context": "sa",
      clusters: [{
        name: "local",
        cluster: { server: info.server, "certificate-authority": info.caCertFile },
      }],
      users: [{ name: "sa", user: { token } }],
      contexts: [{
        name: "sa",
        context: { cluster: "local", user: "sa", namespace: SA_NAMESPACE },
      }],
    }),
  );
  const ns = await newNamespace("rbac");
  const since = Date.now();
  await createServiceAccounts(ns, ["scraper"]);
  const unbind = await bindMetricsReader(`e2e-${ns}-scraper`, ns, ["scraper"]);
  const op = await startOperator([
    `--kubeconfig=${kubeconfig}`,
    "--leader-elect",
    "--metrics-secure",
  ]);
  let tls: Deno.HttpClient | undefined;
  try {
    await op.waitReady();
    tls = Deno.createHttpClient({ caCerts: [await servedCertificate(op.metricsPort)] });
    await t.step("a scrape of the secure /metrics by a metrics-reader: 200", async () => {
      const r = await scrape(
        `https://127.0.0.1:${op.metricsPort}/metrics`,
        tls!,
        await mintToken(c, ns, "scraper", 3600),
      );
      assertEquals(r.status, 200);
    });
    await t.step("main scenario as the ServiceAccount: create, scale, update, delete", async () => {
      await c.create(
        AS,
        appService(ns, "app", { image: "nginx:1.27", ports: [{ containerPort: 80 }] }),
      );
      const ready = (n: number, image: string) =>
        waitFor(`app Ready with ${n} x ${image}`, async () => {
          const a = await getAs(ns, "app");
          return a.status?.ready && a.status.readyReplicas === n &&
            a.status.observedGeneration === a.metadata.generation && a.spec.image === image;
        }, 60_000);
      await ready(1, "nginx:1.27");
      await c.patch(AS, "app", { spec: { replicas: 3 } }, { namespace: ns });
      await ready(3, "nginx:1.27");
      await c.patch(AS, "app", { spec: { image: "nginx:1.28", ports: null } }, { namespace: ns });
      await ready(3, "nginx:1.28");
      await c.delete(AS, "app", { namespace: ns });
      await waitFor("app gone", async () => {
        try {
          await getAs(ns, "app");
          return false;
        } catch (err) {
          return isNotFound(err);
        }
      }, 60_000);
    });
    const logged = op.logs().find((l) => l.message === "Connected");
    assertEquals((logged?.properties as Record<string, unknown>)?.user, SA_USER);
  } finally {
    tls?.close();
    await unbind();
    assertEquals(await op.stop(), 0);
    await dropNamespace(ns);
    await Deno.remove(dir, { recursive: true });
  }

  const events = (await auditEvents(since)).filter((e) => e.user?.username === SA_USER);
  await t.step("no request of the operator was forbidden", () => {
    const denied = events.filter((e) => e.responseStatus?.code === 403);
    assertEquals(denied, [], `forbidden requests:\n${describe(denied)}`);
  });

  await t.step("every verb the RBAC grants was used", () => {
    const used = new Set<string>();
    for (const e of events) {
      const r = e.objectRef ?? {};
      const res = r.subresource ? `${r.resource}/${r.subresource}` : r.resource;
      used.add(`${r.apiGroup ?? ""}|${res}|${e.verb}`);
      // A server-side apply that creates the object is authorized as create too (201).
      if (e.verb === "patch" && e.responseStatus?.code === 201) {
        used.add(`${r.apiGroup ?? ""}|${res}|create`);
      }
    }
    const unused: string[] = [];
    for (const o of objects) {
      for (const rule of o.rules ?? []) {
        for (const g of rule.apiGroups) {
          for (const r of rule.resources) {
            for (const v of rule.verbs) {
              if (!used.has(`${g}|${r}|${v}`)) {
                unused.push(`${o.kind}/${o.metadata?.name}: ${g || "core"} ${r} ${v}`);
              }
            }
          }
        }
      }
    }
    assertEquals(
      unused,
      [],
      `granted but never used:\n${unused.join("\n")}\nused:\n${[...used].sort().join("\n")}`,
    );
  });
});
