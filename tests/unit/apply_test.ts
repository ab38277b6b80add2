/**
 * The write helpers (lib/runtime/apply.ts) against a recording client (what they send; the
 * apiserver's side is tests/e2e/runtime_helpers_test.ts): `apply` is a server-side apply patch with
 * the field manager and the force choice as given, and refuses to run without a boolean `force`;
 * `createOrPatch` creates on 404, sends the merge patch of what `mutate` changed, sends nothing
 * when it changed nothing, sends a `status` change to the status subresource, adds the
 * resourceVersion read with `optimisticLock`, and refuses a mutation of the name or namespace
 * before anything is written.
 */
import type { ConfigMap } from "kubernetes-types/core/v1.d.ts";
import { assert, assertEquals, assertRejects } from "../assert.ts";
import type { KubeClient, KubeObject } from "../../lib/kube/client.ts";
import { ApiError } from "../../lib/kube/errors.ts";
import { CONFIGMAPS, NAMESPACES, SERVICES } from "../../lib/kube/resources.ts";
import { apply, createOrPatch, KeyChangedError } from "../../lib/runtime/apply.ts";

/** One request the fake client was given. */
interface Call {
  verb: "get" | "create" | "patch";
  name?: string;
  body?: unknown;
  opts: Record<string, unknown>;
}

/** A client holding at most one object (`stored`), recording every call. */
function fakeClient(stored?: KubeObject, getError?: ApiError) {
  const calls: Call[] = [];
  const client = {
    get: (_rt: unknown, name: string, opts: Record<string, unknown>) => {
      calls.push({ verb: "get", name, opts });
      if (getError) return Promise.reject(getError);
      if (!stored) return Promise.reject(new ApiError(404, { reason: "NotFound" }));
      return Promise.resolve(structuredClone(stored));
    },
    create: (_rt: unknown, body: KubeObject, opts: Record<string, unknown>) => {
      calls.push({ verb: "create", body, opts });
      return Promise.resolve(body);
    },
    patch: (_rt: unknown, name: string, body: unknown, opts: Record<string, unknown>) => {
      calls.push({ verb: "patch", name, body, opts });
      return Promise.resolve({
        ...stored,
        metadata: { ...stored?.metadata, resourceVersion: "8" },
      });
    },
  } as unknown as KubeClient;
  return { client, calls };
}

const CM: ConfigMap = {
  apiVersion: "v1",
  kind: "ConfigMap",
  metadata: { name: "cm", namespace: "ns", resourceVersion: "7", uid: "u1", labels: { a: "1" } },
  data: { k: "v" },
};

Deno.test("apply: a server-side apply patch with the field manager and force as given", async () => {
  for (const force of [false, true]) {
    const { client, calls } = fakeClient();
    await apply(
      client,
      CONFIGMAPS,
      { metadata: { name: "cm", namespace: "ns" }, data: { k: "v" } },
      {
        fieldManager: "me",
        force,
      },
    );
    assertEquals(calls, [{
      verb: "patch",
      name: "cm",
      body: {
        metadata: { name: "cm", namespace: "ns" },
        data: { k: "v" },
        apiVersion: "v1",
        kind: "ConfigMap",
      },
      opts: {
        type: "apply",
        namespace: "ns",
        fieldManager: "me",
        force,
        subresource: undefined,
        signal: undefined,
      },
    }]);
  }
  // Cluster-scoped: no namespace in the request even if the object names one.
  const { client, calls } = fakeClient();
  await apply(client, NAMESPACES, { metadata: { name: "n", namespace: "x" } }, {
    fieldManager: "me",
    force: false,
  });
  assertEquals(calls[0].opts.namespace, undefined);
});

Deno.test("apply: refused without a boolean force, a field manager, a name or a namespace; nothing sent", async () => {
  const { client, calls } = fakeClient();
  const obj = { metadata: { name: "cm", namespace: "ns" } };
  // @ts-expect-error force is required by the type: the choice must be written out
  await assertRejects(() => apply(client, CONFIGMAPS, obj, { fieldManager: "me" }), /force/);
  await assertRejects(
    () => apply(client, CONFIGMAPS, obj, { fieldManager: "", force: true }),
    /fieldManager/,
  );
  await assertRejects(
    () => apply(client, CONFIGMAPS, { metadata: {} }, { fieldManager: "me", force: true }),
    /without metadata.name/,
  );
  await assertRejects(
    () =>
      apply(client, CONFIGMAPS, { metadata: { name: "cm" } }, { fieldManager: "me", force: true }),
    /namespaced/,
  );
  assertEquals(calls, []);
});

/** An object with a spec and a status (a Service's shape, for the status subresource). */
type WithStatus = KubeObject & { spec?: unknown; status?: unknown };

/** createOrPatch of `ns/cm` on a fake client holding `stored`: what it answered and was sent. */
async function run<T extends KubeObject>(
  stored: KubeObject | undefined,
  mutate: (obj: T) => void,
  o: { optimisticLock?: boolean; resource?: typeof CONFIGMAPS } = {},
) {
  const { client, calls } = fakeClient(stored);
  const result = await createOrPatch<T>(
    client,
    o.resource ?? CONFIGMAPS,
    {
      name: "cm",
      namespace: "ns",
    },
    mutate,
    { fieldManager: "me", optimisticLock: o.optimisticLock },
  );
  const sent = calls.slice(1).map((c) => [c.verb, c.opts.type, c.opts.subresource, c.body]);
  return { result, calls, sent };
}

Deno.test("createOrPatch: absent → the mutated new object is created", async () => {
  const { result, calls } = await run<ConfigMap>(undefined, (cm) => {
    cm.data = { k: "v" };
  });
  assertEquals(result, "created");
  assertEquals(calls.map((c) => c.verb), ["get", "create"]);
  assertEquals(calls[1].body, {
    apiVersion: "v1",
    kind: "ConfigMap",
    metadata: { name: "cm", namespace: "ns" },
    data: { k: "v" },
  });
  assertEquals(calls[1].opts.fieldManager, "me");
});

Deno.test("createOrPatch: present and not changed by mutate → unchanged, only the read", async () => {
  const { result, calls } = await run<ConfigMap>(CM, (cm) => {
    cm.data = { k: "v" }; // already so
    cm.metadata!.labels!.a = "1";
  });
  assertEquals([result, calls.map((c) => c.verb)], ["unchanged", ["get"]]);
});

Deno.test("createOrPatch: present and changed → one merge patch of the difference", async () => {
  const { result, sent } = await run<ConfigMap>(CM, (cm) => {
    cm.data = { k2: "v2" };
    delete cm.metadata!.labels;
  });
  assertEquals(result, "patched");
  assertEquals(sent, [
    ["patch", "merge", undefined, { metadata: { labels: null }, data: { k: null, k2: "v2" } }],
  ]);
});

Deno.test("createOrPatch: a status change goes to the status subresource; optimisticLock sends the resourceVersions", async () => {
  const svc = { ...CM, kind: "Service", data: undefined, spec: { ports: [] }, status: {} };
  const both = await run<WithStatus>(svc, (s) => {
    s.metadata!.labels = { a: "2" };
    s.status = { loadBalancer: { ingress: [{ ip: "10.0.0.1" }] } };
  }, { optimisticLock: true, resource: SERVICES });
  assertEquals(both.result, "patched");
  assertEquals(both.sent, [
    ["patch", "merge", undefined, { metadata: { labels: { a: "2" }, resourceVersion: "7" } }],
    ["patch", "merge", "status", {
      status: { loadBalancer: { ingress: [{ ip: "10.0.0.1" }] } },
      metadata: { resourceVersion: "8" }, // the main patch's answer
    }],
  ]);
  // Only status changed: only the status patch.
  const only = await run<WithStatus>(svc, (s) => {
    s.status = { x: 1 };
  }, { resource: SERVICES });
  assertEquals(only.sent, [["patch", "merge", "status", { status: { x: 1 } }]]);
});

Deno.test("createOrPatch: mutate may not change the name or namespace (KeyChangedError, nothing written)", async () => {
  for (const stored of [undefined, CM]) {
    for (const change of [{ name: "other" }, { namespace: "other" }]) {
      const { client, calls } = fakeClient(stored);
      const err = await assertRejects(() =>
        createOrPatch(client, CONFIGMAPS, { name: "cm", namespace: "ns" }, (cm) => {
          cm.metadata = { ...cm.metadata, ...change };
        }, { fieldManager: "me" })
      );
      assert(err instanceof KeyChangedError, String(err));
      assertEquals(calls.map((c) => c.verb), ["get"]);
    }
  }
});

Deno.test("createOrPatch: a read error other than 404 is thrown; a namespaced key needs a namespace", async () => {
  const { client, calls } = fakeClient(CM, new ApiError(403, { reason: "Forbidden" }));
  await assertRejects(
    () =>
      createOrPatch(client, CONFIGMAPS, { name: "cm", namespace: "ns" }, () => {}, {
        fieldManager: "me",
      }),
    /403/,
  );
  await assertRejects(
    () => createOrPatch(client, CONFIGMAPS, { name: "cm" }, () => {}, { fieldManager: "me" }),
    /namespaced/,
  );
  assertEquals(calls.map((c) => c.verb), ["get"]);
});
