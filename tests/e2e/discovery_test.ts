/**
 * Discovery and DynamicClient (lib/kube/discovery.ts) against the real apiserver of the local
 * control plane, through the public entry module, with CRDs of a group of its own
 * (`discovery-e2e-<random>.example.com`, deleted at the end) and a namespace of its own. The
 * client's request hook records every request, so each step checks which discovery documents were
 * read and which requests were sent, not only the answers:
 * - built-in kinds (core Pod and Namespace, apps/v1 Deployment, ConfigMap) resolve to their plural
 *   and scope, one document per group/version, and get / list / create work through the types;
 * - the AppService CRD (installCrd) resolves to the operator's own constant;
 * - the apiserver's 404s are what `isResourceNotServed` assumes: none for a missing object or
 *   namespace, one for a path of a plural or scope it does not serve;
 * - a kind or group/version not served gives NoKindMatchError naming it;
 * - a CRD created after its group/version was read (and was then not served at all, or served
 *   without that kind) is found by the refresh on a miss, with exactly one read;
 * - a CRD deleted and created again with another plural and scope (namespaced, then
 *   cluster-scoped): a create on the stale type naming a namespace is answered 404, the document
 *   is read once, and the create is not sent again (it would drop the namespace and make a
 *   cluster-scoped object): ScopeChangedError, nothing created; the same create naming no
 *   namespace is sent to the new path and succeeds; the CRD deleted for good: NoKindMatchError
 *   instead of a bare 404.
 */
import type { ConfigMap } from "kubernetes-types/core/v1.d.ts";
import { assert, assertEquals, assertRejects } from "../assert.ts";
import {
  ApiError,
  CRDS,
  Discovery,
  DISCOVERY_MIN_REFRESH_INTERVAL_MS,
  discoveryPath,
  DynamicClient,
  type GroupVersionKind,
  isNoKindMatch,
  isNotFound,
  isResourceNotServed,
  KubeClient,
  type KubeObject,
  loadClusterConfig,
  NAMESPACES,
  PODS,
  ScopeChangedError,
} from "../../lib/kube/mod.ts";
import { APPSERVICES } from "../../lib/appservice/schema.ts";
import {
  admin,
  cluster,
  dropNamespace,
  installCrd,
  newNamespace,
  sleep,
  waitFor,
} from "./harness.ts";

/** A CRD of `group`/v1 with kind `kind`, `plural` and `scope`, any fields allowed. */
function crd(group: string, kind: string, plural: string, scope: "Namespaced" | "Cluster") {
  return {
    apiVersion: "apiextensions.k8s.io/v1",
    kind: "CustomResourceDefinition",
    metadata: { name: `${plural}.${group}` },
    spec: {
      group,
      scope,
      names: { kind, plural, singular: kind.toLowerCase(), listKind: `${kind}List` },
      versions: [{
        name: "v1",
        served: true,
        storage: true,
        schema: {
          openAPIV3Schema: { type: "object", "x-kubernetes-preserve-unknown-fields": true },
        },
      }],
    },
  };
}

type ResourceList = { resources: { name: string; kind: string; namespaced: boolean }[] };

Deno.test("discovery: resolve by group/version/kind against the apiserver, refresh on a miss and on a 404", async (t) => {
  const info = await cluster();
  const c = await admin(); // setup and polling, outside the records below
  const group = `discovery-e2e-${crypto.randomUUID().slice(0, 8)}.example.com`;
  const gv = { group, version: "v1" };
  const docPath = discoveryPath(gv);
  const sent: string[] = [];
  let lastReadAt = 0;
  const readMs: number[] = [];
  const client = new KubeClient(loadClusterConfig({ kubeconfig: info.kubeconfig }), {
    userAgent: "discovery-e2e",
    onRequest: (r) => {
      sent.push(`${r.method} ${r.path} ${r.code}`);
      if (!/^\/apis?\/[^/]+(\/[^/]+)?$/.test(r.path)) return;
      lastReadAt = performance.now();
      readMs.push(Math.round(r.durationSeconds * 1000));
    },
  });
  const discovery = new Discovery(client);
  const dynamic = new DynamicClient(client, discovery);
  const reads = () => sent.filter((s) => /^GET \/apis?\/[^/]+(\/v[^/]*)? /.test(s));
  const kind = (k: string): GroupVersionKind => ({ group, version: "v1", kind: k });
  /** Waits until the document of `group`/v1 lists `plural` as `kind` (or, with undefined, not `plural`). */
  const served = (plural: string, k: string | undefined) =>
    waitFor(
      `${plural} ${k ? "served" : "gone"} in ${docPath}`,
      async () => {
        const doc = await c.raw<ResourceList>(docPath).catch((err) => {
          if (isNotFound(err)) return { resources: [] };
          throw err;
        });
        const r = doc.resources.find((x) => x.name === plural);
        return k ? r?.kind === k : r === undefined;
      },
      20_000,
      100,
    );
  const servedAfterMs: number[] = [];
  const makeCrd = async (k: string, plural: string, scope: "Namespaced" | "Cluster") => {
    const t0 = performance.now();
    await c.create(CRDS, crd(group, k, plural, scope));
    await served(plural, k);
    servedAfterMs.push(Math.round(performance.now() - t0));
  };
  const deleteCrd = async (plural: string) => {
    await c.delete(CRDS, `${plural}.${group}`);
    await waitFor(
      `CRD ${plural} deleted`,
      () =>
        c.get(CRDS, `${plural}.${group}`).then(() => false, (err) => {
          if (!isNotFound(err)) throw err;
          return true;
        }),
      20_000,
      100,
    );
    await served(plural, undefined);
  };
  /** Waits until the interval allows the next read of a document (after the last one answered). */
  const pastInterval = () =>
    sleep(Math.max(0, lastReadAt + DISCOVERY_MIN_REFRESH_INTERVAL_MS + 50 - performance.now()));
  const ns = await newNamespace("discovery");
  try {
    await t.step(
      "built-in kinds: plural and scope from one document per group/version; verbs work",
      async () => {
        assertEquals(await discovery.resolve({ apiVersion: "v1", kind: "Pod" }), PODS);
        assertEquals(
          await discovery.resolve({ group: "", version: "v1", kind: "Namespace" }),
          NAMESPACES,
        );
        assertEquals(await discovery.resolve({ apiVersion: "apps/v1", kind: "Deployment" }), {
          apiVersion: "apps/v1",
          kind: "Deployment",
          plural: "deployments",
          namespaced: true,
        });
        assertEquals(reads(), ["GET /api/v1 200", "GET /apis/apps/v1 200"]);

        const configMaps = await discovery.resolve({ apiVersion: "v1", kind: "ConfigMap" });
        const cm: ConfigMap & { apiVersion: string; kind: string } = {
          apiVersion: "v1",
          kind: "ConfigMap",
          metadata: { name: "resolved", namespace: ns },
          data: { a: "1" },
        };
        await client.create(configMaps, cm);
        assertEquals(
          (await client.get<ConfigMap>(configMaps, "resolved", { namespace: ns })).data,
          { a: "1" },
        );
        await dynamic.create(cm, { ...cm, metadata: { name: "dynamic", namespace: ns } }); // the object names its kind
        const names = (await dynamic.list<ConfigMap>(cm, { namespace: ns })).items.map((x) =>
          x.metadata?.name
        );
        assertEquals(names.filter((n) => n !== "kube-root-ca.crt").sort(), ["dynamic", "resolved"]);
        assertEquals(
          (await dynamic.list({ apiVersion: "apps/v1", kind: "Deployment" }, { namespace: ns }))
            .items,
          [],
        );
        assertEquals(reads().length, 2); // all from the cache
      },
    );

    await t.step("the AppService CRD resolves to the operator's own constant", async () => {
      await installCrd();
      assertEquals(
        await discovery.resolve({ apiVersion: APPSERVICES.apiVersion, kind: "AppService" }),
        APPSERVICES,
      );
      assertEquals(
        (await dynamic.list({ apiVersion: APPSERVICES.apiVersion, kind: "AppService" }, {
          namespace: ns,
        })).items,
        [],
      );
    });

    await t.step(
      "the apiserver's 404s: a missing object or namespace is named in details, an unserved path is not",
      async () => {
        const absent = await assertRejects(() => client.get(PODS, "absent", { namespace: ns }));
        assert(isNotFound(absent) && !isResourceNotServed(absent), String(absent));
        const noNs = await assertRejects(() =>
          client.create(PODS, { metadata: { name: "x" } }, { namespace: `${ns}-absent` })
        );
        assert(isNotFound(noNs) && !isResourceNotServed(noNs), String(noNs));
        for (const wrong of [{ ...PODS, plural: "podz" }, { ...NAMESPACES, namespaced: true }]) {
          const err = await assertRejects(() => client.get(wrong, "x", { namespace: ns }));
          assert(
            err instanceof ApiError && isResourceNotServed(err),
            `${JSON.stringify(wrong)}: ${err}`,
          );
        }
        const noGroup = await assertRejects(() => client.raw(docPath));
        assert(isNotFound(noGroup), String(noGroup));
      },
    );

    await t.step(
      "a kind not served: NoKindMatchError naming it, for a served and an unserved group/version",
      async () => {
        const typo = await assertRejects(() =>
          discovery.resolve({ apiVersion: "apps/v1", kind: "Deploymnt" })
        );
        assert(isNoKindMatch(typo) && typo.groupVersionServed, String(typo));
        assertEquals([typo.group, typo.version, typo.kind], ["apps", "v1", "Deploymnt"]);
        const before = reads().length;
        const noGroup = await assertRejects(() =>
          dynamic.get(kind("Alpha"), "a", { namespace: ns })
        );
        assert(isNoKindMatch(noGroup) && !noGroup.groupVersionServed, String(noGroup));
        assert(
          noGroup.message.includes(`Alpha`) && noGroup.message.includes(`${group}/v1`),
          noGroup.message,
        );
        assertEquals(reads().slice(before), [`GET ${docPath} 404`]);
        assertEquals(sent.filter((s) => s.includes("alphas")), []); // no request on the kind was sent
      },
    );

    await t.step(
      "CRDs created after their group/version was read: found by one refresh on the miss",
      async () => {
        await makeCrd("Alpha", "alphas", "Namespaced");
        await pastInterval();
        let before = reads().length;
        assertEquals(await discovery.resolve(kind("Alpha")), {
          apiVersion: `${group}/v1`,
          kind: "Alpha",
          plural: "alphas",
          namespaced: true,
        });
        assertEquals(reads().slice(before), [`GET ${docPath} 200`]);

        await makeCrd("Beta", "betas", "Cluster"); // the document read above lacks it
        await pastInterval();
        before = reads().length;
        const betas = await discovery.resolve(kind("Beta"));
        assertEquals([betas.plural, betas.namespaced], ["betas", false]);
        assertEquals(reads().slice(before), [`GET ${docPath} 200`]);

        // get / list / create through the resolved types, namespaced and cluster-scoped
        await dynamic.create(kind("Alpha"), { metadata: { name: "a1" } }, { namespace: ns });
        await dynamic.create(kind("Beta"), { metadata: { name: `b1-${ns}` } });
        assertEquals(
          (await dynamic.get(kind("Alpha"), "a1", { namespace: ns })).metadata?.namespace,
          ns,
        );
        const b1 = await client.get(betas, `b1-${ns}`);
        assertEquals(b1.metadata?.namespace, undefined);
        assertEquals((await dynamic.list(kind("Alpha"), { namespace: ns })).items.length, 1);
        assertEquals(
          (await dynamic.listAll(kind("Beta"))).items.map((x: KubeObject) => x.metadata?.name),
          [`b1-${ns}`],
        );
        assertEquals(reads().length, before + 1); // no further read
      },
    );

    await t.step(
      "a CRD made again with another plural and scope: the 404 refreshes, the create is refused, not sent to another scope",
      async () => {
        await makeCrd("Gamma", "gammas", "Namespaced");
        await pastInterval();
        await dynamic.create(kind("Gamma"), { metadata: { name: "g1" } }, { namespace: ns });
        await deleteCrd("gammas");
        await makeCrd("Gamma", "gammaz", "Cluster");
        await pastInterval();

        sent.length = 0;
        // Sent again, the create would lose the namespace named and make a cluster-scoped Gamma.
        const moved = await assertRejects(() =>
          dynamic.create<KubeObject>(kind("Gamma"), { metadata: { name: `g2-${ns}` } }, {
            namespace: ns,
          })
        );
        assert(moved instanceof ScopeChangedError, String(moved));
        assertEquals([moved.namespace, moved.namespaced], [ns, false]);
        assertEquals(sent, [
          `POST /apis/${group}/v1/namespaces/${ns}/gammas 404`,
          `GET ${docPath} 200`,
        ]);
        const gammaz = await discovery.resolve(kind("Gamma"));
        assertEquals([gammaz.plural, gammaz.namespaced], ["gammaz", false]);
        assertEquals((await c.list(gammaz)).items, []); // nothing was created (unrecorded list)
        // Positive control: the same create naming no namespace makes the cluster-scoped Gamma.
        const g2 = await dynamic.create<KubeObject>(kind("Gamma"), {
          metadata: { name: `g2-${ns}` },
        });
        assertEquals(g2.metadata?.namespace, undefined);
        assertEquals(sent.slice(2), [`POST /apis/${group}/v1/gammaz 201`]);
        assertEquals((await dynamic.get(kind("Gamma"), `g2-${ns}`)).metadata?.name, `g2-${ns}`);
        assertEquals(sent.length, 4);

        // deleted for good: the 404, one read, then NoKindMatchError rather than a bare 404
        await deleteCrd("gammaz");
        await pastInterval();
        sent.length = 0;
        const gone = await assertRejects(() => dynamic.get(kind("Gamma"), `g2-${ns}`));
        assert(isNoKindMatch(gone) && gone.groupVersionServed, String(gone));
        assertEquals(sent, [`GET /apis/${group}/v1/gammaz/g2-${ns} 404`, `GET ${docPath} 200`]);
        console.log(
          `discovery: CRD created → in its document after ${servedAfterMs.join(", ")} ms; ` +
            `${readMs.length} document reads of ${Math.min(...readMs)}–${Math.max(...readMs)} ms`,
        );
      },
    );
  } finally {
    for (const plural of ["alphas", "betas", "gammas", "gammaz"]) {
      await c.delete(CRDS, `${plural}.${group}`).catch((err) => {
        if (!isNotFound(err)) throw err;
      });
    }
    await dropNamespace(ns);
    client.close();
  }
});
