/**
 * The finalizer helper (lib/runtime/finalizer.ts): `apply` after the finalizer is added (with a
 * resourceVersion test), `cleanup` while being deleted, the finalizer removed only after a cleanup
 * that resolved `done` (with a test of its position), nothing for an object being deleted without
 * it, a 404 on removal taken as gone.
 */
import { assertEquals, assertRejects } from "../assert.ts";
import type { KubeClient, KubeObject } from "../../lib/kube/client.ts";
import { ApiError } from "../../lib/kube/errors.ts";
import { CONFIGMAPS } from "../../lib/kube/resources.ts";
import { Reconcile, type ReconcileResult } from "../../lib/runtime/controller.ts";
import { finalizer, type FinalizerEvent } from "../../lib/runtime/finalizer.ts";

const NAME = "example.com/cleanup";

/** A client whose `patch` records its calls and answers `answer` (or throws it). */
function fakeClient(answer: (body: unknown) => KubeObject) {
  const calls: { name: string; body: unknown; type?: string }[] = [];
  const client = {
    patch: (_rt: unknown, name: string, body: unknown, o: { type?: string }) => {
      calls.push({ name, body, type: o.type });
      return Promise.resolve(answer(body));
    },
  } as unknown as KubeClient;
  return { client, calls };
}

/** A reconcile that records its events and resolves `result`. */
function recorder(result: ReconcileResult) {
  const events: FinalizerEvent<KubeObject>[] = [];
  const fn = (e: FinalizerEvent<KubeObject>) => {
    events.push(e);
    return Promise.resolve(result);
  };
  return { events, fn };
}

Deno.test("finalizer: added before the first apply, with a resourceVersion test; apply gets the answer", async () => {
  const obj: KubeObject = { metadata: { name: "a", namespace: "ns", resourceVersion: "7" } };
  const answered = { metadata: { ...obj.metadata, finalizers: [NAME], resourceVersion: "8" } };
  const { client, calls } = fakeClient(() => answered);
  const r = recorder(Reconcile.after(5));
  const added: [KubeObject, KubeObject][] = [];
  const o = { client, resource: CONFIGMAPS, name: NAME, fieldManager: "t" };
  const result = await finalizer(obj, { ...o, onAdded: (b, a) => added.push([b, a]) }, r.fn);
  assertEquals(result, Reconcile.after(5));
  assertEquals(calls, [{
    name: "a",
    type: "json",
    body: [
      { op: "test", path: "/metadata/resourceVersion", value: "7" },
      { op: "add", path: "/metadata/finalizers", value: [NAME] },
    ],
  }]);
  assertEquals(r.events, [{ type: "apply", obj: answered }]);
  assertEquals(added, [[obj, answered]]);
  // Other finalizers there: appended; with ours there: no write at all.
  const other = { metadata: { name: "b", resourceVersion: "1", finalizers: ["x"] } };
  const second = fakeClient(() => other);
  await finalizer(other, { ...o, client: second.client }, recorder(Reconcile.done).fn);
  assertEquals((second.calls[0].body as { op: string; path: string }[])[1], {
    op: "add",
    path: "/metadata/finalizers/-",
    value: NAME,
  } as never);
  const ours = { metadata: { name: "c", finalizers: ["x", NAME] } };
  const third = fakeClient(() => ours);
  const r3 = recorder(Reconcile.done);
  await finalizer(ours, { ...o, client: third.client }, r3.fn);
  assertEquals(third.calls, []);
  assertEquals(r3.events.map((e) => e.type), ["apply"]);
});

Deno.test("finalizer: removed only after a cleanup that resolved done; kept while it waits or fails", async () => {
  const deleting: KubeObject = {
    metadata: { name: "a", deletionTimestamp: "2026-01-01T00:00:00Z", finalizers: ["x", NAME] },
  };
  const o = { resource: CONFIGMAPS, name: NAME, fieldManager: "t" };
  const waiting = fakeClient(() => deleting);
  const r1 = recorder(Reconcile.backoff());
  assertEquals(await finalizer(deleting, { ...o, client: waiting.client }, r1.fn), {
    kind: "backoff",
    minMs: 0,
  });
  assertEquals(r1.events.map((e) => e.type), ["cleanup"]);
  assertEquals(waiting.calls, [], "kept while the cleanup waits");
  const failing = fakeClient(() => deleting);
  await assertRejects(() =>
    finalizer(deleting, { ...o, client: failing.client }, () => Promise.reject(new Error("no")))
  );
  assertEquals(failing.calls, [], "kept when the cleanup fails");
  const done = fakeClient(() => deleting);
  assertEquals(
    await finalizer(deleting, { ...o, client: done.client }, recorder(Reconcile.done).fn),
    Reconcile.done,
  );
  assertEquals(done.calls[0].body, [
    { op: "test", path: "/metadata/finalizers/1", value: NAME },
    { op: "remove", path: "/metadata/finalizers/1" },
  ]);
  // Gone meanwhile (404): done. Deleted without our finalizer: nothing to do.
  const gone = fakeClient(() => {
    throw new ApiError(404, { reason: "NotFound", code: 404 });
  });
  assertEquals(
    await finalizer(deleting, { ...o, client: gone.client }, recorder(Reconcile.done).fn),
    Reconcile.done,
  );
  const foreign = { metadata: { name: "b", deletionTimestamp: "x", finalizers: ["x"] } };
  const none = fakeClient(() => foreign);
  const r4 = recorder(Reconcile.done);
  assertEquals(await finalizer(foreign, { ...o, client: none.client }, r4.fn), Reconcile.done);
  assertEquals([none.calls.length, r4.events.length], [0, 0]);
});
