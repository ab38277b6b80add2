/**
 * The runtime's write helpers against the real apiserver of the local control plane, through the
 * public entry modules, in a namespace of their own:
 * - `apply` with `force: false` on a field another field manager owns is answered 409 Conflict
 *   naming that manager, and changes nothing; with `force: true` the field and its ownership move;
 *   an object sent back as read (with `managedFields`) is refused.
 * - `createOrPatch` answers `created`, then `unchanged` for the same mutation with no write at all
 *   (the client's request hook sees no write and the resourceVersion stays), then `patched` for a
 *   real change (the positive control: the same checks see the write and a new resourceVersion),
 *   leaving a field another writer set alone.
 * - `createOrPatch` with `setStatusCondition` on the test's Namespace: the condition goes to the
 *   status subresource, and setting it again writes nothing and keeps its transition time.
 */
import type { ConfigMap, Namespace } from "kubernetes-types/core/v1.d.ts";
import type { Condition, ManagedFieldsEntry } from "kubernetes-types/meta/v1.d.ts";
import { assert, assertEquals } from "../assert.ts";
import {
  ApiError,
  CONFIGMAPS,
  isConflict,
  KubeClient,
  loadClusterConfig,
  NAMESPACES,
} from "../../lib/kube/mod.ts";
import {
  apply,
  createOrPatch,
  findStatusCondition,
  type OperationResult,
  setStatusCondition,
} from "../../lib/runtime/mod.ts";
import { cluster, dropNamespace, newNamespace } from "./harness.ts";

/** The managers whose managedFields entry of `cm` owns `data.<key>`. */
function ownersOf(cm: ConfigMap, key: string): string[] {
  return (cm.metadata?.managedFields ?? [])
    .filter((e: ManagedFieldsEntry) =>
      // deno-lint-ignore no-explicit-any
      (e.fieldsV1 as any)?.["f:data"]?.[`f:${key}`] !== undefined
    )
    .map((e) => e.manager ?? "");
}

Deno.test("runtime helpers: apply's force choice and createOrPatch's created / unchanged / patched against the apiserver", async (t) => {
  const info = await cluster();
  const writes: string[] = [];
  const client = new KubeClient(loadClusterConfig({ kubeconfig: info.kubeconfig }), {
    userAgent: "runtime-helpers-e2e",
    onRequest: (r) => {
      if (r.method !== "GET") writes.push(`${r.method} ${r.path} ${r.code}`);
    },
  });
  const ns = await newNamespace("helpers");
  const get = (name: string) => client.get<ConfigMap>(CONFIGMAPS, name, { namespace: ns });
  try {
    await t.step(
      "apply, force false: 409 naming the other manager, nothing changed; force true takes the field",
      async () => {
        const cm = (k: string): ConfigMap => ({
          metadata: { name: "applied", namespace: ns },
          data: { k },
        });
        await apply(client, CONFIGMAPS, cm("theirs"), {
          fieldManager: "other-manager",
          force: false,
        });
        const before = await get("applied");
        assertEquals(ownersOf(before, "k"), ["other-manager"]);

        const err = await apply(client, CONFIGMAPS, cm("mine"), {
          fieldManager: "me",
          force: false,
        })
          .then(() => undefined, (e) => e);
        assert(err instanceof ApiError && err.code === 409 && isConflict(err), String(err));
        assert(
          err.message.includes("other-manager") && err.message.includes(".data.k"),
          err.message,
        );
        const after = await get("applied");
        assertEquals(after.data, { k: "theirs" });
        assertEquals(after.metadata?.resourceVersion, before.metadata?.resourceVersion);

        const taken = await apply(client, CONFIGMAPS, cm("mine"), {
          fieldManager: "me",
          force: true,
        });
        assertEquals(taken.data, { k: "mine" });
        assertEquals(ownersOf(taken, "k"), ["me"]);

        // An object read from the API is not an apply configuration (docs/library.md says so).
        const asRead = await apply(client, CONFIGMAPS, taken, { fieldManager: "me", force: true })
          .then(() => undefined, (e) => e);
        assert(
          asRead instanceof ApiError && asRead.code === 400 && /managedFields/.test(asRead.message),
          String(asRead),
        );
      },
    );

    await t.step(
      "createOrPatch: created, then unchanged with no write, then patched (positive control)",
      async () => {
        const key = { name: "patched", namespace: ns };
        const setColor = (color: string) => (cm: ConfigMap) => {
          cm.metadata!.labels = { ...cm.metadata!.labels, "example.com/managed": "yes" };
          cm.data = { ...cm.data, color };
        };
        const run = async (color: string): Promise<[OperationResult, string[], string]> => {
          writes.length = 0;
          const r = await createOrPatch(client, CONFIGMAPS, key, setColor(color), {
            fieldManager: "me",
          });
          return [r, [...writes], (await get("patched")).metadata!.resourceVersion!];
        };
        const base = `/api/v1/namespaces/${ns}/configmaps`;

        const [created, createWrites, rv1] = await run("blue");
        assertEquals([created, createWrites], ["created", [`POST ${base} 201`]]);
        assertEquals((await get("patched")).data, { color: "blue" });

        // Another writer's field, which the patches below must leave alone.
        await client.patch(CONFIGMAPS, "patched", { data: { extra: "theirs" } }, { namespace: ns });
        const rv2 = (await get("patched")).metadata!.resourceVersion!;
        assert(rv2 !== rv1, "the other writer's patch did not move the resourceVersion");

        const [unchanged, noWrites, rv3] = await run("blue");
        assertEquals([unchanged, noWrites], ["unchanged", []]);
        assertEquals(rv3, rv2);

        // Positive control: a real change is one PATCH and a new resourceVersion.
        const [patched, patchWrites, rv4] = await run("green");
        assertEquals([patched, patchWrites], ["patched", [`PATCH ${base}/patched 200`]]);
        assert(rv4 !== rv3, `a patch left the resourceVersion at ${rv4}`);
        const got = await get("patched");
        assertEquals(got.data, { color: "green", extra: "theirs" });
        assertEquals(got.metadata?.labels, { "example.com/managed": "yes" });
      },
    );

    await t.step(
      "createOrPatch + setStatusCondition: the condition goes to the status subresource; set again, nothing is written",
      async () => {
        const mark = (n: Namespace) => {
          // NamespaceCondition has the fields of metav1.Condition this sets.
          const conditions = (n.status?.conditions ?? []) as Condition[];
          setStatusCondition(conditions, {
            type: "example.com/Checked",
            status: "True",
            reason: "RuntimeHelpersTest",
          });
          n.status = { ...n.status, conditions: conditions as never };
        };
        writes.length = 0;
        assertEquals(
          await createOrPatch(client, NAMESPACES, { name: ns }, mark, { fieldManager: "me" }),
          "patched",
        );
        assertEquals(writes, [`PATCH /api/v1/namespaces/${ns}/status 200`]);
        const first = await client.get<Namespace>(NAMESPACES, ns);
        const cond = findStatusCondition(
          first.status?.conditions as Condition[],
          "example.com/Checked",
        );
        assertEquals([cond?.status, cond?.reason], ["True", "RuntimeHelpersTest"]);
        assert(cond?.lastTransitionTime, "no lastTransitionTime");

        writes.length = 0;
        assertEquals(
          await createOrPatch(client, NAMESPACES, { name: ns }, mark, { fieldManager: "me" }),
          "unchanged",
        );
        assertEquals(writes, []);
        const second = await client.get<Namespace>(NAMESPACES, ns);
        assertEquals(second.metadata?.resourceVersion, first.metadata?.resourceVersion);
      },
    );
  } finally {
    await dropNamespace(ns);
    client.close();
  }
});
