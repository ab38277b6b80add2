/**
 * Controller ownership (lib/runtime/ownership.ts): the controller reference, and `claim` sorting
 * candidates as client-go's ClaimObject does — owned while matching, released when not (unless the
 * owner is being deleted), orphans adopted only when they match, are not being deleted, are in the
 * owner's namespace and the owner is not being deleted; another controller's objects untouched.
 * A property test checks that every candidate lands in at most one list and that no list holds an
 * object controlled by another owner.
 *
 * The reference editors (controllerutil's rules): setControllerReference refuses an object another
 * owner controls (AlreadyOwnedError) and an owner of another namespace (InvalidOwnerError), updates
 * a reference to the same group/kind/name in place, and reports whether anything changed;
 * setOwnerReference adds a plain reference; hasControllerReference, hasOwnerReference and
 * removeOwnerReference; none of them modifies the metadata or references it was given. A property
 * test: after any sequence of set/remove calls an object has at most one controller and at most
 * one reference per owner, and a second identical call reports no change.
 */
import fc from "fast-check";
import { assert, assertEquals, assertRejects } from "../assert.ts";
import type { KubeObject } from "../../lib/kube/client.ts";
import {
  AlreadyOwnedError,
  claim,
  controllerOf,
  controllerReference,
  hasControllerReference,
  hasOwnerReference,
  InvalidOwnerError,
  isControlledBy,
  type OwnerIdentity,
  removeOwnerReference,
  setControllerReference,
  setOwnerReference,
} from "../../lib/runtime/ownership.ts";

const OWNER = { metadata: { name: "web", namespace: "ns", uid: "u-web" } };

/** An object in `ns` named `name`, controlled by `ctl` (uid) if given. */
function obj(name: string, o: { ctl?: string; ns?: string; deleting?: boolean } = {}): KubeObject {
  return {
    metadata: {
      name,
      namespace: o.ns ?? "ns",
      uid: `u-${name}`,
      ownerReferences: [
        { apiVersion: "v1", kind: "ConfigMap", name: "other", uid: "u-plain" },
        ...(o.ctl
          ? [{
            apiVersion: "apps.our-org.com/v1",
            kind: "AppService",
            name: "x",
            uid: o.ctl,
            controller: true,
          }]
          : []),
      ],
      deletionTimestamp: o.deleting ? "2026-12-02T00:00:00Z" : undefined,
    },
  };
}

const names = (xs: KubeObject[]) => xs.map((x) => x.metadata?.name);
const matchWeb = (x: KubeObject) => x.metadata!.name!.startsWith("web-");

Deno.test("controllerReference: controller true, blockOwnerDeletion only when asked; refuses an owner without uid", () => {
  const owner = { apiVersion: "apps.our-org.com/v1", kind: "AppService", metadata: OWNER.metadata };
  assertEquals(controllerReference(owner), {
    apiVersion: "apps.our-org.com/v1",
    kind: "AppService",
    name: "web",
    uid: "u-web",
    controller: true,
  });
  assertEquals(controllerReference(owner, { blockOwnerDeletion: true }).blockOwnerDeletion, true);
  let threw = false;
  try {
    controllerReference({ ...owner, metadata: { name: "web" } });
  } catch {
    threw = true;
  }
  assert(threw, "a reference to an owner without uid was made");
});

Deno.test("controllerOf / isControlledBy: only the reference with controller true counts", () => {
  assertEquals(controllerOf(obj("a")), undefined);
  assertEquals(controllerOf(obj("a", { ctl: "u-web" }))?.uid, "u-web");
  assertEquals(isControlledBy(obj("a", { ctl: "u-web" }), "u-web"), true);
  assertEquals(isControlledBy(obj("a", { ctl: "u-web" }), "u-other"), false);
  // A plain (non-controller) reference with the owner's uid is not control.
  assertEquals(isControlledBy(obj("a"), "u-plain"), false);
  assertEquals(isControlledBy(obj("a", { ctl: "u-web" }), undefined), false);
});

Deno.test("claim: owned, adopted, released and untouched as ClaimObject sorts them", () => {
  const c = claim(OWNER, [
    obj("web-0", { ctl: "u-web" }), // ours, matches: owned
    obj("db-0", { ctl: "u-web" }), // ours, does not match: released
    obj("web-1"), // orphan, matches: adopted
    obj("db-1"), // orphan, does not match: untouched
    obj("web-2", { ctl: "u-other" }), // another controller's: untouched
    obj("web-3", { deleting: true }), // orphan being deleted: untouched
    obj("web-4", { ns: "elsewhere" }), // orphan in another namespace: untouched
  ], matchWeb);
  assertEquals(names(c.owned), ["web-0"]);
  assertEquals(names(c.release), ["db-0"]);
  assertEquals(names(c.adopt), ["web-1"]);
});

Deno.test("claim: an owner being deleted adopts nothing and releases nothing", () => {
  const going = { metadata: { ...OWNER.metadata, deletionTimestamp: "2026-12-02T00:00:00Z" } };
  const c = claim(going, [
    obj("web-0", { ctl: "u-web" }),
    obj("db-0", { ctl: "u-web" }),
    obj("web-1"),
  ], matchWeb);
  assertEquals(names(c.owned), ["web-0"]);
  assertEquals(c.release, []);
  assertEquals(c.adopt, []);
});

Deno.test("claim (property): each candidate in at most one list; no other controller's object in any", () => {
  const candidate = fc.record({
    name: fc.constantFrom("web-0", "web-1", "db-0"),
    ctl: fc.option(fc.constantFrom("u-web", "u-other"), { nil: undefined }),
    ns: fc.constantFrom("ns", "other"),
    deleting: fc.boolean(),
  }).map((o) => obj(o.name, o));
  fc.assert(fc.property(fc.array(candidate, { maxLength: 12 }), fc.boolean(), (xs, going) => {
    const owner = going
      ? { metadata: { ...OWNER.metadata, deletionTimestamp: "2026-12-02T00:00:00Z" } }
      : OWNER;
    const c = claim(owner, xs, matchWeb);
    const all = [...c.owned, ...c.adopt, ...c.release];
    assertEquals(new Set(all).size, all.length);
    for (const x of all) {
      const ref = controllerOf(x);
      assertEquals(ref === undefined || ref.uid === "u-web", true);
    }
    for (const x of c.adopt) assertEquals(controllerOf(x), undefined);
    if (going) assertEquals(c.adopt.length + c.release.length, 0);
  }));
});

/** An owner of kind AppService (namespaced in `ns` unless `ns` is "") with uid `u-<name>`. */
function owner(name: string, ns = "ns", apiVersion = "apps.our-org.com/v1"): OwnerIdentity {
  return {
    apiVersion,
    kind: "AppService",
    metadata: { name, uid: `u-${name}`, ...(ns ? { namespace: ns } : {}) },
  };
}

/** A ConfigMap in `ns` (cluster-scoped when "") without references. */
function plain(ns = "ns"): KubeObject {
  return { kind: "ConfigMap", metadata: { name: "cm", ...(ns ? { namespace: ns } : {}) } };
}

Deno.test("setControllerReference: sets the controller reference once; a second call changes nothing", () => {
  const o = plain();
  const meta = o.metadata;
  assertEquals(setControllerReference(owner("web"), o), true);
  assertEquals(o.metadata?.ownerReferences, [{
    apiVersion: "apps.our-org.com/v1",
    kind: "AppService",
    name: "web",
    uid: "u-web",
    controller: true,
  }]);
  assert(o.metadata !== meta, "the metadata object given was modified, not replaced");
  assertEquals(meta, { name: "cm", namespace: "ns" });
  assertEquals(setControllerReference(owner("web"), o), false);
  assertEquals(setControllerReference(owner("web"), o, { blockOwnerDeletion: true }), true);
  assertEquals(o.metadata?.ownerReferences?.[0].blockOwnerDeletion, true);
  assertEquals(hasControllerReference(o), true);
  assertEquals(isControlledBy(o, "u-web"), true);
});

Deno.test("setControllerReference: another controller is refused with AlreadyOwnedError; nothing changes", async () => {
  const o = plain();
  setControllerReference(owner("web"), o);
  const before = structuredClone(o);
  const err = await assertRejects(
    () => setControllerReference(owner("db"), o),
    /already controlled/,
  );
  assert(err instanceof AlreadyOwnedError, String(err));
  assertEquals([err.owner.name, err.object], ["web", "ConfigMap ns/cm"]);
  assertEquals(o, before);
  // A plain (non-controller) reference of another owner is no obstacle.
  const p = plain();
  setOwnerReference(owner("db"), p);
  assertEquals(setControllerReference(owner("web"), p), true);
  assertEquals(p.metadata?.ownerReferences?.map((r) => [r.name, r.controller ?? false]), [
    ["db", false],
    ["web", true],
  ]);
});

Deno.test("setControllerReference: the same group/kind/name is updated in place (new uid, another version)", async () => {
  const o = plain();
  setOwnerReference(owner("other"), o);
  setControllerReference(owner("web"), o);
  const successor: OwnerIdentity = {
    apiVersion: "apps.our-org.com/v2",
    kind: "AppService",
    metadata: { name: "web", uid: "u-web-2", namespace: "ns" },
  };
  assertEquals(setControllerReference(successor, o), true);
  assertEquals(o.metadata?.ownerReferences?.map((r) => [r.name, r.uid, r.apiVersion]), [
    ["other", "u-other", "apps.our-org.com/v1"],
    ["web", "u-web-2", "apps.our-org.com/v2"],
  ]);
  // Another group with the same kind and name is another owner.
  const foreign = owner("web", "ns", "other.example.com/v1");
  assertEquals(hasOwnerReference(o, foreign), false);
  const err = await assertRejects(() => setControllerReference(foreign, o));
  assert(err instanceof AlreadyOwnedError, String(err));
});

Deno.test("setControllerReference / setOwnerReference: the namespace rule (InvalidOwnerError)", async () => {
  for (const set of [setControllerReference, setOwnerReference]) {
    for (const o of [plain("elsewhere"), plain("")]) {
      const err = await assertRejects(() => set(owner("web", "ns"), o));
      assert(err instanceof InvalidOwnerError, `${set.name}: ${String(err)}`);
      assertEquals(o.metadata?.ownerReferences, undefined);
    }
    // A cluster-scoped owner may own objects of any namespace, and cluster-scoped ones.
    assertEquals(set(owner("node", ""), plain("elsewhere")), true);
    assertEquals(set(owner("node", ""), plain("")), true);
  }
});

Deno.test("setOwnerReference / hasOwnerReference / removeOwnerReference", () => {
  const o = plain();
  assertEquals(setOwnerReference(owner("a"), o), true);
  assertEquals(setOwnerReference(owner("a"), o), false);
  assertEquals(setOwnerReference(owner("b"), o), true);
  assertEquals(hasControllerReference(o), false);
  assertEquals(hasOwnerReference(o, owner("a")), true);
  assertEquals(hasOwnerReference(o, owner("c")), false);
  // As controller-runtime: a plain set replaces the controller reference of the same owner.
  setControllerReference(owner("c"), o);
  assertEquals(setOwnerReference(owner("c"), o), true);
  assertEquals(hasControllerReference(o), false);
  const refs = o.metadata?.ownerReferences;
  assertEquals(removeOwnerReference(owner("a"), o), true);
  assertEquals(removeOwnerReference(owner("a"), o), false);
  assertEquals(refs?.length, 3); // the array given was not modified
  assertEquals(o.metadata?.ownerReferences?.map((r) => r.name), ["b", "c"]);
  removeOwnerReference(owner("b"), o);
  removeOwnerReference(owner("c"), o);
  assertEquals(o.metadata, { name: "cm", namespace: "ns" });
  assertEquals(removeOwnerReference(owner("a"), plain()), false);
});

Deno.test("reference editors (property): one controller, one reference per owner, repeats change nothing", () => {
  const op = fc.record({
    verb: fc.constantFrom("controller", "owner", "remove"),
    name: fc.constantFrom("a", "b", "c"),
    block: fc.boolean(),
  });
  fc.assert(fc.property(fc.array(op, { maxLength: 15 }), (ops) => {
    const o = plain();
    for (const { verb, name, block } of ops) {
      const run = () =>
        verb === "controller"
          ? setControllerReference(owner(name), o, { blockOwnerDeletion: block })
          : verb === "owner"
          ? setOwnerReference(owner(name), o)
          : removeOwnerReference(owner(name), o);
      try {
        run();
      } catch (err) {
        assert(err instanceof AlreadyOwnedError, String(err));
        assertEquals(controllerOf(o)?.name !== name, true);
        continue;
      }
      const after = structuredClone(o);
      assertEquals(run(), false);
      assertEquals(o, after);
      if (verb === "remove") assertEquals(hasOwnerReference(o, owner(name)), false);
      else assertEquals(hasOwnerReference(o, owner(name)), true);
      if (verb === "controller") assertEquals(isControlledBy(o, `u-${name}`), true);
    }
    const refs = o.metadata?.ownerReferences ?? [];
    assert(refs.filter((r) => r.controller).length <= 1, JSON.stringify(refs));
    assertEquals(new Set(refs.map((r) => r.name)).size, refs.length);
  }));
});
