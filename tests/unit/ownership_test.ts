/**
 * Controller ownership (lib/runtime/ownership.ts): the controller reference, and `claim` sorting
 * candidates as client-go's ClaimObject does — owned while matching, released when not (unless the
 * owner is being deleted), orphans adopted only when they match, are not being deleted, are in the
 * owner's namespace and the owner is not being deleted; another controller's objects untouched.
 * A property test checks that every candidate lands in at most one list and that no list holds an
 * object controlled by another owner.
 */
import fc from "fast-check";
import { assert, assertEquals } from "../assert.ts";
import type { KubeObject } from "../../lib/kube/client.ts";
import {
  claim,
  controllerOf,
  controllerReference,
  isControlledBy,
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
