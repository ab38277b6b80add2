/**
 * The `./testing` entry module (lib/testing/mod.ts) itself, against a minimal control plane of its
 * own in a temporary folder (not the suite's): identities from `kubeconfigFor` are the users and
 * groups the apiserver sees and RBAC decides on, `applyCrds` leaves a CRD served, the audit log
 * names who did what, `restartApiserver` keeps the data, `compact` compacts etcd, the fault proxy's
 * latency delays requests, a client tunnels through the CONNECT proxy, `connectControlPlane`'s
 * dispose leaves the plane running and `stop` removes the temporary folder. Loopback only; every wait bounded.
 */
import { fnv1a64 } from "../../lib/runtime/shards.ts";
import { parse as parseYaml, stringify as stringifyYaml } from "yaml";
import { assert, assertEquals } from "../assert.ts";
import {
  isForbidden,
  KubeClient,
  type KubeObject,
  loadClusterConfig,
  NAMESPACES,
  type ResourceType,
} from "../../lib/kube/mod.ts";
import {
  connectControlPlane,
  type ControlPlane,
  startConnectProxy,
  startControlPlane,
  startFaultProxy,
} from "../../lib/testing/mod.ts";

const WIDGETS: ResourceType = {
  apiVersion: "example.com/v1",
  kind: "Widget",
  plural: "widgets",
  namespaced: true,
};

const WIDGET_CRD = {
  apiVersion: "apiextensions.k8s.io/v1",
  kind: "CustomResourceDefinition",
  metadata: { name: "widgets.example.com" },
  spec: {
    group: "example.com",
    names: { kind: "Widget", plural: "widgets", singular: "widget", listKind: "WidgetList" },
    scope: "Namespaced",
    versions: [{
      name: "v1",
      served: true,
      storage: true,
      schema: {
        openAPIV3Schema: {
          type: "object",
          properties: { spec: { type: "object", properties: { size: { type: "integer" } } } },
        },
      },
    }],
  },
};

/** etcd's answer to a range read of `key` at `revision` (0: current), through its JSON gateway. */
async function etcdRange(endpoint: string, key: string, revision = "0") {
  const res = await fetch(`${endpoint}/v3/kv/range`, {
    method: "POST",
    body: JSON.stringify({ key: btoa(key), revision, keys_only: true, limit: 1 }),
    signal: AbortSignal.timeout(10_000),
  });
  return { status: res.status, body: await res.text() };
}

Deno.test("./testing: a control plane of its own, identities, CRDs, audit log, faults", async (t) => {
  const plane = await startControlPlane({ components: "minimal" });
  const tmp = await Deno.makeTempDir({ prefix: "testing-module-" });
  try {
    const admin = plane.client();
    assert(/^https:\/\/127\.0\.0\.1:\d+$/.test(plane.server), plane.server);

    await t.step(
      "kubeconfigFor: the user and groups RBAC decides on and the audit log names",
      async () => {
        const since = Date.now();
        const kubeconfig = await plane.kubeconfigFor("jane", ["viewers", "team a/b"]);
        const jane = new KubeClient(loadClusterConfig({ kubeconfig }), { maxRetries: 0 });
        try {
          const denied = await jane.list(NAMESPACES).catch((e) => e);
          assert(isForbidden(denied), `jane without RBAC: ${denied}`);
          // A role of its own: the aggregated `view` role gets its rules from
          // kube-controller-manager, which a minimal control plane does not run.
          const rbac = (kind: string, plural: string): ResourceType => ({
            apiVersion: "rbac.authorization.k8s.io/v1",
            kind,
            plural,
            namespaced: false,
          });
          await admin.create(rbac("ClusterRole", "clusterroles"), {
            apiVersion: "rbac.authorization.k8s.io/v1",
            kind: "ClusterRole",
            metadata: { name: "namespace-reader" },
            rules: [{ apiGroups: [""], resources: ["namespaces"], verbs: ["get", "list"] }],
          } as KubeObject);
          await admin.create(rbac("ClusterRoleBinding", "clusterrolebindings"), {
            apiVersion: "rbac.authorization.k8s.io/v1",
            kind: "ClusterRoleBinding",
            metadata: { name: "viewers-read-namespaces" },
            roleRef: {
              apiGroup: "rbac.authorization.k8s.io",
              kind: "ClusterRole",
              name: "namespace-reader",
            },
            subjects: [{ apiGroup: "rbac.authorization.k8s.io", kind: "Group", name: "viewers" }],
          } as KubeObject);
          let listed = false;
          for (let i = 0; i < 50 && !listed; i++) {
            listed = await jane.list(NAMESPACES).then(() => true, () => false);
            if (!listed) await new Promise((r) => setTimeout(r, 200));
          }
          assert(listed, "jane cannot list namespaces through the group's binding");
        } finally {
          jane.close();
        }
        const events = (await plane.auditEvents({ sinceMs: since, username: "jane" }))
          .filter((e) => e.objectRef?.resource === "namespaces" && e.verb === "list");
        assertEquals(events[0]?.responseStatus?.code, 403);
        assertEquals(events.at(-1)?.responseStatus?.code, 200);
        assertEquals(
          events[0].user?.groups?.filter((g) => g !== "system:authenticated").sort(),
          ["team a/b", "viewers"],
        );
      },
    );

    await t.step("applyCrds: a CRD from a file is served once it returns", async () => {
      const file = `${tmp}/crds.yaml`;
      await Deno.writeTextFile(file, `---\n${JSON.stringify(WIDGET_CRD)}\n`);
      assertEquals(await plane.applyCrds([file]), ["widgets.example.com"]);
      await admin.create(WIDGETS, {
        apiVersion: "example.com/v1",
        kind: "Widget",
        metadata: { name: "w", namespace: "default" },
        spec: { size: 3 },
      } as KubeObject, { namespace: "default" });
      const notCrd = `${tmp}/configmap.yaml`;
      await Deno.writeTextFile(notCrd, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n");
      const refused = await plane.applyCrds([notCrd]).catch((e) => e);
      assert(refused instanceof Error && /not only CRDs/.test(refused.message), String(refused));
    });

    await t.step("restartApiserver: same server, data kept", async () => {
      const server = plane.server;
      await plane.restartApiserver(500);
      assertEquals(plane.server, server);
      const got = await admin.get<KubeObject & { spec?: { size?: number } }>(WIDGETS, "w", {
        namespace: "default",
      });
      assertEquals(got.spec?.size, 3);
    });

    await t.step("compact: a read of an older etcd revision fails after, not before", async () => {
      const now = JSON.parse((await etcdRange(plane.info.etcdEndpoint, "/registry/")).body);
      const old = String(Number(now.header.revision) - 1);
      const before = await etcdRange(plane.info.etcdEndpoint, "/registry/", old);
      assertEquals(before.status, 200, before.body);
      await admin.create(NAMESPACES, { metadata: { name: "bump" } } as KubeObject);
      await plane.compact();
      const after = await etcdRange(plane.info.etcdEndpoint, "/registry/", old);
      assert(/compacted/.test(after.body), `after compact: ${after.status} ${after.body}`);
    });

    await t.step("startFaultProxy: latency delays each request and its answer", async () => {
      await using proxy = startFaultProxy(plane.server);
      const kubeconfig = await plane.kubeconfigFor("proxied", ["system:masters"], {
        server: proxy.url,
      });
      const c = new KubeClient(loadClusterConfig({ kubeconfig }), { maxRetries: 0 });
      try {
        await c.get(NAMESPACES, "default"); // the connection (TLS) is up before timing
        proxy.latency(300);
        const t0 = performance.now();
        await c.get(NAMESPACES, "default");
        const ms = performance.now() - t0;
        assert(ms >= 600, `a request through 300 ms of latency each way took ${ms} ms`);
        proxy.latency(0);
        assertEquals(proxy.latencyMs, 0);
      } finally {
        c.close();
      }
    });

    await t.step("startConnectProxy: a kubeconfig's proxy-url tunnels through it", async () => {
      await using proxy = startConnectProxy();
      // A proxy from the environment is not used for loopback servers (as in client-go); a
      // kubeconfig's proxy-url is.
      const cfg = parseYaml(await Deno.readTextFile(plane.kubeconfig)) as {
        clusters: { cluster: Record<string, string> }[];
      };
      for (const cl of cfg.clusters) cl.cluster["proxy-url"] = proxy.url;
      const kubeconfig = `${tmp}/kubeconfig-proxied`;
      await Deno.writeTextFile(kubeconfig, stringifyYaml(cfg));
      const c = new KubeClient(loadClusterConfig({ kubeconfig }), { maxRetries: 0 });
      try {
        assertEquals(proxy.total, 0);
        await c.get(NAMESPACES, "default");
        assertEquals([...proxy.tunnels.keys()], [new URL(plane.server).host]);
      } finally {
        c.close();
      }
    });

    await t.step("connectControlPlane: disposing it leaves the plane running", async () => {
      {
        await using other = await connectControlPlane(plane.dir);
        assertEquals(other.server, plane.server);
        await other.client().get(NAMESPACES, "default");
      }
      await admin.get(NAMESPACES, "default");
      const missing = await connectControlPlane(tmp).catch((e) => e);
      assert(missing instanceof Error && /no control plane/.test(missing.message), String(missing));
    });
  } finally {
    await plane.stop();
    await Deno.remove(tmp, { recursive: true });
  }
  const gone = await Deno.stat(plane.dir).then(() => false, () => true);
  assert(gone, `the temporary folder ${plane.dir} is left after stop`);
  const port = Number(new URL(plane.server).port);
  const listening = await Deno.connect({ hostname: "127.0.0.1", port }).then((c) => {
    c.close();
    return true;
  }, () => false);
  assert(!listening, `something still listens on ${plane.server} after stop`);
});

const CONFIG_MAPS: ResourceType = {
  apiVersion: "v1",
  kind: "ConfigMap",
  plural: "configmaps",
  namespaced: true,
};
/**
 * The lower half of the hash space. Bounds must be `0x` and 16 hex digits: kube-apiserver 1.36.3
 * answers `0x0` with 500 "hexStart must be a 0x-prefixed 16-digit hex value".
 */
const LOWER_HALF =
  "shardRange(object.metadata.namespace, '0x0000000000000000', '0x8000000000000000')";

/** A list answer's part the step reads. */
interface ShardedList {
  metadata?: { shardInfo?: { selector?: string } };
  items: KubeObject[];
}

Deno.test("./testing: featureGates reach kube-apiserver (ShardedListAndWatch on and off)", async (t) => {
  // Three namespaces on each side of 2^63 (the lower half's bound), the first found.
  const candidates = Array.from({ length: 200 }, (_, i) => `gate-${i}-ns`);
  const lower = candidates.filter((n) => fnv1a64(n) < 1n << 63n).slice(0, 3).sort();
  const upper = candidates.filter((n) => fnv1a64(n) >= 1n << 63n).slice(0, 3);
  assert(lower.length === 3 && upper.length === 3, `halves: ${lower} | ${upper}`);
  const names = [...lower, ...upper];
  /** One ConfigMap per namespace, then the list of all ConfigMaps with the selector. */
  const seed = async (plane: ControlPlane) => {
    for (const ns of names) {
      await plane.client().create(NAMESPACES, { metadata: { name: ns } } as KubeObject);
      await plane.client().create(CONFIG_MAPS, {
        apiVersion: "v1",
        kind: "ConfigMap",
        metadata: { name: "c", namespace: ns },
      } as KubeObject, { namespace: ns });
    }
  };
  const listLower = async (plane: ControlPlane) => {
    const q = new URLSearchParams({ shardSelector: LOWER_HALF });
    const l = await plane.client().raw<ShardedList>(`/api/v1/configmaps?${q}`);
    const all = [...new Set(l.items.map((o) => o.metadata!.namespace!))].sort();
    // Others' (kube-system's) too, when in range: the test's own are compared.
    const namespaces = all.filter((ns) => names.includes(ns));
    const outOfRange = all.filter((ns) => fnv1a64(ns) >= 1n << 63n);
    return { namespaces, outOfRange, shardInfo: l.metadata?.shardInfo };
  };

  await t.step("on: a list with shardSelector holds only the range and says so", async () => {
    const plane = await startControlPlane({
      components: "minimal",
      featureGates: { ShardedListAndWatch: true },
    });
    try {
      assert(
        plane.info.apiserverArgs.includes("--feature-gates=ShardedListAndWatch=true"),
        plane.info.apiserverArgs.join(" "),
      );
      await seed(plane);
      const on = await listLower(plane);
      assertEquals(on.namespaces, lower);
      assertEquals(on.outOfRange, []);
      assertEquals(on.shardInfo?.selector?.includes("object.metadata.namespace"), true);
      await plane.restartApiserver(200);
      assertEquals((await listLower(plane)).namespaces, lower, "after restartApiserver");
      await using found = await connectControlPlane(plane.dir);
      assertEquals(found.featureGates, { ShardedListAndWatch: true });
    } finally {
      await plane.stop();
    }
  });

  await t.step("off: the same list holds every namespace and no shardInfo", async () => {
    const plane = await startControlPlane({
      components: "minimal",
      featureGates: { ShardedListAndWatch: false },
    });
    try {
      assertEquals(plane.featureGates, { ShardedListAndWatch: false });
      await seed(plane);
      const off = await listLower(plane);
      assertEquals(off.namespaces, [...names].sort());
      assertEquals(off.shardInfo, undefined);
    } finally {
      await plane.stop();
    }
  });

  await t.step("a gate name that is no name is refused before anything starts", async () => {
    const err = await startControlPlane({ featureGates: { "A=true,B": true } }).catch((e) => e);
    assert(err instanceof RangeError, String(err));
  });
});
