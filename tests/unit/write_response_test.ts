/**
 * The `response` option of the client's write verbs (lib/kube/client.ts `WriteResponse`): what is
 * asked of the apiserver (`Accept`), what is decoded of a successful answer, and that error
 * answers are decoded in full whatever it says; here the client's side against a recording
 * server (the apiserver's side is exercised by the operator's e2e tests: its Pod creates and
 * status writes use it).
 *
 * @module
 */
import { assert, assertEquals, assertRejects } from "../assert.ts";
import { KubeClient, type KubeObject, METADATA_ACCEPT } from "../../lib/kube/client.ts";
import { ApiError } from "../../lib/kube/errors.ts";
import { CONFIGMAPS } from "../../lib/kube/resources.ts";
import { applyMergePatch, statusWritten } from "../../lib/appservice/written.ts";
import type { AppService } from "../../lib/appservice/schema.ts";
import { FakeServer } from "./fakeapi.ts";

Deno.test("write response: full, metadata and none ask and decode what they say", async () => {
  const server = new FakeServer();
  const accepts: string[] = [];
  // A body that is not JSON: decoding it would throw, so a resolved "none" proves it was not.
  let body = "not json";
  server.handler = (req) => {
    accepts.push(req.headers.get("Accept") ?? "");
    return new Response(body, { status: 200, headers: { "Content-Type": "application/json" } });
  };
  const client = new KubeClient(server.config());
  try {
    const cm = { metadata: { name: "a", namespace: "ns" } };
    assertEquals(await client.create(CONFIGMAPS, cm, { response: "none" }), undefined);
    assertEquals(
      await client.patch(CONFIGMAPS, "a", {}, { namespace: "ns", response: "none" }),
      undefined,
    );
    assertEquals(await client.update(CONFIGMAPS, cm, { response: "none" }), undefined);
    assertEquals(
      await client.delete(CONFIGMAPS, "a", { namespace: "ns", response: "none" }),
      undefined,
    );
    // The default decodes: the same body fails to parse.
    const bad = await assertRejects(() => client.patch(CONFIGMAPS, "a", {}, { namespace: "ns" }));
    assert(bad instanceof SyntaxError, String(bad));
    body = JSON.stringify({
      kind: "PartialObjectMetadata",
      apiVersion: "meta.k8s.io/v1",
      metadata: { name: "a", uid: "u1", resourceVersion: "7" },
    });
    const m = await client.create(CONFIGMAPS, cm, { response: "metadata" });
    assertEquals(m.metadata.uid, "u1");
    const full = await client.create<KubeObject>(CONFIGMAPS, cm);
    assertEquals(full.metadata?.resourceVersion, "7");
    assertEquals(accepts, [
      METADATA_ACCEPT,
      METADATA_ACCEPT,
      METADATA_ACCEPT,
      METADATA_ACCEPT,
      "application/json",
      METADATA_ACCEPT,
      "application/json",
    ]);
  } finally {
    client.close();
    await server.close();
  }
});

Deno.test("write response: an error answer is decoded in full with response none", async () => {
  const server = new FakeServer();
  let n = 0;
  server.handler = () => {
    n++;
    return Response.json({
      kind: "Status",
      apiVersion: "v1",
      status: "Failure",
      reason: "AlreadyExists",
      message: 'configmaps "a" already exists',
      details: { name: "a", kind: "configmaps" },
      code: 409,
    }, { status: 409 });
  };
  const client = new KubeClient(server.config());
  try {
    const err = await assertRejects(
      () =>
        client.create(CONFIGMAPS, { metadata: { name: "a", namespace: "ns" } }, {
          response: "none",
        }),
    );
    assert(err instanceof ApiError, String(err));
    assertEquals(err.code, 409);
    assertEquals(err.reason, "AlreadyExists");
    assertEquals(err.status?.details?.name, "a");
    // The connection still serves the next request (the body was read to its end).
    server.handler = () => Response.json({ metadata: { name: "a" } });
    assertEquals(
      await client.patch(CONFIGMAPS, "a", {}, { namespace: "ns", response: "none" }),
      undefined,
    );
    assertEquals(n, 1);
  } finally {
    client.close();
    await server.close();
  }
});

Deno.test("applyMergePatch: RFC 7386 (members replace, objects merge, null removes)", () => {
  const target = { a: 1, b: { c: 2, d: [1, 2] }, e: "x" };
  const out = applyMergePatch(target, { a: 2, b: { d: [3], f: true }, e: null });
  assertEquals(out, { a: 2, b: { c: 2, d: [3], f: true } });
  // Neither argument is changed.
  assertEquals(target, { a: 1, b: { c: 2, d: [1, 2] }, e: "x" });
  assertEquals(applyMergePatch({ a: 1 }, [1]), [1]);
  assertEquals(applyMergePatch("s", { a: { b: 1 } }), { a: { b: 1 } });
});

Deno.test("statusWritten: the stored AppService from the answered metadata and the patch", () => {
  const from = {
    apiVersion: "example.com/v1",
    kind: "AppService",
    metadata: { name: "a", namespace: "ns", uid: "u", resourceVersion: "5", generation: 2 },
    spec: { replicas: 1 },
    status: { observedGeneration: 1, replicas: 0, message: "old" },
  } as unknown as AppService;
  const got = statusWritten(from, { observedGeneration: 2, replicas: 1 }, {
    name: "a",
    namespace: "ns",
    uid: "u",
    resourceVersion: "6",
    generation: 2,
    managedFields: [{ manager: "m" }],
  });
  assertEquals(got.metadata.resourceVersion, "6");
  assert(!("managedFields" in got.metadata));
  assertEquals(got.spec, from.spec);
  assertEquals(got.status as unknown, { observedGeneration: 2, replicas: 1, message: "old" });
  assertEquals(from.metadata.resourceVersion, "5");
});
