/**
 * The config-mirror controller tested with nothing but `./testing`, `./kube` and `./runtime`
 * (their entry modules) and the example's own files: a control plane of its own (etcd and
 * kube-apiserver, `components: "minimal"`), the example's CRD applied, the controller run in this
 * process under a user of its own (so the audit log tells its writes from the test's), resyncing
 * every {@link RESYNC_MS}. Checked through the apiserver: a ConfigMap copied into two namespaces
 * with Ready and observedGeneration, a source change followed, a hand edit put back by the
 * controller, no write while nothing changes, a namespace taken off the list losing its copy, the
 * source immutable, an object of the same name the controller did not make left alone, a Service
 * copied without the clusterIP and node port the apiserver allocated to the source (and no write
 * at resync), a copy changed between read and write met by a 409 and written again, a source of a
 * CRD kind installed during the test found through discovery, and the copies deleted by the
 * finalizer. Each convergence within {@link CONVERGE_MS}.
 *
 * Run alone: `deno test -A examples/config-mirror/controller_test.ts`; `deno task test` runs it
 * with the rest of the suite.
 */
import { deepStrictEqual, ok, rejects } from "node:assert/strict";
import type { ConfigMap, Namespace, Service } from "kubernetes-types/core/v1.d.ts";
import {
  CONFIGMAPS,
  DynamicClient,
  isConflict,
  isInvalid,
  isNotFound,
  type KindRef,
  KubeClient,
  type KubeObject,
  loadClusterConfig,
  NAMESPACES,
  type ResourceType,
} from "../../lib/kube/mod.ts";
import { findStatusCondition, Manager } from "../../lib/runtime/mod.ts";
import { startControlPlane } from "../../lib/testing/mod.ts";
import {
  addConfigMirrorController,
  CONFIG_MIRRORS,
  type ConfigMirror,
  FINALIZER,
  MAX_COPY_WRITES,
  UID_LABEL,
  writeCopy,
} from "./controller.ts";

/** Core v1 Services (not among ./kube's constants). */
const SERVICES: ResourceType = {
  apiVersion: "v1",
  kind: "Service",
  plural: "services",
  namespaced: true,
};

/** The controller's resync period in this test (ms). */
const RESYNC_MS = 300;
/** Bound of each convergence (ms). */
const CONVERGE_MS = 10_000;
/** The controller's user name in the audit log. */
const CONTROLLER_USER = "config-mirror-controller";
/** The namespace of the sources and ConfigMirrors, the two targets, and one with its own `app`. */
const [HOME, TEAM_A, TEAM_B, TEAM_C] = ["mirror-home", "team-a", "team-b", "team-c"];

/** A kind the controller cannot know: testdata/flag_crd.yaml, installed during the test. */
const FLAG_CRD = new URL("./testdata/flag_crd.yaml", import.meta.url).pathname;
/** The FeatureFlag kind; the test, like the controller, addresses it through discovery. */
const FLAGS: KindRef = { apiVersion: "flags.example.com/v1", kind: "FeatureFlag" };
/** A FeatureFlag as the test reads it. */
type Flag = KubeObject & { spec?: { enabled?: boolean; rolloutPercent?: number } };

/**
 * Calls `fn` every 100 ms until it returns a value other than undefined, at most `timeoutMs`;
 * a rejection counts as "not yet" (assert on the value returned, not inside `fn`).
 * @throws Error naming `what` and the last rejection on timeout
 */
async function until<T>(
  what: string,
  fn: () => Promise<T | undefined>,
  timeoutMs = CONVERGE_MS,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last = "undefined";
  while (Date.now() < deadline) {
    const got = await fn().then((value) => ({ value }), (err) => ({ err }));
    if ("value" in got && got.value !== undefined) return got.value;
    last = "err" in got ? String(got.err) : "undefined";
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what} (last: ${last})`);
}

/** The object of `ref`'s kind read through `dynamic`, or undefined when absent. */
async function find<T extends KubeObject>(
  dynamic: DynamicClient,
  ref: KindRef,
  name: string,
  namespace: string,
): Promise<T | undefined> {
  try {
    return await dynamic.get<T>(ref, name, { namespace });
  } catch (err) {
    if (isNotFound(err)) return undefined;
    throw err;
  }
}

Deno.test("config-mirror on ./testing: copies of any kind kept in sync", async (t) => {
  await using plane = await startControlPlane({ components: "minimal" });
  const admin = plane.client();
  const dynamic = new DynamicClient(admin);
  for (const name of [HOME, TEAM_A, TEAM_B, TEAM_C]) {
    await admin.create<Namespace>(NAMESPACES, { metadata: { name } });
  }
  const mirror = (name: string) =>
    admin.get<ConfigMirror>(CONFIG_MIRRORS, name, { namespace: HOME });
  const dataIn = async (ns: string) =>
    (await find<ConfigMap>(dynamic, CONFIGMAPS, "app", ns))?.data;
  /** The mirror once its Ready condition has `status` and `reason` for its current generation. */
  const readyFor = (name: string, status: string, reason: string) =>
    until(`${name} Ready ${status} ${reason}`, async () => {
      const m = await mirror(name);
      const ready = findStatusCondition(m.status?.conditions ?? [], "Ready");
      const current = ready?.observedGeneration === m.metadata?.generation &&
        m.status?.observedGeneration === m.metadata?.generation;
      return current && ready?.status === status && ready.reason === reason ? m : undefined;
    });
  /** The data of the copies in both targets, once both equal `data`. */
  const copiesEqual = (data: Record<string, string>) =>
    until(`copies with ${JSON.stringify(data)}`, async () => {
      const copies = [await dataIn(TEAM_A), await dataIn(TEAM_B)];
      return copies.every((d) => JSON.stringify(d) === JSON.stringify(data)) ? copies : undefined;
    });

  /** Creates ConfigMirror `name` in HOME copying `source` (an object of HOME) into `targets`. */
  const createMirror = (name: string, source: ConfigMirror["spec"]["source"], targets: string[]) =>
    admin.create<ConfigMirror>(CONFIG_MIRRORS, {
      apiVersion: CONFIG_MIRRORS.apiVersion,
      kind: CONFIG_MIRRORS.kind,
      metadata: { name, namespace: HOME },
      spec: { source, targetNamespaces: targets },
    });
  /**
   * Over six resyncs: no write of the controller (asserted), and (the positive control) its list
   * of `resource`, which shows that it did resync meanwhile.
   */
  const noWritesOverResyncs = async (resource: string) => {
    const since = Date.now();
    await new Promise((r) => setTimeout(r, 6 * RESYNC_MS));
    const events = await plane.auditEvents({ sinceMs: since, username: CONTROLLER_USER });
    const writes = events.filter((e) => !["get", "list", "watch"].includes(e.verb));
    deepStrictEqual(writes.map((e) => `${e.verb} ${e.requestURI}`), []);
    ok(
      events.some((e) => e.verb === "list" && e.objectRef?.resource === resource),
      `the controller did not list ${resource} in that time`,
    );
  };

  let stop: AbortController | undefined;
  let run: Promise<number> | undefined;
  let client: KubeClient | undefined;
  try {
    await t.step("the example's CRD is applied and served", async () => {
      await plane.applyCrds([new URL("./crd.yaml", import.meta.url).pathname]);
      const served = await dynamic.discovery.resolve(CONFIG_MIRRORS);
      deepStrictEqual(served, CONFIG_MIRRORS);
      const kubeconfig = await plane.kubeconfigFor(CONTROLLER_USER, ["system:masters"]);
      client = new KubeClient(loadClusterConfig({ kubeconfig }));
      const manager = new Manager({ client });
      addConfigMirrorController(manager, { resyncMs: RESYNC_MS });
      stop = new AbortController();
      run = manager.run(stop.signal);
    });

    await t.step("a ConfigMap is copied into two namespaces; Ready", async () => {
      const home = await admin.get<Namespace>(NAMESPACES, HOME);
      const owner = { apiVersion: "v1", kind: "Namespace", name: HOME, uid: home.metadata!.uid! };
      const source = await admin.create<ConfigMap>(CONFIGMAPS, {
        metadata: { name: "app", namespace: HOME, ownerReferences: [owner] },
        data: { level: "info" },
      });
      await createMirror("app", { apiVersion: "v1", kind: "ConfigMap", name: "app" }, [
        TEAM_A,
        TEAM_B,
      ]);
      await copiesEqual({ level: "info" });
      const m = await readyFor("app", "True", "Synced");
      deepStrictEqual([m.metadata?.generation, m.status?.synced], [1, 2]);
      deepStrictEqual(m.metadata?.finalizers, [FINALIZER]);
      const copy = await admin.get<ConfigMap>(CONFIGMAPS, "app", { namespace: TEAM_A });
      deepStrictEqual(copy.metadata?.labels?.[UID_LABEL], m.metadata?.uid);
      // What the apiserver assigned to the source is not copied: the copy has its own.
      ok(copy.metadata?.uid && copy.metadata.uid !== source.metadata?.uid);
      deepStrictEqual(copy.metadata?.ownerReferences, undefined);
    });

    await t.step("a change of the source reaches both copies", async () => {
      await admin.patch(CONFIGMAPS, "app", { data: { level: "debug", trace: "on" } }, {
        namespace: HOME,
      });
      await copiesEqual({ level: "debug", trace: "on" });
    });

    await t.step("a copy edited by hand is put back by the controller", async () => {
      const since = Date.now();
      await admin.patch(CONFIGMAPS, "app", { data: { level: "error", mine: "x" } }, {
        namespace: TEAM_A,
      });
      await copiesEqual({ level: "debug", trace: "on" });
      const writes = await plane.auditEvents({ sinceMs: since, username: CONTROLLER_USER });
      const restores = writes.filter((e) =>
        e.verb === "patch" && e.objectRef?.resource === "configmaps" &&
        e.objectRef.namespace === TEAM_A
      );
      deepStrictEqual(restores.map((e) => e.responseStatus?.code), [200]);
    });

    await t.step("with nothing changed, resyncs write nothing", async () => {
      await noWritesOverResyncs("configmaps");
    });

    await t.step("a target taken off the list loses its copy; observedGeneration 2", async () => {
      await admin.patch(CONFIG_MIRRORS, "app", { spec: { targetNamespaces: [TEAM_A] } }, {
        namespace: HOME,
      });
      await until(
        "copy in team-b deleted",
        async () => (await dataIn(TEAM_B)) ? undefined : true,
      );
      const m = await readyFor("app", "True", "Synced");
      deepStrictEqual([m.metadata?.generation, m.status?.synced], [2, 1]);
      deepStrictEqual(await dataIn(TEAM_A), { level: "debug", trace: "on" });
      const patch = { spec: { source: { apiVersion: "v1", kind: "Secret", name: "app" } } };
      await rejects(admin.patch(CONFIG_MIRRORS, "app", patch, { namespace: HOME }), isInvalid);
    });

    await t.step("an object it did not make is left alone: Ready False, CopyFailed", async () => {
      const theirs = { metadata: { name: "app", namespace: TEAM_C }, data: { level: "theirs" } };
      await admin.create<ConfigMap>(CONFIGMAPS, theirs);
      const targets = (targetNamespaces: string[]) =>
        admin.patch(CONFIG_MIRRORS, "app", { spec: { targetNamespaces } }, { namespace: HOME });
      await targets([TEAM_A, TEAM_C]);
      const m = await readyFor("app", "False", "CopyFailed");
      ok(findStatusCondition(m.status!.conditions!, "Ready")?.message?.includes(TEAM_C));
      deepStrictEqual([m.metadata?.generation, m.status?.synced], [3, 1]);
      const after = await admin.get<ConfigMap>(CONFIGMAPS, "app", { namespace: TEAM_C });
      deepStrictEqual([after.data, after.metadata?.labels], [theirs.data, undefined]);
      await targets([TEAM_A]);
      await readyFor("app", "True", "Synced");
    });

    await t.step(
      "a Service is copied without what the apiserver allocated; no write at resync",
      async () => {
        const source = await admin.create<Service & KubeObject>(SERVICES, {
          metadata: { name: "web", namespace: HOME },
          spec: {
            type: "NodePort",
            selector: { app: "web" },
            ports: [{ name: "http", port: 80, targetPort: 8080 }],
          },
        });
        ok(source.spec?.clusterIP && source.spec.ports?.[0].nodePort, "nothing was allocated");
        await createMirror("svc", { apiVersion: "v1", kind: "Service", name: "web" }, [
          TEAM_A,
          TEAM_B,
        ]);
        const m = await readyFor("svc", "True", "Synced");
        deepStrictEqual(m.status?.synced, 2);
        const copies: (Service & KubeObject)[] = [];
        for (const ns of [TEAM_A, TEAM_B]) {
          const copy = await admin.get<Service & KubeObject>(SERVICES, "web", { namespace: ns });
          copies.push(copy);
          deepStrictEqual(copy.spec?.selector, source.spec?.selector);
          deepStrictEqual(copy.spec?.ports?.map((p) => [p.name, p.port, p.targetPort]), [[
            "http",
            80,
            8080,
          ]]);
          ok(copy.spec?.clusterIP && copy.spec.clusterIP !== source.spec?.clusterIP);
          ok(copy.spec?.ports?.[0].nodePort !== source.spec?.ports?.[0].nodePort);
          deepStrictEqual(copy.metadata?.ownerReferences, undefined);
        }
        // In sync although each copy has its own allocation: resyncs write nothing.
        await noWritesOverResyncs("services");
        // A hand edit is put back; the copy keeps its own clusterIP and node port.
        await admin.patch(SERVICES, "web", { spec: { selector: { app: "other" } } }, {
          namespace: TEAM_A,
        });
        const restored = await until("the Service copy put back", async () => {
          const c = await admin.get<Service & KubeObject>(SERVICES, "web", { namespace: TEAM_A });
          return c.spec?.selector?.app === "web" ? c : undefined;
        });
        deepStrictEqual(
          [restored.spec?.clusterIP, restored.spec?.ports?.[0].nodePort],
          [copies[0].spec?.clusterIP, copies[0].spec?.ports?.[0].nodePort],
        );
        await admin.delete(CONFIG_MIRRORS, "svc", { namespace: HOME });
        for (const ns of [TEAM_A, TEAM_B]) {
          await until(
            `Service copy in ${ns} deleted`,
            async () => (await find(dynamic, SERVICES, "web", ns)) ? undefined : true,
          );
        }
      },
    );

    await t.step(
      "a copy changed between its read and its write: 409, read again, written again",
      async () => {
        await admin.create<ConfigMap>(CONFIGMAPS, {
          metadata: { name: "locked", namespace: TEAM_C },
          data: { level: "info" },
        });
        const key = { name: "locked", namespace: TEAM_C };
        let calls = 0;
        // The first mutation runs while another writer adds `mine`: the write must not keep it.
        const result = await writeCopy(
          admin,
          CONFIGMAPS,
          key,
          async (obj: KubeObject & { data?: Record<string, string> }) => {
            if (++calls === 1) {
              await admin.patch(CONFIGMAPS, "locked", { data: { mine: "x" } }, {
                namespace: TEAM_C,
              });
            }
            obj.data = { level: "debug" };
          },
        );
        deepStrictEqual([result, calls], ["patched", 2]);
        const after = await admin.get<ConfigMap>(CONFIGMAPS, "locked", { namespace: TEAM_C });
        deepStrictEqual(after.data, { level: "debug" });
        // A writer that changes it every time: MAX_COPY_WRITES writes, then the 409.
        calls = 0;
        await rejects(
          writeCopy(
            admin,
            CONFIGMAPS,
            key,
            async (obj: KubeObject & { data?: Record<string, string> }) => {
              await admin.patch(CONFIGMAPS, "locked", { data: { n: String(++calls) } }, {
                namespace: TEAM_C,
              });
              obj.data = { level: "error" };
            },
          ),
          isConflict,
        );
        deepStrictEqual(calls, MAX_COPY_WRITES);
        await admin.delete(CONFIGMAPS, "locked", { namespace: TEAM_C });
      },
    );

    await t.step("a kind whose CRD is made during the test is found by discovery", async () => {
      await createMirror("flag", {
        apiVersion: FLAGS.apiVersion,
        kind: "FeatureFlag",
        name: "dark-mode",
      }, [TEAM_A, TEAM_B]);
      await readyFor("flag", "False", "KindNotServed");
      await plane.applyCrds([FLAG_CRD]);
      const spec = { enabled: true, rolloutPercent: 25 };
      await dynamic.create(FLAGS, { metadata: { name: "dark-mode", namespace: HOME }, spec });
      const m = await readyFor("flag", "True", "Synced");
      for (const ns of [TEAM_A, TEAM_B]) {
        const copy: Flag | undefined = await find(dynamic, FLAGS, "dark-mode", ns);
        deepStrictEqual(copy?.spec, spec);
        deepStrictEqual(copy?.metadata?.labels?.[UID_LABEL], m.metadata?.uid);
      }
    });

    await t.step("on delete, the finalizer's cleanup deletes the copies", async () => {
      await admin.delete(CONFIG_MIRRORS, "app", { namespace: HOME });
      await admin.delete(CONFIG_MIRRORS, "flag", { namespace: HOME });
      for (const name of ["app", "flag"]) {
        await until(
          `${name} gone`,
          async () => (await find(dynamic, CONFIG_MIRRORS, name, HOME)) ? undefined : true,
        );
      }
      deepStrictEqual(await dataIn(TEAM_A), undefined);
      for (const ns of [TEAM_A, TEAM_B]) {
        deepStrictEqual(await find(dynamic, FLAGS, "dark-mode", ns), undefined);
      }
      ok(await dataIn(HOME), "the source ConfigMap was deleted");
    });

    await t.step("the manager stops with exit code 0", async () => {
      stop!.abort();
      deepStrictEqual(await run, 0);
    });
  } finally {
    stop?.abort();
    await run;
    client?.close();
  }
});
